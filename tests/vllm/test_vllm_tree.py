"""Nothing a vLLM launch spawns escapes the stop (docs/cases.md C16), in-process: the supervisor and
tests/helpers/fake_vllm.py with a descendant that calls ``setsid()``; the subreaper call in a child interpreter; the
report of what survives; and the malformed-request limiter and key-flag masking as units (items 8, 9).

The test process itself is not made a subreaper (only the agent and ``conduit vllm run`` are), so the orphan
case here is found by the launch marker sweep (tests/agent/test_agent_faults.py covers the agent, a subreaper).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from aiohttp.http_exceptions import BadHttpMessage
from test_supervisor import no_gpu, run, settings

from conduit.daemon.agent.logs import MalformedRequests, describe_malformed
from conduit.daemon.cli.agent import vllm_lines
from conduit.daemon.cli.vllm import EXIT_FAILED, vllm_action
from conduit.daemon.vllm import supervisor as supervisor_module
from conduit.daemon.vllm.process import describe
from conduit.daemon.vllm.supervisor import Supervisor, VllmState
from conduit.daemon.vllm.tree import MARKER_ENV, PR_SET_CHILD_SUBREAPER, Tree
from conduit.redact import mask_argv, mask_key_flags

S = VllmState


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.parametrize("how", ["child", "orphan"])
def test_stop_kills_a_descendant_that_left_the_session(tmp_path: Path, how: str) -> None:
    pidfile = tmp_path / "escapee.pid"
    escapees: list[int] = []

    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.READY, timeout_s=20)
        escapees.append(int(pidfile.read_text().split()[0]))
        pid = escapees[0]
        assert os.getsid(pid) == pid != sup.snapshot()["pid"]  # its own session: killpg cannot reach it
        assert psutil.Process(pid).environ().get(MARKER_ENV)  # carries the launch's marker
        out = await sup.stop()
        assert out["state"] == "stopped", out
        assert not _alive(pid)

    try:
        run(body, settings(env={"FAKE_VLLM_CHILDREN": 1, "FAKE_VLLM_SETSID": how, "FAKE_VLLM_PIDFILE": pidfile}))
    finally:
        for pid in escapees:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_tree_sees_descendants_and_forgets_the_dead() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                             "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                             "print(c.pid, flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        tree = Tree(proc.pid, psutil.Process(proc.pid).create_time(), None)
        tree.sample()
        assert tree.pids() == {proc.pid, child}
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while child in tree.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tree.pids() == {proc.pid}
    finally:
        proc.kill()
        proc.wait(10)


def test_become_subreaper_sets_the_flag_in_its_process() -> None:
    code = ("import ctypes; from conduit.daemon.vllm.tree import become_subreaper; ok = become_subreaper(); "
            "v = ctypes.c_int(); ctypes.CDLL(None).prctl(37, ctypes.byref(v), 0, 0, 0); print(ok, v.value)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == (["True", "1"] if sys.platform.startswith("linux") else ["False", "0"])
    assert PR_SET_CHILD_SUBREAPER == 36


def test_what_survives_is_named_and_stop_reports_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--marker-arg"])
    launched: set[int] = set()
    try:
        deadline = time.monotonic() + 10
        while "--marker-arg" not in psutil.Process(sleeper.pid).cmdline() and time.monotonic() < deadline:
            time.sleep(0.01)  # exec'd
        (line,) = describe([psutil.Process(sleeper.pid)])
        assert line.startswith(f"{sleeper.pid} {sys.executable} -c import time") and "--marker-arg" in line

        async def stuck(*args: Any, **kw: Any) -> list[str]:  # a process in D state outlives SIGKILL
            return [line]

        monkeypatch.setattr(supervisor_module, "kill_group", stuck)

        async def body(sup: Supervisor) -> None:
            await sup.wait_for(S.READY, timeout_s=20)
            launched.update(sup.pids())
            snap = await sup.stop()
            assert snap["state"] == "failed" and snap["last_failure"]["kind"] == "stop_incomplete"
            assert line in snap["last_failure"]["reason"]
            text = "\n".join(vllm_lines(snap))
            assert f"last failure: processes of the vLLM group survived SIGKILL: {line}" in text

            class Client:
                def post(self, path: str) -> dict[str, Any]:
                    return snap

                def get(self, path: str) -> dict[str, Any]:
                    return snap

            code, _, err = vllm_action(Client(), "stop", poll_s=0.01)
            assert code == EXIT_FAILED and err == "vLLM is failed"

        sup = asyncio.run(_in_loop(body))
        assert sup.state is S.FAILED
    finally:
        sleeper.kill()
        sleeper.wait(10)
        for pid in launched:  # the stop was told it failed: the fake vLLM is still there
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


async def _in_loop(body: Any) -> Supervisor:
    sup = Supervisor(settings(), memory_probe=no_gpu)
    task = asyncio.create_task(sup.run())
    try:
        await body(sup)
    finally:
        await sup.aclose(stop_vllm=False)
        task.cancel()
    return sup


def test_malformed_requests_are_counted_and_summarised_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limiter = MalformedRequests(interval_s=10, clock=lambda: now[0])
    logger = logging.getLogger("test.malformed")
    logger.addFilter(limiter)
    try:
        with caplog.at_level(logging.INFO, logger="test.malformed"):
            for i in range(2000):
                now[0] = i * 0.001
                try:
                    raise BadHttpMessage(f"Bad header {i}\nwith a second line")
                except BadHttpMessage:
                    logger.exception("Error handling request from %s", "unix")
            logger.error("a handler's own error keeps its traceback", exc_info=ValueError("x"))
            limiter.flush()  # the period is not over: nothing yet
            now[0] = 12.0
            limiter.flush()
            limiter.flush()  # nothing pending any more
            now[0] = 30.0
            limiter.flush()  # a quiet period ends quietly
            try:
                raise BadHttpMessage("again")
            except BadHttpMessage:
                logger.exception("Error handling request from %s", "unix")
    finally:
        logger.removeFilter(limiter)
    lines = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records
             if r.name in ("test.malformed", "conduit.agent")]
    assert lines == [
        ("WARNING", "ignored a malformed request: 400 Bad header 0 (more are counted, one line per 10 s)", False),
        ("ERROR", "a handler's own error keeps its traceback", True),
        ("WARNING", "ignored 1999 malformed requests in the last 10 s; last: 400 Bad header 1999", False),
        ("WARNING", "ignored a malformed request: 400 again (more are counted, one line per 10 s)", False),
    ]


def test_describe_malformed_masks_and_bounds() -> None:
    text = describe_malformed(BadHttpMessage("Authorization: Bearer sk-abcdefghijklmnop " + "x" * 500))
    assert "sk-abcdefghijklmnop" not in text and "Bearer sk-...mnop" in text and len(text) <= 160


def test_key_flags_are_masked_and_ordinary_flags_are_not() -> None:
    k = "sk-abcdefghijklmnop"
    for raw in (f"--api-key {k}", f"--api-key={k}", f"api_key={k},", f"{{'api_key': '{k}'}}", f"VLLM_API_KEY={k}",
                f"Authorization: Bearer {k}", f"x-api-key: {k}", f"['--api-key', '{k}']", f"hf_token={k}"):
        masked = mask_key_flags(raw)
        assert k not in masked and "sk-...mnop" in masked, raw
        assert mask_key_flags(masked) == masked
    for plain in ("max_num_batched_tokens=8192 --tokenizer foo", "KV cache size: 4,096 tokens", "Basic model info"):
        assert mask_key_flags(plain) == plain
    assert mask_argv(["vllm", "--api-key", k, "--port", "8000", f"--hf-token={k}"]) == [
        "vllm", "--api-key", "sk-...mnop", "--port", "8000", "--hf-token=sk-...mnop"]
