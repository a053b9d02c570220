"""`conduit bench --compare-vllm KEY=VALUE`: the supervised vLLM before and after a [vllm] change, against a real
`conduit agent` process supervising tests/helpers/fake_vllm.py (which streams paced tokens with at most --max-num-seqs
answers at once, so max_num_seqs 2 -> 4 doubles its throughput at concurrency 4).

Covered: the change is written with its comment kept, the agent relaunches vLLM and the command waits for the new
process; both sweeps send the same prompts; the table, each side's saturation and the efficiency; the default
restore (the profile byte for byte as before, vLLM relaunched with the old flags) and --keep; the GPU counts of a
tensor_parallel_size change; usage mistakes refused before any request (exit 3), no agent (exit 2), a change that
makes vLLM fail (exit 1, and the table restored).

Throughput is set by the fake's token pacing and its slots, so ratios are asserted with a generous tolerance,
never a wall-clock bound."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.agentproc import AgentProc
from helpers.paths import HELPERS

FAKE = str(HELPERS / "fake_vllm.py")
# 24 tokens of 0.02 s: the best level of "after" streams ~1 s, so the per-level cost that does not scale with slots
# (connects, the first and last request's edges, a loaded machine's scheduling delays; ~0.05 s idle, several
# tenths under load) stays small beside it (8 tokens gave 0.3 s levels and ratios of 1.7-1.9 idle, 1.36 loaded)
LEVELS = ("--concurrency", "1,2,4,8", "--requests", "8", "--max-tokens", "24", "--prompt-tokens", "16",
          "--ready-timeout", "60s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def profile_text(port: int, extra: str = "") -> str:
    return (f'version = 1\nchannel = "local"\nmodel = "fake"\n\n# the supervised server\n[vllm]\n'
            f'model = "fake-model"\nserved_model_name = "fake"\nport = {port}\n'
            f'command = ["{sys.executable}", "{FAKE}"]\nmax_num_seqs = 2   # the batch cap under test\n'
            f'health_interval_s = 0.2\nmetrics_interval_s = 0.3\nstop_grace_s = 3\n'
            f'extra_env = {{ FAKE_VLLM_TOKEN_S = "0.02" }}\nrestart = {{ backoff_initial_s = 0.2, max_restarts = 1 }}\n'
            f'{extra}')


@pytest.fixture
def agent(temp_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AgentProc]:
    """An agent supervising the fake vLLM with max_num_seqs = 2; every vLLM group it started is killed after."""
    path = temp_home / ".config" / "conduit" / "profile.toml"
    path.parent.mkdir(parents=True)
    path.write_text(profile_text(free_port()))
    seen: set[int] = set()
    with AgentProc(temp_home) as proc:
        monkeypatch.setenv("CONDUIT_AGENT_SOCKET", str(proc.sock))
        proc.seen = seen  # type: ignore[attr-defined]
        proc.wait_for("/v1/vllm", lambda b: b.get("state") == "ready" and bool(seen.add(b["pid"]) or True))
        yield proc
        _, body = proc.get("/v1/vllm")
        if body.get("pid"):
            seen.add(body["pid"])
    for pgid in seen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):
    """``conduit bench ARGS`` in this process: (exit code, stdout, stderr)."""
    from conduit.daemon.cli.main import main

    def run(*args: str) -> tuple[int, str, str]:
        rc = main(["bench", *args])
        out, err = capsys.readouterr()
        return rc, out, err

    return run


def _vllm(agent: AgentProc) -> dict[str, Any]:
    _, body = agent.get("/v1/vllm")
    if body.get("pid"):
        agent.seen.add(body["pid"])  # type: ignore[attr-defined]
    return dict(body)


def _best(doc: dict[str, Any], side: str) -> float:
    return max(lv["output_tokens_per_s"] for lv in doc[side]["levels"])


def test_before_and_after_a_max_num_seqs_change_then_restore(agent: AgentProc, run_cli, temp_home: Path,
                                                             tmp_path: Path) -> None:
    path = temp_home / ".config" / "conduit" / "profile.toml"
    original = path.read_text()
    pid0 = _vllm(agent)["pid"]
    rc, out, err = run_cli("--compare-vllm", "max_num_seqs=4", *LEVELS, "--json", str(tmp_path / "c.json"))
    assert rc == 0, err
    doc = json.loads((tmp_path / "c.json").read_text())
    # the change was applied and waited for: "after" ran against a relaunched vLLM with --max-num-seqs 4
    assert "set max_num_seqs = 4 in [vllm]" in err and "restored [vllm]" in err
    assert doc["a"]["label"] == "before" and doc["b"]["label"] == "after"
    assert doc["a"]["saturation"]["concurrency"] == 2 and doc["b"]["saturation"]["concurrency"] == 4
    assert _best(doc, "b") / _best(doc, "a") == pytest.approx(2.0, rel=0.3)
    assert doc["efficiency"]["best"] == pytest.approx(2.0, rel=0.3)  # one GPU on each side: the plain ratio
    assert all(lv["ok"] == 8 for side in ("a", "b") for lv in doc[side]["levels"])
    assert doc["b"]["load"][2]["running_max"] == 4 and doc["a"]["load"][2]["running_max"] == 2
    assert "before tok/s" in out and "after tok/s" in out and "scaling efficiency" in out
    # restored: the profile byte for byte (its comments too), and vLLM relaunched with the old flags
    assert path.read_text() == original
    snap = _vllm(agent)
    assert snap["state"] == "ready" and snap["pid"] != pid0
    argv = snap["argv"]
    assert argv[argv.index("--max-num-seqs") + 1] == "2"


def test_keep_leaves_the_change_with_its_comment(agent: AgentProc, run_cli, temp_home: Path) -> None:
    path = temp_home / ".config" / "conduit" / "profile.toml"
    rc, out, err = run_cli("--compare-vllm", "max_num_seqs=4", "--compare-vllm", "tensor_parallel_size=2",
                           "--keep", "--concurrency", "2", "--requests", "4", "--max-tokens", "4",
                           "--prompt-tokens", "8", "--ready-timeout", "60s")
    assert rc == 0, err
    text = path.read_text()
    assert "max_num_seqs = 4   # the batch cap under test" in text and "tensor_parallel_size = 2" in text
    assert "# the supervised server" in text and "kept max_num_seqs = 4" in err
    # GPU counts from the two tables: 1 before, 2 after (tensor_parallel_size)
    assert "GPUs: before 1 ([vllm] before: tensor 1 x pipeline 1 x data 1), after 2 ([vllm] after: tensor 2" in out
    argv = agent.wait_for("/v1/vllm", lambda b: b.get("state") == "ready")["argv"]
    assert argv[argv.index("--max-num-seqs") + 1] == "4" and argv[argv.index("--tensor-parallel-size") + 1] == "2"
    _vllm(agent)


def test_a_change_vllm_cannot_start_with_fails_and_is_restored(agent: AgentProc, run_cli, temp_home: Path) -> None:
    """extra_args the fake cannot start with is made by FAKE_VLLM_MODE: exit_at_start via extra_env."""
    path = temp_home / ".config" / "conduit" / "profile.toml"
    original = path.read_text()
    rc, _, err = run_cli("--compare-vllm", 'extra_env={ FAKE_VLLM_MODE = "exit_at_start" }', "--concurrency", "1",
                         "--requests", "2", "--max-tokens", "4", "--prompt-tokens", "8", "--ready-timeout", "60s")
    assert rc == 1, err
    assert "after setting extra_env" in err and "the agent reports vLLM failed" in err
    assert "restored [vllm]" in err and path.read_text() == original
    assert _vllm(agent)["state"] == "ready"


def test_refusals_before_any_request(agent: AgentProc, run_cli, temp_home: Path) -> None:
    path = temp_home / ".config" / "conduit" / "profile.toml"
    original = path.read_text()
    pid = _vllm(agent)["pid"]
    for args, words in ((("--compare-vllm", "startup_timeout_s=5"), "not how vLLM runs"),
                        (("--compare-vllm", "max_num_seq=4"), "[vllm] has no key 'max_num_seq'"),
                        (("--compare-vllm", "max_num_seqs"), "is not KEY=VALUE"),
                        (("--compare-vllm", "max_num_seqs=2"), "does not change how vLLM is launched"),
                        (("--compare-vllm", "max_num_seqs=0"), "`vllm.max_num_seqs`: Input should be greater than 0"),
                        (("--compare-vllm", "max_num_seqs=4", "--base-url", "http://127.0.0.1:9/v1"), "--base-url"),
                        (("--compare-vllm", "max_num_seqs=4", "--csv", "x.csv"), "--json only"),
                        (("--keep",), "--keep goes with --compare-vllm")):
        rc, _, err = run_cli(*args)
        assert rc == 3, (args, err)
        assert words in err.replace("\n", " ") or words in " ".join(err.split()), (args, err)
    assert path.read_text() == original and _vllm(agent)["pid"] == pid


def test_no_agent_exits_2_and_changes_nothing(run_cli, temp_home: Path, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    path = temp_home / ".config" / "conduit" / "profile.toml"
    path.parent.mkdir(parents=True)
    path.write_text(profile_text(free_port()))
    monkeypatch.setenv("CONDUIT_AGENT_SOCKET", str(tmp_path / "none.sock"))
    rc, _, err = run_cli("--compare-vllm", "max_num_seqs=4")
    assert rc == 2 and "does not answer" in err
    assert path.read_text() == profile_text(int(path.read_text().split("port = ")[1].split("\n")[0]))


def test_parse_change_reads_toml_values() -> None:
    from conduit.daemon.cli.bench_vllm import parse_change

    assert parse_change("max_num_seqs=4") == ("max_num_seqs", 4)
    assert parse_change(" gpu_memory_utilization = 0.85 ") == ("gpu_memory_utilization", 0.85)
    assert parse_change("enforce_eager=true") == ("enforce_eager", True)
    assert parse_change("dtype=bfloat16") == ("dtype", "bfloat16")  # not TOML: taken as a string
    assert parse_change('extra_args=["--foo", "1"]') == ("extra_args", ["--foo", "1"])
    assert parse_change("max_num_seqs=") == ("max_num_seqs", None)  # removed: vLLM's default
    for bad in ("max_num_seqs", "=4", "nope=1", "restart=1", "model=x"):
        with pytest.raises(ValueError):
            parse_change(bad)
