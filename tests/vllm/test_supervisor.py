"""The vLLM supervisor driven against tests/helpers/fake_vllm.py: a real process group, real HTTP on 127.0.0.1, real
signals. Covers what is slow or impossible to cause with real vLLM here (start-up timeout, crash loop, exit 0
after an engine death, /health 503), plus C16 (no EngineCore/Worker left), adoption and the GPU preflight
(the only fake part: NVML's numbers)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from helpers.paths import HELPERS
from helpers.procs import alive, has_engine_and_worker, names

from conduit.daemon.agent.gpu import memory_by_index
from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.process import group_members, kill_group
from conduit.daemon.vllm.supervisor import IllegalTransition, Supervisor, VllmState
from conduit.errors import ConduitError

FAKE = str(HELPERS / "fake_vllm.py")
S = VllmState
KEY = "sk-test-0123456789abcdefghij"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def settings(**kw: Any) -> VllmSettings:
    env = {k: str(v) for k, v in kw.pop("env", {}).items()}
    base: dict[str, Any] = {
        "model": "fake-model", "served_model_name": "fake", "port": free_port(),
        "command": [sys.executable, FAKE], "extra_env": env, "health_interval_s": 0.1, "metrics_interval_s": 0.2,
        "startup_timeout_s": 20, "stop_grace_s": 3, "unhealthy_restart_s": 30,
        "restart": {"backoff_initial_s": 0.05, "backoff_max_s": 0.2, "max_restarts": 5},
    }
    base.update(kw)
    return VllmSettings.model_validate(base)


def no_gpu() -> None:
    """The memory probe of a machine without an NVIDIA GPU (the preflight has nothing to check)."""
    return None


def run(body: Callable[[Supervisor], Awaitable[None]], s: VllmSettings, **kw: Any) -> Supervisor:
    """Run ``body`` with a running supervisor; afterwards stop vLLM and check nothing of any launch is left."""

    async def main() -> Supervisor:
        sup = Supervisor(s, **{"memory_probe": no_gpu, **kw})
        task = asyncio.create_task(sup.run())
        seen: set[int] = set()
        try:
            await body(sup)
            seen |= sup.pids()
        finally:
            if not task.done():
                await sup.stop()
            await sup.aclose(stop_vllm=False)
        assert not [p for p in seen if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
        return sup

    return asyncio.run(main())








def states(sup: Supervisor) -> list[str]:
    return [h[0] for h in sup.history]


def test_ready_then_sigkill_restarts_with_no_leftover_engine_c16() -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.READY, timeout_s=60)
        first = sup.pids()
        assert has_engine_and_worker(first), names(first)
        assert len(first) == 3
        snap = sup.snapshot()
        leader = snap["pid"]
        assert snap["pgid"] == leader and snap["kv_cache"]["tokens"] == 4096
        assert "CPU KV cache size" in snap["kv_cache"]["line"]
        os.kill(leader, signal.SIGKILL)
        await sup.wait_for(S.RESTARTING, S.FAILED, timeout_s=30)
        assert alive(first) == set()  # EngineCore and Worker of that launch are gone before the restart
        assert "SIGKILL" in sup.snapshot()["last_failure"]["reason"]
        await sup.wait_for(S.READY, timeout_s=60)
        assert sup.snapshot()["pid"] != leader and sup.snapshot()["restarts"] == 1
        assert alive(first) == set()
        second = sup.pids()
        out = await sup.stop()
        assert out["state"] == "stopped" and alive(second) == set() and sup.pids() == set()
        assert not sup.pid_path.exists()

    run(body, settings(env={"FAKE_VLLM_CHILDREN": 1}))


def test_startup_timeout_fails_with_diagnosis_and_kills_the_group() -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.STARTING, timeout_s=30)
        launched = sup.pids()
        assert launched
        await sup.wait_for(S.FAILED, timeout_s=60)
        f = sup.snapshot()["last_failure"]
        assert f["kind"] == "startup_timeout" and "loading weights forever" in f["reason"]
        assert "startup_timeout_s" in f["fix"]
        assert alive(launched) == set()

    run(body, settings(startup_timeout_s=1.0, env={"FAKE_VLLM_MODE": "never_ready", "FAKE_VLLM_CHILDREN": 1}))


def test_crash_loop_gives_up_after_the_limit() -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.FAILED, timeout_s=30)
        snap = sup.snapshot()
        assert snap["last_failure"]["kind"] == "crash_loop"
        assert "3 crashes" in snap["last_failure"]["reason"]
        assert snap["restarts"] == 2
        assert states(sup).count("ready") == 3 and states(sup).count("restarting") == 2

    run(body, settings(env={"FAKE_VLLM_MODE": "crash_after_ready", "FAKE_VLLM_AFTER_S": 0.3},
                       restart={"backoff_initial_s": 0.05, "max_restarts": 2}))


def test_exit_0_after_engine_death_is_a_crash() -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.READY, timeout_s=60)
        await sup.wait_for(S.RESTARTING, S.FAILED, timeout_s=30)
        f = sup.snapshot()["last_failure"]
        assert f["exit_code"] == 0
        assert "status 0" in f["reason"] and "engine died" in f["reason"]
        assert "unhealthy" in states(sup)  # /health said 503 before the exit
        await sup.wait_for(S.READY, timeout_s=60)

    run(body, settings(env={"FAKE_VLLM_MODE": "engine_death", "FAKE_VLLM_AFTER_S": 0.3, "FAKE_VLLM_503_S": 1.0},
                       restart={"backoff_initial_s": 0.05, "max_restarts": 1}))


def test_health_503_marks_unhealthy_then_restarts() -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.READY, timeout_s=60)
        pid = sup.snapshot()["pid"]
        await sup.wait_for(S.UNHEALTHY, timeout_s=30)
        assert psutil.pid_exists(pid)
        await sup.wait_for(S.RESTARTING, S.FAILED, timeout_s=30)
        assert sup.snapshot()["last_failure"]["kind"] == "unhealthy"
        assert alive({pid}) == set()

    run(body, settings(unhealthy_restart_s=0.5, env={"FAKE_VLLM_MODE": "health503", "FAKE_VLLM_AFTER_S": 0.3}))


def test_start_up_error_with_known_cause_fails_at_once() -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.FAILED, timeout_s=60)
        f = sup.snapshot()["last_failure"]
        assert f["kind"] == "port_in_use" and str(sup.settings.port) in f["reason"]
        assert "restarting" not in states(sup)
        # start again after the cause is "fixed": a start from failed is allowed
        await sup.apply_settings(settings(port=sup.settings.port))
        await sup.wait_for(S.READY, timeout_s=60)

    run(body, settings(env={"FAKE_VLLM_MODE": "exit_at_start",
                            "FAKE_VLLM_MESSAGE": "OSError: [Errno 98] Address already in use"}))


CONFIG_ONLY = ("ValueError: Couldn't instantiate the backend tokenizer from one of: \n"
               "(1) a `tokenizers` library serialization file, \n"
               "You need to have sentencepiece or tiktoken installed to convert a slow tokenizer to a fast one.")


@pytest.mark.parametrize(("message", "kind", "fix"), [
    (CONFIG_ONLY, "tokenizer_not_found", "tokenizer.json"),  # a config-only model directory (vLLM 0.32's text)
    ("RuntimeError: Cannot find any model weights with `/m/cfg`", "weights_not_found", "safetensors"),
    ("api_server.py: error: unrecognized arguments: --swap-space 4", "unknown_argument", "0.18"),
    ("ValueError: User-specified max_model_len (4096) is greater than the derived max_model_len "
     "(max_position_embeddings=512.0 or model_max_length=None in model's config.json).",
     "max_model_len_too_long", "max_model_len = 512"),
    ("RuntimeError: something nobody has seen before", "exited", "conduit vllm logs"),
])
def test_any_start_up_failure_fails_at_once_without_relaunching(message: str, kind: str, fix: str) -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.FAILED, timeout_s=60)
        await asyncio.sleep(0.5)  # longer than the backoff: a relaunch would show by now
        snap = sup.snapshot()
        f = snap["last_failure"]
        assert (snap["state"], f["kind"], f["exit_code"]) == ("failed", kind, 1), f
        assert fix in f["fix"]
        assert states(sup).count("starting") == 1 and "restarting" not in states(sup)
        assert snap["restarts"] == 0 and not (sup.dir / "vllm.log.1").exists()

    run(body, settings(env={"FAKE_VLLM_MODE": "exit_at_start", "FAKE_VLLM_MESSAGE": message}))


def test_internal_port_taken_at_start_is_retried_then_named() -> None:
    """vLLM picks its internal ports afresh on each launch, so that one start-up failure is retried."""
    msg = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
           "address. port: 41733, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")

    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.FAILED, timeout_s=30)
        f = sup.snapshot()["last_failure"]
        assert f["kind"] == "crash_loop" and "port 41733" in f["reason"], f
        assert "not [vllm].port" in f["reason"] and "VLLM_PORT" in f["fix"]
        assert states(sup).count("restarting") == 2

    run(body, settings(env={"FAKE_VLLM_MODE": "exit_at_start", "FAKE_VLLM_MESSAGE": msg},
                       restart={"backoff_initial_s": 0.05, "max_restarts": 2}))


def test_stop_escalates_to_sigkill_when_term_is_ignored() -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.READY, timeout_s=60)
        launched = sup.pids()
        out = await sup.stop()
        assert out["state"] == "stopped" and alive(launched) == set()

    run(body, settings(stop_grace_s=0.3, env={"FAKE_VLLM_CHILDREN": 1, "FAKE_VLLM_IGNORE_TERM": 1}))


def test_apply_settings_restarts_only_on_a_launch_change() -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.READY, timeout_s=60)
        pid = sup.snapshot()["pid"]
        same = sup.settings.model_copy(update={"health_interval_s": 0.2, "startup_timeout_s": 99})
        assert await sup.apply_settings(same) is False
        assert sup.snapshot()["pid"] == pid and sup.state is S.READY
        changed = sup.settings.model_copy(update={"max_num_seqs": 4})
        assert await sup.apply_settings(changed) is True
        await sup.wait_for(S.READY, timeout_s=60)
        snap = sup.snapshot()
        assert snap["pid"] != pid and "--max-num-seqs" in snap["argv"] and alive({pid}) == set()

    run(body, settings())


def test_api_key_is_used_for_readiness_and_never_shown() -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.READY, timeout_s=60)
        snap = sup.snapshot()
        assert KEY not in repr(snap)
        assert KEY not in " ".join(psutil.Process(snap["pid"]).cmdline())
        async with httpx.AsyncClient(trust_env=False) as c:
            assert (await c.get(snap["base_url"] + "/v1/models")).status_code == 401

    run(body, settings(api_key=KEY))


def test_metrics_snapshot_after_traffic() -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.READY, timeout_s=60)
        async with httpx.AsyncClient(trust_env=False) as c:
            r = await c.post(sup.settings.base_url + "/v1/chat/completions", json={"model": "fake", "messages": []})
            assert r.status_code == 200
        m = await sup.scrape_now()
        assert m is not None and m["prompt_tokens_total"] == 10 and m["ttft"]["count"] == 1
        assert sup.snapshot()["metrics"]["generation_tokens_total"] == 5

    run(body, settings())


def test_agent_restart_adopts_a_healthy_server() -> None:
    s = settings(env={"FAKE_VLLM_CHILDREN": 1})

    async def main() -> None:
        first = Supervisor(s, memory_probe=no_gpu)
        t1 = asyncio.create_task(first.run())
        await first.wait_for(S.READY, timeout_s=60)
        pid, group = first.snapshot()["pid"], first.pids()
        await first.aclose(stop_vllm=False)  # the agent goes away; vLLM keeps serving
        assert t1.done() and alive(group) == group

        second = Supervisor(s, memory_probe=no_gpu)
        t2 = asyncio.create_task(second.run())
        await second.wait_for(S.READY, timeout_s=30)
        snap = second.snapshot()
        assert snap["pid"] == pid and snap["adopted"] and any("adopted" in w for w in snap["warnings"])
        assert second.pids() == group
        os.kill(pid, signal.SIGKILL)  # not our child: noticed through a pidfd
        await second.wait_for(S.RESTARTING, S.FAILED, timeout_s=30)
        assert alive(group) == set()
        await second.wait_for(S.READY, timeout_s=60)
        await second.aclose(stop_vllm=True)
        assert t2.done() and second.pids() == set()

    asyncio.run(main())


def test_agent_restart_kills_an_orphaned_engine() -> None:
    s = settings(env={"FAKE_VLLM_CHILDREN": 1})

    async def main() -> None:
        first = Supervisor(s, memory_probe=no_gpu)
        asyncio.create_task(first.run())
        await first.wait_for(S.READY, timeout_s=60)
        group = first.pids()
        await first.aclose(stop_vllm=False)
        os.kill(first.snapshot()["pid"], signal.SIGKILL)  # while no agent runs: EngineCore/Worker orphaned
        await asyncio.sleep(0.2)
        assert has_engine_and_worker(alive(group))

        second = Supervisor(s, memory_probe=no_gpu, autostart=False)
        t2 = asyncio.create_task(second.run())
        for _ in range(200):
            if not alive(group):
                break
            await asyncio.sleep(0.05)
        assert alive(group) == set()
        for _ in range(100):  # the warning follows the last check that nothing is left
            if any("leftover" in w for w in second.snapshot()["warnings"]):
                break
            await asyncio.sleep(0.05)
        assert second.state is S.STOPPED and any("leftover" in w for w in second.snapshot()["warnings"])
        await second.aclose(stop_vllm=False)
        assert t2.done()

    asyncio.run(main())


def test_gpu_preflight_refuses_before_launching() -> None:
    g = 1024**3

    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.FAILED, timeout_s=30)
        f = sup.snapshot()["last_failure"]
        assert f["kind"] == "gpu_memory"
        assert "10.00 GiB free of 80.00 GiB" in f["reason"] and "72.00 GiB" in f["reason"]
        assert "0.1" in f["fix"]
        assert not sup.log_path.exists()  # nothing was launched

    run(body, settings(gpu_memory_utilization=0.9), memory_probe=lambda: [(0, 10 * g, 80 * g)])


def test_gpu_preflight_passes_when_memory_is_free() -> None:
    g = 1024**3

    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.READY, timeout_s=60)

    run(body, settings(gpu_memory_utilization=0.5), memory_probe=lambda: [(0, 60 * g, 80 * g)])


def test_gpu_preflight_reads_the_fake_device_set_through_agent_gpu(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe the agent and `conduit vllm run` pass (agent.gpu.memory_by_index) honours $CONDUIT_FAKE_GPUS."""
    g = 1024**3
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({"devices": [
        {"name": "NVIDIA H100", "uuid": "GPU-0", "total": 80 * g, "used": 70 * g, "free": 10 * g}]}))
    monkeypatch.setenv("CONDUIT_FAKE_GPUS", str(spec))

    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.FAILED, timeout_s=30)
        f = sup.snapshot()["last_failure"]
        assert f["kind"] == "gpu_memory" and "GPU 0: 10.00 GiB free of 80.00 GiB" in f["reason"]
        assert not sup.log_path.exists()

    run(body, settings(gpu_memory_utilization=0.9), memory_probe=memory_by_index)


def test_missing_interpreter_fails_with_a_reason() -> None:
    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.FAILED, timeout_s=30)
        assert sup.snapshot()["last_failure"]["kind"] == "launch_error"

    s = settings().model_copy(update={"command": None, "python": "/nonexistent/bin/python"})
    run(body, s)


def test_commands_need_the_loop_and_illegal_transitions_are_errors() -> None:
    sup = Supervisor(settings(), memory_probe=no_gpu)
    with pytest.raises(ConduitError):
        asyncio.run(sup.start())
    with pytest.raises(IllegalTransition) as exc:
        sup._to(S.UNHEALTHY)
    assert "stopped -> unhealthy" in str(exc.value)


def test_kill_group_on_a_vanished_group_is_quiet() -> None:
    async def main() -> None:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass", start_new_session=True)
        await proc.wait()
        assert await kill_group(proc.pid, proc.pid, grace_s=0.1) == []
        assert group_members(proc.pid, proc.pid) == []

    asyncio.run(main())
