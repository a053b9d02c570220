"""Every ``raise ...Error(...)`` of the pinned vLLM's configuration, argument and quantization checks is either
mapped to a cause with the ``[vllm]`` key it concerns (``configcauses.MESSAGES``) or left to the generic fix by
a listed exemption with a reason (``tests/data/vllm_messages/exempt.json``, per file with its count).

Reads the installed package's source (``tests/helpers/vllm_raises.py``); runs in the real-vLLM tier (it needs
the venv). Prints the counts (found / mapped / exempt) and, when they drift, the messages that are new."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from helpers.paths import TESTS
from helpers.vllm_raises import RaiseSite, raise_sites

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.configcauses import MESSAGES

pytestmark = pytest.mark.vllm

EXEMPT = json.loads((TESTS / "data" / "vllm_messages" / "exempt.json").read_text())
KEYS = set(VllmSettings.model_fields) | {"extra_args", "extra_env"}


def _package(vllm_python: str) -> Path:
    found = sorted(Path(vllm_python).parent.parent.glob("lib/python3*/site-packages/vllm"))
    if not found:
        pytest.fail(f"no site-packages/vllm next to {vllm_python}")
    return found[0]


def _mapped(site: RaiseSite) -> bool:
    return any(m.fragment in site.template for m in MESSAGES)


def test_every_raise_site_is_mapped_or_exempt(vllm_python: str) -> None:
    sites = raise_sites(_package(vllm_python))
    mapped = [s for s in sites if _mapped(s)]
    rest = Counter(s.file for s in sites if not _mapped(s))
    listed = {e["file"]: e for e in EXEMPT["files"]}
    print(f"\nvLLM {EXEMPT['version']} raise sites: found {len(sites)}, mapped {len(mapped)}, "
          f"exempt {sum(rest.values())} (in {len(rest)} files)")
    for e in EXEMPT["files"]:
        print(f"  exempt {rest.get(e['file'], 0):3d} {e['file']}: {e['reason']}")
    drift = {f: (n, listed[f]["sites"] if f in listed else 0) for f, n in rest.items()
             if f not in listed or listed[f]["sites"] != n}
    new = [f"{s.file}:{s.line}: {s.template[:150]}" for s in sites if not _mapped(s) and s.file in drift]
    assert not drift, ("unmapped raise sites changed (file: (now, listed)); map them in configcauses.MESSAGES "
                       f"or update exempt.json with a reason: {drift}\n" + "\n".join(new))
    assert all(e["reason"].strip() for e in EXEMPT["files"])
    assert len(mapped) >= 40


def test_every_mapped_message_names_a_vllm_key_and_exists(vllm_python: str) -> None:
    """Each table entry's key is a ``[vllm]`` key (or extra_args / extra_env / cluster), and each fragment is
    still raised by the pinned vLLM (or by the library it calls: listed below), so the table has no dead rows."""
    sites = raise_sites(_package(vllm_python))
    elsewhere = {  # raised outside the files scanned: (fragment, where)
        "Consider reducing tensor_parallel_size": "quantization/utils/marlin_utils.py",
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0": "platforms/cuda.py",
        "is larger than the number of available GPUs": "config/parallel.py (a multi-line f-string)",
        "Cannot find any of": "quantization/base_config.py get_from_keys",
        "--device-ids": "engine/arg_utils.py",
    }
    dead = [m.fragment for m in MESSAGES
            if not any(m.fragment in s.template for s in sites) and m.fragment not in elsewhere]
    assert not dead, f"fragments the pinned vLLM no longer raises: {dead}"
    assert {m.key for m in MESSAGES} <= KEYS | {"cluster"}
