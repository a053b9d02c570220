"""Start a real ``conduit agent`` process on a real Unix socket under the temporary HOME (test helper)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from conduit.daemon.verify.gateway import Answer, Recorded
from helpers import gateways

GiB = 1024**3


def conduit_exe() -> str:
    """The ``conduit`` console script of the interpreter running the tests."""
    exe = Path(sys.executable).parent / "conduit"
    return str(exe) if exe.exists() else (shutil.which("conduit") or "conduit")


def short_dir() -> Path:
    """A short temporary directory (Unix socket paths are limited to 107 bytes)."""
    return Path(tempfile.mkdtemp(prefix="ca-", dir="/tmp"))


def fake_gpu(i: int = 0, free: int = 60 * GiB, total: int = 80 * GiB, **kw: Any) -> dict[str, Any]:
    """One device of a ``FakeNvml`` description."""
    d = {"name": f"Fake H100 #{i}", "uuid": f"GPU-fake-{i}", "total": total, "used": total - free - GiB,
         "free": free, "reserved": GiB, "util": [10, 5], "processes": []}
    d.update(kw)
    return d


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a Unix socket (an independent client, so tests do not only use conduit's own)."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def request(sock: Path, method: str, path: str, timeout: float = 10.0) -> tuple[int, Any]:
    """One request; returns (status, parsed JSON body)."""
    conn = UnixHTTPConnection(str(sock), timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


class AgentProc:
    """A running agent. Use as a context manager; ``stop()`` sends SIGTERM and waits."""

    def __init__(self, home: Path, sock: Path | None = None, gpus: dict[str, Any] | None = None,
                 args: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        self.dir = short_dir()
        self.sock = sock or self.dir / "run" / "agent.sock"
        self.gpu_file = self.dir / "gpus.json"
        self.set_gpus(gpus if gpus is not None else {"error": "library_not_found"})
        self.env = dict(os.environ, HOME=str(home), CONDUIT_AGENT_SOCKET=str(self.sock),
                        CONDUIT_FAKE_GPUS=str(self.gpu_file), **(env or {}))
        self.log = self.dir / "agent.log"
        self.args = args or []
        self.proc: subprocess.Popen[bytes] | None = None

    def set_gpus(self, spec: dict[str, Any]) -> None:
        """Rewrite the fake device description atomically (the agent re-reads it every sample)."""
        tmp = self.gpu_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(spec))
        os.replace(tmp, self.gpu_file)

    def start(self, wait: bool = True) -> AgentProc:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([conduit_exe(), "agent", *self.args], env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited {self.proc.returncode}: {self.log.read_text()}")
            try:
                status, body = request(self.sock, "GET", "/v1/healthz", timeout=2)
                if status == 200 and body.get("ok"):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"agent not ready in {timeout} s: {self.log.read_text()}")

    def wait_for(self, path: str, pred: Any, timeout: float = 60.0) -> Any:
        """Poll GET ``path`` until ``pred(body)`` is true; return the body."""
        deadline = time.monotonic() + timeout
        body = None
        while time.monotonic() < deadline:
            _, body = request(self.sock, "GET", path)
            if pred(body):
                return body
            time.sleep(0.1)
        raise AssertionError(f"condition on {path} not met in {timeout} s; last body: {body}")

    def get(self, path: str) -> tuple[int, Any]:
        return request(self.sock, "GET", path)

    def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode

    def __enter__(self) -> AgentProc:
        try:
            return self.start()
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Gateway(gateways.Gateway):
    """A gateway of fixed statuses: ``routes`` maps a path to the status it answers (``{"data": []}`` with 200,
    an error body otherwise), anything else 404; ``hang``: each request waits 5 s first (past a probe's read
    timeout). ``routes`` may be replaced while it serves; ``seen`` is each request's (path, lower-cased headers)."""

    def __init__(self, routes: dict[str, int], hang: bool = False) -> None:
        self.routes, self.hang = routes, hang
        super().__init__(respond=self._status)

    def _status(self, rec: Recorded) -> Answer:
        if self.hang:
            time.sleep(5)
        status = self.routes.get(rec.path, 404)
        return Answer(status, {"data": []} if status == 200 else {"error": "x"})

    @property
    def seen(self) -> list[tuple[str, dict[str, str]]]:
        return [(r.path, r.headers) for r in self.recorded()]
