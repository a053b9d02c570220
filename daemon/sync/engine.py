"""The sync engine: profile -> per-tool settings -> adapter targets -> the one writer.

One tool's failure (a file that cannot be parsed, a key source that fails, a tool that is not installed, a
``[tools.<name>]`` table whose channel does not speak the tool's protocol) is reported for that tool and the
other tools are still synced. Nothing is written when nothing changed.

A tool whose own window can choose the provider (``keeps_user_choice``: CC Switch) is told to take the choice
back (``take_current``) only when the profile's channel for it changed since the last sync that wrote it, or
with ``force``; a fallback routing switch alone (``[fallback]``) takes it only from conduit's own rows. That memory
is ``state_dir()/choices.json``, ``{"tool": "channel", "tool.routed": "fallback channel"}`` (the second only while
routed), written after each sync that is not a dry run.

The ``[fallback]`` route's own values (its small model, its channel's timeout) must go when tools switch back,
even when ``limits.json`` (who wrote each limit value) was lost or damaged meanwhile: for a tool that follows the
fallback, each sync also renders both routes in memory (``route_values``) and hands the adapter's ledger what
only the fallback writes (``LimitLedger.derived``); such a value found without a record is conduit's.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from conduit.adapters.base import (
    FROM_CONDUIT,
    Adapter,
    Env,
    NotFound,
    TakeCurrent,
    TextTarget,
    ToolSettings,
    Unsupported,
)
from conduit.adapters.limits import LimitLedger
from conduit.adapters.registry import ADAPTERS
from conduit.adapters.writer.apply import Writer, WriteResult
from conduit.adapters.writer.backups import BackupStore
from conduit.daemon.catalog.context import remember_limits, with_context
from conduit.daemon.config import paths
from conduit.daemon.config.firstuse import is_placeholder_url, placeholder_message
from conduit.daemon.config.profile import LoadedProfile
from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.config.routing import decision
from conduit.daemon.sync.mcpstate import remember_mcp, with_mcp
from conduit.errors import BadArguments, ConduitError
from conduit.fileio import atomic_write, make_private_dirs
from conduit.text import one_line

Status = Literal["changed", "unchanged", "error", "not_found", "unsupported", "disabled"]


@dataclass
class ToolReport:
    """What a sync did to one tool.

    Attributes:
        tool: registry name; display: the tool's name for people.
        status: ``changed`` / ``unchanged`` / ``error`` / ``not_found`` / ``unsupported`` / ``disabled``.
        results: one WriteResult per file or database (diffs already masked).
        message: the reason for error/not_found/unsupported, or None (``not_found``: one short line,
            ``absent_line``).
        restart_hint: what to do for the tool to see the change (only when something changed).
        detail: for ``not_found``, the adapter's whole explanation (every path looked at, its other ways to
            create the tool's files); None otherwise.
    """

    tool: str
    display: str
    status: Status
    results: list[WriteResult] = field(default_factory=list)
    message: str | None = None
    restart_hint: str | None = None
    detail: str | None = None


@dataclass
class SyncReport:
    """The outcome of one sync: per-tool reports plus the profile's normalization notices."""

    tools: list[ToolReport]
    notices: list[str]

    @property
    def ok(self) -> bool:
        """True when no enabled tool failed (not_found is not a failure: the tool is simply absent)."""
        return all(t.status not in ("error", "unsupported") for t in self.tools)

    @property
    def changed(self) -> bool:
        """True when any file was (or, in a dry run, would be) changed."""
        return any(t.status == "changed" for t in self.tools)


def sync(
    profile: LoadedProfile,
    *,
    tools: Iterable[str] | None = None,
    dry_run: bool = False,
    env: Env | None = None,
    backups: BackupStore | None = None,
    environ: Mapping[str, str] | None = None,
    resolver: Resolver | None = None,
    force: bool = False,
) -> SyncReport:
    """Bring every enabled tool (or only ``tools``) in line with ``profile``.

    Args:
        profile: a validated profile.
        tools: registry names to sync; None means every ``[tools.<name>]`` table.
        dry_run: compute diffs, write nothing, take no backups.
        env: where tools' files are found (HOME, CLAUDE_CONFIG_DIR, ...); default: this process.
        backups: where backups go; default: the state directory.
        environ: environment for ``env`` key sources; default: this process.
        resolver: reuse the keys another sync of the same profile already read (a ``command`` source such as
            ``op read`` may prompt to unlock on every run); default: read them now.
    Raises:
        ConduitError: a name in ``tools`` that is not in the profile.
    """
    env = env or Env()
    wanted = list(profile.model.tools) if tools is None else list(tools)
    for name in wanted:
        if name not in profile.model.tools:
            known = ", ".join(profile.model.tools) or "none"
            raise BadArguments(f"tool `{name}` is not in {profile.path}", f"tools in the profile: {known}; "
                               f"add a [tools.{name}] table to sync it" if name in ADAPTERS else
                               f"known tools: {', '.join(ADAPTERS)}")
    resolver = resolver if resolver is not None and resolver.profile is profile else Resolver(profile, environ)
    enabled = [t for t, cfg in profile.model.tools.items() if cfg.enabled]
    secrets = _known_secrets(resolver, list(dict.fromkeys([*wanted, *enabled]))) + sorted(REDACTOR.secrets)
    writer = Writer(backups or BackupStore(paths.backups_dir()), dry_run=dry_run, secrets=secrets)
    choices = _read_choices()
    reports = [_sync_tool(name, resolver, writer, env, take=True if force else _take(choices, name, resolver))
               for name in wanted]
    if not dry_run:
        _write_choices(choices, reports, resolver)
    notices = list(profile.notices) + placeholder_models(profile, wanted)
    for cname in {resolver.tool_channel_name(t) for t in wanted}:
        try:
            notices += [n for n in resolver.channel(cname).notices if n not in notices]
        except (ConduitError, KeyError):  # said once, in the tool's report (a failing key, an undefined channel)
            pass
    return SyncReport(tools=reports, notices=notices)


def _known_secrets(resolver: Resolver, tools: list[str]) -> list[str]:
    """Every key the profile resolves for ``tools`` (every enabled tool, not only those synced now: a tool's file
    may hold another channel's key in a line a diff shows), so the writer masks them in any diff or message. The process-wide ``REDACTOR`` adds the keys and key-like flag values read elsewhere."""
    keys = []
    names = dict.fromkeys([resolver.profile.model.channel, *(resolver.tool_channel_name(t) for t in tools)])
    for cname in names:
        try:
            key = resolver.channel(cname).key
        except (ConduitError, KeyError):  # a failing key source, or a channel the profile lacks
            continue
        if key:
            keys.append(key)
    return keys


_PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.|x{3,}|(?:your|my)[-_ ]?model(?:[-_ ]?(?:name|id))?|"
                          r"model[-_ ]?(?:name|id)", re.IGNORECASE)
_PLACEHOLDER_CASED = re.compile(r"[A-Z]+(?:[-_][A-Z]+)+")  # MODEL-NAME, YOUR_MODEL: capitals only, as in docs


def is_placeholder(text: str) -> bool:
    """``text`` has the shape of a documentation placeholder (``MODEL-NAME``, ``<model>``, ``your-model``,
    ``...``), not of a model id."""
    if not text:
        return False
    return _PLACEHOLDER_CASED.fullmatch(text) is not None or (text.lower() == text
                                                              and _PLACEHOLDER.fullmatch(text) is not None)


def placeholder_models(profile: LoadedProfile, tools: Iterable[str]) -> list[str]:
    """A warning per model id that looks like a documentation placeholder (``MODEL-NAME``, ``<model>``,
    ``your-model``, ``...``) in ``model``, ``small_model`` or a tool's override: a gateway answers it with 404.
    Sources of the shapes: the placeholders of gateway docs copied into profiles."""
    found: dict[str, str] = {}
    named = [("model", profile.model.model), ("small_model", profile.model.small_model)]
    for t in tools:
        cfg = profile.model.tools.get(t)
        if cfg is not None:
            named += [(f"tools.{t}.model", cfg.model), (f"tools.{t}.small_model", cfg.small_model)]
    for key, value in named:
        text = str(value) if value else ""
        if is_placeholder(text) and text not in found:
            found[text] = key
    return [f"{key} = \"{text}\" looks like a placeholder, not a model id: put the id the gateway lists "
            f"(GET /v1/models), e.g. with `conduit use MODEL`" for text, key in found.items()]


def choices_path() -> Path:
    """``state_dir()/choices.json``: the channel each ``keeps_user_choice`` tool was last synced to."""
    return paths.state_dir() / "choices.json"


def _read_choices() -> dict[str, str] | None:
    """The remembered channels; ``{}`` when none was ever written, None when the file is there but unreadable
    (then nothing is known, and a provider the user picked must not be taken back on a guess)."""
    try:
        data = json.loads(choices_path().read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else None


_ROUTED = ".routed"  # choices.json key suffix: the fallback channel a tool was last synced to, while routed there


def _profile_channel(resolver: Resolver, name: str) -> str:
    """The channel the profile gives ``name`` (its ``[tools.X] channel``, else the profile's), never the fallback
    route: a routing switch is not the user's choice changing."""
    cfg = resolver.profile.model.tools.get(name)
    return (cfg.channel if cfg and cfg.channel else None) or resolver.profile.model.channel


def _take(choices: dict[str, str] | None, name: str, resolver: Resolver) -> TakeCurrent:
    """The ``take_current`` value for ``name``: True when the profile's channel for it differs from the one
    remembered (or none is); ``(FROM_CONDUIT, profile's channel, route before, route now)`` when only the fallback
    routing moved it (another routed channel, or back to the profile's); False when nothing changed or the record
    is unreadable (``choices`` None)."""
    if choices is None:
        return False
    own = _profile_channel(resolver, name)
    if choices.get(name) != own:
        return True
    before, now = choices.get(name + _ROUTED, own), resolver.tool_channel_name(name)
    return (FROM_CONDUIT, own, before, now) if before != now else False


def _write_choices(choices: dict[str, str] | None, reports: list[ToolReport], resolver: Resolver) -> None:
    """Remember the channel of each ``keeps_user_choice`` tool that synced (an unreadable record is replaced);
    a failure to write is not fatal (the next sync then takes the choice back once, as a first sync does)."""
    new = dict(choices or {})
    for r in reports:
        if ADAPTERS[r.tool].keeps_user_choice and r.status in ("changed", "unchanged"):
            new[r.tool] = own = _profile_channel(resolver, r.tool)
            routed = resolver.tool_channel_name(r.tool)
            if routed != own:
                new[r.tool + _ROUTED] = routed
            else:
                new.pop(r.tool + _ROUTED, None)
    if new == choices:
        return
    try:
        make_private_dirs(choices_path().parent)
        atomic_write(choices_path(), (json.dumps(new, indent=2, sort_keys=True) + "\n").encode("utf-8"), 0o600)
    except OSError:
        pass


def _sync_tool(name: str, resolver: Resolver, writer: Writer, env: Env, *,
               take: TakeCurrent = True) -> ToolReport:
    adapter = ADAPTERS[name]
    report = ToolReport(tool=name, display=adapter.display_name, status="unchanged")
    if not resolver.profile.model.tools[name].enabled:
        report.status = "disabled"
        return report
    try:
        settings = resolver.tool_settings(name)
        settings = with_mcp(with_context(settings, resolver.profile))  # context: [tools.X]/models; MCP owners
        settings = _with_derived(settings, route_values(name, resolver, env))
        held = next((m for m in (settings.model, settings.small_model) if m and is_placeholder(m)), None)
        if held is not None:  # e.g. `conduit init`'s MODEL-NAME: a tool that worked must not be broken by it
            report.status = "error"
            report.message = (f"model `{held}` is a placeholder, not a model id: nothing written for "
                              f"{adapter.display_name}; put the id the gateway lists (`conduit models`) in the "
                              "profile, e.g. with `conduit use MODEL`")
            return report
        if is_placeholder_url(settings.root.url):  # `conduit init`'s stand-in: no gateway was named yet
            report.status, report.message = "error", placeholder_message(settings.channel, settings.root.url)
            return report
        if adapter.keeps_user_choice:
            settings = dataclasses.replace(settings, take_current=take)
        targets = adapter.plan(settings, env)
    except NotFound as exc:
        report.status, report.message, report.detail = "not_found", absent_line(name, str(exc), env), str(exc)
        return report
    except Unsupported as exc:
        report.status, report.message = "unsupported", str(exc)
        return report
    except ConduitError as exc:
        report.status, report.message = "error", str(exc)
        return report
    except OSError as exc:  # a path the system refuses (too long, not a directory): the file named, not a bug
        where = one_line(exc.filename, 120) if exc.filename else adapter.display_name
        report.status, report.message = "error", writer.mask(f"cannot use {where}: {exc.strerror or exc}")
        return report
    except Exception as exc:  # an adapter bug must not stop the other tools (docs/design.md: they still sync)
        report.status, report.message = "error", writer.mask(f"internal error in the {adapter.display_name} "
                                                             f"adapter: {type(exc).__name__}: {exc}")
        return report
    for target in targets:
        try:
            result = writer.apply(name, target)
        except Exception as exc:
            report.status = "error"
            report.message = writer.mask(f"internal error writing {getattr(target, 'path', '?')}: "
                                         f"{type(exc).__name__}: {exc}")
            continue
        report.results.append(result)
        if result.error:
            # Later targets of the same tool are still tried: each file is independent and atomic.
            report.status, report.message = "error", result.error
        elif result.changed and report.status != "error":
            report.status = "changed"
    remember_limits(settings, report.results, dry_run=writer.dry_run)  # who owns each limit value now
    remember_mcp(settings, report.results, dry_run=writer.dry_run)  # ... and each MCP server entry
    if report.status == "changed":
        report.restart_hint = _restart_hint(adapter, report.results, env)
    return report


def _restart_hint(adapter: Adapter, results: list[WriteResult], env: Env) -> str | None:
    """The adapter's restart hint, or its MCP one (``McpSupport.restart_hint``) when the only file changed is
    the tool's MCP file (Claude Code's ``~/.claude.json``: its usual hint speaks of ``env``, which an MCP-only
    change leaves alone). A tool whose MCP servers sit in its main config (OpenCode, Codex) declares none."""
    mcp, support = adapter.mcp_path(env), adapter.mcp
    if support is not None and support.restart_hint and all(r.path == mcp for r in results if r.changed):
        return support.restart_hint
    return adapter.restart_hint


def absent_line(name: str, message: str, env: Env) -> str:
    """One short line for a configured tool that is not there: its name, the first thing missing (from the
    adapter's ``NotFound`` ``message``, HOME shown as ``~``) and what to do. Example: ``Cline not installed (no
    ~/.cline/data/globalState.json): remove `[tools.cline]` or install it``."""
    adapter = ADAPTERS[name]
    what = message.split(": ", 1)[1] if ": " in message else message
    what = what.split(";")[0].split(" and ")[0].split(" (")[0].strip().rstrip(".")
    home = str(env.home)
    what = what.replace(home + "/", "~/") if home not in ("", "/") else what
    return f"{adapter.display_name} not installed ({what}): remove `[tools.{name}]` or install it"


def route_values(name: str, resolver: Resolver, env: Env) -> dict[str, dict[str, object]]:
    """``{file path: {slot: value}}``: what the ``[fallback]`` route writes into ``name``'s limit slots where the
    primary route writes another value or none, from two renders in memory of the tool's current files (nothing
    is written, no record is read); ``{}`` when the profile has no ``[fallback]``, the tool does not follow it,
    or a render fails. Never raises."""
    profile = resolver.profile
    fb = profile.model.fallback
    if fb is None:
        return {}
    routes = []
    for active in ("fallback", "primary"):
        other = Resolver(profile, resolver.environ,
                         routing=decision(active, "", str(profile.path), profile.model.channel, fb))
        other._channels = resolver._channels  # the keys already read: a `command` source runs once per sync
        if active == "fallback" and other.fallback_route(name) is None:
            return {}
        try:
            routes.append(_rendered_slots(with_context(other.tool_settings(name), profile), env))
        except Exception:  # a tool not installed, a file that does not parse, a key that fails: nothing derived
            return {}
    fallback, primary = routes
    return {p: {k: v for k, v in slots.items() if primary.get(p, {}).get(k, _NONE) != v}
            for p, slots in fallback.items()}


_NONE = object()


def _rendered_slots(settings: ToolSettings, env: Env) -> dict[str, dict[str, object]]:
    """The limit slots a render of ``settings`` writes, per file: ``{path: {slot: value}}``."""
    ledger = LimitLedger()
    settings = dataclasses.replace(settings, limits=ledger)
    for target in ADAPTERS[settings.tool].plan(settings, env):
        if isinstance(target, TextTarget):
            try:
                text: str | None = target.path.read_text(encoding="utf-8")
            except FileNotFoundError:
                text = None
            target.render(text)
    return {p: {k: r["wrote"] for k, r in slots.items()} for p, slots in ledger.after.items()}


def _with_derived(settings: ToolSettings, derived: dict[str, dict[str, object]]) -> ToolSettings:
    """``settings`` whose limit ledger knows ``derived`` (``LimitLedger.derived``)."""
    if not derived or settings.limits is None:
        return settings
    return dataclasses.replace(settings, limits=dataclasses.replace(settings.limits, derived=derived))
