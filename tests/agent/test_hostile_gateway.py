"""Gateways that answer too much, too slowly, or with escapes (tests/helpers/hostile.py): real `conduit agent`,
`conduit doctor --live` and `conduit key rotate` processes stay bounded in memory and time
(conduit.daemon.config.gateway: one deadline per exchange, a cap on the decoded body).

- The agent, probing a 512 MiB answer, a gzip bomb and a drip for three probe rounds, stays under 100 MB RSS,
  and the drip is a ``timeout`` (phase ``body``), not a probe that never ends.
- ``doctor --live`` (no agent: the probes run in the command) and ``key rotate`` end within their bounds against
  each; the peak RSS is printed.
- A primary that starts to drip moves the tools to the ``[fallback]`` within ``after_s`` plus one probe deadline
  (plus one probe interval and margin).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers.agentproc import AgentProc, conduit_exe
from helpers.daemonproc import Daemon
from helpers.hostile import HostileGateway, wait_until

KEY = "sk-hostile-canary-0123456789ab"
MB = 1_000_000
RSS_LIMIT = 100 * MB
ATTACKS = ("huge", "bomb", "drip")
TIMEOUT_S = 3  # the channels' `timeout`: one probe's deadline


def _profile(home: Path, channels: dict[str, str], *, primary: str | None = None, extra: str = "") -> Path:
    keys = home / ".config" / "conduit" / "keys"
    keys.mkdir(parents=True, exist_ok=True)
    (keys / "k").write_text(KEY + "\n")
    os.chmod(keys / "k", 0o600)
    text = f'version = 1\nchannel = "{primary or next(iter(channels))}"\nmodel = "m"\n{extra}\n'
    for name, url in channels.items():
        text += (f'[channels.{name}]\nbase_url = "{url}"\nprotocols = ["openai", "anthropic"]\n'
                 f'timeout = {TIMEOUT_S}\nkey = {{ file = "{keys / "k"}" }}\n\n')
    path = home / ".config" / "conduit" / "profile.toml"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def _peak_rss(proc: psutil.Process, until: Any, timeout: float) -> tuple[int, bool]:
    """Sample ``proc``'s RSS every 50 ms until ``until()`` or ``timeout`` s; ``(peak bytes, until() held)``."""
    peak, deadline = 0, time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            peak = max(peak, proc.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        if until():
            return peak, True
        time.sleep(0.05)
    return peak, bool(until())


def _run_measured(home: Path, args: list[str], bound_s: float, stdin: str = "") -> tuple[subprocess.CompletedProcess[str], int]:
    """Run ``conduit ARGS`` with the agent unreachable, sampling its RSS; AssertionError past ``bound_s``."""
    env = dict(os.environ, HOME=str(home), NO_COLOR="1", COLUMNS="200",
               CONDUIT_AGENT_SOCKET=str(home / "no-agent.sock"))
    io = {n: home / f".{n}-{os.getpid()}" for n in ("in", "out", "err")}
    io["in"].write_text(stdin)
    with open(io["in"]) as i, open(io["out"], "w") as o, open(io["err"], "w") as e:
        p = subprocess.Popen([conduit_exe(), *args], env=env, stdin=i, stdout=o, stderr=e, text=True)
        peak, ended = _peak_rss(psutil.Process(p.pid), lambda: p.poll() is not None, bound_s)
        if not ended:
            p.kill()
        p.wait(10)
    out, err = io["out"].read_text(), io["err"].read_text()
    assert ended, f"conduit {' '.join(args)} still running after {bound_s} s"
    return subprocess.CompletedProcess(args, p.returncode, out, err), peak


def test_agent_memory_stays_bounded_probing_huge_bomb_and_drip(temp_home: Path) -> None:
    gws = {m: HostileGateway(m).start() for m in ATTACKS}
    try:
        _profile(temp_home, {m: gws[m].url for m in ATTACKS})
        with AgentProc(temp_home, args=["--probe-interval", "1"]) as agent:
            assert agent.proc is not None

            def rounds() -> bool:
                chans = agent.get("/v1/channels")[1]["channels"]
                return all(p["probes"] >= 3 for m in ATTACKS for p in chans[m]["protocols"].values())

            peak, done = _peak_rss(psutil.Process(agent.proc.pid), rounds, timeout=120)
            chans = agent.get("/v1/channels")[1]["channels"]
            assert agent.stop() == 0
            log = agent.log.read_text(errors="replace")
    finally:
        for gw in gws.values():
            gw.stop()
    print(f"agent peak RSS over three probe rounds of huge/bomb/drip: {peak / MB:.1f} MB")
    assert done, chans
    assert peak < RSS_LIMIT, f"{peak / MB:.1f} MB"
    drip = chans["drip"]["protocols"]["openai"]
    assert drip["verdict"] == "timeout" and drip["phase"] == "body", drip
    for m in ("huge", "bomb"):
        p = chans[m]["protocols"]["openai"]
        assert p["verdict"] == "ok" and "not a model list" in p["message"], p
    assert "Traceback" not in log and KEY not in log


@pytest.mark.parametrize("attack", ATTACKS)
def test_doctor_live_and_key_rotate_end_within_their_bounds(temp_home: Path, attack: str) -> None:
    with HostileGateway(attack) as gw:
        _profile(temp_home, {"gw": gw.url})
        # doctor --live: every probe within 2 x the channel's timeout, all channels at once; + start-up margin
        r, peak = _run_measured(temp_home, ["doctor", "--live", "--json"], bound_s=2 * TIMEOUT_S + 30)
        print(f"doctor --live against {attack}: exit {r.returncode}, peak RSS {peak / MB:.1f} MB")
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr.lower(), r.stderr
        live = json.loads(r.stdout)["live"]
        verdict = live["channels"]["gw"]["protocols"]["openai"]["verdict"]
        assert verdict == ("timeout" if attack == "drip" else "ok"), live["channels"]
        # key rotate: the check within CHECK_TIMEOUT_S (10 s), then a sync of no tools; + start-up margin
        r, peak = _run_measured(temp_home, ["key", "rotate", "gw"], bound_s=10 + 30, stdin="sk-new-key-0123456789abcdef\n")
        print(f"key rotate against {attack}: exit {r.returncode}, peak RSS {peak / MB:.1f} MB")
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr.lower(), r.stderr
        if attack == "drip":
            assert r.returncode == 1 and "no whole answer within 10 s" in r.stderr, r.stderr
        else:
            assert r.returncode == 0, r.stderr


def test_a_dripping_primary_moves_the_tools_to_the_fallback(temp_home: Path, tmp_path: Path) -> None:
    after_s, interval_s = 2.0, 1.0
    (temp_home / ".claude").mkdir()
    with HostileGateway("ok") as primary, HostileGateway("ok") as hosted:
        _profile(temp_home, {"primary": primary.url, "hosted": hosted.url}, primary="primary",
                 extra=f'[fallback]\nchannel = "hosted"\nmodel = "fb-model"\nafter_s = {after_s}\n\n'
                       '[tools.claude_code]\n')
        with AgentProc(temp_home, args=["--probe-interval", str(interval_s)]) as agent:
            def active() -> str | None:
                return (agent.get("/v1/status")[1].get("routing") or {}).get("active")

            assert wait_until(lambda: active() == "primary" and primary.requests >= 2, 60), active()
            daemon = Daemon(temp_home, tmp_path).start()
            try:
                settings = temp_home / ".claude" / "settings.json"
                assert wait_until(lambda: primary.url in settings.read_text(), 30)
                primary.mode = "drip"
                t0 = time.monotonic()
                # bound: one probe interval (+20 % jitter) until the next probe, its deadline, after_s, margin
                bound = interval_s * 1.2 + TIMEOUT_S + after_s + 5
                moved = wait_until(lambda: hosted.url in settings.read_text(), bound + 10, step=0.05)
                elapsed = time.monotonic() - t0
            finally:
                daemon.stop()
            status = agent.log.read_text(errors="replace")
    print(f"dripping primary: tools on the fallback after {elapsed:.1f} s (bound {bound:.1f} s)")
    assert moved and elapsed < bound, (elapsed, status[-2000:])
