"""The context window and output limit each tool is given: the profile's ``[tools.X] context_window`` /
``max_output_tokens`` win, else what the cached model list of the tool's channel says for its model.

Who owns a limit value in a tool's file is recorded in ``state_dir()/limits.json`` (0600, no key): ``{tool: {file
path: {slot: {"wrote": V, "had": U}}}}`` (``conduit.adapters.limits``). ``with_context`` hands the tool's
records to the adapter; the engine calls ``remember_limits`` after writing, which keeps the new records of the
files written without error (never in a dry run). A missing or damaged record file is an empty one: no value
in a tool's file is then taken for conduit's, so none is removed.

The sync engine calls ``with_context`` once per tool, right after the resolver built its ``ToolSettings``, so
the channel and model looked up are whatever the settings ended with (a fallback route included). It reads
only the cache (``conduit.daemon.catalog.models``): a sync never waits on the network. ``refresh_stale`` is the
bounded refresh ``conduit sync`` runs before it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from conduit.adapters.base import ToolSettings
from conduit.adapters.limits import LimitLedger
from conduit.adapters.registry import ADAPTERS
from conduit.adapters.writer.results import WriteResult
from conduit.daemon.catalog.models import FETCH_TIMEOUT_S, CatalogError, models_base, read_cache, refresh
from conduit.daemon.config.paths import state_dir
from conduit.daemon.config.profile import LoadedProfile
from conduit.daemon.config.resolve import Resolver
from conduit.errors import ConduitError
from conduit.fileio import atomic_write, locked, make_private_dirs, read_regular_file
from conduit.text import one_line, safe_number

LIMITS_MAX_BYTES = 4 << 20
"""Cap on ``limits.json`` (bytes); a real one is a few hundred bytes."""

DERIVED_OUTPUT_CAP = 32768
"""The most output tokens ``derived_output`` grants, whatever the context (tokens)."""


def derived_output(context_window: int) -> int:
    """The output limit given when only the context is known (vLLM's ``/models`` has ``max_model_len`` and no
    output figure): a quarter of the context, at least 1, at most ``DERIVED_OUTPUT_CAP``. Why: tools otherwise
    send their own default ``max_tokens`` (OpenCode 32000, Continue and Cline theirs), which vLLM refuses with
    HTTP 400 once it exceeds ``max_model_len`` minus the prompt; a quarter leaves three quarters for the prompt,
    and the cap keeps a 1M-token model from reserving a quarter million for output. Tokens in, tokens out."""
    return max(1, min(context_window // 4, DERIVED_OUTPUT_CAP))


def with_context(settings: ToolSettings, profile: LoadedProfile) -> ToolSettings:
    """``settings`` with ``context_window`` and ``max_output_tokens`` filled: each from ``[tools.<tool>]`` when
    set there, else from the cached ``/models`` entry for ``(settings.channel, settings.model)``, else None; an
    output limit still unknown while the context is known is ``derived_output(context)``. Never raises (no
    cache, a damaged cache or a model it does not list: the field stays None)."""
    cfg = profile.model.tools.get(settings.tool)
    ctx = cfg.context_window if cfg is not None else None
    out = cfg.max_output_tokens if cfg is not None else None
    if ctx is None or out is None:
        roots = profile.roots.get(settings.channel)
        cached = read_cache(settings.channel, models_base(roots)) if roots else None
        entry = cached.find(settings.model) if cached is not None else None
        if entry is not None:
            ctx = ctx if ctx is not None else entry.context_window
            out = out if out is not None else entry.max_output_tokens
    out = _room_for_the_prompt(ctx, out, mine=cfg is not None and cfg.max_output_tokens is not None)
    ledger = LimitLedger(before=_read_limits().get(settings.tool, {}))
    return dataclasses.replace(settings, context_window=ctx, max_output_tokens=out, limits=ledger)


def _room_for_the_prompt(ctx: int | None, out: int | None, *, mine: bool) -> int | None:
    """The output limit written beside the context ``ctx``: ``derived_output(ctx)`` when only the context is known,
    and also when the output would leave the prompt half the context or less (a gateway listing
    ``max_completion_tokens`` equal to the context gave Aider ``max_input_tokens = 1`` and Continue a prompt
    budget of 0); an output limit the profile sets (``mine``) is kept unless it is the whole context or more."""
    if ctx is None:
        return out
    if out is None or out >= ctx or (not mine and out > ctx // 2):
        return derived_output(ctx)
    return out


def limits_path() -> Path:
    """``state_dir()/limits.json``: what conduit wrote last into each tool's limit keys."""
    return state_dir() / "limits.json"


def _read_limits() -> dict[str, Any]:
    """The whole record file as ``{tool: {path: {slot: record}}}``; ``{}`` when missing, unreadable or damaged
    (only well-formed records are kept)."""
    try:
        data = json.loads(read_regular_file(limits_path(), max_bytes=LIMITS_MAX_BYTES, what="limits record"))
    except (OSError, ConduitError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {tool: {p: {k: r for k, r in slots.items() if _sane_record(r)}
                   for p, slots in files.items() if isinstance(slots, dict)}
            for tool, files in data.items() if isinstance(files, dict)}


RECORD_MAX_FIGURE = 1 << 40
"""The largest figure a limit record may hold (tokens); anything else in ``limits.json`` is not a record."""


def _sane_value(value: Any) -> bool:
    """A value a limit slot may be given back: a whole number in ``[0, RECORD_MAX_FIGURE]``, a boolean, or a
    one-line string of at most 200 characters without control characters (a state file is outside text)."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return safe_number(value, low=0, high=RECORD_MAX_FIGURE, integer=True) is not None
    return isinstance(value, str) and len(value) <= 200 and one_line(value) == value


def _sane_record(rec: Any) -> bool:
    """``{"wrote": V}`` or ``{"wrote": V, "had": U}`` with sane values, ``U`` of the same kind as ``V`` (a
    figure's slot never gets words or a float back: hostile values are not written into a tool's file)."""
    if not isinstance(rec, dict) or "wrote" not in rec or not _sane_value(rec["wrote"]):
        return False
    if "had" not in rec:
        return True
    return _sane_value(rec["had"]) and _kind(rec["had"]) is _kind(rec["wrote"])


def _kind(value: Any) -> type:
    """``bool`` for booleans (``True`` is not ``1`` here), else the value's type."""
    return bool if isinstance(value, bool) else type(value)


def remember_limits(settings: ToolSettings, results: Iterable[WriteResult], *, dry_run: bool) -> None:
    """Save the records ``settings.limits`` collected for the files in ``results`` written without an error;
    nothing in a dry run or when nothing changed. A failure to save is not fatal (the values conduit wrote are
    then taken for the person's and kept)."""
    ledger = settings.limits
    if dry_run or ledger is None:
        return
    done = {str(r.path) for r in results if r.error is None}
    new = ledger.records(done)
    path = limits_path()
    if _read_limits().get(settings.tool, {}) == new:
        return  # nothing to save: no lock file either (a sync that wrote nothing leaves the disk as it was)
    try:
        make_private_dirs(path.parent)
        # the daemon and a one-shot `conduit sync` may save at once: the file is re-read and replaced under a
        # lock, so one tool's records never erase another's
        with locked(path.with_name(path.name + ".lock"), timeout_s=5.0):
            every = _read_limits()
            if every.get(settings.tool, {}) == new:
                return
            every[settings.tool] = new
            atomic_write(path, (json.dumps({t: f for t, f in every.items() if f}, indent=1, sort_keys=True)
                                + "\n").encode("utf-8"), 0o600)
    except OSError:  # TimeoutError included: the records stay as they were
        pass


def refresh_stale(resolver: Resolver, tools: Iterable[str], *, max_age_s: float,
                  timeout_s: float = FETCH_TIMEOUT_S, offline: bool = False) -> list[str]:
    """Refresh the cached model list of each channel ``tools`` use (those whose adapter ``writes_context``)
    when it is missing or older than ``max_age_s`` (one bounded fetch per channel, ``timeout_s`` each). Returns one line per channel that could
    not be refreshed (the sync then goes on with the old cache or none); never raises, never names a key.
    ``offline`` (``conduit sync --dry-run``): no request at all; a missing or stale cache is only said."""
    profile = resolver.profile
    names = dict.fromkeys(resolver.tool_channel_name(t) for t in tools
                          if t in profile.model.tools and profile.model.tools[t].enabled
                          and t in ADAPTERS and ADAPTERS[t].writes_context)
    problems = []
    for name in names:
        roots = profile.roots.get(name)
        cached = read_cache(name, models_base(roots)) if roots else None
        if cached is not None and cached.age_s() <= max_age_s:
            continue
        if offline:
            age = "not cached yet" if cached is None else f"{cached.age_s() / 60:.0f} min old"
            problems.append(f"model list of `{name}` {age}; a dry run sends nothing, so context settings use "
                            + ("that cache" if cached else "the profile's values only")
                            + f" (`conduit models {name}` refreshes it)")
            continue
        try:
            refresh(resolver.channel(name), timeout_s=timeout_s)
        except CatalogError as exc:
            problems.append(f"model list of `{name}` not refreshed ({exc.message}); context settings use "
                            + ("the cache from before" if cached else "the profile's values only"))
        except (ConduitError, KeyError):  # a failing key source or an undefined channel: the tool's report says
            continue
    return problems


__all__ = ["DERIVED_OUTPUT_CAP", "derived_output", "limits_path", "refresh_stale", "remember_limits", "with_context"]
