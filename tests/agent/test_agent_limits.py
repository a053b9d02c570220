"""The agent under hostile or heavy clients keeps answering everyone else; other uids are refused."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from pathlib import Path

import pytest
from helpers.agentproc import AgentProc, request

from conduit.daemon.agent.unixsocket import peer_uid


def raw(sock: Path, data: bytes, timeout: float = 10.0) -> bytes:
    """Send bytes, read until the agent closes; tolerate the agent closing while we still send."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(sock))
    out = b""
    try:
        s.sendall(data)
        while chunk := s.recv(65536):
            out += chunk
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        s.close()
    return out


def healthy(agent: AgentProc) -> bool:
    status, body = request(agent.sock, "GET", "/v1/healthz")
    return status == 200 and body["ok"] is True


def test_malformed_requests_get_400_and_the_agent_goes_on(temp_home: Path) -> None:
    with AgentProc(temp_home) as agent:
        for junk in (b"GARBAGE\r\n\r\n", b"GET /v1/status HTTP/9.9\r\n\r\n", b"\x00\x01\x02\r\n\r\n",
                     b"GET /v1/status HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"):
            out = raw(agent.sock, junk)
            assert out == b"" or out.startswith(b"HTTP/1.") and b" 400 " in out.split(b"\r\n")[0], out[:200]
        assert healthy(agent)


def test_one_megabyte_header_is_refused(temp_home: Path) -> None:
    with AgentProc(temp_home) as agent:
        big = b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1024 * 1024) + b"\r\n\r\n"
        out = raw(agent.sock, big)
        assert out == b"" or b" 400 " in out.split(b"\r\n")[0] or b" 431 " in out.split(b"\r\n")[0], out[:200]
        many = b"GET /v1/status HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(500)) + b"\r\n"
        out = raw(agent.sock, many)
        assert not out.startswith(b"HTTP/1.1 200"), out[:200]
        assert healthy(agent)


def test_slow_client_does_not_block_others_and_is_cut_off(temp_home: Path) -> None:
    with AgentProc(temp_home, args=["--idle-timeout", "3"]) as agent:
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        slow.connect(str(agent.sock))
        line = b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"z" * 100
        closed = False
        answered = 0
        for byte in line:  # one byte a second; at most ~len(line) s, but the agent cuts it off after ~3 s
            try:
                slow.send(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if healthy(agent):
                answered += 1
            time.sleep(1)
        if not closed:
            slow.settimeout(10)
            try:
                closed = slow.recv(1) == b""
            except (ConnectionResetError, TimeoutError):
                closed = False
        slow.close()
        assert answered >= 2  # others were answered while the slow client dribbled
        assert closed, "the agent kept a connection that never finished its request"
        assert healthy(agent)


def test_200_concurrent_clients(temp_home: Path) -> None:
    async def one(path: str) -> int:
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        await writer.drain()
        data = await reader.read()
        writer.close()
        return int(data.split(b" ", 2)[1])

    async def idle(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_unix_connection(path)

    async def scenario(path: str) -> tuple[list[int], int]:
        idlers = await asyncio.gather(*(idle(path) for _ in range(200)))  # 200 connected, silent clients
        statuses = await asyncio.wait_for(asyncio.gather(*(one(path) for _ in range(200))), 60)
        lone = await asyncio.wait_for(one(path), 10)
        for _, w in idlers:
            w.close()
        return statuses, lone

    with AgentProc(temp_home) as agent:
        statuses, lone = asyncio.run(scenario(str(agent.sock)))
        assert statuses == [200] * 200 and lone == 200
        assert healthy(agent)


def test_peer_uid_through_a_socket_pair() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        assert peer_uid(a) == os.getuid() and peer_uid(b) == os.getuid()
    finally:
        a.close()
        b.close()
    assert peer_uid(object()) is None


NOBODY = 65534
REQUEST = b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"


def request_as(sock: Path, uid: int | None) -> dict[str, object]:
    """GET /v1/status from a forked child that first becomes ``uid`` (None: stays the parent's uid).

    The child is this interpreter, already loaded, so the new uid never has to reach the Python binary
    (under pyenv in a 0700 home it cannot). Returns what the child saw: its uid, the status line, and
    whether the body carried status data; or ``{"error": ...}``.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            os.close(r)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(str(sock))
            s.sendall(REQUEST)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            s.close()
            seen = {"uid": os.getuid(), "status_line": data.split(b"\r\n")[0].decode(), "leaked": b'"pid"' in data}
            os.write(w, json.dumps(seen).encode())
            code = 0
        except BaseException as exc:
            os.write(w, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as pipe:
        out = pipe.read()
    os.waitpid(pid, 0)
    return dict(json.loads(out or b'{"error": "the child said nothing"}'))


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a client under another uid")
def test_another_uid_is_refused_even_with_loose_file_modes(temp_home: Path) -> None:
    with AgentProc(temp_home) as agent:
        # Loosen the file modes as a careless admin might: the uid check must still refuse.
        os.chmod(agent.dir, 0o755)
        os.chmod(agent.sock.parent, 0o755)
        os.chmod(agent.sock, 0o666)
        refused = request_as(agent.sock, NOBODY)
        assert "error" not in refused, refused
        assert refused["uid"] == NOBODY  # the child really was another uid
        assert str(refused["status_line"]).startswith("HTTP/1.1 403"), refused
        assert refused["leaked"] is False  # nothing of the status leaked into the refusal
        control = request_as(agent.sock, None)  # the same request, the agent's own uid
        assert control["uid"] == os.getuid() and str(control["status_line"]).startswith("HTTP/1.1 200"), control
        assert control["leaked"] is True
        assert healthy(agent)  # the owner still gets answers
        assert f"refused a request from uid {NOBODY}" in agent.log.read_text()
