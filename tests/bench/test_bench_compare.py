"""`conduit bench --compare`: the same sweep against two loopback stand-ins of known throughput (a scripted SSE
server with N slots: at most N answers stream at once, the rest wait, as vLLM's max_num_seqs makes them), the
scaling efficiency, the diagnosis below 0.6 with the running/waiting gauges sampled during the run, --json, and
GPU counts from --gpus and from the profile's [vllm].

Throughput is set by the servers' token pacing (asyncio.sleep) and their slots, so the ratio between the two
holds under load; it is asserted with a generous tolerance, never a wall-clock bound."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.procs import cpu_wait_s
from helpers.sse_server import Script, ScriptedServer  # noqa: E402

from conduit.daemon.bench import compare

PACED = dict(first_token_s=0.015, inter_token_s=0.015, tokens=8, metrics=True)
LEVELS = ("--concurrency", "1,2,4,8", "--requests", "8", "--max-tokens", "8", "--prompt-tokens", "16")


@dataclass
class SlotServer(ScriptedServer):
    """``ScriptedServer`` with ``slots`` streaming answers at once (the rest wait in line) and vLLM's gauges
    ``vllm:num_requests_running`` / ``vllm:num_requests_waiting`` on ``/metrics``."""

    slots: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        self.running = 0
        self.peak_running = 0
        self._slots: asyncio.Semaphore | None = None

    async def _respond(self, w: asyncio.StreamWriter, path: str, body: dict[str, Any],
                       headers: dict[str, str]) -> bool:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.slots)
        async with self._slots:
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
            try:
                return await super()._respond(w, path, body, headers)
            finally:
                self.running -= 1

    def metrics_text(self) -> str:
        lab = 'model_name="m"'
        return super().metrics_text() + (
            f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{lab}}} {self.running}\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{lab}}} "
            f"{self.in_flight - self.running}\n")


@pytest.fixture
def pair() -> Iterator[tuple[SlotServer, SlotServer]]:
    with SlotServer(Script(**PACED), slots=2) as a, SlotServer(Script(**PACED), slots=4) as b:
        yield a, b


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):
    """``conduit bench ARGS``: (exit code, stdout, stderr)."""
    from conduit.daemon.cli.main import main

    def run(*args: str) -> tuple[int, str, str]:
        rc = main(["bench", *args])
        out, err = capsys.readouterr()
        return rc, out, err

    return run


def _best(doc: dict[str, Any], side: str) -> float:
    return max(lv["output_tokens_per_s"] for lv in doc[side]["levels"])


def test_twice_the_slots_on_twice_the_gpus_scales_at_about_one(pair, run_cli, tmp_path: Path) -> None:
    a, b = pair
    # 24 tokens: B's best levels stream ~0.75 s, not 0.25 s, so a stall of a loaded machine (client and servers
    # share this process) moves the ratio and the 10 % saturation step a third as much (8 gave 1.47-2.56 loaded)
    a.script, b.script = Script(**(PACED | {"tokens": 24})), Script(**(PACED | {"tokens": 24}))
    levels = (*LEVELS[:4], "--max-tokens", "24", *LEVELS[6:])
    waited, t0 = cpu_wait_s(), time.monotonic()
    rc, out, err = run_cli("--base-url", a.root + "/v1", "--model", "m", *levels, "--compare", b.root + "/v1",
                           "--gpus", "1,2", "--json", str(tmp_path / "c.json"))
    waited, wall = cpu_wait_s() - waited, time.monotonic() - t0
    assert rc == 0, err
    doc = json.loads((tmp_path / "c.json").read_text())
    # the numbers hold where this process had its CPU; a machine that kept it waiting longer (a 1 s stall in
    # one level of ~2 s) bends the curves, so then only the sweep's shape below is checked
    if waited <= 0.05 * wall:
        assert _best(doc, "b") / _best(doc, "a") == pytest.approx(2.0, rel=0.25)
        assert doc["efficiency"]["best"] == pytest.approx(1.0, rel=0.25)
        assert doc["diagnosis"] == [] and "diagnosis" not in out
        # saturation of each curve: A's 2 slots flatten it at 2, B's 4 at 4
        assert doc["a"]["saturation"]["concurrency"] == 2 and doc["b"]["saturation"]["concurrency"] == 4
    assert "scaling efficiency" in out and "GPUs: A 1 (--gpus), B 2 (--gpus)" in out
    # the same sweep on both: same levels, same prompts in the same order, alternating targets
    assert [lv["concurrency"] for lv in doc["a"]["levels"]] == [lv["concurrency"] for lv in doc["b"]["levels"]]
    assert [s.body["messages"] for s in a.seen] == [s.body["messages"] for s in b.seen]
    assert len(a.seen) == len(b.seen) == 32
    assert a.peak_running == 2 and b.peak_running == 4
    # gauges were sampled during the levels: at concurrency 8, A ran 2 at once and others waited
    load8 = doc["a"]["load"][3]
    assert load8["samples"] >= 1 and load8["running_max"] == 2 and load8["waiting_max"] > 0


def test_same_throughput_on_twice_the_gpus_is_half_and_diagnosed(run_cli, tmp_path: Path) -> None:
    with SlotServer(Script(**PACED), slots=2) as a, SlotServer(Script(**PACED), slots=2) as b:
        rc, out, err = run_cli("--base-url", a.root + "/v1", "--model", "m", *LEVELS, "--compare",
                               b.root + "/v1", "--gpus", "1,2", "--json", str(tmp_path / "c.json"))
    assert rc == 0, err
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["efficiency"]["best"] == pytest.approx(0.5, rel=0.25)
    assert "throughput barely moved with more GPUs" in out and "a batch too small to use them, or the " \
        "interconnect" in out
    assert "requests waited while at most 2 ran" in out  # measured: B's gauges during its best level
    assert "data parallelism gives more" in out
    assert "GPU utilisation: not measured (no agent answered)" in out
    assert doc["diagnosis"] and doc["diagnosis"][0].startswith("diagnosis: throughput barely moved")


def test_gpu_count_of_the_local_channel_comes_from_vllm_parallel_sizes(pair, run_cli, temp_home: Path) -> None:
    """A = a hosted channel, B = the supervised vLLM's implicit `local` channel with tensor_parallel_size 2."""
    from helpers.toolfiles import write_profile

    a, b = pair
    write_profile(temp_home, a.root + "/v1/", key_text=None, model="m", tools=(),
                  extra=f'[vllm]\nmodel = "m"\nport = {b.port}\ntensor_parallel_size = 2\n')
    rc, out, err = run_cli("--channel", "gw", *LEVELS, "--compare", "local")
    assert rc == 0, err
    assert "B 2 ([vllm] tensor_parallel_size 2 x pipeline_parallel_size 1 x data_parallel_size 1)" in out
    assert "A 1 (assumed: give --gpus A,B)" in out
    assert len(a.seen) == len(b.seen) == 32


def test_compare_refuses_what_it_does_not_write(pair, run_cli, tmp_path: Path) -> None:
    a, b = pair
    rc, _, err = run_cli("--base-url", a.root + "/v1", "--model", "m", "--compare", b.root + "/v1",
                         "--csv", str(tmp_path / "x.csv"))
    assert rc == 3 and "--json only" in err
    rc, _, err = run_cli("--base-url", a.root + "/v1", "--model", "m", "--gpus", "1,2")
    assert rc == 3 and "--compare" in err
    rc, _, err = run_cli("--base-url", a.root + "/v1", "--model", "m", "--compare", b.root + "/v1",
                         "--gpus", "2")
    assert rc == 3 and "A,B" in err
    assert a.seen == [] and b.seen == []


def test_efficiency_formula_and_gpu_parsing() -> None:
    assert compare.efficiency(100.0, 200.0, 1, 2) == 1.0
    assert compare.efficiency(100.0, 100.0, 1, 2) == 0.5
    assert compare.efficiency(100.0, 300.0, 2, 4) == 1.5
    assert compare.efficiency(0.0, 100.0, 1, 2) is None
    assert compare.parse_gpus(" 1, 4") == (1, 4)
    for bad in ("2", "0,1", "1,x", "1,2,3"):
        with pytest.raises(ValueError):
            compare.parse_gpus(bad)


def test_a_target_that_fails_every_request_gets_no_efficiency(run_cli) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed again at once: connections are refused
    with SlotServer(Script(**PACED), slots=2) as a:
        rc, out, err = run_cli("--base-url", a.root + "/v1", "--model", "m", "--concurrency", "1,2",
                               "--requests", "2", "--compare", f"http://127.0.0.1:{dead}/v1", "--gpus", "1,2")
    assert rc == 0, err  # A answered
    assert "scaling efficiency: not computed (B delivered no tokens" in out
    assert "diagnosis" not in out
