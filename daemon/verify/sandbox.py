"""The process that runs INSIDE the namespaces: ``python -m conduit.daemon.verify.sandbox SPEC.json RESULT.json``.

``runner.Sandbox`` starts it under ``unshare -n -m -p -f --mount-proc --kill-child`` (plus ``-r`` without
root), so here it is pid 1 of a fresh pid namespace, with a network namespace holding only ``lo`` and a
private mount namespace. It:

1. brings ``lo`` up (the ``SIOCSIFFLAGS`` ioctl that ``ip link set lo up`` makes);
2. bind-mounts a temporary resolv.conf (``nameserver 127.0.0.1``) over ``/etc/resolv.conf``;
3. starts ``NxDomainResponder`` on 127.0.0.1:53 and ``RecordingGateway`` on ``SPEC.port``;
4. runs ``SPEC.argv`` (own process group; stdin ``/dev/null`` or ``SPEC.stdin``; stdout/stderr kept to the
   last ``CAPTURE_BYTES``), waits ``SPEC.timeout_s``, then SIGTERM, ``GRACE_S``, SIGKILL to the group;
5. records every other process still in the namespace (``leftovers``: command lines), then kills them;
6. writes RESULT.json, mode 0600 (it holds the raw credential the tool sent; the parent compares it and
   never prints it).

SPEC: ``{argv, env, cwd, timeout_s, port, reply, stdin?}``. RESULT: ``{exit_code (None when timed out),
timed_out, duration_s, requests: [Recorded.to_json(redact=False)], dns_names, leftovers, stdout_tail,
stderr_tail (last TAIL_BYTES each, text), setup_errors}``. Exit status 0 when RESULT was written, 2 on a
bad SPEC.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import psutil

from conduit.daemon.verify.dns import NxDomainResponder
from conduit.daemon.verify.gateway import RecordingGateway

CAPTURE_BYTES = 256 * 1024
"""How much of each of stdout and stderr is kept (the last bytes; the rest is read and dropped)."""
TAIL_BYTES = 4096
"""How much of each is reported."""
GRACE_S = 2.0
"""Between SIGTERM and SIGKILL to the tool's process group."""

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_MS_BIND = 4096


class Capture:
    """Drain a pipe in a daemon thread, keeping its last ``limit`` bytes."""

    def __init__(self, pipe: IO[bytes] | None, limit: int = CAPTURE_BYTES) -> None:
        self._buf = bytearray()
        self._limit = limit
        self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self._thread.start()

    def _drain(self, pipe: IO[bytes] | None) -> None:
        if pipe is None:
            return
        with pipe:
            while chunk := os.read(pipe.fileno(), 65536):
                self._buf += chunk
                if len(self._buf) > self._limit:
                    del self._buf[: len(self._buf) - self._limit]

    def tail(self, n: int = TAIL_BYTES, wait_s: float = 2.0) -> str:
        """The last ``n`` bytes as text (UTF-8, replacement characters), after waiting for the pipe's end."""
        self._thread.join(timeout=wait_s)
        return bytes(self._buf[-n:]).decode("utf-8", "replace")


def spawn(argv: list[str], env: dict[str, str], cwd: str, stdin: str | None) -> tuple[subprocess.Popen[bytes],
                                                                                      Capture, Capture]:
    """Start the tool in its own session (so its group can be killed), pipes captured.
    Raises ``OSError`` when the program cannot be started."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if stdin is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    return proc, Capture(proc.stdout), Capture(proc.stderr)


def _feed(pipe: IO[bytes], text: str) -> None:
    try:
        with pipe:
            pipe.write(text.encode())
    except OSError:
        pass


def wait_bounded(proc: subprocess.Popen[bytes], timeout_s: float) -> tuple[int | None, bool]:
    """Wait up to ``timeout_s``; on timeout SIGTERM the group, ``GRACE_S``, SIGKILL. (exit code or None when
    timed out, timed_out)."""
    try:
        return proc.wait(timeout=timeout_s), False
    except subprocess.TimeoutExpired:
        pass
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
    return None, True


def signal_group(pgid: int, sig: int) -> None:
    """``killpg``, tolerating a group that is gone (ESRCH) or not ours (EPERM)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def describe(p: psutil.Process) -> str:
    """A process's command line (or its name) for ``leftovers``; "" when it is already gone."""
    try:
        return " ".join(p.cmdline()) or f"[{p.name()}]"
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def kill_all(procs: Iterable[psutil.Process], grace_s: float = 1.0) -> None:
    """SIGTERM each, wait up to ``grace_s``, SIGKILL the rest, wait for them (gone processes are fine)."""
    procs = list(procs)
    for p in procs:
        try:
            p.terminate()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    alive = _wait_gone(procs, grace_s)
    for p in alive:
        try:
            p.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    _wait_gone(alive, grace_s)


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Poll until each process has exited (a zombie counts: it is dead, only not yet reaped by its parent,
    which ``psutil.wait_procs`` would wait out); return those still running after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        _reap_zombies_of_ours()
        alive = [p for p in procs if _running(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def _running(p: psutil.Process) -> bool:
    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True


def _reap_zombies_of_ours() -> None:
    """Reap exited children of this process (pid 1 of the sandbox inherits every orphan); never blocks."""
    if os.getpid() == 1:
        _reap_zombies()


def _reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def namespace_others() -> list[psutil.Process]:
    """Every live process in this pid namespace but this one (zombies reaped first). Only meaningful as pid 1
    of a private namespace: the caller checks that."""
    _reap_zombies()
    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def lo_up() -> None:
    """Bring the loopback interface up (``SIOCGIFFLAGS`` then ``SIOCSIFFLAGS`` with ``IFF_UP``).
    Raises ``OSError`` without CAP_NET_ADMIN in this network namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, _SIOCGIFFLAGS, req)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


def bind_resolv_conf(workdir: Path, target: str = "/etc/resolv.conf") -> None:
    """Bind-mount a file naming 127.0.0.1 over ``target`` (this mount namespace only).
    Raises ``OSError`` (errno from mount(2)) when that fails, e.g. ``target`` missing."""
    src = workdir / "resolv.conf"
    src.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    src.chmod(0o644)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(str(src).encode(), target.encode(), None, _MS_BIND, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bind-mount over {target}: {os.strerror(err)}")


def _setup(workdir: Path) -> tuple[list[str], NxDomainResponder | None]:
    errors: list[str] = []
    dns: NxDomainResponder | None = None
    if os.getpid() != 1:  # not our own namespaces: never touch the host's lo or /etc/resolv.conf
        return ["not pid 1 of a private pid namespace: network setup and DNS responder skipped"], None
    for step in (lo_up, lambda: bind_resolv_conf(workdir)):
        try:
            step()
        except OSError as exc:
            errors.append(str(exc))
    try:
        dns = NxDomainResponder(port=53).start()
    except OSError as exc:
        errors.append(f"dns responder on 127.0.0.1:53: {exc}")
    return errors, dns


def run_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Do steps 1-5 for one SPEC and return the RESULT dict (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="conduit-sandbox-") as tmp:
        errors, dns = _setup(Path(tmp))
        gateway = RecordingGateway(port=int(spec["port"]), reply=str(spec.get("reply", "ok"))).start()
        try:
            result = _run_tool(spec, errors)
        finally:
            gateway.stop()
            if dns is not None:
                dns.stop()
        result.update(requests=[r.to_json(redact=False) for r in gateway.recorded()],
                      dns_names=dns.names() if dns else [], setup_errors=errors)
        return result


def _run_tool(spec: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    start = time.monotonic()
    try:
        proc, out, err = spawn(list(spec["argv"]), dict(spec["env"]), str(spec["cwd"]), spec.get("stdin"))
    except OSError as exc:
        errors.append(f"cannot start {spec['argv'][0]!r}: {exc}")
        return {"exit_code": None, "timed_out": False, "duration_s": 0.0, "leftovers": [],
                "stdout_tail": "", "stderr_tail": "", "start_error": str(exc)}
    code, timed_out = wait_bounded(proc, float(spec["timeout_s"]))
    duration = time.monotonic() - start
    leftovers: list[str] = []
    if os.getpid() == 1:  # never sweep a namespace that is not our own
        others = namespace_others()
        leftovers = [d for d in (describe(p) for p in others) if d]
        signal_group(proc.pid, signal.SIGKILL)
        kill_all(others)
        _reap_zombies()
    else:
        signal_group(proc.pid, signal.SIGKILL)
    return {"exit_code": code, "timed_out": timed_out, "duration_s": round(duration, 3),
            "leftovers": leftovers, "stdout_tail": out.tail(), "stderr_tail": err.tail()}


def write_result(path: Path, result: dict[str, Any]) -> None:
    """Write RESULT.json created with mode 0600 (it holds raw credentials)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(result, f)
    os.chmod(path, 0o600)


def main(argv: list[str]) -> int:
    """``SPEC.json RESULT.json``: run and write; 2 with a message on stderr for a bad invocation or SPEC."""
    if len(argv) != 2:
        print("usage: python -m conduit.daemon.verify.sandbox SPEC.json RESULT.json", file=sys.stderr)
        return 2
    try:
        spec = json.loads(Path(argv[0]).read_text())
        for key in ("argv", "env", "cwd", "timeout_s", "port"):
            spec[key]  # noqa: B018 - presence check
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"conduit verify sandbox: bad spec {argv[0]}: {exc!r}", file=sys.stderr)
        return 2
    write_result(Path(argv[1]), run_spec(spec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
