"""A tiny client for the agent's socket, on httpx's Unix-socket transport.

Usage::

    from conduit.daemon.agent.client import AgentClient
    with AgentClient() as agent:              # socket: conduit.daemon.config.paths.agent_socket_path()
        status = agent.get("/v1/status")      # dict, see docs/reference/socket.md
        agent.post("/v1/channels/taotoken/probe", params={"wait": 5})

Errors (translated at this boundary)::

    httpx.TransportError, OSError   -> AgentUnreachable  (exit code 2; the socket path and how to start it)
    a socket not the user's alone   -> UntrustedSocket   (exit code 2; ``conduit.daemon.agent.trust``: its
                                       directory must be the user's with mode 0700, the socket the user's)
    HTTP 4xx/5xx with a JSON body   -> AgentError        (message and hint from the body; ``status`` kept)
    a body that is not JSON         -> AgentError

httpx is imported when the client is made, not when this module is, so ``import conduit.daemon.agent.client`` stays
cheap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any

from conduit.daemon.agent.trust import UntrustedSocket, check_socket
from conduit.errors import AgentUnreachable, ConduitError


class AgentError(ConduitError):
    """The agent answered with an error (``status`` is the HTTP status; ``body`` the parsed JSON, if any)."""

    def __init__(self, message: str, hint: str | None = None, status: int = 0, body: Any = None) -> None:
        super().__init__(message, hint)
        self.status = status
        self.body = body


class AgentClient:
    """One connection pool to the agent's socket.

    Args:
        socket_path: the socket (default ``conduit.daemon.config.paths.agent_socket_path()``).
        timeout_s: per-request timeout, seconds (connect, read and write alike).
    """

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, timeout_s: float = 5.0) -> None:
        import httpx

        if socket_path is None:
            from conduit.daemon.config.paths import agent_socket_path

            socket_path = agent_socket_path()
        self.socket_path = Path(socket_path)
        self._httpx = httpx
        self._client = httpx.Client(transport=httpx.HTTPTransport(uds=str(self.socket_path)),
                                    base_url="http://localhost", timeout=timeout_s, trust_env=False)

    def request(self, method: str, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request; return the JSON body (a dict) of a 2xx answer.

        Raises:
            UntrustedSocket: the socket's directory is not the user's with mode 0700, or the socket is not the
                user's (checked before every request: a planted agent is never asked anything).
            AgentUnreachable: the socket is missing, refuses, or times out.
            AgentError: any non-2xx answer, or a body that is not a JSON object.
        """
        check_socket(self.socket_path)
        try:
            resp = self._client.request(method, path, params=params)
        except (self._httpx.TransportError, OSError) as exc:
            raise AgentUnreachable(
                f"the conduit agent does not answer on {self.socket_path} ({_unreachable_words(exc)})",
                hint="start it with `conduit agent` (or `systemctl --user start conduit-agent`)",
            ) from None
        try:
            body = resp.json()
        except (ValueError, json.JSONDecodeError):
            raise AgentError(f"the agent answered HTTP {resp.status_code} with a body that is not JSON",
                             status=resp.status_code) from None
        if resp.status_code >= 300 or not isinstance(body, dict):
            message = body.get("message") if isinstance(body, dict) else None
            hint = body.get("hint") if isinstance(body, dict) else None
            raise AgentError(message or f"the agent answered HTTP {resp.status_code}", hint,
                             status=resp.status_code, body=body)
        return body

    def get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """``request("GET", path)``."""
        return self.request("GET", path, params)

    def post(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """``request("POST", path)``; a 202 (still running) is returned like a 200."""
        return self.request("POST", path, params)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


__all__ = ["AgentClient", "AgentError", "UntrustedSocket"]


def _unreachable_words(exc: BaseException) -> str:
    """Why a request to the socket failed, in a user's words (not httpx's class names)."""
    chain: list[BaseException] = [exc]
    while chain[-1].__cause__ is not None or chain[-1].__context__ is not None:
        nxt = chain[-1].__cause__ or chain[-1].__context__
        if nxt is None or nxt in chain or len(chain) > 8:
            break
        chain.append(nxt)
    text = " ".join(f"{type(e).__name__} {e}" for e in chain)
    if "Errno 2]" in text or "FileNotFoundError" in text:
        return "no socket there: the agent is not running"
    if "Errno 111]" in text or "ConnectionRefused" in text:
        return "the socket is left over from an agent that stopped: nothing accepts on it"
    if "Timeout" in text:
        return "it did not answer in time: the agent may be busy or stuck"
    if "Errno 13]" in text or "PermissionError" in text:
        return "permission denied on the socket"
    return f"the connection failed: {exc}"

