"""A hostile gateway on 127.0.0.1 (test and bench helper): every answer is one of the attacks of ``MODES``.

    with HostileGateway("drip") as gw:      # gw.url: http://127.0.0.1:PORT (any path answers)
        gw.mode = "bomb"                    # switch at any time

Modes:
    huge     200, no Content-Length, 512 MiB of ``a`` streamed (written 64 KiB at a time, never held whole)
    bomb     200, ``Content-Encoding: gzip``: about 0.5 MB that inflates to 512 MiB (made once per process)
    drip     200 with its headers at once, then one byte every ``drip_every_s`` seconds (2 s), for ever
    escape   200, a model list whose ids, an extra header and an error message hold ANSI/OSC/BEL escapes
    nested   200, 200,000 ``[`` (a JSON parser's recursion limit)
    ok       200, ``{"data": [{"id": "plain-model"}]}``
Connections are served on daemon threads; a write the client no longer reads ends that connection.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
import zlib

MODES = ("huge", "bomb", "drip", "escape", "nested", "ok")
HUGE_BYTES = 512 << 20
ESC_ID = "evil\x1b]52;c;aGVsbG8=\x07\x1b[2J\x1b[31mred\u202e\nINFO forged line"
"""A model id a hostile gateway lists: OSC 52 (clipboard), BEL, clear screen, colour, a bidi override, a newline."""

_BOMB: bytes | None = None
_LOCK = threading.Lock()


def gzip_bomb() -> bytes:
    """The gzip of ``HUGE_BYTES`` zero bytes (about 0.5 MB), made once per process, streamed from 1 MiB pieces."""
    global _BOMB
    with _LOCK:
        if _BOMB is None:
            z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            piece = bytes(1 << 20)
            parts = [z.compress(piece) for _ in range(HUGE_BYTES >> 20)]
            parts.append(z.flush())
            _BOMB = b"".join(parts)
        return _BOMB


def _head(extra: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n{extra}\r\n").encode()


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        conn: socket.socket = self.request
        conn.settimeout(30)
        try:
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                got = conn.recv(65536)
                if not got:
                    return
                data += got
            self.server.requests += 1
            getattr(self, f"_{self.server.owner.mode}")(conn)
        except OSError:
            return  # the client went away: the point of most modes

    def _huge(self, conn: socket.socket) -> None:
        conn.sendall(_head())
        chunk = b"a" * (64 << 10)
        for _ in range(HUGE_BYTES // len(chunk)):
            conn.sendall(chunk)

    def _bomb(self, conn: socket.socket) -> None:
        body = gzip_bomb()
        conn.sendall(_head(f"content-encoding: gzip\r\ncontent-length: {len(body)}\r\n") + body)

    def _drip(self, conn: socket.socket) -> None:
        conn.sendall(_head("content-length: 100000\r\n"))
        while not self.server.owner.stopped.wait(self.server.owner.drip_every_s):
            conn.sendall(b" ")

    def _escape(self, conn: socket.socket) -> None:
        body = json.dumps({"data": [{"id": ESC_ID}, {"id": "ok-model"}],
                           "error": {"message": "bad \x1b[2J\x07 thing\nINFO forged"}}).encode()
        conn.sendall(_head(f"x-evil: \x1b[31mred\x07\r\ncontent-length: {len(body)}\r\n") + body)

    def _nested(self, conn: socket.socket) -> None:
        body = b"[" * 200_000
        conn.sendall(_head(f"content-length: {len(body)}\r\n") + body)

    def _ok(self, conn: socket.socket) -> None:
        body = json.dumps({"data": [{"id": "plain-model"}]}).encode()
        conn.sendall(_head(f"content-length: {len(body)}\r\n") + body)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: HostileGateway
    requests = 0


class HostileGateway:
    """See the module docstring. ``mode``: one of ``MODES`` (may be changed while it serves); ``requests``: how many
    requests it read."""

    def __init__(self, mode: str = "ok", drip_every_s: float = 2.0) -> None:
        assert mode in MODES, mode
        self.mode, self.drip_every_s = mode, drip_every_s
        self.stopped = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True)

    @property
    def requests(self) -> int:
        return self._server.requests

    def start(self) -> HostileGateway:
        if self.mode == "bomb":
            gzip_bomb()
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HostileGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(pred: object, timeout: float, step: float = 0.1) -> bool:
    """Poll ``pred()`` until true or ``timeout`` seconds; returns the last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(step)
    return bool(pred())  # type: ignore[operator]
