"""The headers every request conduit sends to a model gateway carries for its key and protocol.

The key goes as ``Authorization: Bearer <key>`` or, for a channel with ``auth = "x-api-key"``, as
``x-api-key: <key>``; an Anthropic-protocol request also names the API version (``anthropic-version``), which
Anthropic's API requires. Used by the agent's prober, ``conduit bench``, the model catalog and key rotation.
"""

from __future__ import annotations

from conduit.adapters.base import AuthStyle, Protocol_

__all__ = ["ANTHROPIC_VERSION", "auth_headers"]

ANTHROPIC_VERSION = "2023-06-01"


def auth_headers(protocol: Protocol_, key: str | None, auth: AuthStyle) -> dict[str, str]:
    """The gateway headers for one request: ``anthropic-version`` for the Anthropic protocol, then the key in
    ``auth``'s header (none when ``key`` is None or empty: a channel that needs no key). Header names are lower
    case. The values hold the key: never log them."""
    headers: dict[str, str] = {}
    if protocol == "anthropic":
        headers["anthropic-version"] = ANTHROPIC_VERSION
    if key:
        if auth == "x-api-key":
            headers["x-api-key"] = key
        else:
            headers["authorization"] = f"Bearer {key}"
    return headers
