"""What a bench is pointed at: a channel of the profile, or a base URL with a key source, as an ``Endpoint``;
and the warnings about settings that would make a sweep measure nothing useful.

Keys go through the profile's own key sources (``conduit.daemon.config.sources``), so they are cleaned and
refused exactly as ``conduit sync`` cleans and refuses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from conduit.adapters.base import AuthStyle, Protocol_
from conduit.daemon.bench.wire import Endpoint
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.resolve import require_channel, resolve_channel
from conduit.daemon.config.sources import KeySource
from conduit.daemon.config.sources import read_key as read_source
from conduit.errors import ProfileError


def channel_endpoint(profile_path: str | None, name: str,
                     protocol: Protocol_ | None = None) -> tuple[Endpoint, str]:
    """Look up channel ``name`` in the profile: (endpoint, the profile's model).

    The base URL is rendered for the protocol as the tools get it (``Root.openai_base()`` for OpenAI,
    ``Root.anthropic_base()`` for Anthropic); the key comes from the channel's key source, cleaned. Without
    ``protocol``, openai when the channel speaks it, else anthropic.

    Args:
        profile_path: the profile file, or None for the default (``conduit.daemon.config.profile``).

    Raises:
        ProfileError: no profile, no such channel, or the channel lacks the protocol; KeyError_: the key
            source fails.
    """
    profile = load_profile(profile_path)
    require_channel(profile, name)  # exit code 3, like every command given an unknown channel
    ch = resolve_channel(profile, name)
    proto: Protocol_ = protocol or ("openai" if "openai" in ch.roots else "anthropic")
    if proto not in ch.roots:
        raise ProfileError(f"{profile.path}: channel `{name}` does not speak the {proto} protocol",
                           hint=f"it speaks {', '.join(ch.roots)}; pass --protocol accordingly")
    root = ch.roots[proto]
    base = root.openai_base() if proto == "openai" else root.anthropic_base()
    return Endpoint(base, proto, ch.key, ch.auth), profile.model.model


def read_key(key_env: str | None, key_file: Path | None) -> str | None:
    """The key from ``$key_env`` or ``key_file`` through the shared key sources (cleaned), or None.

    Raises:
        KeyError_: the variable is unset/blank, the file cannot be read, or the key is refused.
    """
    if key_env:
        return read_source(KeySource(env=key_env)).key
    if key_file:
        return read_source(KeySource(file=str(key_file.expanduser().absolute()))).key
    return None


def url_endpoint(base_url: str, protocol: Protocol_, auth: AuthStyle | None, key_env: str | None,
                 key_file: Path | None) -> Endpoint:
    """An endpoint from a base URL and a key source (see ``read_key``; no source: no key).

    Raises:
        ConduitError: a bad base URL (``Endpoint``); KeyError_: from ``read_key``.
    """
    return Endpoint(base_url, protocol, read_key(key_env, key_file), auth)


def url_warnings(ep: Endpoint) -> list[str]:
    """Warnings about the two base-URL mistakes that make every request a 404 (cases C01/C02)."""
    tail = ep.base_url.rsplit("/", 1)[-1]
    out = []
    if ep.protocol == "anthropic" and tail == "v1":
        out.append(f"anthropic requests go to {ep.url}: give the root without /v1")
    if ep.protocol == "openai" and not (tail.startswith("v") and tail[1:2].isdigit()):
        out.append(f"openai requests go to {ep.url}: the base usually ends in /v1")
    return out


def level_warnings(requests: int, levels: Sequence[int]) -> list[str]:
    """A warning for each level larger than the requests per level: it never reaches its concurrency."""
    return [f"level {c} gets only {requests} requests: it never runs {c} at once" for c in levels if requests < c]


def vllm_gpus(profile_path: str | None, channel: str) -> tuple[int, str] | None:
    """(GPUs, where from) for a channel that is the supervised vLLM (the implicit ``local`` channel of
    ``[vllm]``): ``tensor_parallel_size x pipeline_parallel_size x data_parallel_size`` (each 1 when unset, as
    vLLM defaults them). None for any other channel or a profile without ``[vllm]``.

    Raises:
        ProfileError: the profile cannot be read (as ``channel_endpoint``).
    """
    profile = load_profile(profile_path)
    v = profile.vllm
    if v is None or channel not in profile.implicit_channels:
        return None
    tp, pp, dp = v.tensor_parallel_size or 1, v.pipeline_parallel_size or 1, v.data_parallel_size or 1
    return tp * pp * dp, (f"[vllm] tensor_parallel_size {tp} x pipeline_parallel_size {pp} x "
                          f"data_parallel_size {dp}")
