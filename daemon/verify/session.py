"""``conduit run`` and ``conduit env``: one session of a tool with the profile's settings, written nowhere the user
keeps files.

The settings are the tool's as ``conduit sync`` resolves them (``Resolver.tool_settings``, context limits from the
``/models`` cache), with ``--channel`` (another channel of the profile) and ``--model`` applied. Then:

- every tool: the adapter's ``run_env(settings, env)`` (``None`` unsets a variable), and each exported variable of
  its ``competing`` declaration that ``run_env`` does not set is unset, so the shell cannot outrank the profile;
- a tool configured by its files (``configured_by == "files"``): a temporary directory (0700, removed when the
  session ends) gets a copy of the user's files (``conduit.daemon.verify.copyconfig.TempHome``, as ``conduit
  verify`` builds it), the adapter's ``plan`` re-renders the copies through the one writer, and the tool is pointed
  at them with its own directory variables (``tool_dirs``: ``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``...); a tool whose
  files lie outside those directories runs with ``HOME`` (and the exported XDG variables) in the temporary
  directory instead, which ``Session.note`` says. The user's own files are only read.

The tool's state written during the session (sessions, logs, caches under the temporary directory) goes with it.

Example::

    with open_session(load_profile(), "copilot", ["-p", "say ok"], environ=os.environ, cwd=Path.cwd()) as s:
        exit_code = run_session(s)
    export_lines(session_variables(load_profile(), "copilot", environ=os.environ, cwd=Path.cwd()))
"""

from __future__ import annotations

import dataclasses
import difflib
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from conduit.adapters.base import Adapter, Env, NotFound, Target, ToolSettings, Unsupported
from conduit.adapters.registry import ADAPTERS, missing_declarations
from conduit.adapters.writer.apply import Writer
from conduit.adapters.writer.backups import BackupStore
from conduit.daemon.catalog.context import with_context
from conduit.daemon.config.profile import LoadedProfile
from conduit.daemon.config.resolve import Resolver, require_channel
from conduit.daemon.verify.copyconfig import TempHome
from conduit.daemon.verify.tools import ONE_SHOTS, find_binary
from conduit.errors import BadArguments, ConduitError, ToolFileError
from conduit.redact import fingerprint

EXIT_NOT_FOUND = 127
"""``conduit run``'s exit code when the tool's binary is not on PATH (as a shell's "command not found")."""


@dataclass
class Session:
    """One prepared session of a tool.

    Attributes:
        tool / display: registry name and the tool's name for people.
        settings: the resolved settings (channel, model, key...) the session uses.
        variables: the adapter's ``run_env`` (``None``: unset).
        unset: exported variables the session drops (``None`` in ``variables``, or ``competing`` ones), names only.
        argv: the command line: the binary found on PATH, then the user's arguments.
        env: the whole environment the tool starts with.
        cwd: the working directory.
        temp: the temporary directory holding the re-rendered copies (file-configured tools), else None.
        note: what a person should know about how the tool was pointed at the copies (``HOME`` moved), or None.
    """

    tool: str
    display: str
    settings: ToolSettings
    variables: dict[str, str | None]
    unset: list[str]
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    temp: Path | None = None
    note: str | None = None


def session_settings(profile: LoadedProfile, tool: str, *, channel: str | None = None, model: str | None = None,
                     environ: Mapping[str, str]) -> ToolSettings:
    """``tool``'s settings as ``conduit sync`` resolves them, on ``channel`` and with ``model`` when given.

    Raises:
        BadArguments: an unknown tool, one without a ``[tools.<name>]`` table (or disabled), an unknown channel,
            or a channel that does not speak the tool's protocol.
        ProfileError / KeyError_: the tool's table has a problem, or the channel's key cannot be read.
    """
    adapter = _adapter(tool, profile)
    resolver = Resolver(profile, environ)
    settings = resolver.tool_settings(tool)
    if channel is not None:
        require_channel(profile, channel)
        ch = resolver.channel(channel)
        if adapter.protocol not in ch.roots:
            raise BadArguments(f"channel `{channel}` does not speak {adapter.protocol}, which "
                               f"{adapter.display_name} needs", f"add \"{adapter.protocol}\" to its protocols, "
                               "or pick another channel")
        settings = dataclasses.replace(settings, channel=ch.name, root=ch.roots[adapter.protocol], key=ch.key,
                                       auth=ch.auth if adapter.protocol == "anthropic" else "bearer",
                                       timeout_s=ch.timeout_s)
    if model:
        settings = dataclasses.replace(settings, model=model)
    return with_context(settings, profile)


def _adapter(tool: str, profile: LoadedProfile) -> Adapter:
    """The adapter of ``tool``, which must be enabled in ``profile``. Raises BadArguments."""
    if tool not in ADAPTERS:
        close = difflib.get_close_matches(tool, list(ADAPTERS), n=1, cutoff=0.5)
        raise BadArguments(f"unknown tool `{tool}`", (f"did you mean `{close[0]}`? " if close else "")
                           + f"known tools: {', '.join(ADAPTERS)}")
    cfg = profile.model.tools.get(tool)
    if cfg is None or not cfg.enabled:
        raise BadArguments(f"tool `{tool}` is not enabled in {profile.path}",
                           f"add a [tools.{tool}] table (or remove enabled = false)")
    return ADAPTERS[tool]


def session_variables(profile: LoadedProfile, tool: str, *, channel: str | None = None, model: str | None = None,
                      environ: Mapping[str, str], cwd: Path) -> tuple[ToolSettings, dict[str, str | None]]:
    """The settings and the adapter's ``run_env`` for one session (what ``conduit env`` prints).

    Raises:
        BadArguments: as ``session_settings``, or a tool configured by its files only (no variables).
    """
    settings = session_settings(profile, tool, channel=channel, model=model, environ=environ)
    adapter = ADAPTERS[tool]
    variables = adapter.run_env(settings, Env(environ, cwd=cwd))
    if not variables:
        raise BadArguments(f"{adapter.display_name} takes its settings from its files, not from variables",
                           f"run `conduit sync`, or start one session with `conduit run {tool}`")
    return settings, variables


def export_lines(variables: Mapping[str, str | None], key: str | None, *, show_key: bool = False) -> list[str]:
    """Shell lines for ``variables``: ``export VAR='value'`` (shell-quoted), ``unset VAR`` for ``None``. A variable
    holding ``key`` is shown as a commented-out line with the key's fingerprint unless ``show_key``."""
    out = []
    for var, value in variables.items():
        if value is None:
            out.append(f"unset {var}")
        elif key and value == key and not show_key:
            out.append(f"# export {var}={shlex.quote(fingerprint(value))}  (masked: add --show-key to print it)")
        else:
            out.append(f"export {var}={shlex.quote(value)}")
    return out


@contextmanager
def open_session(profile: LoadedProfile, tool: str, args: Sequence[str], *, channel: str | None = None,
                 model: str | None = None, environ: Mapping[str, str], cwd: Path) -> Iterator[Session]:
    """Prepare one session of ``tool`` (see the module docstring); the temporary directory is removed on exit.

    Raises:
        BadArguments: as ``session_settings``, or a tool without a command line.
        ToolNotFound: none of its binaries on ``environ``'s PATH.
        ToolFileError / ConduitError: a user file cannot be copied or re-rendered (nothing is run).
    """
    settings = session_settings(profile, tool, channel=channel, model=model, environ=environ)
    adapter = ADAPTERS[tool]
    if tool not in ONE_SHOTS:
        raise BadArguments(f"{adapter.display_name} has no command line to run",
                           f"conduit run starts: {', '.join(ONE_SHOTS)}")
    binary = find_binary(ONE_SHOTS[tool], environ.get("PATH", ""))
    if binary is None:
        raise ToolNotFound(f"none of {', '.join(ONE_SHOTS[tool].binaries)} is on PATH",
                           f"install {adapter.display_name}" + (f" ({adapter.package.pin})" if adapter.package
                                                                else ""))
    variables = adapter.run_env(settings, Env(environ, cwd=cwd))
    competing = (*adapter.competing.model, *adapter.competing.key, *adapter.competing.base)
    unset = [v for v in dict.fromkeys((*competing, *variables)) if v in environ
             and (v not in variables or variables[v] is None)]
    env = {k: v for k, v in environ.items() if k not in unset}
    session = Session(tool, adapter.display_name, settings, variables, unset, [str(binary), *args], env, cwd)
    try:
        if adapter.configured_by == "files":
            session.temp = Path(tempfile.mkdtemp(prefix=f"conduit-run-{tool}-"))  # 0700
            session.note = _temp_config(session, environ)
        session.env.update({k: v for k, v in variables.items() if v is not None})
        yield session
    finally:
        if session.temp is not None:
            shutil.rmtree(session.temp, ignore_errors=True)


class ToolNotFound(ConduitError):
    """The tool's binary is not on PATH (``conduit run`` exits ``EXIT_NOT_FOUND``)."""

    exit_code = EXIT_NOT_FOUND


def _temp_config(session: Session, environ: Mapping[str, str]) -> str | None:
    """Copy the user's files of the tool into ``session.temp``, re-render them there, and point ``session.env`` at
    them; a note when the tool had to get ``HOME`` moved. Raises ToolFileError / ConduitError."""
    assert session.temp is not None
    tool, settings, temp = session.tool, session.settings, session.temp
    adapter = ADAPTERS[tool]
    home = TempHome(temp, Env(environ, cwd=session.cwd))
    try:
        user_targets: list[Target] = adapter.plan(settings, home.user)
    except (NotFound, Unsupported, ConduitError):
        user_targets = []
    home.copy_tool(tool, user_targets)
    targets = _plan_fresh(adapter, settings, home.env)
    writer = Writer(BackupStore(temp / ".conduit-run-backups"), secrets=[settings.key_or_placeholder])
    for target in targets:
        if not target.path.is_relative_to(temp):  # never a user's file
            raise ToolFileError(f"{target.path}: outside the temporary copy, not written",
                                "report this as a conduit bug; use `conduit sync` meanwhile")
        result = writer.apply(tool, target)
        if result.error:
            raise ToolFileError(result.error, "fix the file (or restore it: conduit restore), then run again")
    dirs = {var: home.env.environ.get(var) or str(temp if rel == "." else temp / rel)
            for var, rel in adapter.tool_dirs.items()}
    if all(any(t.path.is_relative_to(d) for d in dirs.values()) for t in targets):
        _top_level_state(home, dirs, adapter)
        session.env.update(dirs)
        return None
    session.env.update({k: v for k, v in home.env.environ.items() if environ.get(k) != v})
    return (f"{adapter.display_name} has no variable for the folder of its files: it runs with HOME={temp} "
            "for this session")


def _top_level_state(home: TempHome, dirs: Mapping[str, str], adapter: Adapter) -> None:
    """Also place the copied files of HOME's top level (``verify_files``) into each tool directory the user did
    not export: with its directory variable set, the tool reads them there (Claude Code's ``.claude.json`` moves
    to ``$CLAUDE_CONFIG_DIR``, see its adapter's ``verify_files``)."""
    for var, target in dirs.items():
        if home.user.get(var):
            continue
        for path in home.copied:
            copy = home.map(path)
            if path.parent == home.user.home and copy is not None and copy.is_file():
                dest = Path(target) / path.name
                if not dest.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                    shutil.copy2(copy, dest)


def _plan_fresh(adapter: Adapter, settings: ToolSettings, env: Env) -> list[Target]:
    """``adapter.plan`` in the temporary HOME; when the tool has no files yet, again with its ``fresh_options``.
    Raises ConduitError when it still finds nothing to write to."""
    try:
        return adapter.plan(settings, env)
    except (NotFound, Unsupported) as exc:
        forced = {} if "fresh_options" in missing_declarations(adapter) else dict(adapter.fresh_options)
        if not forced or isinstance(exc, Unsupported):
            raise ConduitError(str(exc), "run `conduit doctor` for details") from exc
    try:
        return adapter.plan(dataclasses.replace(settings, options=settings.options.model_copy(update=forced)), env)
    except (NotFound, Unsupported) as exc:
        raise ConduitError(str(exc), "run `conduit doctor` for details") from exc


def run_session(session: Session) -> int:
    """Start the tool (stdin, stdout and stderr are this process's) and wait; its exit code (``128 + N`` when a
    signal N ended it). Ctrl-C reaches the tool (same process group), not this wait."""
    proc = subprocess.Popen(session.argv, env=session.env, cwd=session.cwd)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    return 128 - code if code < 0 else code


__all__ = ["EXIT_NOT_FOUND", "Session", "ToolNotFound", "export_lines", "open_session", "run_session",
           "session_settings", "session_variables"]
