"""The sync daemon's side of the model-list cache: when a new list means a sync.

The agent's prober (and ``conduit models``) store each channel's ``GET /models`` answer in
``<state dir>/models/<channel>.json`` (``conduit.daemon.catalog.models``); each sync reads it to give the tools
their context window and output limit (``conduit.daemon.catalog.context``). The daemon watches those files with
the profile, so a vLLM relaunched with another ``--max-model-len`` reaches the tools without a profile edit. A
write that changes no channel's models (the agent refreshes an unchanged list every minute, so ``conduit sync``
sees a fresh cache) costs nothing: only a different ``catalog_key`` costs one full sync.
"""

from __future__ import annotations

from pathlib import Path

from conduit.daemon.catalog.models import ModelInfo, cache_path, models_base, read_cache
from conduit.daemon.config.profile import LoadedProfile

CatalogKey = tuple[tuple[str, tuple[ModelInfo, ...] | None], ...]
"""Per channel of the profile (sorted by name): the models its cache lists (sorted by id: a gateway that lists
them in another order lists the same models), or None without a usable cache."""


def catalog_files(profile: LoadedProfile) -> set[Path]:
    """The cache file of every channel of ``profile`` (whether it exists yet or not)."""
    return {cache_path(name) for name in profile.model.channels}


def catalog_key(profile: LoadedProfile) -> CatalogKey:
    """What the caches of ``profile``'s channels list now (a cache from another base URL counts as none, as the
    sync reads it). Never raises: a damaged cache is None, as ``read_cache`` returns."""
    key = []
    for name in sorted(profile.model.channels):
        roots = profile.roots.get(name)
        cached = read_cache(name, models_base(roots)) if roots else None
        key.append((name, tuple(sorted(cached.models, key=lambda m: m.id)) if cached is not None else None))
    return tuple(key)


__all__ = ["CatalogKey", "catalog_files", "catalog_key"]
