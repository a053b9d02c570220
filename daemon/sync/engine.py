"""The sync engine: profile -> per-tool settings -> adapter targets -> the one writer.

One tool's failure (a file that cannot be parsed, a key source that fails, a tool that is not installed) is
reported for that tool and the other tools are still synced. Nothing is written when nothing changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from conduit.adapters.backups import BackupStore
from conduit.adapters.base import Env, NotFound, Unsupported
from conduit.adapters.registry import ADAPTERS
from conduit.adapters.writer import Writer, WriteResult
from conduit.daemon.config import paths
from conduit.daemon.config.profile import LoadedProfile
from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.config.resolve import Resolver
from conduit.errors import BadArguments, ConduitError

Status = Literal["changed", "unchanged", "error", "not_found", "unsupported", "disabled"]


@dataclass
class ToolReport:
    """What a sync did to one tool.

    Attributes:
        tool: registry name; display: the tool's name for people.
        status: ``changed`` / ``unchanged`` / ``error`` / ``not_found`` / ``unsupported`` / ``disabled``.
        results: one WriteResult per file or database (diffs already masked).
        message: the reason for error/not_found/unsupported, or None.
        restart_hint: what to do for the tool to see the change (only when something changed).
    """

    tool: str
    display: str
    status: Status
    results: list[WriteResult] = field(default_factory=list)
    message: str | None = None
    restart_hint: str | None = None


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
    reports = [_sync_tool(name, resolver, writer, env) for name in wanted]
    notices = list(profile.notices)
    for cname in {resolver.tool_channel_name(t) for t in wanted}:
        try:
            notices += [n for n in resolver.channel(cname).notices if n not in notices]
        except ConduitError:
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


def _sync_tool(name: str, resolver: Resolver, writer: Writer, env: Env) -> ToolReport:
    adapter = ADAPTERS[name]
    report = ToolReport(tool=name, display=adapter.display_name, status="unchanged")
    if not resolver.profile.model.tools[name].enabled:
        report.status = "disabled"
        return report
    try:
        targets = adapter.plan(resolver.tool_settings(name), env)
    except NotFound as exc:
        report.status, report.message = "not_found", str(exc)
        return report
    except Unsupported as exc:
        report.status, report.message = "unsupported", str(exc)
        return report
    except ConduitError as exc:
        report.status, report.message = "error", str(exc)
        return report
    except Exception as exc:  # an adapter bug must not stop the other tools (DESIGN: they still sync)
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
    if report.status == "changed":
        report.restart_hint = adapter.restart_hint
    return report
