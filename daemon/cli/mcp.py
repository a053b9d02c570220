"""CLI: ``conduit mcp list | add | rm`` (thin: the view is ``conduit.daemon.sync.mcpview``, the profile edit
``conduit.daemon.config.mcpedit``, the write the sync engine). No value of a server's ``env`` or ``headers`` is
ever printed; what is printed passes through the ``REDACTOR``."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape as esc
from rich.table import Table

from conduit.adapters.base import Env
from conduit.adapters.registry import ADAPTERS
from conduit.daemon.cli.app import state
from conduit.daemon.cli.console import make_console
from conduit.daemon.cli.sync import _print_sync, _record_without_daemon
from conduit.daemon.config.mcpedit import add_server, remove_server
from conduit.daemon.config.profile import LoadedProfile, load_profile
from conduit.daemon.config.redaction import redact_data
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.sync.engine import sync
from conduit.daemon.sync.mcpprobe import Listing, probe_listing
from conduit.daemon.sync.mcpview import McpView, mcp_view
from conduit.errors import BadArguments

commands = typer.Typer(suggest_commands=False)  # loaded lazily by the root app (cli.commands.COMMANDS); click
# itself says "Did you mean" for a mistyped subcommand, and typer's own suggestion (inherited by sub-apps) repeats it

mcp_app = typer.Typer(
    name="mcp",
    help="List, add and remove the MCP servers the profile gives the tools (conduit mcp list shows, per tool, "
    "whether it will load each one).",
    no_args_is_help=True,
)
commands.add_typer(mcp_app, name="mcp")

out = make_console()

_STYLE = {"written": "green", "overridden": "yellow", "drifted": "yellow", "not_written": "yellow",
          "disabled_by_tool": "yellow", "persons": "cyan"}
_WORDS = {"written": "written", "overridden": "overridden by a project file", "drifted": "changed by hand (drift)",
          "not_written": "not written yet", "disabled_by_tool": "disabled by the tool", "persons": "the person's own",
          "disabled": "disabled in the profile", "excluded": "not for this tool", "transport": "transport not supported"}


@mcp_app.command("list")
def list_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    probe: Annotated[bool, typer.Option("--probe", help="Also ask each installed tool's own listing command "
                                        "(claude mcp list, ...) which servers it sees, 60 s at most each.")] = False,
) -> int:
    """Each MCP server of the profile against each tool: written, overridden by a project file, disabled, ..."""
    profile = load_profile(state.profile)
    env = Env()
    view = mcp_view(profile, env)
    listings = _probe(view, env) if probe else {}
    if as_json:
        data = view.as_dict()
        if probe:
            data["listed"] = {t: {"seen": sorted(x.seen), "problem": x.problem} for t, x in listings.items()}
        out.print_json(json.dumps(redact_data(data)))
        return 0
    if not view.servers:
        out.print("no MCP servers in the profile (add one: conduit mcp add NAME -- COMMAND ARGS)")
    tools = [t for t in profile.model.tools if t in ADAPTERS and ADAPTERS[t].mcp is not None]
    if view.servers:
        table = Table("server", "transport", *(ADAPTERS[t].display_name for t in tools))
        for name, row in view.servers.items():
            cells = []
            for t in tools:
                cell = row["tools"][t]
                cells.append(f"[{_STYLE.get(cell.state, 'dim')}]{esc(_WORDS.get(cell.state, cell.state))}[/]")
            table.add_row(esc(name), row["transport"], *cells)
        out.print(table)
        for name, row in view.servers.items():
            for t, cell in row["tools"].items():
                if cell.state in ("overridden", "drifted", "not_written") and cell.detail:
                    out.print(f"  {name} in {ADAPTERS[t].display_name}: {cell.detail}", markup=False, soft_wrap=True)
    if view.no_mcp:
        names = ", ".join(ADAPTERS[t].display_name for t in view.no_mcp)
        out.print(f"[dim]no MCP support (nothing written): {esc(names)}[/]")
    for t, listing in listings.items():
        wanted = [n for n, row in view.servers.items() if row["tools"][t].state == "written"]
        missing = [n for n in wanted if n not in listing.seen]
        said = listing.problem or (f"does not list {', '.join(missing)}" if missing else "lists every server")
        out.print(f"{ADAPTERS[t].display_name}: {said}", markup=False)
    return 0


def _probe(view: McpView, env: Env) -> dict[str, Listing]:
    """Each tool's listing command, for the tools some server is written to (``probe_listing``)."""
    tools = dict.fromkeys(t for row in view.servers.values() for t, c in row["tools"].items() if c.state == "written")
    return {t: probe_listing(t, list(view.servers), env) for t in tools
            if (support := ADAPTERS[t].mcp) is not None and support.list_argv}


@mcp_app.command("add")
def add_cmd(
    name: Annotated[str, typer.Argument(help="The server's name ([mcp.servers.NAME]).")],
    command: Annotated[list[str] | None, typer.Argument(help="After --: the command and its arguments.")] = None,
    url: Annotated[str | None, typer.Option("--url", help="A streamable HTTP server instead of a command.")] = None,
    tool: Annotated[list[str] | None, typer.Option("--tool", help="Only this tool (repeatable).")] = None,
    no_sync: Annotated[bool, typer.Option("--no-sync", help="Only edit the profile.")] = False,
) -> int:
    """Add an MCP server to the profile (comments kept), then sync: conduit mcp add NAME -- COMMAND ARGS."""
    if bool(command) == bool(url):
        raise BadArguments("give a command after `--` or --url (one of them)" if not command else
                           "give either a command after `--` or --url, not both",
                           "conduit mcp add NAME -- /path/to/server ARGS, or conduit mcp add NAME --url URL")
    profile = add_server(state.profile, name, command=command[0] if command else None,
                         args=command[1:] if command else (), url=url, tools=tool)
    out.print(f"profile: added [mcp.servers.{name}] ({profile.path})", markup=False)
    return 0 if no_sync else _sync(profile)


@mcp_app.command("rm")
def rm_cmd(
    name: Annotated[str, typer.Argument(help="The server's name.")],
    no_sync: Annotated[bool, typer.Option("--no-sync", help="Only edit the profile.")] = False,
) -> int:
    """Remove an MCP server from the profile, then sync: it goes only from tools where the entry is still
    conduit's."""
    profile = remove_server(state.profile, name)
    out.print(f"profile: removed [mcp.servers.{name}] ({profile.path})", markup=False)
    return 0 if no_sync else _sync(profile)


def _sync(profile: LoadedProfile) -> int:
    resolver = Resolver(profile)
    report = sync(profile, resolver=resolver)
    _record_without_daemon(report, "conduit mcp", resolver)
    _print_sync(report, dry_run=False)
    return 0 if report.ok else 1
