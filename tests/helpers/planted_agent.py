"""Plant a fake agent in the guessable fallback directory ``/tmp/conduit-<uid>`` and ask the real CLI about it.

Run as root inside a private mount namespace (``unshare -m``; see tests/agent/test_agent_trust.py), so the real
``/tmp/conduit-0`` is never touched::

    unshare -m python tests/helpers/planted_agent.py --owner 65534 --mode 0700

It mounts a tmpfs on ``/tmp/conduit-<uid>`` only (the rest of ``/tmp``, where a checkout and its venv may live,
stays visible), gives that directory ``--owner`` and ``--mode``, forks a
child that drops to ``--owner`` and serves a "everything is ready" ``/v1/status`` on ``agent.sock`` there (the
socket is the owner's), then runs ``conduit status --json``, ``conduit status`` and ``conduit wait
--vllm-ready`` as this user without ``XDG_RUNTIME_DIR`` and prints their results as one JSON line.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from socketserver import UnixStreamServer

PLANTED = {"agent": {"state": "running", "pid": 1, "socket": "planted"}, "channels": {}, "note": None,
           "gpus": {"gpus": [], "reason": "planted"}, "host": {}, "vllm": {"state": "ready"},
           "tools": {"tools": {}}, "planted": True}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps(PLANTED).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def address_string(self) -> str:
        return "unix"

    def log_message(self, *args: object) -> None:
        pass


def serve(path: str, uid: int) -> None:
    """The planted agent: drop to ``uid`` (a forked child of an interpreter already loaded), then serve."""
    os.setgid(uid)
    os.setuid(uid)
    server = UnixStreamServer(path, Handler)
    server.serve_forever()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--owner", type=int, required=True)
    ap.add_argument("--mode", type=lambda s: int(s, 8), required=True)
    ap.add_argument("--conduit", required=True)
    args = ap.parse_args()
    # The mount point is created (and removed) in the real /tmp, which every namespace shares: one plant at a
    # time on this machine (pytest-xdist workers, other checkouts), or one run's rmdir unmounts another's tmpfs.
    lock = os.open(f"/tmp/.conduit-planted-agent-{os.getuid()}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        return _plant_locked(args)
    finally:
        os.close(lock)


def _plant_locked(args: argparse.Namespace) -> int:
    d = f"/tmp/conduit-{os.getuid()}"
    created = not os.path.lexists(d)
    if created:  # a mount point; removed again below, after the namespace's mount is gone
        os.mkdir(d, 0o700)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", d], check=True, timeout=10)
        os.chown(d, args.owner, args.owner)
        os.chmod(d, args.mode)
        return _plant_and_ask(d, args)
    finally:
        subprocess.run(["umount", d], check=False, timeout=10)
        if created:
            os.rmdir(d)


def _plant_and_ask(d: str, args: argparse.Namespace) -> int:
    sock = os.path.join(d, "agent.sock")
    child = os.fork()
    if child == 0:
        try:
            serve(sock, args.owner)
        finally:
            os._exit(1)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.02)
        probe = socket.socket(socket.AF_UNIX)
        probe.settimeout(5)
        probe.connect(sock)  # the planted agent answers
        probe.close()
        env = {k: v for k, v in os.environ.items()
               if k not in ("XDG_RUNTIME_DIR", "CONDUIT_AGENT_SOCKET")} | {"HOME": "/nonexistent", "NO_COLOR": "1"}
        results = {}
        for name, argv in (("status_json", ["status", "--json"]), ("status", ["status"]),
                           ("wait", ["wait", "--vllm-ready", "--timeout", "0"])):
            r = subprocess.run([args.conduit, *argv], env=env, capture_output=True, text=True, timeout=60)
            results[name] = {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}
        results["socket_owner"] = os.lstat(sock).st_uid
        print(json.dumps(results))
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
