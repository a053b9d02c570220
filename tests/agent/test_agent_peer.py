"""The agent answers only its own uid, and reads the peer's uid once per connection.

A real aiohttp server with the agent's middleware on a real Unix socket in a directory others may enter, a real
client process running as ``nobody`` (it drops to that uid before it connects), and keep-alive clients of our own uid whose
``SO_PEERCRED`` reads are counted.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

import conduit.daemon.agent.guard as guard
from conduit.redact import Redactor

NOBODY = 65534

CLIENT = textwrap.dedent("""
    import os, socket, sys
    os.setgid(int(sys.argv[2]))  # the interpreter lives under root's home: drop to the other uid once started
    os.setuid(int(sys.argv[2]))
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(sys.argv[1])
    s.sendall(b"GET /x HTTP/1.1\\r\\nHost: l\\r\\n\\r\\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    print(data.decode(errors="replace"))
""")


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory under /tmp that another uid may enter (mode 0755), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="cpeer-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _serve(sock_path: Path, stop: asyncio.Event, ready: asyncio.Event) -> asyncio.Task[None]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=json.dumps({"ok": True}).encode(), content_type="application/json")

    async def run() -> None:
        app = web.Application(middlewares=[guard.guard_middleware(os.getuid(), Redactor())])
        app.router.add_get("/x", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.UnixSite(runner, str(sock_path))
        await site.start()
        sock_path.chmod(0o777)
        ready.set()
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    return asyncio.ensure_future(run())


def test_another_uid_is_refused_and_ours_costs_one_peer_read_per_connection(
        open_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another uid")
    calls: list[int] = []
    real = guard.peer_uid

    def counted(sock: socket.socket) -> int | None:
        uid = real(sock)
        calls.append(-1 if uid is None else uid)
        return uid

    monkeypatch.setattr(guard, "peer_uid", counted)
    sock_path = open_dir / "agent.sock"

    async def body() -> tuple[str, list[int]]:
        stop, ready = asyncio.Event(), asyncio.Event()
        task = _serve(sock_path, stop, ready)
        await asyncio.wait_for(ready.wait(), 10)
        try:
            other = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-c", CLIENT, str(sock_path), str(NOBODY)],
                capture_output=True, text=True, timeout=30)
            statuses = []
            for _ in range(2):  # two keep-alive connections of our own uid, three requests each
                reader, writer = await asyncio.open_unix_connection(str(sock_path))
                for _ in range(3):
                    writer.write(b"GET /x HTTP/1.1\r\nHost: l\r\n\r\n")
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length:"))
                    await reader.readexactly(length)
                    statuses.append(int(head.split(b" ")[1]))
                writer.close()
            return other.stdout + other.stderr, statuses
        finally:
            stop.set()
            await task

    text, statuses = asyncio.run(body())
    assert "HTTP/1.1 403" in text and "forbidden" in text and f"serves uid {os.getuid()} only" in text, text
    assert statuses == [200] * 6
    assert calls == [NOBODY, os.getuid(), os.getuid()]  # one read per connection, not per request
