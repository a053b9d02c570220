"""Plant a fake agent in the guessable fallback directory ``/tmp/conduit-<uid>`` and ask the real CLI about it.

Run as root inside a private mount namespace with its own ``/tmp`` (``unshare -m``; see
tests/test_agent_trust.py), so the real ``/tmp/conduit-0`` is never touched::

    unshare -m python tests/planted_agent.py --owner 65534 --mode 0700

It mounts a tmpfs on ``/tmp``, creates ``/tmp/conduit-<uid>`` owned by ``--owner`` with ``--mode``, forks a
child that drops to ``--owner`` and serves a "everything is ready" ``/v1/status`` on ``agent.sock`` there (the
socket is the owner's), then runs ``conduit status --json``, ``conduit status`` and ``conduit wait
--vllm-ready`` as this user without ``XDG_RUNTIME_DIR`` and prints their results as one JSON line.
"""

from __future__ import annotations

import argparse
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
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/tmp"], check=True, timeout=10)
    d = f"/tmp/conduit-{os.getuid()}"
    os.mkdir(d)
    os.chown(d, args.owner, args.owner)
    os.chmod(d, args.mode)
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
