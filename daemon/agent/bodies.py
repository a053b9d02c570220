"""Answer bodies kept between requests: each route's bytes are made again only when what they show changed.

A route's body is a pure function of a few sources of state (a GPU/host sample, the prober's results, the
profile's note, the vLLM slot's snapshot, the sync state file): the handler names them in a *key* (the
keeper's generation counters, the prober's ``generation``, the slot's snapshot dict) and ``BodyCache.get``
returns the bytes made for that key, masked once by the agent's ``conduit.redact.Redactor`` when they were
made. The redactor's secret set is part of every key (the frozenset object itself: ``Redactor.add`` replaces
it), so a key learned after a body was made makes the next answer rebuild and mask it.

The response then carries the secret set it was masked with (``MASKED_WITH``), and the middleware
(``conduit.daemon.agent.server``) masks again only a body that does not carry the current set: every answer is
still masked with every key the agent knows when it leaves.

Example::

    cache = BodyCache(redactor)
    body, secrets = cache.get("gpus", (keeper.gpu_generation,), lambda: render(keeper.gpus))
    resp = masked_response(body, secrets)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

from aiohttp import web

from conduit.redact import Redactor, redact_bytes

MASKED_WITH: web.ResponseKey[frozenset[str]] = web.ResponseKey("conduit.masked_with")
"""Key of a ``web.Response``'s user data: the secret set (frozenset) its body was already masked with."""


class BodyCache:
    """The last body of each route and the key it was made for.

    Args:
        redactor: masks each body once, when it is made; its secret set is part of every key.

    Attributes:
        builds: route -> how many times its body was made (a request that found its key reuses the bytes).
    """

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.builds: Counter[str] = Counter()
        self._kept: dict[str, tuple[Any, frozenset[str], bytes]] = {}

    def get(self, route: str, key: Hashable, build: Callable[[], bytes]) -> tuple[bytes, frozenset[str]]:
        """``(body, secrets)``: the bytes kept for ``route`` when ``key`` equals the key they were made for
        (``==``; a snapshot dict may be part of it) and the redactor's secret set is the same object; else
        ``build()``'s bytes, masked with the current ``secrets`` and kept. Read the sources' generations into
        ``key`` *before* ``build`` reads the sources, so a change racing a build only costs one more build."""
        secrets = self.redactor.secrets
        kept = self._kept.get(route)
        if kept is not None and kept[1] is secrets and kept[0] == key:
            return kept[2], secrets
        body = build()
        self.builds[route] += 1
        if secrets:
            body = redact_bytes(body, secrets)
        self._kept[route] = (key, secrets, body)
        return body, secrets

    def mask(self, body: bytes, secrets: frozenset[str]) -> bytes:
        """``body`` (a part made per request) masked with ``secrets``."""
        return redact_bytes(body, secrets) if secrets else body


def masked_response(body: bytes, secrets: frozenset[str], status: int = 200) -> web.Response:
    """A JSON ``web.Response`` of ``body``, marked as already masked with ``secrets`` (``MASKED_WITH``)."""
    resp = web.Response(body=body, status=status, content_type="application/json")
    resp[MASKED_WITH] = secrets
    return resp


__all__ = ["MASKED_WITH", "BodyCache", "masked_response"]
