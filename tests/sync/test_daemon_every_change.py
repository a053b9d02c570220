"""Every change reaches the tools: a change made while the daemon runs its first full sync (field case C26), one
made while that sync waits on a slow key command or on CC Switch's locked database, and one made after the
state or profile directory was deleted and made again.

A real ``conduit daemon`` subprocess per start, under a temporary HOME, with the real files of Claude Code, Cline,
CC Switch and Codex CLI. No wall-clock assertions: every wait is an upper bound.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers.daemonproc import Daemon, claude_env, cline_settings, set_model, wait_for
from helpers.toolfiles import cc_switch_db, claude_settings, cline_gen_c, write_profile

from conduit.daemon.catalog.models import Catalog, ModelInfo, models_base, write_cache
from conduit.daemon.config.fallback import FallbackSettings
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.routing import decision, write_routing

START = "claude-sonnet-4-20250514"
FB_MODEL = "fb-model"
FALLBACK = ('[tools.codex]\ncreate = true\n\n[channels.fb]\nbase_url = "http://127.0.0.1:9/fb"\n'
            'protocols = ["openai", "anthropic"]\nkey = { file = "~/.config/conduit/keys/gw" }\n\n'
            f'[fallback]\nchannel = "fb"\nmodel  = "{FB_MODEL}"\n')  # two spaces: set_model leaves it alone
STARTS = 50
"""Daemon starts with one change at a random moment in their first ``WINDOW_S``."""
WINDOW_S = 3.0
SLOW_KEY = 'key = { command = "sleep 0.8; echo sk-test-command-0123456789" }'
"""The key source of those starts: a `pass show` that takes 0.8 s, so the first full sync covers about a third
of the window (a change made during it is the one a daemon without watches in place loses)."""


def _home(root: Path, monkeypatch: pytest.MonkeyPatch, key: str | None = None) -> tuple[Path, Path]:
    """A fresh HOME with the four tools, a profile with a ``[fallback]`` (its key ``key``: a TOML key source,
    default the key file) and a model-list cache; HOME points there. Returns (home, profile)."""
    home = root / "h"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    claude_settings(home)
    cline_gen_c(home)
    cc_switch_db(home)
    profile = write_profile(home, "http://127.0.0.1:9/api", key_text="sk-test-every-0123456789\n", extra=FALLBACK)
    if key is not None:
        profile.write_text(profile.read_text().replace('key = { file = "~/.config/conduit/keys/gw" }\nauth', key
                                                       + "\nauth", 1))
    _cache(profile, 8192)
    return home, profile


def _cache(profile: Path, window: int) -> None:
    base = models_base(load_profile(profile).roots["gw"])
    write_cache(Catalog("gw", base, time.time(), (ModelInfo(START, window, None),)))


def _current_cc_model(home: Path) -> str | None:
    db = home / ".cc-switch" / "cc-switch.db"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:  # ro: no IN_CLOSE_WRITE
        row = conn.execute("SELECT settings_config FROM providers WHERE app_type = 'claude' AND is_current"
                           ).fetchone()
    conn.close()
    return json.loads(row[0])["env"].get("ANTHROPIC_MODEL") if row else None


def _models(home: Path) -> tuple[object, object, object]:
    """(Claude Code, Cline, CC Switch's current row) model."""
    return claude_env(home).get("ANTHROPIC_MODEL"), cline_settings(home).get("model"), _current_cc_model(home)


def _context(home: Path) -> object:
    path = home / ".codex" / "config.toml"
    return tomllib.loads(path.read_text()).get("model_context_window") if path.exists() else None


def _route(profile: Path, active: str = "fallback") -> None:
    write_routing(decision(active, "test", str(profile), "gw",  # type: ignore[arg-type]
                           FallbackSettings(channel="fb", model=FB_MODEL)))


def _change(kind: str, profile: Path, n: int) -> Callable[[Path], bool]:
    """Make one change of ``kind``; returns the check that every tool has it."""
    if kind == "profile":
        set_model(profile, f"saved-{n}", "rename")
        return lambda h: _models(h) == (f"saved-{n}",) * 3
    if kind == "routing":
        _route(profile)
        return lambda h: _models(h) == (FB_MODEL,) * 3
    _cache(profile, 16384 + n)
    return lambda h: _context(h) == 16384 + n


def _remove(directory: Path) -> None:
    """``rm -rf``, again while the daemon writes a file into it meanwhile (then ``rmdir`` finds it not empty)."""
    for _ in range(50):
        try:
            shutil.rmtree(directory)
            return
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"cannot remove {directory}")


def _daemon(home: Path, tmp: Path) -> Daemon:
    return Daemon(home, tmp, env={"CONDUIT_AGENT_SOCKET": str(tmp / "no-agent.sock")})


def _prepared(kind: str, home: Path, profile: Path, n: int) -> tuple[Callable[[], None], Callable[[], bool]]:
    """A change of ``kind`` made ready under ``home`` (HOME points there now) that needs no HOME to be made (two
    starts run at once), and the check that every tool has it."""
    if kind == "profile":
        return lambda: set_model(profile, f"saved-{n}", "rename"), lambda: _models(home) == (f"saved-{n}",) * 3
    state = home / ".local" / "state" / "conduit"
    target = state / "routing.json" if kind == "routing" else state / "models" / "gw.json"
    ready = state / f"{kind}.ready"
    if kind == "routing":
        write_routing(decision("fallback", "test", str(profile), "gw", FallbackSettings(channel="fb", model=FB_MODEL)),
                      path=ready)
    else:
        before = target.read_bytes()
        _cache(profile, 16384 + n)
        ready.write_bytes(target.read_bytes())
        target.write_bytes(before)
    done = (lambda: _models(home) == (FB_MODEL,) * 3) if kind == "routing" else \
        (lambda: _context(home) == 16384 + n)
    return lambda: os.replace(ready, target), done


def _one_start(root: Path, change: Callable[[], None], done: Callable[[], bool], at: float, what: str) -> str | None:
    """Start a daemon, make ``change`` ``at`` seconds later, wait for ``done``; what was missed, or None."""
    d = _daemon(root / "h", root).start(wait_ready=False)
    try:
        time.sleep(at)
        change()
        d.notify.wait_for("READY=1")  # type: ignore[union-attr]
        try:
            wait_for(done, timeout=10, what=what)
        except AssertionError:
            return f"{what}\n{d.log()[-1500:]}"
    finally:
        d.stop()
    return None


def test_a_change_at_any_moment_of_the_first_seconds_reaches_every_tool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``STARTS`` daemon starts (two at a time, each in its own HOME), each with one change (a profile save by
    rename, a routing decision, a new model list) at a random moment of its first ``WINDOW_S``: none is missed."""
    rng = random.Random(int(os.environ.get("CONDUIT_TEST_SEED", "0")) or None)
    runs = []
    for n in range(STARTS):
        root = tmp_path / f"s{n}"
        home, profile = _home(root, monkeypatch, key=SLOW_KEY)
        kind = ("profile", "routing", "models")[n % 3]
        at = rng.uniform(0, WINDOW_S)
        runs.append((root, *_prepared(kind, home, profile, n), at, f"start {n}: {kind} at {at:.2f} s"))
    with ThreadPoolExecutor(2) as pool:
        missed = [m for m in pool.map(lambda r: _one_start(*r), runs) if m]
    assert not missed, f"{len(missed)} of {STARTS} changes missed:\n" + "\n".join(missed)


def test_c26_a_save_during_a_slow_first_sync_reaches_every_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """C26, widened: the first sync waits 3 s on a `command` key source; the profile is saved by rename meanwhile."""
    marker = tmp_path / "key-read"
    home, profile = _home(tmp_path, monkeypatch, key=f'key = {{ command = "touch {marker}; sleep 3; '
                                                     f'echo sk-test-command-0123456789" }}')
    d = _daemon(home, tmp_path).start(wait_ready=False)
    try:
        wait_for(marker.exists, what="the first sync reading the key")
        set_model(profile, "saved-during-start", "rename")
        d.notify.wait_for("READY=1")  # type: ignore[union-attr]
        wait_for(lambda: _models(home) == ("saved-during-start",) * 3, what="the save in every tool", timeout=20)
    finally:
        d.stop()


_HOLD = """import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


@pytest.mark.parametrize("kind", ["profile", "routing"])
def test_a_change_while_cc_switch_holds_its_database_reaches_every_tool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """CC Switch holds an exclusive lock on its database for 4 s while the daemon's first sync waits on it."""
    home, profile = _home(tmp_path, monkeypatch)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(home / ".cc-switch" / "cc-switch.db"), "4"],
                              stdout=subprocess.PIPE, text=True)
    d = _daemon(home, tmp_path)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        d.start(wait_ready=False)
        wait_for(lambda: claude_env(home).get("ANTHROPIC_MODEL") == START, what="the first sync under way")
        done = _change(kind, profile, 1)
        d.notify.wait_for("READY=1")  # type: ignore[union-attr]
        wait_for(lambda: done(home), what=f"the {kind} change in every tool", timeout=20)
    finally:
        holder.wait(20)
        d.stop()


def test_deleted_and_recreated_directories_are_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``rm -rf ~/.local/state/conduit`` and ``~/.config/conduit`` restored from a backup, three times each: every
    later fallback decision and profile save reaches every tool."""
    home, profile = _home(tmp_path, monkeypatch)
    state, config = home / ".local" / "state" / "conduit", home / ".config" / "conduit"
    d = _daemon(home, tmp_path).start()
    try:
        for n in range(3):
            _remove(state)
            time.sleep(0.2)
            _route(profile, "fallback")
            wait_for(lambda: _models(home) == (FB_MODEL,) * 3, what=f"fallback after state dir removal {n}")
            _route(profile, "primary")
            wait_for(lambda: FB_MODEL not in _models(home), what=f"primary again {n}")  # noqa: B023
            backup = tmp_path / f"config-backup-{n}"
            shutil.copytree(config, backup)
            _remove(config)
            time.sleep(0.2)
            set_model(backup / "profile.toml", f"restored-{n}", "atomic")
            shutil.copytree(backup, config) if n % 2 else os.rename(backup, config)
            wait_for(lambda: _models(home) == (f"restored-{n}",) * 3,  # noqa: B023
                     what=f"the restored profile {n} in every tool")
    finally:
        d.stop()


def test_a_fallback_decision_that_turns_stale_sends_the_tools_back(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """No agent behind a fallback decision that reaches ``STALE_AFTER_S`` while the daemon runs: with no event at
    all, the tools go back to the primary, and the log says why with the decision's date."""
    from conduit.daemon.config.routing import STALE_AFTER_S

    home, profile = _home(tmp_path, monkeypatch)
    since = time.time() - STALE_AFTER_S + 10  # fresh for 10 s: the daemon starts on it, busy machine or not
    write_routing(decision("fallback", "test", str(profile), "gw", FallbackSettings(channel="fb", model=FB_MODEL),
                           since=since))
    d = _daemon(home, tmp_path).start()
    try:
        wait_for(lambda: _models(home) == (FB_MODEL,) * 3, what="the fallback while the decision is fresh")
        wait_for(lambda: _models(home) == (START,) * 3, what="the primary once the decision is stale")
        said = f"fallback since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"
        wait_for(lambda: said in d.log() and "no agent is running" in d.log(), what="the stale decision logged")
    finally:
        d.stop()
