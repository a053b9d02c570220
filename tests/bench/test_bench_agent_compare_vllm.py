"""`conduit bench --dataset agent --compare-vllm KEY=VALUE`: the agent workload against the supervised vLLM before
and after a [vllm] change, against a real `conduit agent` process supervising tests/helpers/fake_vllm.py (its
/metrics counts 6 of 10 prompt tokens as prefix-cache hits, none without prefix caching, and with
--kv-offloading-size also 3 of 4 tokens found in the tier: vllm:external_prefix_cache_*).

Covered: a KV tier A/B (the tier's hit rate appears only after; the launch got the flag; the profile restored
byte for byte); prefix caching turned off (the hit rate falls to 0 %); --keep; refusals before any request."""

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
WORKLOAD = ("--dataset", "agent:sessions=2,turns=2,prefix=16,turn=4,gap=0.05s", "--max-tokens", "3",
            "--ready-timeout", "60s")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def agent(temp_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AgentProc]:
    """An agent supervising the fake vLLM; every vLLM group it started is killed after."""
    path = temp_home / ".config" / "conduit" / "profile.toml"
    path.parent.mkdir(parents=True)
    path.write_text(f'version = 1\nchannel = "local"\nmodel = "fake"\n\n# the supervised server\n[vllm]\n'
                    f'model = "fake-model"\nserved_model_name = "fake"\nport = {_port()}\n'
                    f'command = ["{sys.executable}", "{FAKE}"]\nenable_prefix_caching = true  # kept\n'
                    'health_interval_s = 0.2\nmetrics_interval_s = 0.3\nstop_grace_s = 3\n'
                    'restart = { backoff_initial_s = 0.2, max_restarts = 1 }\n')
    seen: set[int] = set()
    with AgentProc(temp_home) as proc:
        monkeypatch.setenv("CONDUIT_AGENT_SOCKET", str(proc.sock))
        proc.wait_for("/v1/vllm", lambda b: b.get("state") == "ready" and bool(seen.add(b["pid"]) or True))
        proc.seen = seen  # type: ignore[attr-defined]
        yield proc
        _, body = proc.get("/v1/vllm")
        if body.get("pid"):
            seen.add(body["pid"])
    for pgid in seen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
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


def test_a_kv_tier_before_and_after_then_restore(agent: AgentProc, run_cli, temp_home: Path,  # type: ignore[no-untyped-def]
                                                 tmp_path: Path) -> None:
    path = temp_home / ".config" / "conduit" / "profile.toml"
    original, pid0 = path.read_text(), _vllm(agent)["pid"]
    rc, out, err = run_cli(*WORKLOAD, "--compare-vllm", "kv_offloading_size=2", "--json", str(tmp_path / "ab.json"))
    assert rc == 0, err
    doc = json.loads((tmp_path / "ab.json").read_text())
    a, b = doc["before"], doc["after"]
    assert doc["changes"] == {"kv_offloading_size": 2}
    assert a["requests"] == b["requests"] == 4 and a["failed"] == b["failed"] == 0
    assert a["prefix_cache_hit_rate"] == b["prefix_cache_hit_rate"] == 0.6
    assert a["external_prefix_cache_hit_rate"] is None and b["external_prefix_cache_hit_rate"] == 0.75
    assert a["prompt_tokens_cached"] == 24 and b["prompt_tokens_cached"] == 36
    for needle in ("KV tier hit rate (external)", "75%", "60%", "TTFT p50 / p95 ms", "TPOT p50 / p95 ms"):
        assert needle in out
    assert "set kv_offloading_size = 2 in [vllm]" in err and "restored [vllm]" in err
    assert path.read_text() == original
    snap = _vllm(agent)
    assert snap["state"] == "ready" and snap["pid"] != pid0 and "--kv-offloading-size" not in snap["argv"]


def test_prefix_caching_off_and_keep(agent: AgentProc, run_cli, temp_home: Path) -> None:  # type: ignore[no-untyped-def]
    path = temp_home / ".config" / "conduit" / "profile.toml"
    rc, out, err = run_cli(*WORKLOAD, "--compare-vllm", "enable_prefix_caching=false", "--keep")
    assert rc == 0, err
    row = next(line for line in out.splitlines() if "prefix-cache hit rate" in line)
    assert "60%" in row and "0%" in row.replace("60%", "")
    assert "enable_prefix_caching = false  # kept" in path.read_text() and "kept enable_prefix_caching" in err
    argv = agent.wait_for("/v1/vllm", lambda b: b.get("state") == "ready")["argv"]
    assert "--no-enable-prefix-caching" in argv
    _vllm(agent)


def test_a_change_vllm_cannot_start_with_fails_and_is_restored(agent: AgentProc, run_cli,  # type: ignore[no-untyped-def]
                                                              temp_home: Path) -> None:
    path = temp_home / ".config" / "conduit" / "profile.toml"
    original = path.read_text()
    rc, out, err = run_cli(*WORKLOAD, "--compare-vllm", 'extra_env={ FAKE_VLLM_MODE = "exit_at_start" }')
    assert rc == 1, err
    assert "after setting extra_env" in err and "the agent reports vLLM failed" in err
    assert "restored [vllm]" in err and path.read_text() == original
    assert agent.wait_for("/v1/vllm", lambda b: b.get("state") == "ready")["state"] == "ready"
    _vllm(agent)


@pytest.mark.parametrize("args,needle", [
    (["--compare-vllm", "kv_offloading_backend=lmcache"], "needs kv_offloading_size"),
    (["--compare-vllm", "kv_offloading_size=-1"], "greater than 0"),
    (["--compare-vllm", "health_interval_s=1"], "not compared this way"),
    (["--compare-vllm", "kv_offloading_size=2", "--concurrency", "4"], "sessions=N"),
    (["--compare-vllm", "kv_offloading_size=2", "--base-url", "http://127.0.0.1:1/v1"], "--base-url"),
])
def test_refusals_before_any_request(agent: AgentProc, run_cli, temp_home: Path, args: list[str],  # type: ignore[no-untyped-def]
                                     needle: str) -> None:
    path = temp_home / ".config" / "conduit" / "profile.toml"
    original, pid0 = path.read_text(), _vllm(agent)["pid"]
    rc, out, err = run_cli(*WORKLOAD, *args)
    assert rc == 3 and needle in err, err
    assert path.read_text() == original and _vllm(agent)["pid"] == pid0
