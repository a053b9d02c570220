"""A channel's model list (``GET <openai base>/models``), parsed, and cached per channel in the state directory.

Shapes the parser knows (``parse_models``), each from the server's own source:

- vLLM: ``{"object": "list", "data": [{"id": ..., "max_model_len": 4096, ...}]}``; ``max_model_len`` is the
  model's whole context (prompt + output) in tokens (vllm-project/vllm 0.32 ``vllm/entrypoints/serve/engine/
  protocol.py`` ``ModelCard.max_model_len``, filled from ``model_config.max_model_len`` in ``vllm/entrypoints/
  openai/models/serving.py``).
- OpenRouter-style gateways: ``{"data": [{"id": ..., "context_length": 200000, "top_provider":
  {"context_length": ..., "max_completion_tokens": 64000}}]}`` (openrouter.ai API reference, "List models").
- Anything else (OpenAI, Anthropic, most gateways): ids only; context unknown (None).

The cache file is ``state_dir()/models/<channel>.json``: ``{"channel", "base_url", "fetched_at" (Unix seconds),
"models": [{"id", "context_window", "max_output_tokens"}]}``. It holds no key; a cache whose ``base_url`` is
not the channel's current one is ignored. Reads are bounded and tolerant (a missing, oversized or damaged file
is "no cache"), so a sync never fails or hangs on it.

Errors: ``CatalogError`` (a ``ConduitError``) names the URL and what went wrong, never the key. The request is
made with ``http.client`` (standard library), not httpx, so the commands that may fetch (``conduit sync`` with a
stale cache, ``conduit use``) keep their start-up light.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conduit.adapters.base import Root
from conduit.daemon.config import paths
from conduit.daemon.config.firstuse import announce, is_placeholder_url, placeholder_message
from conduit.daemon.config.gateway import GatewayTimeout, auth_headers, get_stdlib
from conduit.daemon.config.resolve import ResolvedChannel
from conduit.errors import ConduitError
from conduit.fileio import atomic_write, make_private_dirs, read_regular_file
from conduit.text import one_line

BODY_MAX_BYTES = 16 << 20
"""Cap on a ``/models`` answer: 16 MiB (OpenRouter's full list is a few MiB; vLLM's a few hundred bytes)."""
CACHE_MAX_BYTES = 4 << 20
"""Cap on a cache file read back: 4 MiB (only ids and two numbers per model are kept)."""
FETCH_TIMEOUT_S = 3.0
"""Default bound of one whole fetch (resolve, connect, body), seconds."""
REMEMBER_REFRESH_S = 60.0
"""An unchanged answer rewrites the cache (new ``fetched_at``) at most this often, seconds."""
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
MAX_TOKENS_FIGURE = 1 << 30
"""The largest context or output figure believed (tokens; about a billion, far beyond any model's)."""
CLOCK_SKEW_S = 300.0
"""How far in the future a cache's ``fetched_at`` may lie before the cache counts as stale (seconds)."""


class CatalogError(ConduitError):
    """The model list could not be fetched or read (names the URL, never the key)."""


@dataclass(frozen=True)
class ModelInfo:
    """One model as the channel lists it.

    Attributes:
        id: the model id as the gateway names it (what tools send as ``model``).
        context_window: the whole context in tokens (vLLM ``max_model_len``, OpenRouter ``context_length``),
            or None when the server does not say.
        max_output_tokens: the output limit in tokens (OpenRouter ``top_provider.max_completion_tokens``), or
            None.
    """

    id: str
    context_window: int | None = None
    max_output_tokens: int | None = None


@dataclass(frozen=True)
class Catalog:
    """A channel's model list at one moment.

    Attributes:
        channel: the channel's name in the profile. base_url: the URL's base the list came from (no key).
        fetched_at: Unix seconds. models: in the server's order.
    """

    channel: str
    base_url: str
    fetched_at: float
    models: tuple[ModelInfo, ...]

    def find(self, model: str) -> ModelInfo | None:
        """The entry for ``model`` (exact id), or None."""
        return next((m for m in self.models if m.id == model), None)

    def age_s(self, now: float | None = None) -> float:
        """Seconds since the fetch; infinite (stale) when ``fetched_at`` is not a number or lies more than
        ``CLOCK_SKEW_S`` in the future (a cache stamped by a wrong clock must not stay fresh for ever)."""
        age = (time.time() if now is None else now) - self.fetched_at
        if not math.isfinite(age) or age < -CLOCK_SKEW_S:
            return math.inf
        return max(0.0, age)


def models_base(roots: dict[str, Root]) -> str | None:
    """The base ``/models`` is asked under: the OpenAI root with its version (``https://gw/api/v1``), else the
    Anthropic root + ``/v1`` (Anthropic's API lists models there too); None for a channel with neither."""
    if "openai" in roots:
        return roots["openai"].openai_base()
    if "anthropic" in roots:
        return roots["anthropic"].anthropic_base() + "/v1"
    return None


def _positive_int(value: Any) -> int | None:
    """``value`` when it is a positive integer (or an integral float) of at most ``MAX_TOKENS_FIGURE``, else None
    (a figure no model has: tools write it into files whose integers are 64-bit, and it would mean nothing).
    Booleans are not numbers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 < value <= MAX_TOKENS_FIGURE:
        return value
    return None


def parse_models(body: Any) -> list[ModelInfo]:
    """The models in a ``/models`` answer (``{"data": [...]}`` or a bare list); entries without a string ``id``
    are skipped, and control characters in an id are written escaped (``conduit.text.one_line``: a gateway's
    ``\x1b]52;...`` never reaches a terminal through ``conduit use``, ``sync`` or ``verify``). Context from ``max_model_len`` (vLLM), else ``context_length`` or ``top_provider.context_length``
    (OpenRouter); output limit from ``top_provider.max_completion_tokens``. Never raises."""
    items = body.get("data") if isinstance(body, dict) else body
    if not isinstance(items, list):
        return []
    out: list[ModelInfo] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"].strip():
            continue
        got = item.get("top_provider")
        top: dict[str, Any] = got if isinstance(got, dict) else {}
        ctx = (_positive_int(item.get("max_model_len")) or _positive_int(item.get("context_length"))
               or _positive_int(top.get("context_length")))
        out.append(ModelInfo(one_line(item["id"]), ctx, _positive_int(top.get("max_completion_tokens"))))
    return out


def _headers(channel: ResolvedChannel) -> dict[str, str]:
    """Auth as the channel wants it: ``Authorization: Bearer`` or ``x-api-key`` (+ ``anthropic-version`` for a
    channel without an OpenAI root)."""
    return {"accept": "application/json",
            **auth_headers("openai" if "openai" in channel.roots else "anthropic", channel.key, channel.auth)}


def _get(url: str, headers: dict[str, str], timeout_s: float) -> bytes:
    """One GET bounded as a whole by ``timeout_s`` seconds through ``conduit.daemon.config.gateway.get_stdlib``
    (the standard library's ``http.client``: ``conduit sync`` and ``use`` keep httpx out of their start-up,
    tests/cli/test_cli_start.py): resolve, connect, headers and body under one deadline, at most
    ``BODY_MAX_BYTES`` bytes, redirects not followed (a 3xx is an error). Raises CatalogError."""
    try:
        got = get_stdlib(url, headers, max_bytes=BODY_MAX_BYTES, deadline_s=timeout_s)
    except GatewayTimeout:
        raise CatalogError(f"GET {url}: no answer within {timeout_s:g} s",
                           "is the server running? (`conduit doctor --live`)") from None
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise CatalogError(f"GET {url}: {why}", "is the server running? (`conduit doctor --live`)") from None
    if got.status != 200:
        raise CatalogError(f"GET {url}: HTTP {got.status}",
                           "check the channel's base URL and key (`conduit doctor --live`)")
    if got.truncated:
        raise CatalogError(f"GET {url}: the answer is {got.problem or f'over {BODY_MAX_BYTES} bytes'}")
    return bytes(got.body)


def fetch(channel: ResolvedChannel, *, timeout_s: float = FETCH_TIMEOUT_S) -> Catalog:
    """``GET <base>/models`` now, bounded: ``timeout_s`` for the whole request (resolve, connect, body), the
    body capped at ``BODY_MAX_BYTES``, no redirects followed.

    Raises:
        CatalogError: no OpenAI/Anthropic root, unreachable, timed out, an HTTP error status, a body over the
            cap or not JSON. The message names the URL and the status, never the key.
    """
    base = models_base(channel.roots)
    if base is None:
        raise CatalogError(f"channel `{channel.name}` has no OpenAI or Anthropic base URL to list models from")
    url = f"{base}/models"
    if is_placeholder_url(url):  # the starter's stand-in: never asked (conduit.daemon.config.firstuse)
        raise CatalogError(placeholder_message(channel.name, base))
    announce(channel.name, url, channel.key)  # "sending the key of channel X to host H for the first time"
    body = _get(url, _headers(channel), timeout_s)
    try:
        data = json.loads(bytes(body))
    except (ValueError, RecursionError):
        raise CatalogError(f"GET {url}: the answer is not JSON (or nested too deeply)") from None
    return Catalog(channel.name, base, time.time(), tuple(parse_models(data)))


def cache_path(channel: str) -> Path:
    """``state_dir()/models/<channel>.json`` (characters outside ``[A-Za-z0-9._-]`` become ``_``)."""
    return paths.state_dir() / "models" / f"{_SAFE_NAME.sub('_', channel)}.json"


def write_cache(catalog: Catalog) -> None:
    """Store ``catalog`` (0600, atomic). Raises OSError when the state directory cannot be written."""
    path = cache_path(catalog.channel)
    make_private_dirs(path.parent)
    doc = {"channel": catalog.channel, "base_url": catalog.base_url, "fetched_at": catalog.fetched_at,
           "models": [asdict(m) for m in catalog.models]}
    atomic_write(path, (json.dumps(doc, indent=1) + "\n").encode("utf-8"), 0o600)


def read_cache(channel: str, base_url: str | None = None, *, windows: bool = True) -> Catalog | None:
    """The cached list of ``channel``, or None when there is none, it is unreadable, over ``CACHE_MAX_BYTES``,
    malformed, or (with ``base_url``) fetched from another base URL; with ``windows`` the contexts
    ``write_windows`` kept are filled in where the list has none. Never raises."""
    try:
        doc = json.loads(read_regular_file(cache_path(channel), max_bytes=CACHE_MAX_BYTES, what="model cache"))
        models = tuple(ModelInfo(one_line(m["id"]), _positive_int(m.get("context_window")),
                                 _positive_int(m.get("max_output_tokens"))) for m in doc["models"]
                       if isinstance(m, dict) and isinstance(m.get("id"), str))
        got = Catalog(str(doc["channel"]), str(doc["base_url"]), float(doc["fetched_at"]), models)
    except (OSError, ConduitError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    if got.channel != channel or (base_url is not None and got.base_url != base_url):
        return None
    learned = read_windows(channel) if windows else {}
    if learned:
        got = dataclasses.replace(got, models=tuple(
            dataclasses.replace(m, context_window=learned[m.id]) if m.context_window is None and m.id in learned
            else m for m in got.models))
    return got


def windows_path(channel: str) -> Path:
    """``state_dir()/models/<channel>.windows.json``: context windows learned from the engine itself."""
    return paths.state_dir() / "models" / f"{_SAFE_NAME.sub('_', channel)}.windows.json"


def write_windows(channel: str, windows: dict[str, int]) -> None:
    """Keep ``{model id: context tokens}`` that the channel's ``/models`` does not say (an observed Ollama's
    ``/api/ps`` ``context_length``: conduit.daemon.vllm.ollama); ``read_cache`` fills them in for models listed
    without a context. Written 0600, atomically. Raises OSError when the state directory cannot be written."""
    path = windows_path(channel)
    make_private_dirs(path.parent)
    doc = {"channel": channel, "windows": {k: v for k, v in windows.items() if _positive_int(v)}}
    atomic_write(path, (json.dumps(doc, indent=1) + "\n").encode("utf-8"), 0o600)


def read_windows(channel: str) -> dict[str, int]:
    """What ``write_windows`` kept for ``channel``; ``{}`` when nothing (or a damaged file). Never raises."""
    try:
        doc = json.loads(read_regular_file(windows_path(channel), max_bytes=CACHE_MAX_BYTES, what="model windows"))
        got = doc["windows"] if doc.get("channel") == channel else {}
        return {k: n for k, v in got.items() if isinstance(k, str) and (n := _positive_int(v))}
    except (OSError, ConduitError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return {}


def refresh(channel: ResolvedChannel, *, timeout_s: float = FETCH_TIMEOUT_S) -> Catalog:
    """Fetch now and store the result (a cache that cannot be written is not an error). Raises CatalogError."""
    got = fetch(channel, timeout_s=timeout_s)
    try:
        write_cache(got)
    except OSError:
        pass
    return got


def remember(channel: str, base_url: str, body: bytes | bytearray) -> Catalog | None:
    """Cache a ``/models`` answer someone else already fetched (the agent's prober, which asks ``base_url +
    "/models"`` on every probe, every second for a ``[fallback]`` primary; it calls this off its event loop).
    The file is written only when the models differ from the cache's, or the cache is older than
    ``REMEMBER_REFRESH_S`` (so ``fetched_at`` stays within that of the last answer and ``conduit sync`` sees a
    fresh cache). Returns the catalog now cached, or None when ``body`` is over ``BODY_MAX_BYTES`` or not JSON,
    or the cache cannot be written. Never raises."""
    if len(body) > BODY_MAX_BYTES:
        return None
    try:
        models = tuple(parse_models(json.loads(body)))
        cached = read_cache(channel, base_url, windows=False)
        if cached is not None and cached.models == models and cached.age_s() < REMEMBER_REFRESH_S:
            return cached
        got = Catalog(channel, base_url, time.time(), models)
        write_cache(got)
    except (ValueError, OSError, RecursionError):
        return None
    return got


def current(channel: ResolvedChannel, *, max_age_s: float, timeout_s: float = FETCH_TIMEOUT_S) -> Catalog:
    """The cached list when younger than ``max_age_s`` (and from the channel's current base URL), else
    ``refresh``. Raises CatalogError when a fetch is needed and fails."""
    cached = read_cache(channel.name, models_base(channel.roots))
    if cached is not None and cached.age_s() <= max_age_s:
        return cached
    return refresh(channel, timeout_s=timeout_s)


def cache_max_age_s() -> float:
    """How old a cache may be before ``conduit sync`` refreshes it: ``CONDUIT_MODELS_MAX_AGE_S`` seconds, default
    600 (10 minutes; the agent's prober refreshes it more often while it runs)."""
    try:
        return max(0.0, float(os.environ.get("CONDUIT_MODELS_MAX_AGE_S", "600")))
    except ValueError:
        return 600.0


__all__ = ["BODY_MAX_BYTES", "CACHE_MAX_BYTES", "Catalog", "CatalogError", "ModelInfo", "REMEMBER_REFRESH_S", "cache_max_age_s",
           "cache_path", "current", "fetch", "models_base", "parse_models", "read_cache", "read_windows", "refresh", "remember",
           "windows_path", "write_cache", "write_windows"]
