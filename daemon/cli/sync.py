"""CLI: ``conduit sync | doctor | use | restore | demo`` (thin: parse, call, print, return an exit code;
``init`` is ``conduit.daemon.cli.init``).

What ``sync`` and ``doctor`` print (``--json`` included) and the state file a plain ``sync`` writes pass through
the config layer's ``REDACTOR`` (``conduit.daemon.config.redaction``): every key resolved in this run is shown
as its fingerprint only.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

import typer
from rich.markup import escape as esc

from conduit.adapters.base import Env
from conduit.adapters.registry import ADAPTERS
from conduit.adapters.writer.backups import BackupStore
from conduit.daemon.catalog.context import refresh_stale
from conduit.daemon.catalog.models import cache_max_age_s, models_base, read_cache
from conduit.daemon.cli.app import state
from conduit.daemon.cli.console import make_console, print_diff
from conduit.daemon.config import paths
from conduit.daemon.config.edit import use_model
from conduit.daemon.config.profile import LoadedProfile, did_you_mean, load_profile
from conduit.daemon.config.redaction import REDACTOR, redact_data
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.sync.engine import SyncReport, sync
from conduit.daemon.sync.keyrest import rest_after_sync
from conduit.daemon.sync.lock import running_daemon_pid
from conduit.daemon.sync.state import read_state, record_report, write_state
from conduit.errors import BadArguments, ConduitError

commands = typer.Typer()  # this module's commands; the root app loads them lazily (cli.commands.COMMANDS)

out = make_console()
err = make_console(stderr=True)

_STYLE = {"changed": "green", "unchanged": "dim", "error": "red", "not_found": "yellow", "unsupported": "red",
          "disabled": "dim", "in_sync": "green", "drifted": "yellow", "not_managed": "dim", "not_synced": "yellow"}


@commands.command("sync")
def sync_cmd(
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the diffs; write nothing."),
    tool: list[str] = typer.Option(None, "--tool", help="Only this tool (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable report."),
    force: bool = typer.Option(False, "--force", help="Also take back the provider chosen in a tool's own window "
                               "(CC Switch), even when the profile's choice did not change."),
) -> int:
    """Rewrite every tool's config from the profile (merge, never clobber). Shows a diff per tool."""
    profile = load_profile(state.profile)
    resolver = Resolver(profile)
    for line in refresh_stale(resolver, tool or list(profile.model.tools), max_age_s=cache_max_age_s(),
                              offline=dry_run):  # a dry run makes no network request at all
        err.print(f"[yellow]note[/] {esc(line)}")  # bounded (3 s a channel); the sync goes on without it
    for line in unlisted_models(profile, tool or list(profile.model.tools)):
        err.print(f"[yellow]warning[/] {esc(line)}")
    report = sync(profile, tools=tool or None, dry_run=dry_run, force=force, resolver=resolver)
    if not dry_run:
        _record_without_daemon(report, "conduit sync", resolver)
    if as_json:
        out.print_json(json.dumps(redact_data(report_json(report, dry_run))))
    else:
        note = routing_note(resolver, tool or list(profile.model.tools))
        if note:
            out.print(f"[yellow]routing[/] {esc(note)}", soft_wrap=True)
        _print_sync(report, dry_run)
    return 0 if report.ok else 1


def routing_note(resolver: Resolver, tools: list[str]) -> str | None:
    """One line while the agent's decision routes tools to the ``[fallback]`` (``conduit.daemon.config.routing``):
    since when, why, and which tools now use which channel and model; None otherwise."""
    d = resolver.routing
    routed = [t for t in tools if resolver.fallback_route(t) is not None]
    route = d.route_for(resolver.profile) if d is not None else None
    if d is not None and route is None and d.applies_to(resolver.profile) and d.stale():
        return d.standing()  # a stale decision nobody stands behind: said, and not applied
    if d is None or route is None or not routed:
        return None
    return (f"{d.standing()} ({d.why}): {', '.join(routed)} use channel `{route.channel}`, model "
            f"`{route.model}` instead of `{resolver.profile.model.channel}` until the agent switches back")


def unlisted_models(profile: LoadedProfile, tools: list[str]) -> list[str]:
    """A line per (channel, model) the enabled ``tools`` use whose channel's cached model list (the agent's
    probe or ``conduit models`` keep it; read only, no request) is not empty and lacks the model: a typo in a
    hand edit is otherwise answered 404 by the gateway at the tool's first request. Only the cache is read."""
    prof = profile.model
    pairs: dict[tuple[str, str], None] = {}
    for name in tools:
        cfg = prof.tools.get(name)
        if cfg is None or not cfg.enabled:
            continue
        for model in (cfg.model or prof.model, cfg.small_model or prof.small_model):
            if model:
                pairs[(cfg.channel or prof.channel, model)] = None
    lines = []
    for channel, model in pairs:
        roots = profile.roots.get(channel)
        cached = read_cache(channel, models_base(roots)) if roots else None
        if cached is None or not cached.models or cached.find(model) is not None:
            continue
        close = difflib.get_close_matches(model, [m.id for m in cached.models], n=1, cutoff=0.6)
        lines.append(f"model `{model}` is not among the models channel `{channel}` lists ({cached.base_url}/models)"
                     + (f"; did you mean `{close[0]}`?" if close else "") + f" (`conduit models {channel}`)")
    return lines


def _record_without_daemon(report: SyncReport, trigger: str, resolver: Resolver | None = None) -> None:
    """Keep the state file (what `conduit status`, `doctor` and the agent read) current when no daemon owns it;
    ``trigger`` is the command (``conduit sync``, ``conduit use``), recorded as ``last_sync.trigger``. With the
    sync's ``resolver``, where each tool's key rests is recorded too, and a tool whose key moved to a reference
    has it taken out of its backups (``rest_after_sync``: whether or not a daemon runs)."""
    rests = rest_after_sync(report, resolver, Env()) if resolver is not None else None
    if running_daemon_pid() is not None:
        return  # the daemon keeps the state file; it sees these writes as its own tool-file events
    doc = read_state()
    record_report(doc, report, trigger, mask=REDACTOR, rests=rests)
    try:
        write_state(doc, redact=REDACTOR)
    except OSError:
        pass  # the sync itself succeeded; a state directory that cannot be written is not worth failing it


def report_json(report: SyncReport, dry_run: bool) -> dict[str, Any]:
    """A SyncReport as JSON-able data (diffs are already masked)."""
    return {
        "dry_run": dry_run,
        "ok": report.ok,
        "notices": report.notices,
        "tools": {
            t.tool: {
                "status": t.status,
                "message": t.message,
                "restart_hint": t.restart_hint,
                "files": [{"label": r.label, "path": str(r.path), "changed": r.changed, "diff": r.diff,
                           "error": r.error, "backup": str(r.backup) if r.backup else None, "notices": r.notices}
                          for r in t.results],
            }
            for t in report.tools
        },
    }


def _print_sync(report: SyncReport, dry_run: bool) -> None:
    # What normalization changed in the profile is said when it matters (a dry run, or a sync that wrote),
    # not on every no-op sync; `conduit doctor` always shows it.
    for notice in report.notices:
        placeholder = "looks like a placeholder" in notice  # said on every sync: every request would fail
        if dry_run or report.changed or placeholder:
            out.print(f"[yellow]{'warning' if placeholder else 'notice'}[/] {esc(notice)}", soft_wrap=True)
    said: dict[str, str] = {}  # a message shared by several tools (a key that cannot be read) is said once
    for t in report.tools:
        verb = {"changed": "would change" if dry_run else "updated"}.get(t.status, t.status.replace("_", " "))
        first = said.setdefault(t.message, t.display) if t.message else t.display
        same = f" (the same problem as {esc(first)}, above)" if first != t.display else ""
        out.print(f"[bold]{t.display}[/]: [{_STYLE.get(t.status, 'white')}]{verb}[/]{same}")
        if t.message and not same:
            out.print(f"  {REDACTOR(t.message)}", markup=False, soft_wrap=True)
        for r in t.results:
            if r.diff:
                print_diff(out, r.diff)
            for n in r.notices:
                out.print(f"  {r.label or r.path.name}: {n}", markup=False)
        if t.restart_hint and not dry_run:
            out.print(f"  [dim]restart may be needed: {esc(t.restart_hint)}[/]")


@commands.command("doctor")
def doctor_cmd(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable report."),
    live: bool = typer.Option(False, "--live", help="Also probe every channel now, read GPU memory and processes, "
                              "the vLLM state and its prefix-cache hit rate. Exit 0 only when all is healthy."),
    deep: bool = typer.Option(False, "--deep", help="Implies --live. Also send one tiny tool-call request per "
                              "channel and model the tools use (costs a few tokens on a hosted gateway)."),
    show_all: bool = typer.Option(False, "--all", help="Also list the tools the profile does not manage."),
    show_diff: bool = typer.Option(False, "--diff", help="Also print what a sync would change, as a diff."),
) -> int:
    """Per tool: file found, version, in sync or drifted, higher-precedence overrides, restart needs."""
    from conduit.daemon.cli.doctorview import print_doctor  # lazy for start-up speed, like the two below
    from conduit.daemon.sync.doctor import doctor as build_doctor

    report = build_doctor(state.profile, Env())
    live = live or deep
    if live:
        from conduit.daemon.agent.live import live_report

        report["live"] = live_report(state.profile, deep=deep)
        report["ok"] = report["ok"] and report["live"]["ok"]
    report = redact_data(json.loads(json.dumps(report, default=str)))
    if as_json:
        out.print_json(json.dumps(report))
        return 0 if report["ok"] else 1
    print_doctor(out, report, show_all=show_all, show_diff=show_diff)
    if live:
        _print_live(report["live"])
    return 0 if report["ok"] else 1


def _print_live(live: dict[str, Any]) -> None:
    from rich.table import Table  # lazy for start-up speed: `conduit sync` prints no table

    out.print(f"[bold]live checks[/] (via {'the agent' if live['source'] == 'agent' else 'direct probes'})")
    table = Table("channel", "protocol", "verdict", "latency", "details")
    for name, ch in (live.get("channels") or {}).items():
        for proto, p in (ch.get("protocols") or {}).items():
            verdict = p.get("verdict")
            lat = (p.get("latency_ms") or {}).get("last")
            details = p.get("message") or ""
            if p.get("working_base"):
                details += f" (works: {p['working_base']})"
            table.add_row(name, proto, f"[{'green' if verdict == 'ok' else 'red'}]{verdict}[/]",
                          f"{lat:.0f} ms" if lat is not None else "-", esc(details))
    out.print(table)
    gpus = live.get("gpus") or {}
    if gpus.get("gpus"):
        for g in gpus["gpus"]:
            free, total = g.get("free_bytes"), g.get("total_bytes")
            procs = ", ".join(f"{p.get('pid')}{' (vLLM)' if p.get('vllm') else ''}" for p in g.get("processes") or [])
            out.print(f"GPU {g.get('index')} {g.get('name')}: "
                      + (f"{free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB" if free and total else "memory unknown")
                      + (f"; processes: {procs}" if procs else ""))
    else:
        out.print(f"GPUs: none ({gpus.get('reason')})", markup=False)
    host = live.get("host") or {}
    if host.get("total_bytes"):
        out.print(f"host memory: {host['available_bytes'] / 2**30:.1f} GiB available of {host['total_bytes'] / 2**30:.1f} GiB")
    vllm = live.get("vllm") or {}
    line = f"vLLM: {vllm.get('state')}"
    if vllm.get("note"):
        line += f" ({vllm['note']})"
    out.print(line, soft_wrap=True, markup=False)
    pc = live.get("prefix_cache")
    if pc:
        out.print(f"prefix-cache hit rate: {pc['hit_rate']:.0%}" + (f" (low: {pc['hint']})" if pc["low"] else ""))
    from conduit.daemon.cli.kvtierview import kv_tier_lines

    for kv_line in kv_tier_lines(live.get("kv_tier")):
        out.print(kv_line, markup=False, highlight=False)
    if "tool_calls" in live:
        from conduit.daemon.cli.toolcalls import print_tool_calls

        print_tool_calls(out, live["tool_calls"])
    for p in live["problems"]:
        out.print(f"[red]problem[/] {esc(p)}", soft_wrap=True)
    out.print("[green]live: healthy[/]" if live["ok"] else "[red]live: not healthy[/]")


@commands.command("use")
def use_cmd(
    model: str = typer.Argument(..., help="The model every tool should use."),
    channel: str | None = typer.Option(None, "--channel", help="Also switch every tool to this channel."),
    small_model: str | None = typer.Option(None, "--small-model", help="Also set the background model (Claude "
                                           "Code's haiku slot); \"\" removes it, so the tools use MODEL."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would change; write nothing, ask no gateway."),
    no_sync: bool = typer.Option(False, "--no-sync", help="Only edit the profile."),
    no_check: bool = typer.Option(False, "--no-check", help="Do not check MODEL against the channel's model list."),
) -> int:
    """Switch the model (and optionally the channel) in the profile, keeping its comments, then sync.

    ``--small-model`` sets the background model too; a background model of another vendor is said, with the
    choices the channel's cached model list offers."""
    from conduit.daemon.cli.smallmodel import small_model_advice  # lazy: only `use` reads the model cache

    current = load_profile(state.profile)
    small = current.model.small_model if small_model is None else small_model
    advice = small_model_advice(current, model, channel, small or None)
    if dry_run:
        out.print(f"would set model = {model} (now {current.model.model})" + (f", channel = {channel}" if channel else "")
                  + (f", small_model = {small or '(none)'}" if small_model is not None else "")
                  + f" in {current.path}", markup=False)
        for line in advice:
            out.print(f"[yellow]warning[/] {esc(line)}")
        return 0
    if not no_check:
        from conduit.daemon.cli.models import check_model_name  # lazy: only `use` needs the catalog

        check_model_name(current, model, channel)
    profile, warnings = use_model(state.profile, model, channel, small_model=small_model)
    out.print(f"profile: model = {profile.model.model}" + (f", channel = {channel}" if channel else "")
              + (f", small_model = {profile.model.small_model or '(none)'}" if small_model is not None else "")
              + f" ({profile.path})", markup=False)
    for w in [*warnings, *advice]:
        out.print(f"[yellow]warning[/] {esc(w)}")
    if no_sync:
        return 0
    resolver = Resolver(profile)
    report = sync(profile, resolver=resolver)
    _record_without_daemon(report, "conduit use", resolver)
    _print_sync(report, dry_run=False)
    return 0 if report.ok else 1


@commands.command("restore")
def restore_cmd(
    tool: str = typer.Argument(..., help=f"Tool whose files to restore: {', '.join(ADAPTERS)}."),
    list_only: bool = typer.Option(False, "--list", help="List the backups instead of restoring."),
    backup_id: str | None = typer.Option(None, "--id", help="Restore this backup (default: the newest)."),
    as_json: bool = typer.Option(False, "--json", help="With --list: machine-readable output."),
) -> int:
    """Restore a tool's files from conduit's backups (the restore itself is backed up, so it can be undone)."""
    if tool not in ADAPTERS:
        raise BadArguments(f"unknown tool `{tool}`", did_you_mean(tool, ADAPTERS))
    store = BackupStore(paths.backups_dir())
    if list_only:
        from rich.table import Table  # lazy for start-up speed: `conduit sync` prints no table

        backups = store.list(tool)
        if as_json:
            out.print_json(json.dumps({"tool": tool, "backups": [
                {"id": b.id, "created": b.created.isoformat(), "path": str(b.path), "size": b.size, "kind": b.kind}
                for b in backups]}))
            return 0
        if not backups:
            out.print(f"no backups for {tool} in {paths.backups_dir() / tool}")
            return 0
        table = Table("id", "created (UTC)", "file", "bytes")
        table.columns[0].no_wrap = True  # the id is copied into --id
        for b in backups:
            table.add_row(b.id, b.created.strftime("%Y-%m-%d %H:%M:%S"), str(b.path), str(b.size))
        out.print(table)
        return 0
    for p in store.restore(tool, backup_id):
        out.print(f"restored {p}")
    _warn_if_managed(tool)
    return 0


def _warn_if_managed(tool: str) -> None:
    """After a restore: a running sync daemon still manages ``tool`` from the profile, so it reports the restored
    file as drift or (``on_drift = "reapply"``) writes the profile back within a second; say how to keep it."""
    pid = running_daemon_pid()
    if pid is None:
        return
    try:
        profile = load_profile(state.profile)
    except ConduitError:
        return
    cfg = profile.model.tools.get(tool)
    if cfg is None or not cfg.enabled:
        return
    what = "writes the profile back over it" if profile.model.on_drift == "reapply" else "reports it as drift"
    err.print(f"[yellow]warning[/] the sync daemon (pid {pid}) still manages {tool} and {what}; to keep the "
              f"restored file, set `enabled = false` in {esc(f'[tools.{tool}]')} (the daemon follows the profile)")


@commands.command("demo")
def demo_cmd(keep: bool = typer.Option(False, "--keep", help="Keep the temporary HOME afterwards.")) -> int:
    """Run the main job end to end in a throwaway HOME (real-format configs of all three tools)."""
    from conduit.daemon.cli.demo import run_demo

    return run_demo(keep=keep)
