"""Soak: a real sync daemon and a real agent under a random mix of everything that writes around them.

    .venv/bin/python bench/soak.py                 # 10 minutes (the figure in the closing notes)
    .venv/bin/python bench/soak.py --duration 60   # a short run

Not part of the test suite (it runs for minutes). In a throwaway HOME with real-format files of Claude Code,
Cline and CC Switch, a profile with ``on_drift = "reapply"`` and a loopback stand-in gateway, it starts
``conduit daemon`` and ``conduit agent`` as subprocesses, then, until the duration is up, picks at random:

- a profile save (a new model), by rename or in place (truncate + write);
- a save of Claude Code's ``settings.json`` by "another program" that bumps a counter key of its own, by
  rename or in place;
- a CC Switch transaction that bumps a counter in its ``settings`` table;
- a key rotation (``conduit key rotate`` with a new key on stdin);
- a new attack from the hostile channel (tests/helpers/hostile.py, probed by the agent every 2 s with a 3 s
  ``timeout``): a 512 MiB answer, a gzip bomb, a drip, model ids and errors holding escapes, 200,000 nested
  brackets; and now and then a tool's own save of ``settings.json`` with mode 0644 (the daemon makes it 0600).

Every second it also asks the agent ``GET /v1/status`` (5 s timeout) and checks the daemon still syncs.

Printed at the end, each goal 0: **hangs** (a status request or a sync that did not complete in time, or a
process that did not stop on SIGTERM within 5 s), **lost keys** (a counter another writer wrote that went
missing or back), **torn files** (a tool file that did not parse while no in-place writer of ours was mid-save),
**leaked canaries** (any key, current or rotated out, found in the daemon's or the agent's log, the state file
or a status answer; a rotated-out key found in any file under HOME), and the daemon's and the agent's RSS at
start and end (goal: growth under 5 MB each), the agent's peak RSS while the hostile channel is probed (goal:
under 100 MB), **raw escapes** (an ESC, BEL or C1 byte in a log or a status answer; goal 0), and **open key
files** (Claude Code's settings left readable by others at a check; goal 0). Exit status 0 when every goal is
met.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from conduit.daemon.cli.demo import StandInGateway
from conduit.daemon.cli.samples import CLAUDE_SETTINGS, cc_switch_db, claude_settings, cline_gen_c

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers.hostile import HostileGateway  # noqa: E402

MODELS = ["deepseek-chat", "claude-sonnet-4-20250514", "qwen-max", "glm-4.6", "kimi-k2"]
PROFILE = """version = 1
channel = "gw"
model = "{model}"
on_drift = "reapply"

[channels.gw]
base_url = "{root}"
protocols = ["openai", "anthropic"]
key = {{ file = "~/.config/conduit/keys/gw" }}

[channels.hostile]
base_url = "{hostile}"
protocols = ["openai", "anthropic"]
timeout = 3

[tools.claude_code]
[tools.cline]
[tools.cc_switch]
"""
ATTACKS = ("huge", "bomb", "drip", "escape", "nested")
RAW = ("\x1b", "\x07", "\x9b", "\x9d")
AGENT_RSS_LIMIT_MB = 100.0


@dataclass
class Figures:
    """What the soak counts; every goal is 0 but the RSS figures."""

    hangs: list[str] = field(default_factory=list)
    lost_keys: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    actions: dict[str, int] = field(default_factory=dict)
    rss_mb: dict[str, tuple[float, float]] = field(default_factory=dict)
    agent_peak_mb: float = 0.0
    raw_escapes: list[str] = field(default_factory=list)
    open_files: list[str] = field(default_factory=list)

    def count(self, what: str) -> None:
        self.actions[what] = self.actions.get(what, 0) + 1


class Soak:
    """The throwaway HOME, the two processes and the writers."""

    def __init__(self, home: Path, seed: int) -> None:
        self.home, self.rng = home, random.Random(seed)
        self.gateway = StandInGateway()
        self.hostile = HostileGateway("escape").start()
        self.fig = Figures()
        self.keys: list[str] = []  # every key used; the last one is current
        self.claude_counter = 0
        self.claude_lost_counted = False
        self.cc_counter = 0
        self.file_lock = threading.Lock()  # the other program's saves vs the soak's own checks
        self.env = dict(os.environ, HOME=str(home))
        for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "CONDUIT_PROFILE", "CLAUDE_CONFIG_DIR",
                    "CLINE_DATA_DIR", "CLINE_DIR", "ANTHROPIC_BASE_URL", "NOTIFY_SOCKET", "CONDUIT_AGENT_SOCKET"):
            self.env.pop(var, None)
        self.env["CONDUIT_AGENT_SOCKET"] = str(home / "agent.sock")
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    # ---------------------------------------------------------------------------------------------- set-up

    def lay_out(self) -> None:
        claude_settings(self.home, {**CLAUDE_SETTINGS, "soakCounter": 0})
        cline_gen_c(self.home)
        db = cc_switch_db(self.home)
        with sqlite3.connect(db) as conn:
            conn.execute("INSERT OR REPLACE INTO settings(key, value) VALUES ('soak_counter', '0')")
        conn.close()
        keydir = self.home / ".config/conduit/keys"
        keydir.mkdir(parents=True, exist_ok=True)
        self.keys.append(self._new_key())
        (keydir / "gw").write_text(self.keys[-1] + "\n")
        (keydir / "gw").chmod(0o600)
        self._save_profile(self.rng.choice(MODELS), in_place=False)

    def start(self) -> None:
        for name, args in (("daemon", ["daemon", "-v"]), ("agent", ["agent"])):
            log = open(self.home / f"{name}.log", "wb")  # noqa: SIM115 - kept open for the process's life
            args = args + (["--probe-interval", "2"] if name == "agent" else [])
            self.procs[name] = subprocess.Popen([sys.executable, "-m", "conduit.daemon.cli", *args], env=self.env,
                                                cwd=self.home, stdout=log, stderr=subprocess.STDOUT)
        self._wait(lambda: self._status() is not None, 30, "the agent to answer")
        self._wait(lambda: self._claude_env().get("ANTHROPIC_AUTH_TOKEN") == self.keys[-1], 30, "the first sync")
        time.sleep(1.0)
        self.rss_start = {n: self._rss(p) for n, p in self.procs.items()}

    # ---------------------------------------------------------------------------------------------- actions

    def _new_key(self) -> str:
        return "sk-demo-soak-" + secrets.token_hex(12)

    def _write(self, path: Path, text: str, *, in_place: bool) -> None:
        if in_place:
            with open(path, "r+" if path.exists() else "w") as f:
                f.truncate(0)
                f.flush()
                # the moment another program's in-place save leaves the file empty: short, or longer than the
                # daemon's debounce (a slow writer, a big file)
                time.sleep(self.rng.choice((0.002, 0.02, 0.3)))
                f.write(text)
        else:
            tmp = path.with_name(f".{path.name}.soak-{os.getpid()}")
            tmp.write_text(text)
            os.replace(tmp, path)

    def _save_profile(self, model: str, *, in_place: bool) -> None:
        path = self.home / ".config/conduit/profile.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write(path, PROFILE.format(model=model, root=self.gateway.root, hostile=self.hostile.url), in_place=in_place)

    def profile_save(self) -> None:
        self._save_profile(self.rng.choice(MODELS), in_place=self.rng.random() < 0.5)
        self.fig.count("profile saves")

    def claude_save(self) -> None:
        path = self.home / ".claude/settings.json"
        with self.file_lock:  # check() never sees this writer half done
            doc = self._read_json(path)
            if doc is None:
                return
            self._count_lost(doc)
            doc = {**CLAUDE_SETTINGS, **doc}  # what was lost is written again, so each loss counts once
            self.claude_counter += 1
            doc["soakCounter"] = self.claude_counter
            self._write(path, json.dumps(doc, indent=2) + "\n", in_place=self.rng.random() < 0.5)
            self.claude_lost_counted = False
        self.fig.count("tool saves")

    def cc_transaction(self) -> None:
        self.cc_counter += 1
        conn = sqlite3.connect(self.home / ".cc-switch/cc-switch.db", timeout=10)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE settings SET value = ? WHERE key = 'soak_counter'", (str(self.cc_counter),))
            conn.execute("COMMIT")
        finally:
            conn.close()
        self.fig.count("CC Switch transactions")

    def attack(self) -> None:
        """The hostile channel's next answer (the agent probes it every 2 s); now and then a tool's own save of
        Claude Code's settings with mode 0644."""
        self.hostile.mode = self.rng.choice(ATTACKS)
        self.fig.count(f"hostile {self.hostile.mode}")
        if self.rng.random() < 0.3:
            with self.file_lock:
                path = self.home / ".claude/settings.json"
                tmp = path.with_name(".settings.soak-tmp")
                tmp.write_bytes(path.read_bytes())
                tmp.chmod(0o644)
                os.replace(tmp, path)
            self.fig.count("0644 saves")

    def rotate(self) -> None:
        key = self._new_key()
        r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "key", "rotate", "gw"], input=key + "\n",
                           text=True, capture_output=True, env=self.env, cwd=self.home, timeout=120)
        if r.returncode == 0:
            self.keys.append(key)
            self.fig.count("key rotations")
        else:
            self.fig.hangs.append(f"key rotate exited {r.returncode}: {r.stderr.strip()[:200]}")

    # ---------------------------------------------------------------------------------------------- checks

    def _read_json(self, path: Path) -> dict[str, Any] | None:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            self.fig.torn.append(f"{path.name}: {exc}")
            return None
        return doc if isinstance(doc, dict) else None

    def _count_lost(self, doc: dict[str, Any]) -> None:
        """The other program's keys: its counter as it last wrote it, and every key of its own."""
        missing = [k for k in CLAUDE_SETTINGS if k not in doc]
        if self.claude_lost_counted:
            return
        if doc.get("soakCounter", -1) != self.claude_counter or missing:
            self.claude_lost_counted = True  # counted once; the next save writes it all again
            self.fig.lost_keys.append(f"settings.json: soakCounter {doc.get('soakCounter')} (wrote "
                                      f"{self.claude_counter}), missing {missing}")

    def _claude_env(self) -> dict[str, Any]:
        try:
            env = json.loads((self.home / ".claude/settings.json").read_text()).get("env", {})
        except (OSError, ValueError):
            return {}
        return env if isinstance(env, dict) else {}

    def _status(self) -> dict[str, Any] | None:
        try:
            transport = httpx.HTTPTransport(uds=self.env["CONDUIT_AGENT_SOCKET"])
            with httpx.Client(transport=transport, timeout=5.0) as c:
                body = c.get("http://localhost/v1/status").text
        except httpx.HTTPError:
            return None
        for key in self.keys:
            if key in body:
                self.fig.leaks.append("a key in a /v1/status answer")
        doc = dict(json.loads(body))
        if any(c in json.dumps(doc, ensure_ascii=False) for c in RAW):
            self.fig.raw_escapes.append("a raw escape in a /v1/status answer")
        return doc

    def check(self) -> None:
        self.fig.agent_peak_mb = max(self.fig.agent_peak_mb, self._rss(self.procs["agent"]))
        mode = (self.home / ".claude/settings.json").stat().st_mode & 0o077
        if mode:
            time.sleep(1.0)  # a 0644 save may have just landed: the daemon tightens it on its event
            if (self.home / ".claude/settings.json").stat().st_mode & 0o077:
                self.fig.open_files.append(f"{time.strftime('%H:%M:%S')} settings.json readable by others")
        if self._status() is None:
            self.fig.hangs.append(f"{time.strftime('%H:%M:%S')} /v1/status did not answer within 5 s")
        with self.file_lock:
            doc = self._read_json(self.home / ".claude/settings.json")
            if doc is not None:
                self._count_lost(doc)
        conn = sqlite3.connect(self.home / ".cc-switch/cc-switch.db", timeout=10)
        try:
            row = conn.execute("SELECT value FROM settings WHERE key = 'soak_counter'").fetchone()
        finally:
            conn.close()
        if row is None or int(row[0]) != self.cc_counter:
            self.fig.lost_keys.append(f"CC Switch soak_counter {row} != {self.cc_counter}")
            self.cc_counter = int(row[0]) if row else 0

    def synced(self, timeout_s: float = 20.0) -> None:
        """A fresh profile save reaches Claude Code within ``timeout_s``, else a hang is counted."""
        model = f"soak-probe-{secrets.token_hex(3)}"
        self._save_profile(model, in_place=False)
        if not self._wait(lambda: self._claude_env().get("ANTHROPIC_MODEL") == model, timeout_s, None):
            self.fig.hangs.append(f"{time.strftime('%H:%M:%S')} a profile save did not reach Claude Code in "
                                  f"{timeout_s:g} s")

    def final_scan(self) -> None:
        current, old = self.keys[-1], self.keys[:-1]
        logs = {p.name: p.read_text(errors="replace") for p in (self.home / "daemon.log", self.home / "agent.log")}
        state = self.home / ".local/state/conduit/sync.json"
        logs["sync.json"] = state.read_text(errors="replace") if state.exists() else ""
        for name, text in logs.items():
            if any(c in text for c in RAW):
                self.fig.raw_escapes.append(f"a raw escape in {name}")
            for key in self.keys:
                if key in text:
                    self.fig.leaks.append(f"a key ({'current' if key == current else 'rotated out'}) in {name}")
        for path in self.home.rglob("*"):
            if path.is_file() and not path.name.endswith(".log"):
                data = path.read_bytes()
                for key in old:
                    if key.encode() in data:
                        self.fig.leaks.append(f"a rotated-out key in {path.relative_to(self.home)}")

    def stop(self) -> None:
        self.rss_end = {n: self._rss(p) for n, p in self.procs.items()}
        for name, proc in self.procs.items():
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.fig.hangs.append(f"{name} did not stop within 5 s of SIGTERM")
                proc.kill()
                proc.wait(timeout=5)
        self.gateway.close()
        self.hostile.stop()
        self.fig.rss_mb = {n: (self.rss_start[n], self.rss_end[n]) for n in self.procs}

    # ---------------------------------------------------------------------------------------------- helpers

    @staticmethod
    def _rss(proc: subprocess.Popen[bytes]) -> float:
        try:
            return float(psutil.Process(proc.pid).memory_info().rss) / 1e6
        except psutil.Error:
            return float("nan")

    @staticmethod
    def _wait(pred: Any, timeout_s: float, what: str | None) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.05)
        if what:
            raise SystemExit(f"soak: timed out waiting for {what}")
        return False


def _tool_writer(soak: Soak, stop: threading.Event) -> None:
    """Another program saving Claude Code's settings, concurrently with everything else."""
    rng = random.Random(soak.rng.random())
    while not stop.is_set():
        soak.claude_save()
        stop.wait(rng.uniform(0.02, 0.2))


def run(duration_s: float, seed: int, home: Path) -> Figures:
    """Run the soak for ``duration_s`` seconds in ``home``; returns the figures."""
    soak = Soak(home, seed)
    soak.lay_out()
    soak.start()
    actions = [(soak.profile_save, 4), (soak.cc_transaction, 3), (soak.rotate, 1), (soak.attack, 1)]
    stop = threading.Event()
    writer = threading.Thread(target=_tool_writer, args=(soak, stop), daemon=True)
    writer.start()
    deadline = time.monotonic() + duration_s
    next_check = time.monotonic() + 5.0
    try:
        while time.monotonic() < deadline:
            action = soak.rng.choices([a for a, _ in actions], weights=[w for _, w in actions])[0]
            action()
            soak.fig.agent_peak_mb = max(soak.fig.agent_peak_mb, soak._rss(soak.procs["agent"]))
            time.sleep(soak.rng.uniform(0.01, 0.15))
            if time.monotonic() >= next_check:
                time.sleep(0.6)  # let the daemon settle, so a check sees what a person would
                soak.check()
                soak.synced()
                next_check = time.monotonic() + 5.0
        stop.set()
        writer.join(timeout=10)
        time.sleep(2.0)
        soak.check()
        soak.synced()
        soak.final_scan()
    finally:
        stop.set()
        soak.stop()
    return soak.fig


def report(fig: Figures, duration_s: float) -> int:
    """Print the figures; 0 when every goal is met."""
    growth = {n: end - start for n, (start, end) in fig.rss_mb.items()}
    print(f"soak: {duration_s:g} s; actions: " + ", ".join(f"{v} {k}" for k, v in sorted(fig.actions.items())))
    for label, items in (("hangs", fig.hangs), ("lost keys of the other writers", fig.lost_keys),
                         ("torn files", fig.torn), ("leaked canaries", fig.leaks),
                         ("raw escapes in logs/answers", fig.raw_escapes), ("key files left open", fig.open_files)):
        print(f"  {label:32s} {len(items)}" + (f"   e.g. {items[0]}" if items else ""))
    for name, (start, end) in fig.rss_mb.items():
        print(f"  RSS {name:27s} {start:.1f} MB -> {end:.1f} MB ({end - start:+.1f} MB; goal < +5 MB)")
    print(f"  agent peak RSS (hostile channel)  {fig.agent_peak_mb:.1f} MB (goal < {AGENT_RSS_LIMIT_MB:g} MB)")
    ok = not (fig.hangs or fig.lost_keys or fig.torn or fig.leaks or fig.raw_escapes or fig.open_files) \
        and all(g < 5 for g in growth.values()) and fig.agent_peak_mb < AGENT_RSS_LIMIT_MB
    print("soak: all goals met" if ok else "soak: goals missed")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the throwaway HOME")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="conduit-soak-"))
    try:
        fig = run(args.duration, args.seed, home)
    finally:
        if not args.keep:
            subprocess.run(["rm", "-rf", "--", str(home)], check=False)
    return report(fig, args.duration)


if __name__ == "__main__":
    sys.exit(main())
