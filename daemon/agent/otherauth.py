"""After a 401/403 from a gateway: the same probe once in the other auth header style.

A gateway that wants ``x-api-key`` often answers 401 to ``Authorization: Bearer`` (and the other way round);
when the other style answers 2xx, the probe's message and hint name it (``set auth = "x-api-key" in
[channels.NAME]``), as ``working_base`` names the base URL that answers after a 404. Used by
``conduit.daemon.agent.prober.probe_once``.
"""

from __future__ import annotations

from typing import Literal

import httpx

from conduit.daemon.config.gateway import aread_bounded

AuthStyle = Literal["bearer", "x-api-key"]
HEADER = {"bearer": "Authorization: Bearer", "x-api-key": "x-api-key"}


def other_style(auth: AuthStyle) -> AuthStyle:
    """``bearer`` <-> ``x-api-key``."""
    return "x-api-key" if auth == "bearer" else "bearer"


async def retry_status(client: httpx.AsyncClient, url: str, headers: dict[str, str], timeout: float) -> int | None:
    """GET ``url`` once with ``headers`` (the key in the other style), bounded as a whole by ``timeout``
    seconds and reading no body (``conduit.daemon.config.gateway.aread_bounded``); its HTTP status, or None on a
    network failure or a timeout (never raises for one)."""
    try:
        return (await aread_bounded(client, "GET", url, headers=headers, max_bytes=0, deadline_s=timeout)).status
    except (httpx.HTTPError, OSError):
        return None


def works_as(status: int, was: AuthStyle, other: AuthStyle, again: int, channel: str) -> tuple[str, str]:
    """The probe's ``(message, hint)`` when the key was refused with ``was`` (``status``) and accepted with
    ``other`` (``again``, 2xx). Holds no key."""
    return (f"HTTP {status} with {HEADER[was]}; the same key works as {HEADER[other]} (HTTP {again})",
            f"set auth = \"{other}\" in [channels.{channel}]")


__all__ = ["other_style", "retry_status", "works_as"]
