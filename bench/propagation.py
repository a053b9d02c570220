"""Profile save -> every tool written: latency of a real ``conduit daemon``, against a floor from the same run.

What it measures, all under a throwaway HOME with real-format files of Claude Code, Cline (gen C) and CC Switch
(default), or, with ``--all-tools``, of every tool in ``conduit.adapters.registry`` (each one's sample from
tests/helpers/toolsamples.py ``SAMPLES`` or ``conduit.daemon.cli.samples``, enabled with its ``fresh_options``).
The files waited on are the adapters' own targets that a model change rewrites (found on the first floor sync):
a save is done when the last of them holds the new model.

1. **floor**: the same change applied with no watcher, in this process: ``sync(profile)`` after an atomic
   profile save (it renders and atomically writes the same files). Also, for context, ``raw``: only the atomic
   replaces (temp, fsync, rename) of the same final bytes of the text files (SQLite files are left out).
2. **daemon**: ``conduit daemon`` as a subprocess; for each of ``--saves`` saves (atomic rename of the profile
   with a new model), the time until every tool file holds the new model (polled every 0.5 ms).
3. **idle**: the daemon's RSS and CPU time over ``--idle`` seconds with nothing happening, and its context
   switches (each one is a wake-up of some thread; a daemon that polls shows a steady count).

Prints p50/p99 of each, the ratio daemon/floor, and its goals (the daemon syncs on the leading
edge: no debounce before the first sync): single-save p50 within 2x the floor; idle RSS under 45 MB and no
periodic wake-ups (``--debounce-ms`` now only delays the re-read of a profile that did not parse).

Run: ``.venv/bin/python bench/propagation.py [--all-tools] [--saves 200] [--idle 30] [--debounce-ms 50] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
THREE = ("claude_code", "cline", "cc_switch")
"""The default tools: the three the daemon was first measured with."""
SQLITE_SUFFIXES = (".db", ".sqlite", ".vscdb")


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def _samples() -> dict[str, Any]:
    """Per tool name, the function writing its real-format sample under a HOME."""
    from conduit.daemon.cli.samples import cc_switch_db, claude_settings, cline_gen_c

    sys.path.insert(0, str(REPO / "tests"))
    from helpers.toolsamples import SAMPLES

    return {**SAMPLES, "claude_code": claude_settings, "cline": cline_gen_c, "cc_switch": cc_switch_db}


def _setup(home: Path, tools: tuple[str, ...]) -> Path:
    """Each tool's sample (when it has one), a key file and a profile enabling ``tools`` with their
    ``fresh_options``; returns the profile path."""
    from conduit.adapters.registry import ADAPTERS

    samples = _samples()
    for tool in tools:
        if tool in samples:
            samples[tool](home)
    cfg = home / ".config" / "conduit"
    (cfg / "keys").mkdir(parents=True)
    key = cfg / "keys" / "gw"
    key.write_text("sk-bench-0123456789abcdef\n")
    key.chmod(0o600)
    tables = "".join(f"[tools.{t}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in
                                                 ADAPTERS[t].fresh_options.items()) for t in tools)
    profile = cfg / "profile.toml"
    profile.write_text('version = 1\nchannel = "gw"\nmodel = "m-start"\n\n[channels.gw]\n'
                       'base_url = "https://gw.example.com/api"\nprotocols = ["openai", "anthropic", "gemini"]\n'
                       'key = { file = "~/.config/conduit/keys/gw" }\n\n' + tables)
    return profile


def _save(profile: Path, model: str) -> None:
    text = re.sub(r'(?m)^model = ".*"$', f'model = "{model}"', profile.read_text())
    tmp = profile.with_name(".profile.toml.bench")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, profile)


def _targets(profile: Path) -> list[Path]:
    """Every file the enabled adapters' plans target for the profile as it is now."""
    from conduit.adapters.base import Env
    from conduit.adapters.registry import ADAPTERS
    from conduit.daemon.config.profile import load_profile
    from conduit.daemon.config.resolve import Resolver

    loaded = load_profile(profile)
    resolver, env = Resolver(loaded), Env()
    out: list[Path] = []
    for name, cfg in loaded.model.tools.items():
        if cfg.enabled:
            out += [Path(t.path) for t in ADAPTERS[name].plan(resolver.tool_settings(name), env)]
    return list(dict.fromkeys(out))


def _stamp(path: Path) -> int:
    """The newest mtime (ns) of ``path`` and, for SQLite, its ``-wal`` file; 0 when missing."""
    newest = 0
    for p in (path, path.with_name(path.name + "-wal")) if path.suffix in SQLITE_SUFFIXES else (path,):
        try:
            newest = max(newest, p.stat().st_mtime_ns)
        except OSError:
            pass
    return newest


def _holds(path: Path, model: str) -> bool:
    """Whether ``path`` (with its ``-wal`` for SQLite) holds ``model``'s name."""
    parts = (path, path.with_name(path.name + "-wal")) if path.suffix in SQLITE_SUFFIXES else (path,)
    data = b""
    for p in parts:
        try:
            data += p.read_bytes()
        except OSError:
            pass
    return model.encode() in data


def _all_at(files: list[Path], model: str) -> bool:
    return all(_holds(p, model) for p in files)


def _wait_changed(files: list[Path], model: str, before: list[int], timeout: float = 30.0) -> None:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        now = [_stamp(p) for p in files]
        if all(a != b for a, b in zip(now, before, strict=True)) and _all_at(files, model):
            return
        time.sleep(0.0005)
    raise TimeoutError(f"the tools did not reach {model} within {timeout} s")


def _model(kind: str, i: int) -> str:
    """A model name no other save's name contains (``m-floor-00003-z``)."""
    return f"m-{kind}-{i:05d}-z"


def floor(profile: Path, n: int) -> tuple[list[float], list[float], list[Path]]:
    """(sync() times, raw atomic-write times) in ms for ``n`` model changes, no watcher, and the tool files a
    model change rewrites (those holding the new model after the first sync)."""
    from conduit.adapters.base import Env
    from conduit.daemon.config.profile import load_profile
    from conduit.daemon.sync.engine import sync

    sync_ms: list[float] = []
    raw_ms: list[float] = []
    files: list[Path] = []
    for i in range(n):
        model = _model("floor", i)
        t0 = time.perf_counter()
        _save(profile, model)
        report = sync(load_profile(profile), env=Env())
        sync_ms.append((time.perf_counter() - t0) * 1000)
        if not files:
            files = [p for p in _targets(profile) if _holds(p, model)]
        assert report.ok and files and _all_at(files, model), report
        # raw: write the same final bytes of the text files again atomically, nothing else
        blobs = [(p, p.read_bytes()) for p in files if p.suffix not in SQLITE_SUFFIXES]
        t0 = time.perf_counter()
        for p, data in blobs:
            real = p.resolve()
            tmp = real.with_name(f".{real.name}.raw")
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, real.stat().st_mode & 0o777)
            os.replace(tmp, real)
            dfd = os.open(real.parent, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
        raw_ms.append((time.perf_counter() - t0) * 1000)
    return sync_ms, raw_ms, files


def daemon_run(home: Path, profile: Path, files: list[Path], n: int, debounce_ms: int,
               idle_s: float) -> dict[str, Any]:
    sock_path = home.parent / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(60)
    env = dict(os.environ, HOME=str(home), NOTIFY_SOCKET=str(sock_path))
    for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "CONDUIT_PROFILE", "CLAUDE_CONFIG_DIR", "CLINE_DATA_DIR"):
        env.pop(var, None)
    log = open(home.parent / "daemon.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "conduit.daemon.cli", "daemon", "--debounce-ms", str(debounce_ms)],
                            env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        while b"READY=1" not in sock.recv(4096):
            pass
        lat = []
        for i in range(n):
            model = _model("daemon", i)
            before = [_stamp(p) for p in files]
            t0 = time.perf_counter()
            _save(profile, model)
            try:
                _wait_changed(files, model, before)
            except TimeoutError:
                log.flush()
                sys.stderr.write((home.parent / "daemon.log").read_text()[-1500:])
                late = [str(p) for p in files if not _holds(p, model)]
                sys.stderr.write(f"\nnot at {model}: {late} profile={profile.read_text()[:60]!r}\n")
                raise
            lat.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.01)
        time.sleep(1.0)  # let the daemon settle (its own write events)
        p = psutil.Process(proc.pid)
        cpu0, ctx0 = p.cpu_times(), _ctx(p)
        time.sleep(idle_s)
        cpu1, ctx1 = p.cpu_times(), _ctx(p)
        rss = p.memory_info().rss
        return {"latency_ms": lat, "idle_rss_bytes": rss,
                "idle_cpu_s": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
                "idle_wakeups": ctx1 - ctx0, "threads": p.num_threads()}
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        sock.close()


def _ctx(p: psutil.Process) -> int:
    """Context switches of every thread of ``p`` (voluntary + involuntary), from /proc/<pid>/task/*/status."""
    total = 0
    for t in Path(f"/proc/{p.pid}/task").iterdir():
        try:
            for line in (t / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--saves", type=int, default=200)
    ap.add_argument("--idle", type=float, default=30.0, help="idle window, seconds")
    ap.add_argument("--debounce-ms", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--all-tools", action="store_true",
                    help="enable every registered tool (each with its sample), not only the first three")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="conduit-bench-"))
    try:
        home = base / "home"
        home.mkdir()
        os.environ["HOME"] = str(home)
        for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "CONDUIT_PROFILE"):
            os.environ.pop(var, None)
        from conduit.adapters.registry import ADAPTERS

        tools = tuple(ADAPTERS) if args.all_tools else THREE
        profile = _setup(home, tools)
        sync_ms, raw_ms, files = floor(profile, args.saves)
        d = daemon_run(home, profile, files, args.saves, args.debounce_ms, args.idle)
    finally:
        (shutil.rmtree(base, ignore_errors=True) if not os.environ.get("KEEP") else print(base))
    lat = d["latency_ms"]
    p50, p99 = statistics.median(lat), _pct(lat, 99)
    f50, f99 = statistics.median(sync_ms), _pct(sync_ms, 99)
    r50 = statistics.median(raw_ms)
    goal = 2 * f50
    out = {
        "saves": args.saves, "debounce_ms": args.debounce_ms, "tools": list(tools),
        "files": [str(p.relative_to(home)) if p.is_relative_to(home) else str(p) for p in files],
        "daemon_ms": {"p50": round(p50, 2), "p99": round(p99, 2)},
        "floor_sync_ms": {"p50": round(f50, 2), "p99": round(f99, 2)},
        "floor_raw_write_ms": {"p50": round(r50, 2)},
        "ratio_p50_daemon_over_floor": round(p50 / f50, 2),
        "goal_p50_ms": round(goal, 2), "goal_met": p50 <= goal,
        "idle_s": args.idle, "idle_rss_mb": round(d["idle_rss_bytes"] / 2**20, 1),
        "idle_cpu_s": round(d["idle_cpu_s"], 3), "idle_wakeups": d["idle_wakeups"], "threads": d["threads"],
        "idle_goal_met": d["idle_rss_bytes"] < 45 * 2**20 and d["idle_wakeups"] <= 2,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"profile save -> {len(tools)} tools' {len(files)} files written ({args.saves} saves, debounce "
          f"{args.debounce_ms} ms)")
    print(f"  daemon          p50 {p50:8.2f} ms   p99 {p99:8.2f} ms")
    print(f"  floor: sync()   p50 {f50:8.2f} ms   p99 {f99:8.2f} ms   (same files, same run, no watcher)")
    print(f"  floor: raw      p50 {r50:8.2f} ms   (only the atomic replaces of the same bytes)")
    print(f"  ratio daemon/floor p50 {p50 / f50:.2f}x")
    print(f"  goal p50 <= 2 x floor = {goal:.2f} ms: {'met' if out['goal_met'] else 'NOT met'}")
    print(f"idle {args.idle:g} s: RSS {out['idle_rss_mb']} MB, CPU {out['idle_cpu_s']} s, "
          f"context switches {d['idle_wakeups']} ({d['threads']} threads); goal < 45 MB and no periodic "
          f"wake-ups: {'met' if out['idle_goal_met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
