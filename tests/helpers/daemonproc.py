"""A real ``conduit daemon`` subprocess for the integration tests, and readers of the three tools' files.

The daemon runs as ``python -m conduit.daemon.cli daemon -v`` under the test's temporary HOME, with
``NOTIFY_SOCKET`` pointing at a datagram socket the test binds, so the test knows (READY=1) when the first sync
is done, exactly as systemd would. Its stderr goes to ``<tmp>/daemon.log``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WAIT_S = 30.0  # an upper bound for waiting, never an assertion about speed


def wait_for(pred: Callable[[], Any], timeout: float = WAIT_S, what: str = "condition") -> Any:
    """Poll ``pred`` until it returns a truthy value; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = pred()
            if value:
                return value
        except Exception as exc:  # a file mid-creation: try again
            last_exc = exc
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last_exc!r})" if last_exc else ""))


class NotifyListener:
    """A bound ``AF_UNIX`` datagram socket standing in for systemd's notification socket."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.messages: list[str] = []

    def wait_for(self, line: str, timeout: float = WAIT_S) -> list[str]:
        """Receive datagrams until one holds ``line`` (e.g. ``READY=1``); returns everything received."""
        deadline = time.monotonic() + timeout
        while not any(line in m.splitlines() for m in self.messages):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {line} on {self.path}; got {self.messages}")
            self.sock.settimeout(left)
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except TimeoutError:
                continue
        return self.messages

    def close(self) -> None:
        self.sock.close()


class Daemon:
    """``conduit daemon`` as a subprocess under ``home``.

    Args:
        home: the temporary HOME.
        tmp: where the log and the notify socket go.
        args: extra arguments after ``daemon``.
        env: extra environment variables (None as a value removes the variable).
    """

    def __init__(self, home: Path, tmp: Path, *args: str, env: dict[str, str | None] | None = None) -> None:
        self.home, self.tmp, self.args = home, tmp, args
        self.extra_env = env or {}
        self.log_path = tmp / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.notify: NotifyListener | None = None
        self.starts = 0

    def start(self, wait_ready: bool = True) -> Daemon:
        self.starts += 1
        sock_path = self.tmp / f"notify-{self.starts}.sock"
        self.notify = NotifyListener(sock_path)
        env = dict(os.environ, HOME=str(self.home), NOTIFY_SOCKET=str(sock_path), PYTHONUNBUFFERED="1",
                   PYTHONFAULTHANDLER="1")  # SIGABRT on a hung daemon writes every thread's stack to the log
        for name, value in self.extra_env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen([sys.executable, "-m", "conduit.daemon.cli", "daemon", "-v", *self.args],
                                     env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.home)
        log.close()
        if wait_ready:
            self.notify.wait_for("READY=1")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stacks(self) -> str:
        """Abort a hung daemon with SIGABRT and return what faulthandler wrote: every thread's stack."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGABRT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        text = self.log()
        at = text.find("Fatal Python error")
        return text[at:] if at >= 0 else text[-4000:]

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGABRT)  # faulthandler: the hung threads' stacks into the log
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
        if self.notify:
            self.notify.close()
        rc = self.proc.returncode
        self.proc = None
        return rc


# --------------------------------------------------------------------------------- the three tools' files


def claude_env(home: Path) -> dict[str, Any]:
    return json.loads((home / ".claude" / "settings.json").read_text())["env"]


def cline_settings(home: Path) -> dict[str, Any]:
    doc = json.loads((home / ".cline" / "data" / "settings" / "providers.json").read_text())
    return doc["providers"]["openai-compatible"]["settings"]


def cc_switch_env(home: Path) -> dict[str, Any]:
    db = home / ".cc-switch" / "cc-switch.db"
    # read-write (never create), as CC Switch opens it: after a kill -9 mid-commit the first reader must roll
    # the hot journal back, which a read-only connection cannot ("attempt to write a readonly database")
    with sqlite3.connect(f"file:{db}?mode=rw", uri=True, timeout=10) as conn:
        row = conn.execute("SELECT settings_config FROM providers WHERE id = 'conduit-gw' AND app_type = 'claude'"
                           ).fetchone()
    conn.close()
    return json.loads(row[0])["env"] if row else {}


def models(home: Path) -> tuple[str | None, str | None, str | None]:
    """(Claude Code, Cline, CC Switch) model each tool is set to."""
    return (claude_env(home).get("ANTHROPIC_MODEL"), cline_settings(home).get("model"),
            cc_switch_env(home).get("ANTHROPIC_MODEL"))


def keys(home: Path) -> tuple[str | None, str | None, str | None]:
    """(Claude Code, Cline, CC Switch) key each tool holds."""
    return (claude_env(home).get("ANTHROPIC_AUTH_TOKEN"), cline_settings(home).get("apiKey"),
            cc_switch_env(home).get("ANTHROPIC_AUTH_TOKEN"))


def all_at(home: Path, model: str) -> Callable[[], bool]:
    return lambda: models(home) == (model, model, model)


def read_state(home: Path) -> dict[str, Any]:
    return json.loads((home / ".local" / "state" / "conduit" / "sync.json").read_text())


def set_model(profile: Path, model: str, how: str = "rename") -> None:
    """Save the profile with ``model = "<model>"`` the way an editor would.

    how: ``rename`` (vim: old file renamed to a backup, new file written, backup removed), ``truncate``
    (open for writing, truncate, write in two parts), ``sed`` (a real ``sed -i``), ``atomic`` (temp + rename).
    """
    import re

    text = profile.read_text()
    new = re.sub(r'(?m)^model = ".*"$', f'model = "{model}"', text)
    if how == "rename":
        backup = profile.with_name(profile.name + "~")
        os.rename(profile, backup)
        profile.write_text(new)
        os.unlink(backup)
    elif how == "truncate":
        with open(profile, "r+") as fh:
            fh.truncate(0)
            fh.flush()
            half = len(new) // 2
            fh.write(new[:half])
            fh.flush()
            fh.write(new[half:])
    elif how == "sed":
        subprocess.run(["sed", "-i", f's/^model = ".*"$/model = "{model}"/', str(profile)], check=True)
    elif how == "atomic":
        tmp = profile.with_name(f".{profile.name}.tmp")
        tmp.write_text(new)
        os.replace(tmp, profile)
    else:
        raise ValueError(how)
