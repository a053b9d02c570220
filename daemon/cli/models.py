"""CLI: ``conduit models [CHANNEL]`` and the model-name check of ``conduit use`` (thin; the work is in
``conduit.daemon.catalog.models``).

The list comes from the channel's cache when it is fresh (the agent's prober refreshes it on each probe;
``CONDUIT_MODELS_MAX_AGE_S``, default 600 s), else from ``GET <openai base>/models`` now (3 s bound).
"""

from __future__ import annotations

import difflib
import json

import typer
from rich.markup import escape as esc

from conduit.daemon.catalog.models import Catalog, cache_max_age_s, current
from conduit.daemon.cli.app import state
from conduit.daemon.cli.console import make_console, shown
from conduit.daemon.config.profile import LoadedProfile, load_profile
from conduit.daemon.config.resolve import require_channel, resolve_channel
from conduit.errors import BadArguments, ConduitError

commands = typer.Typer()  # this module's commands; the root app loads them lazily (cli.commands.COMMANDS)

out = make_console()
err = make_console(stderr=True)


def catalog_for(profile: LoadedProfile, channel: str) -> Catalog:
    """The channel's model list: the cache when fresh, else fetched now.

    Raises:
        BadArguments: ``channel`` is not in the profile (exit 3). KeyError_: its key cannot be read.
        CatalogError: the list is needed and the server does not give it.
    """
    require_channel(profile, channel)
    return current(resolve_channel(profile, channel), max_age_s=cache_max_age_s())


@commands.command("models")
def models_cmd(
    channel: str | None = typer.Argument(None, help="The channel to list (default: the profile's channel)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> int:
    """List the models a channel serves, with each one's context length where the server says."""
    profile = load_profile(state.profile)
    name = channel or profile.model.channel
    cat = catalog_for(profile, name)
    if as_json:
        out.print_json(json.dumps({
            "channel": cat.channel, "base_url": cat.base_url, "fetched_at": cat.fetched_at,
            "models": [{"id": m.id, "context_window": m.context_window, "max_output_tokens": m.max_output_tokens}
                       for m in cat.models]}))
        return 0
    from rich.table import Table  # lazy for start-up speed

    table = Table("model", "context (tokens)", "max output (tokens)", title=f"{shown(name)}: "
                  f"{shown(cat.base_url)}/models ({cat.age_s():.0f} s old)")
    for m in cat.models:
        table.add_row(shown(m.id), str(m.context_window or "?"), str(m.max_output_tokens or "?"))
    out.print(table)
    if not cat.models:
        out.print(f"{shown(name)} lists no models")
    return 0


def check_model_name(profile: LoadedProfile, model: str, channel: str | None) -> None:
    """Refuse ``model`` when the channel's list is known and does not have it; warn in one line on stderr and
    go on when the list cannot be had (no answer, an empty list, a failing key source).

    Raises:
        BadArguments: the model is not in the list (exit 3), with "did you mean" for a close match.
    """
    name = channel or profile.model.channel
    if name not in profile.model.channels:
        return  # `conduit use` itself refuses the channel, with its own hint
    try:
        cat = catalog_for(profile, name)
    except ConduitError as exc:
        first = exc.message.splitlines()[0] if exc.message else type(exc).__name__
        err.print(f"[yellow]warning[/] cannot check `{esc(model)}` against the models of `{esc(name)}`: "
                  f"{esc(first)}; going on (--no-check skips the check)")
        return
    ids = [m.id for m in cat.models]
    if not ids:
        err.print(f"[yellow]warning[/] `{esc(name)}` lists no models; `{esc(model)}` not checked")
        return
    if model in ids:
        return
    close = difflib.get_close_matches(model, ids, n=1, cutoff=0.6)
    shown = ", ".join(ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
    raise BadArguments(f"model `{model}` is not among the models channel `{name}` lists ({cat.base_url}/models)",
                       (f"did you mean `{close[0]}`? " if close else f"it lists: {shown}; ")
                       + f"see `conduit models {name}`; --no-check skips this check")


__all__ = ["catalog_for", "check_model_name", "commands", "models_cmd"]
