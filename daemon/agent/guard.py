"""The agent's answers and the middleware every request passes: the uid check, errors as ``ErrorBody``, masking.

``answer``/``error`` make the JSON responses of every route (``conduit.daemon.agent.models.render``);
``guard_middleware`` refuses a peer of another uid (``SO_PEERCRED``, read once per connection), turns aiohttp's
404/405 and a ``ConduitError`` into ``ErrorBody`` answers, and masks every secret the agent knows in each body
(a kept body already masked with the current secret set is passed as it is: ``conduit.daemon.agent.bodies``).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import BaseModel

from conduit.daemon.agent.bodies import MASKED_WITH
from conduit.daemon.agent.models import ErrorBody, render
from conduit.daemon.agent.unixsocket import peer_uid
from conduit.errors import ConduitError
from conduit.redact import Redactor, redact_bytes

log = logging.getLogger("conduit.agent")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def answer(body: BaseModel, status: int = 200) -> web.Response:
    """An HTTP answer whose body is ``body`` as ``conduit.daemon.agent.models.render`` writes it."""
    return web.Response(body=render(body), status=status, content_type="application/json")


def error(status: int, code: str, message: str, hint: str | None = None) -> web.Response:
    """An ``ErrorBody`` answer: ``{"error": code, "message", "hint"}``."""
    return answer(ErrorBody(error=code, message=message, hint=hint), status)



def _redacted(resp: web.StreamResponse, redactor: Redactor) -> web.StreamResponse:
    """``resp`` with every secret ``redactor`` knows masked in its body (a plain ``web.Response``'s bytes),
    unless it was already masked with the current secret set (a kept body: ``conduit.daemon.agent.bodies``)."""
    if isinstance(resp, web.Response) and isinstance(resp.body, bytes):
        secrets = redactor.secrets
        if secrets and resp.get(MASKED_WITH) is not secrets:
            body = redact_bytes(resp.body, secrets)
            if body != resp.body:
                resp.body = body
    return resp


def guard_middleware(my_uid: int, redactor: Redactor) -> Middleware:
    """The middleware: refuse other uids (``SO_PEERCRED``), turn aiohttp's 404/405 into ``ErrorBody``, and mask
    every known secret in what is answered.

    The peer's uid is read once per connection (a connected socket's peer cannot change) and kept in a weak map
    keyed by the connection's transport, so a keep-alive client costs one ``getsockopt`` however many requests
    it sends."""
    peers: weakref.WeakKeyDictionary[asyncio.BaseTransport, int | None] = weakref.WeakKeyDictionary()

    def uid_of(request: web.Request) -> int | None:
        transport = request.transport
        if transport is None:
            return None
        try:
            return peers[transport]
        except KeyError:
            sock = transport.get_extra_info("socket")
            uid = peers[transport] = peer_uid(sock) if sock is not None else None
            return uid

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        uid = uid_of(request)
        if uid is not None and uid != my_uid:
            log.warning("refused a request from uid %s", uid)
            refused = error(403, "forbidden", f"this agent serves uid {my_uid} only")
            refused.force_close()
            return refused
        resp: web.StreamResponse
        try:
            resp = await handler(request)
        except web.HTTPException as exc:
            if exc.status == 404:
                resp = error(404, "not_found", f"no route {request.method} {request.path}",
                             hint="see GET /v1/openapi.json")
            elif exc.status == 405:
                resp = error(405, "method_not_allowed", f"{request.method} is not allowed on {request.path}")
            else:
                raise
        except ConduitError as exc:
            resp = error(404, "not_found", exc.message, exc.hint)
        return _redacted(resp, redactor)

    return guard


__all__ = ["Handler", "answer", "error", "guard_middleware"]
