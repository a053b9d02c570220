"""Review fixes of [vllm.cluster] and `bench --compare-vllm`: a kept cluster keeper takes the new [vllm] (and a new
Python replaces it), a cancelled node reading leaves no child behind, the supervisor's pending action lives in a
kept task, an mp follower is ready while it lives, Ray's argv shows no secrets, and a restore that cannot be
written says so beside the original error."""

from __future__ import annotations

import asyncio
import io
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from rich.console import Console

from conduit.daemon.agent.cluster import ClusterKeeper, follow_cluster
from conduit.daemon.cli import bench_vllm
from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm import cluster as vcluster
from conduit.daemon.vllm.messages import Launch, Message, Ready
from conduit.daemon.vllm.metrics import MetricsTracker
from conduit.daemon.vllm.monitor import Monitor
from conduit.daemon.vllm.raynode import RayProcess
from conduit.errors import ConduitError


def settings(python: str, model: str = "/m", **cluster: Any) -> VllmSettings:
    table = {"role": "worker", "head_address": "127.0.0.1:9", **cluster}
    return VllmSettings.model_validate({"model": model, "python": python, "cluster": table})


async def until(pred: Any, timeout: float = 60.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if v := pred():
            return v
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_a_kept_keeper_takes_the_new_settings_and_a_new_python_replaces_it(tmp_path: Path) -> None:
    other = tmp_path / "python"
    other.symlink_to(sys.executable)

    async def main() -> None:
        keeper = await follow_cluster(None, settings(sys.executable), None, tmp_path)
        assert keeper is not None
        kept = await follow_cluster(keeper, settings(sys.executable, model="/other"), None, tmp_path)
        assert kept is keeper and kept.settings.model == "/other"  # the next preflight checks the new model
        moved = await follow_cluster(kept, settings(str(other), model="/other"), None, tmp_path)
        assert moved is not None and moved is not kept and moved.settings.interpreter() == str(other)
        await moved.aclose()

    asyncio.run(main())


def test_a_cancelled_reading_kills_its_child(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    code = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"

    async def main() -> None:
        task = asyncio.create_task(vcluster._run([sys.executable, "-c", code, str(pid_file)], 600.0))
        await until(lambda: pid_file.exists() and pid_file.read_text())
        pid = int(pid_file.read_text())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    asyncio.run(main())


class StuckSupervisor:
    """A supervisor whose loop never takes a command (``start``/``stop`` raise as before its loop runs)."""

    def __init__(self) -> None:
        self.calls = 0

    async def start(self) -> None:
        self.calls += 1
        raise ConduitError("not running yet")

    stop = start


def test_the_pending_action_runs_in_a_kept_task_cancelled_on_close(tmp_path: Path) -> None:
    async def main() -> None:
        keeper = ClusterKeeper(settings(sys.executable, role="head", nodes=1), tmp_path)
        keeper._pending = "launch"
        sup = StuckSupervisor()
        keeper.attach(sup)
        task = keeper._act_task
        assert task is not None and not task.done()
        keeper._dispatch("stop")  # one at a time: the newest waits for the running one
        assert keeper._act_task is task and keeper._pending == "stop"
        await until(lambda: sup.calls >= 2)
        await keeper.aclose()
        assert task.cancelled()

    asyncio.run(main())


def test_an_mp_follower_is_ready_while_it_lives_without_http(tmp_path: Path) -> None:
    s = VllmSettings.model_validate({"model": "/m", "port": 9, "startup_timeout_s": 3600, "cluster": {
        "backend": "mp", "role": "worker", "head_address": "127.0.0.1:29501", "nodes": 2, "node_rank": 1}})
    assert vcluster.headless(s) and vcluster.cluster_flags(s)[-1] == "--headless"
    posted: list[Message] = []
    mon = Monitor(lambda: s, posted.append, MetricsTracker(), lambda: None)
    cur = Launch(1, os.getpid(), os.getpid(), os.getpid(), 0.0, None, ["vllm"], tmp_path / "vllm.log")

    async def main() -> None:
        task = asyncio.create_task(mon.run(cur, ready=False))
        await asyncio.sleep(0.6)
        assert posted == []  # not before vLLM says it launched its headless executor
        cur.log_path.write_text("INFO [serve.py:224] Launching vLLM (v0.32.0) headless multiproc executor, with "
                                "head node address 127.0.0.1:29501 for torch.distributed process group.\n")
        await until(lambda: posted, timeout=30.0)
        assert posted == [Ready(1)]
        task.cancel()

    asyncio.run(main())


def test_ray_argv_in_the_snapshot_masks_secret_flags(tmp_path: Path) -> None:
    s = settings("/venv/bin/python", ray_args=["--redis-password=hunter2", "--temp-dir=/t"])
    snap = RayProcess(vcluster.ray_start_argv(s), {}, tmp_path / "ray.log").snapshot()
    assert "hunter2" not in repr(snap) and "--temp-dir=/t" in snap["argv"]


class Snapshots(bench_vllm.AgentVllm):
    """``/v1/vllm`` answers from a list (the last one repeats)."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        super().__init__(poll_s=0.0, sleep=lambda _s: None)
        self.answers = answers

    def snapshot(self) -> dict[str, Any]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def compare(tmp_path: Path) -> bench_vllm.VllmCompare:
    return bench_vllm.VllmCompare(changes={"max_num_seqs": 4}, build=lambda _m: None,  # type: ignore[arg-type]
                                  show=lambda *_a: None, util=None, ready_timeout_s=5.0)  # type: ignore[arg-type]


def profile(tmp_path: Path) -> Path:
    p = tmp_path / "profile.toml"
    p.write_text('version = 1\nchannel = "local"\nmodel = "m"\n[vllm]\nmodel = "/m"\nmax_num_seqs = 4\n')
    return p


def test_the_restore_waits_past_the_changed_process(tmp_path: Path) -> None:
    # before: pid 10; the change made pid 11, which never became ready; the restore must not stop at 11
    agent = Snapshots([{"state": "starting", "pid": 11}, {"state": "ready", "pid": 11},
                       {"state": "ready", "pid": 12}])
    agent.seen_pids = {10, 11}
    err = Console(file=io.StringIO())
    bench_vllm._restore(compare(tmp_path), agent, profile(tmp_path), {"max_num_seqs": 8}, (10, None), err, False)
    assert 12 in agent.seen_pids and "max_num_seqs = 8" in profile_text(tmp_path)


def profile_text(tmp_path: Path) -> str:
    return (tmp_path / "profile.toml").read_text()


def test_a_restore_that_cannot_be_written_says_so_and_keeps_the_first_error(tmp_path: Path) -> None:
    path = profile(tmp_path)
    path.write_text(path.read_text() + "max_num_seqs = [\n")  # the profile broke during the bench
    agent = Snapshots([{"state": "ready", "pid": 12}])
    out = io.StringIO()
    with pytest.raises(ConduitError) as e:
        bench_vllm._restore(compare(tmp_path), agent, path, {"max_num_seqs": 8}, (10, 11), Console(file=out), False)
    assert f"could not restore `[vllm].max_num_seqs = 8` in {path}" in e.value.message
    assert "set it back by hand" in e.value.message
    bench_vllm._restore(compare(tmp_path), agent, path, {"max_num_seqs": 8}, (10, 11),
                        Console(file=out, width=400), True)  # failing: printed beside the original error
    assert "could not restore" in out.getvalue() and "set it back by hand" in out.getvalue()
