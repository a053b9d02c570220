"""After a 404 from a gateway's models list: the neighbouring base URLs a misconfigured ``base_url`` often
means, and the first one that answers (named in the probe's ``working_base`` and hint). Used by
``conduit.daemon.agent.prober.probe_once``; every request is bounded (``conduit.daemon.config.gateway``).
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

import httpx

from conduit.daemon.config.gateway import aread_bounded

__all__ = ["find_working", "neighbour_bases"]


def neighbour_bases(base: str) -> list[str]:
    """Base URLs next to ``base`` that a misconfigured gateway URL often means, nearest first, without ``base``.

    With and without a trailing ``/v1``, and without an ``/api`` segment (each with and without ``/v1``).
    Example: ``https://h/api/v1`` -> ``["https://h/api", "https://h/api/v1/v1", "https://h/v1", "https://h"]``.
    """
    parts = urlsplit(base)
    path = parts.path.rstrip("/")
    segs = [s for s in path.split("/") if s]
    cands: list[list[str]] = []
    if segs and segs[-1] == "v1":
        cands.append(segs[:-1])
    cands.append(segs + ["v1"])
    if "api" in segs:
        no_api = [s for s in segs if s != "api"]
        cands.append(no_api)
        if no_api and no_api[-1] == "v1":
            cands.append(no_api[:-1])
        else:
            cands.append(no_api + ["v1"])
    out: list[str] = []
    for c in cands:
        url = urlunsplit((parts.scheme, parts.netloc, "/" + "/".join(c) if c else "", "", ""))
        if url.rstrip("/") != base.rstrip("/") and url not in out:
            out.append(url)
    return out


async def find_working(client: httpx.AsyncClient, base: str, suffix: str, headers: dict[str, str], protocol: str,
                       until: float) -> tuple[str | None, str, str]:
    """After a 404 at ``base + suffix``: ``(working base or None, message, hint)`` from the neighbouring bases
    (``neighbour_bases``), each asked for its status only (``aread_bounded``, no body read), all before
    ``until`` (``time.monotonic()`` seconds). Never raises for network trouble."""
    url = base + suffix
    for cand in neighbour_bases(base):
        left = until - time.monotonic()
        if left <= 0:
            break
        try:
            got = await aread_bounded(client, "GET", cand + suffix, headers=headers,
                                      max_bytes=0, deadline_s=left)
        except (httpx.HTTPError, OSError):
            continue
        if got.status < 300 or got.status in (401, 403):
            root = cand if protocol == "anthropic" else cand.removesuffix("/v1")
            return (cand, f"HTTP 404 at {url}; {cand}{suffix} answers HTTP {got.status}",
                    f"set the channel's base_url to {root}")
    return None, "HTTP 404: no models endpoint under this base URL", \
        "check the base_url against the gateway's docs; no neighbouring base URL answered either"
