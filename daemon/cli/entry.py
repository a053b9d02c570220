"""The ``conduit`` console script: a fast path for ``conduit status --json``, then the full CLI.

Scripts call ``conduit status --json`` in loops, so it must start about as fast as a bare interpreter. The full
CLI imports typer, rich, pydantic and httpx (hundreds of ms); this path uses only the standard library
(one HTTP/1.1 request over ``AF_UNIX``) for the one request it makes, and prints exactly what the full command prints
(the agent's ``/v1/status`` JSON). Anything else, and any failure, goes to the full CLI, which owns every error
message, so both paths answer identically. A socket the client must not trust (``conduit.daemon.agent.trust``:
its directory not the user's with mode 0700, or the socket not the user's) is never connected to here: the full
CLI refuses it with the reason.
"""

from __future__ import annotations

import os
import sys


def _socket_path(argv: list[str]) -> str | None:
    """The socket for ``status --json [--socket PATH]``, or None when argv is anything else."""
    if not argv or argv[0] != "status" or "--json" not in argv:
        return None
    rest = [a for a in argv[1:] if a != "--json"]
    if not rest:
        env = os.environ.get("CONDUIT_AGENT_SOCKET", "").strip()
        if env:
            return env
        runtime = os.environ.get("XDG_RUNTIME_DIR", "").strip()
        if runtime and os.path.isdir(runtime):
            return os.path.join(runtime, "conduit", "agent.sock")
        return f"/tmp/conduit-{os.getuid()}/agent.sock"  # the documented fallback (conduit.daemon.config.paths)
    if len(rest) == 2 and rest[0] == "--socket":
        return rest[1]
    if len(rest) == 1 and rest[0].startswith("--socket="):
        return rest[0].split("=", 1)[1]
    return None


def fast_status(path: str, timeout_s: float = 5.0) -> bytes | None:
    """GET /v1/status over ``path``: the body when the agent answers ``200`` with a plain (Content-Length or
    read-to-close) body, else None, and the caller falls back to the full CLI.

    One request with ``Connection: close``; anything unexpected (another status, chunked encoding, a socket
    error, a socket that ``conduit.daemon.agent.trust.socket_problem`` refuses) returns None rather than being
    interpreted here.
    """
    # lazy for start-up speed: only this path needs the agent package (standard library only, ~1 ms) and socket
    import socket

    from conduit.daemon.agent.trust import socket_problem

    if socket_problem(path) is not None:
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(path)
            sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
                         b"Connection: close\r\n\r\n")
            chunks = []
            while data := sock.recv(65536):
                chunks.append(data)
    except OSError:
        return None
    head, sep, body = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    if not sep or not lines[0].startswith(b"HTTP/1.1 200 "):
        return None
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    if b"transfer-encoding" in headers:
        return None
    length = headers.get(b"content-length")
    if length is not None and (not length.isdigit() or int(length) != len(body)):
        return None
    return body


def main() -> int:
    """Entry point of the ``conduit`` script."""
    argv = sys.argv[1:]
    path = _socket_path(argv)
    if path is not None:
        body = fast_status(path)
        if body is not None:
            import json  # ~1 ms; re-dumped so the output is byte-identical to the full command's

            try:
                sys.stdout.write(json.dumps(json.loads(body)) + "\n")
                return 0
            except ValueError:
                pass
    from conduit.daemon.cli.main import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
