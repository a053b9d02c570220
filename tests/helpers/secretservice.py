"""A real Secret Service for tests: a private D-Bus session bus and an unlocked gnome-keyring in a throwaway HOME.

``SecretService.start(home, tmp)`` runs ``dbus-daemon`` with a configuration of its own (no service
directories: nothing is auto-started, so a stopped keyring stays stopped) and ``gnome-keyring-daemon
--foreground --unlock --components=secrets`` fed a password on stdin, which creates and unlocks the ``login``
collection under ``home/.local/share/keyrings``. ``env`` is what a conduit process needs to reach it
(``DBUS_SESSION_BUS_ADDRESS``). ``stop_keyring()`` kills the keyring daemon (the bus stays: "no Secret
Service"); ``freeze_keyring()`` stops it with SIGSTOP (it holds every call: "no answer"). ``close()`` ends both.

The packages (Debian): dbus-daemon, dbus-bin (``dbus-send``), gnome-keyring; ``.ci/run`` installs them.
``require()`` skips a test where they are missing, naming them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BINARIES = ("dbus-daemon", "dbus-send", "gnome-keyring-daemon")
PACKAGES = "dbus-daemon dbus-bin gnome-keyring"

_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:dir={dir}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


def require() -> None:
    """Skip the calling test when a binary of ``BINARIES`` is missing (``.ci/run`` installs them)."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        pytest.skip(f"no {', '.join(missing)}: apt-get install {PACKAGES} (.ci/run does)")


@dataclass
class SecretService:
    """A running private bus and keyring daemon (see the module docstring)."""

    home: Path
    dir: Path
    bus: subprocess.Popen[bytes] | None = None
    keyring: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, home: Path, tmp: Path) -> SecretService:
        """Start the bus and an unlocked keyring for ``home``; ``tmp`` holds the bus socket and runtime dir."""
        run = tmp / "ss-run"
        run.mkdir(mode=0o700)
        conf = run / "bus.conf"
        conf.write_text(_CONFIG.format(dir=run))
        self = cls(home=home, dir=run)
        self.bus = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--nofork", "--print-address=1"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        assert self.bus.stdout is not None
        address = self.bus.stdout.readline().decode().strip()
        assert address.startswith("unix:"), "dbus-daemon printed no address"
        self.env = {"DBUS_SESSION_BUS_ADDRESS": address}
        self.keyring = subprocess.Popen(
            ["gnome-keyring-daemon", "--foreground", "--unlock", "--components=secrets"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env=self.child_env(XDG_RUNTIME_DIR=str(run)))
        assert self.keyring.stdin is not None
        self.keyring.stdin.write(b"test-keyring-password")
        self.keyring.stdin.close()
        self._wait_owned()
        return self

    def child_env(self, **extra: str) -> dict[str, str]:
        """``os.environ`` with HOME = ``home``, the bus address and ``extra``: for a conduit subprocess."""
        return {**os.environ, "HOME": str(self.home), **self.env, **extra}

    def _wait_owned(self, timeout: float = 30.0) -> None:
        """Wait until ``org.freedesktop.secrets`` has an owner on the bus (the keyring daemon is ready)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = subprocess.run(["dbus-send", "--session", "--print-reply", "--dest=org.freedesktop.DBus", "/",
                                "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.secrets"],
                               capture_output=True, text=True, env=self.child_env(), timeout=10)
            if "boolean true" in r.stdout:
                return
            time.sleep(0.05)
        self.close()
        raise AssertionError("gnome-keyring-daemon did not take org.freedesktop.secrets on the private bus")

    def stop_keyring(self) -> None:
        """Kill the keyring daemon (SIGKILL) and reap it: the bus has no Secret Service any more."""
        _end(self.keyring)

    def freeze_keyring(self) -> None:
        """SIGSTOP the keyring daemon: it keeps its bus name and answers nothing."""
        assert self.keyring is not None
        os.kill(self.keyring.pid, signal.SIGSTOP)

    def close(self) -> None:
        """End the keyring daemon and the bus."""
        if self.keyring is not None and self.keyring.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.keyring.pid, signal.SIGCONT)
        _end(self.keyring)
        _end(self.bus)


def _end(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()
