"""Observing an engine conduit did not start (``[vllm] manage = false``): ``conduit.daemon.vllm.observer`` against
real loopback servers started by the test itself: tests/helpers/fake_vllm.py as a vLLM run by hand (its own
process group, its output in a file the ``log_command`` reads) and tests/helpers/fake_ollama.py (Ollama's
documented ``/api/ps``, ``/api/show``, ``/api/version`` answers).

Covered: ready + metrics for a vLLM; a killed engine goes unhealthy with a diagnosis from its log, then failed,
and ready again when it is back; start/stop/restart refused naming ``manage = false``; Ollama detected, its loaded
models and the served model's window (``/api/ps`` ``context_length``, else ``/api/show``'s ``num_ctx``, else its
``model_info`` maximum); the ``log_command`` is bounded in output and time; the profile keys are validated.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.fake_ollama import FakeOllama
from helpers.paths import HELPERS

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.observer import Observer, read_log_command
from conduit.daemon.vllm.supervisor import VllmState
from conduit.errors import ConduitError, ProfileError

FAKE = str(HELPERS / "fake_vllm.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def observed(url: str, **kw: Any) -> VllmSettings:
    return VllmSettings.model_validate({"model": "fake", "manage": False, "url": url, "health_interval_s": 0.1,
                                        "metrics_interval_s": 0.1, "unhealthy_restart_s": 0.5, **kw})


def start_fake(port: int, log: Path) -> subprocess.Popen[bytes]:
    """A fake vLLM run by hand (not by conduit): its own session, output to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, FAKE, "--model", "fake", "--port", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


async def until(obs: Observer, *states: VllmState, timeout_s: float = 20.0) -> None:
    await obs.wait_for(*states, timeout_s=timeout_s)


def test_an_observed_vllm_is_read_killed_diagnosed_and_back(tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "engine.log"
    proc = start_fake(port, log)
    try:
        asyncio.run(_vllm_story(port, log, proc))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def _vllm_story(port: int, log: Path, proc: subprocess.Popen[bytes]) -> None:
    obs = Observer(observed(f"http://127.0.0.1:{port}/v1", log_command=f"tail -n 200 {log}"))
    task = asyncio.create_task(obs.run())
    try:
        await until(obs, VllmState.READY)
        for _ in range(100):
            if obs.snapshot()["metrics"]:
                break
            await asyncio.sleep(0.05)
        snap = obs.snapshot()
        assert snap["managed"] is False and snap["engine"] == "vllm" and snap["pid"] is None
        assert snap["metrics"]["kv_cache_usage_fraction"] == 0.0 and snap["base_url"] == f"http://127.0.0.1:{port}"
        assert snap["log_command"] == ["tail", "-n", "200", str(log)]
        for action in (obs.start, obs.stop, obs.restart):
            with pytest.raises(ConduitError, match="manage = false"):
                await action()
        assert proc.poll() is None  # refused: nothing was stopped

        # its last words, then it dies: unhealthy at once, diagnosed from the log_command's output
        with open(log, "a") as f:
            f.write("ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                    "total capacity of 79.11 GiB of which 1.5 GiB is free.\n")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        await until(obs, VllmState.UNHEALTHY)
        for _ in range(200):  # the log command runs after the state changed
            failure = obs.snapshot()["last_failure"]
            if failure["log_tail"]:
                break
            await asyncio.sleep(0.05)
        assert failure["kind"] == "cuda_oom", failure
        assert "out of memory" in failure["log_tail"]
        await until(obs, VllmState.FAILED)

        # started again by its owner: ready again
        again = start_fake(port, log)
        try:
            await until(obs, VllmState.READY)
            states = [s for s, _ in obs.snapshot()["history"]]
            assert states[-4:] == ["unhealthy", "failed", "starting", "ready"]
        finally:
            os.killpg(again.pid, signal.SIGKILL)
            again.wait()
    finally:
        await obs.aclose(stop_vllm=True)
        assert task.done()


def test_an_engine_down_when_observation_begins_is_failed_with_a_plain_reason() -> None:
    async def story() -> dict[str, Any]:
        obs = Observer(observed(f"http://127.0.0.1:{free_port()}", engine="vllm"))
        task = asyncio.create_task(obs.run())
        await until(obs, VllmState.FAILED)
        assert not obs.recovering
        await obs.aclose(stop_vllm=False)
        assert task.done()
        return obs.snapshot()

    snap = asyncio.run(story())
    assert snap["last_failure"]["kind"] == "unreachable"
    assert "set [vllm].log_command" in snap["last_failure"]["fix"]


def test_an_observed_ollama_gives_loaded_models_and_the_window() -> None:
    with FakeOllama(models={"qwen2.5:0.5b": 32768, "llama3.2:latest": 131072},
                    num_ctx={"llama3.2:latest": 4096}) as fake:
        got = asyncio.run(_ollama_story(fake))
    assert got["detected"] == "ollama" and got["version"] == "0.12.3"
    # not loaded: /api/show's model_info maximum (no num_ctx parameter); loaded: /api/ps context_length
    assert got["before"] == {"tokens": 32768, "source": "api/show model_info"}
    assert got["after"] == {"tokens": 8192, "source": "api/ps context_length"}
    assert got["windows"] == [{"qwen2.5:0.5b": 32768}, {"qwen2.5:0.5b": 8192}, {"llama3.2": 4096}]
    assert got["loaded"][0]["name"] == "qwen2.5:0.5b" and got["loaded"][0]["vram_fraction"] == 0.5
    assert got["llama"] == {"tokens": 4096, "source": "api/show num_ctx"}  # a Modelfile's num_ctx wins
    assert ("POST", "/api/show") in fake.requests


async def _ollama_story(fake: FakeOllama) -> dict[str, Any]:
    seen: list[dict[str, int]] = []
    obs = Observer(observed(fake.url, model="qwen2.5:0.5b"), on_windows=seen.append)
    task = asyncio.create_task(obs.run())
    out: dict[str, Any] = {}
    try:
        await until(obs, VllmState.READY)
        out["detected"], out["version"] = obs.engine, obs.version
        out["before"] = obs.snapshot()["ollama"]["window"]
        fake.load("qwen2.5:0.5b", context_length=8192, size=2 << 30, vram=1 << 30)
        for _ in range(200):
            if (obs.snapshot()["ollama"]["window"] or {}).get("tokens") == 8192:
                break
            await asyncio.sleep(0.02)
        out["after"], out["loaded"] = obs.snapshot()["ollama"]["window"], obs.snapshot()["ollama"]["loaded"]
        out["windows"] = seen
        await obs.apply_settings(observed(fake.url, model="llama3.2"))  # tag "latest" implied
        for _ in range(200):
            w = obs.snapshot()["ollama"]
            if w and (w["window"] or {}).get("tokens") == 4096:
                break
            await asyncio.sleep(0.02)
        out["llama"] = obs.snapshot()["ollama"]["window"]
        assert obs.state is VllmState.READY
    finally:
        await obs.aclose(stop_vllm=False)
        assert task.done()
    return out


def test_an_ollama_without_the_model_is_not_ready() -> None:
    async def story(fake: FakeOllama) -> dict[str, Any]:
        obs = Observer(observed(fake.url, model="missing:7b", engine="ollama"))
        task = asyncio.create_task(obs.run())
        await until(obs, VllmState.FAILED)
        await obs.aclose(stop_vllm=False)
        assert task.done()
        return obs.snapshot()

    with FakeOllama(models={"qwen2.5:0.5b": 32768}) as fake:
        snap = asyncio.run(story(fake))
    assert "not 'missing:7b'" in snap["last_failure"]["reason"]


def test_the_log_command_is_bounded_in_output_and_time(tmp_path: Path) -> None:
    big = asyncio.run(read_log_command([sys.executable, "-c", "print('x' * 300000 + 'END')"], max_bytes=1000))
    assert len(big.encode()) <= 1000 and big.rstrip().endswith("END")
    slow = asyncio.run(read_log_command([sys.executable, "-c", "import time; print('early', flush=True); "
                                         "time.sleep(3600)"], timeout_s=0.5))  # unbounded: the test hangs
    assert slow.strip() == "early"
    missing = asyncio.run(read_log_command([str(tmp_path / "no-such-command")]))
    assert missing.startswith("[conduit] cannot run log_command")


@pytest.mark.parametrize(("table", "words"), [
    ({"url": "http://127.0.0.1:8000"}, "add manage = false"),
    ({"manage": False, "url": "ftp://x"}, "not an http"),
    ({"manage": False, "log_command": ""}, "empty command"),
    ({"manage": False, "log_command": "docker logs 'unclosed"}, "cannot split"),
    ({"manage": False, "engine": "tgi"}, "engine"),
    ({"manage": False, "cluster": {"role": "head", "head_address": "10.0.0.1:6379"}}, "manage = true"),
])
def test_observe_only_keys_are_checked(table: dict[str, Any], words: str) -> None:
    from conduit.daemon.config.vllm import load

    with pytest.raises(ProfileError, match=words):
        load({"model": "m", **table})


def test_observed_url_is_the_engines_root() -> None:
    s = observed("https://gpu-box.lan:8443/v1/", log_command="docker logs --tail 500 'my vllm'")
    assert s.base_url == "https://gpu-box.lan:8443" and s.log_command == ["docker", "logs", "--tail", "500", "my vllm"]
    assert VllmSettings.model_validate({"model": "m", "manage": False}).base_url == "http://127.0.0.1:8000"


def test_the_vllm_commands_refuse_an_observed_engine_without_asking_the_agent(temp_home: Path) -> None:
    from helpers.agentproc import conduit_exe

    p = temp_home / ".config" / "conduit" / "profile.toml"
    p.parent.mkdir(parents=True)
    p.write_text('version = 1\nchannel = "local"\nmodel = "m"\n\n[vllm]\nmodel = "m"\nmanage = false\n'
                 'url = "http://127.0.0.1:9"\n')
    env = {"HOME": str(temp_home), "PATH": os.environ.get("PATH", "/usr/bin"), "COLUMNS": "200"}
    for args in (["vllm", "stop"], ["vllm", "start"], ["vllm", "restart"], ["vllm", "run"]):
        r = subprocess.run([conduit_exe(), *args], env=env, capture_output=True, text=True, timeout=60)
        # no agent runs: without the local refusal start/stop/restart would exit 2 (agent unreachable)
        assert r.returncode == 1 and "manage = false" in r.stderr, (args, r.returncode, r.stderr)


def test_an_engine_that_wants_a_key_for_its_models_is_up_not_failed(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """vLLM with ``--api-key``: ``/health`` answers, ``/v1/models`` 401 without the key. An ``[engines.NAME]``
    table gives no key: the engine is shown ready (from ``/health``) with a warning, not failed (which would move
    the tools of a channel that works, with its own key, to the fallback)."""
    port, log = free_port(), tmp_path / "fake.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, FAKE, "--model", "fake", "--port", str(port), "--api-key",
                                 "sk-engine-0123456789abcdef"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)

    async def story() -> dict[str, Any]:
        obs = Observer(observed(f"http://127.0.0.1:{port}", engine="vllm"), table="[engines.box]")
        task = asyncio.create_task(obs.run())
        try:
            await until(obs, VllmState.READY, timeout_s=60)
            await asyncio.sleep(0.5)  # several more looks: still ready, one warning
            return obs.snapshot()
        finally:
            await obs.aclose(stop_vllm=False)
            assert task.done()

    caplog.set_level("INFO")
    try:
        snap = asyncio.run(story())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert snap["state"] == "ready"
    warned = [w for w in snap["warnings"] if "/v1/models answered 401" in w]
    assert len(warned) == 1 and "sk-engine" not in str(snap)
    # side by side with other engines, the log names which one changed state
    assert any(r.getMessage().startswith("engine [engines.box] starting -> ready") for r in caplog.records)
