"""A DNS responder for the sandbox: every query answered NXDOMAIN, every name asked recorded.

Inside the tool's network namespace ``/etc/resolv.conf`` names ``127.0.0.1``, so each vendor look-up a tool
tries (telemetry, update checks) fails at once and shows up in ``names()``, instead of waiting for a
resolver timeout. Wire format per RFC 1035 section 4: the 12-byte header (ID, flags, four counts) and the
question section (length-prefixed labels, QTYPE, QCLASS); over TCP each message has a 2-byte length prefix.
The answer copies the ID, the opcode, RD and the question, sets QR and RA, and RCODE 3 (name error).

Example::

    with NxDomainResponder(port=0) as dns:       # port 53 inside the sandbox
        ...                                      # a resolver asks for api.anthropic.com
        dns.names()                              # ["api.anthropic.com"]
"""

from __future__ import annotations

import socketserver
import struct
import threading

NXDOMAIN = 3
"""RCODE 3, "name error": the name does not exist."""
MAX_MESSAGE = 4096
"""The largest query read; DNS over UDP is 512 bytes classically, EDNS asks for more."""


def parse_question(msg: bytes) -> tuple[str, int, int] | None:
    """(name, qtype, end offset of the question) of a query's first question; None when malformed.

    The name is lower-case, dot-joined, without the trailing dot; compression pointers are refused (queries
    do not use them)."""
    if len(msg) < 12 or struct.unpack("!H", msg[4:6])[0] < 1:
        return None
    labels: list[str] = []
    i = 12
    while i < len(msg):
        n = msg[i]
        if n == 0:
            if i + 5 > len(msg):
                return None
            qtype = struct.unpack("!H", msg[i + 1:i + 3])[0]
            return ".".join(labels).lower(), qtype, i + 5
        if n & 0xC0 or i + 1 + n > len(msg):
            return None
        labels.append(msg[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    return None


def nxdomain_reply(msg: bytes) -> bytes | None:
    """The NXDOMAIN answer to one query (header + its first question), or None when it is malformed."""
    q = parse_question(msg)
    if q is None:
        return None
    qid, flags = struct.unpack("!HH", msg[:4])
    out_flags = 0x8000 | (flags & 0x7800) | (flags & 0x0100) | 0x0080 | NXDOMAIN
    return struct.pack("!HHHHHH", qid, out_flags, 1, 0, 0, 0) + msg[12:q[2]]


class _Udp(socketserver.BaseRequestHandler):
    server: _UdpServer

    def handle(self) -> None:
        data, sock = self.request
        reply = self.server.responder._answer(data)
        if reply is not None:
            sock.sendto(reply, self.client_address)


class _Tcp(socketserver.BaseRequestHandler):
    server: _TcpServer

    def handle(self) -> None:
        self.request.settimeout(5)
        try:
            while True:
                head = self.request.recv(2)
                if len(head) < 2:
                    return
                (size,) = struct.unpack("!H", head)
                data = b""
                while len(data) < size:
                    part = self.request.recv(size - len(data))
                    if not part:
                        return
                    data += part
                reply = self.server.responder._answer(data)
                if reply is None:
                    return
                self.request.sendall(struct.pack("!H", len(reply)) + reply)
        except OSError:
            return


class _UdpServer(socketserver.ThreadingUDPServer):
    daemon_threads = True
    allow_reuse_address = True
    max_packet_size = MAX_MESSAGE
    responder: NxDomainResponder


class _TcpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    responder: NxDomainResponder


class NxDomainResponder:
    """NXDOMAIN for every query on ``host:port`` over UDP and TCP (same port; 0 picks a free UDP port and
    TCP tries the same one, skipped if taken); a context manager. ``start()`` raises ``OSError`` when the
    UDP port cannot be bound (port 53 needs root, which the sandbox has in its namespace)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 53) -> None:
        self.host, self.port = host, port
        self._lock = threading.Lock()
        self._names: list[str] = []
        self._servers: list[socketserver.BaseServer] = []
        self._threads: list[threading.Thread] = []

    def names(self) -> list[str]:
        """Each name asked, de-duplicated, in the order first asked."""
        with self._lock:
            return list(dict.fromkeys(self._names))

    def _answer(self, data: bytes) -> bytes | None:
        q = parse_question(data)
        if q is not None:
            with self._lock:
                self._names.append(q[0])
        return nxdomain_reply(data)

    def start(self) -> NxDomainResponder:
        """Bind UDP (required) and TCP (best effort) and serve each in a daemon thread; returns self."""
        udp = _UdpServer((self.host, self.port), _Udp)
        udp.responder = self
        self.port = udp.server_address[1]
        self._servers.append(udp)
        try:
            tcp = _TcpServer((self.host, self.port), _Tcp)
            tcp.responder = self
            self._servers.append(tcp)
        except OSError:
            pass
        for server in self._servers:
            t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                 name="verify-dns", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        """Stop both servers; idempotent."""
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self._servers, self._threads = [], []

    def __enter__(self) -> NxDomainResponder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
