"""``conduit verify``: run each installed tool once against a loopback canary, with conduit's config, in the
user's own environment and working directory, and say whether it sent what the profile says.

Per tool (enabled in the profile, with a one-shot command: its adapter's ``one_shot``, in
``conduit.daemon.verify.tools.ONE_SHOTS``; and its binary on the user's PATH):

1. a temporary HOME ``T`` (0700, removed afterwards) gets a copy of the tool's files as they are now
   (``conduit.daemon.verify.copyconfig``); conduit's adapter then writes the tool's config into ``T`` from the
   resolved profile, with the channel's scheme, host and port replaced by the canary's root and the path kept
   (``https://taotoken.net/api`` -> ``http://127.0.0.1:PORT/api``), so the canary sees the path the real gateway
   would. The key is the profile's key (the canary is loopback, inside the sandbox).
2. the tool's one-shot command runs in the sandbox (``conduit.daemon.verify.runner.Sandbox``: network cut where
   namespaces are allowed, leftovers killed) with the user's environment except ``HOME=T`` and the remapped
   tool-directory variables, plus the documented opt-outs, in the user's working directory;
3. the recorded requests are judged (``conduit.daemon.verify.verdicts.judge``).

Zero tokens reach the real gateway; the user's files are only read. Keys appear only as fingerprints.

Example::

    checks = verify(load_profile(), ["gemini"], environ=os.environ, cwd=Path.cwd())
    exit_code(checks)  # 0 when every checked tool is ``ok``
"""

from __future__ import annotations

import difflib
import json
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from conduit.adapters.base import Env, NotFound, Root, Target, ToolSettings, Unsupported
from conduit.adapters.keyref import DELIVERY_OPTIONS, RUNS_CONDUIT
from conduit.adapters.registry import ADAPTERS, missing_declarations
from conduit.adapters.writer.apply import Writer
from conduit.adapters.writer.backups import BackupStore
from conduit.daemon.config.profile import LoadedProfile
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.verify.copyconfig import TempHome
from conduit.daemon.verify.runner import OPT_OUT_ENV, Sandbox, ToolRun
from conduit.daemon.verify.tools import ONE_SHOTS, find_binary, tool_version
from conduit.daemon.verify.verdicts import (
    Expected,
    judge,
    sources,
    static_sources,
    unsafe_without_isolation,
)
from conduit.errors import BadArguments, ConduitError
from conduit.redact import fingerprint, mask_key_flags, redact

PROMPT = "Reply with the single word: ok"


@dataclass
class ToolCheck:
    """The outcome for one tool (JSON-ready through ``to_json``; never holds a raw key).

    Attributes:
        tool / display: registry name and the tool's name for people.
        verdict: ``ok``, ``not_installed``, ``config_error`` (the profile's key or the tool's files),
            ``sandbox_error``, ``not_run`` (no mount namespace, and the tool would reach the user's own file
            pointing at the real gateway) or a verdict of ``verdicts.judge``.
        detail: what was sent, or what won instead and the fix.
        version: what ``--version`` printed (parsed), or None.
        binary: the binary found on PATH, or None.
        requested: named on the command line (a missing one then fails the run).
        method / path / auth_header / key_fingerprint / model: the model request the verdict rests on.
        expected: the path prefix, key fingerprint and model the profile says.
        seconds: how long the run took; exit_code / timed_out: how it ended.
        dns_names: hosts the tool looked up; leftovers: processes it left (killed); isolation: how it ran.
        copied: the user files copied into the temporary HOME.
        outranking: exported competing variables and project files present (``verdicts.static_sources``),
            whatever the verdict: a source that did not win today may win after a change.
    """

    tool: str
    display: str
    verdict: str
    detail: str = ""
    version: str | None = None
    binary: str | None = None
    requested: bool = False
    method: str | None = None
    path: str | None = None
    auth_header: str | None = None
    key_fingerprint: str | None = None
    model: str | None = None
    expected: dict[str, str | None] = field(default_factory=dict)
    seconds: float | None = None
    exit_code: int | None = None
    timed_out: bool = False
    dns_names: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    isolation: str = ""
    copied: list[str] = field(default_factory=list)
    outranking: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The check as ``conduit verify --json`` prints it."""
        return dict(self.__dict__)

    @property
    def passed(self) -> bool:
        """``ok``, or a tool that is not installed and was not named on the command line."""
        return self.verdict == "ok" or (self.verdict == "not_installed" and not self.requested)


def select_tools(profile: LoadedProfile, names: Sequence[str]) -> list[str]:
    """The tools to check: ``names`` (each must be enabled in the profile and have a command line), or every
    enabled tool with one. Raises BadArguments (exit 3) naming the tool and what to do."""
    enabled = [t for t, cfg in profile.model.tools.items() if cfg.enabled and t in ONE_SHOTS]
    for name in names:
        if name not in ADAPTERS:
            close = difflib.get_close_matches(name, [*ONE_SHOTS, "claude", "cn"], n=1, cutoff=0.5)
            guess = {"claude": "claude_code", "cn": "continue"}.get(close[0], close[0]) if close else None
            raise BadArguments(f"unknown tool `{name}`", (f"did you mean `{guess}`? " if guess else "")
                               + f"known tools: {', '.join(sorted(ONE_SHOTS))}")
        if name not in ONE_SHOTS:
            raise BadArguments(f"{ADAPTERS[name].display_name} has no command line to run once",
                               f"conduit verify runs: {', '.join(sorted(ONE_SHOTS))}")
        if name not in enabled:
            raise BadArguments(f"tool `{name}` is not enabled in {profile.path}",
                               f"add a [tools.{name}] table (or remove enabled = false) to verify it")
    return list(dict.fromkeys(names)) if names else enabled


def verify(profile: LoadedProfile, names: Sequence[str] = (), *, environ: Mapping[str, str], cwd: Path,
           timeout_s: float = 60.0, sandbox: Sandbox | None = None) -> list[ToolCheck]:
    """Check each selected tool (see the module docstring); one ``ToolCheck`` per tool, in profile order.

    Args:
        profile: the loaded profile; names: tools to check (empty: every enabled tool with a command line).
        environ: the user's environment (PATH finds the binaries; the tool runs with it, HOME replaced).
        cwd: the working directory the tool runs in. timeout_s: bound on each tool's run, seconds.
        sandbox: the sandbox to run every tool in (default: a fresh ``Sandbox.create()`` per tool).
    Raises:
        BadArguments: an unknown or not enabled tool name. A failing key source is reported per tool.
    """
    tools = select_tools(profile, names)
    resolver = Resolver(profile, environ)
    box: Sandbox | None = sandbox
    checks: list[ToolCheck] = []
    for tool in tools:
        spec = ONE_SHOTS[tool]
        check = ToolCheck(tool, ADAPTERS[tool].display_name, "not_installed", requested=tool in names)
        binary = find_binary(spec, environ.get("PATH", ""))
        if binary is None:
            check.detail = f"none of {', '.join(spec.binaries)} on PATH"
            checks.append(check)
            continue
        check.binary = str(binary)
        check.outranking = static_sources(tool, environ, cwd)
        # A fresh sandbox per tool (the isolation is probed once per process): without namespaces its loopback
        # port is picked free now, so the root written into this tool's config is the one its run serves.
        _check_tool(check, resolver, box or Sandbox.create(), environ=environ, cwd=cwd, timeout_s=timeout_s)
        checks.append(check)
    return checks


def canary_settings(settings: ToolSettings, root: str) -> ToolSettings:
    """``settings`` with the channel root's scheme, host and port replaced by ``root`` (the path kept)."""
    path = urlsplit(settings.root.url).path.rstrip("/")
    return replace(settings, root=Root(url=root.rstrip("/") + path, version=settings.root.version))


def expected_prefix(tool: str, settings: ToolSettings) -> str:
    """The path a correct model request starts with (``/api/v1/``; Gemini: ``/api/v1``, then ``beta/...``)."""
    protocol = ADAPTERS[tool].protocol
    root = settings.root
    if protocol == "openai":
        return urlsplit(root.openai_base()).path + "/"
    return urlsplit(root.url).path + ("/v1/" if protocol == "anthropic" else "/v1")


def _check_tool(check: ToolCheck, resolver: Resolver, box: Sandbox, *, environ: Mapping[str, str], cwd: Path,
                timeout_s: float) -> None:
    """Fill ``check``: copy, write, run, judge. Never raises for the tool's own problems."""
    tool = check.tool
    try:
        settings = canary_settings(resolver.tool_settings(tool), box.root)
    except ConduitError as exc:
        check.verdict, check.detail = "config_error", str(exc)
        return
    key = settings.key_or_placeholder
    want = Expected(expected_prefix(tool, settings), key, settings.model)
    check.expected = {"path": want.prefix, "key_fingerprint": fingerprint(key), "model": want.model}
    tmp = Path(tempfile.mkdtemp(prefix=f"conduit-verify-{tool}-"))  # mode 0700
    try:
        home = TempHome(tmp, Env(environ, cwd=cwd))
        # --version too runs with the temporary HOME: a tool may write its state file on any start.
        check.version = tool_version(check.binary or "", ONE_SHOTS[tool], env=run_env(home, tool))
        error = _prepare(home, tool, resolver, settings)
        if error:
            check.verdict, check.detail = "config_error", redact(error, [key])
            return
        # A tool configured only by its environment (Copilot) gets the adapter's variables, as `conduit run` gives.
        adapter = ADAPTERS[tool]
        session = adapter.run_env(settings, home.env) if adapter.configured_by == "environment" else {}
        _run_and_judge(check, home, box, want, environ=environ, cwd=cwd, timeout_s=timeout_s, session=session)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _prepare(home: TempHome, tool: str, resolver: Resolver, settings: ToolSettings) -> str | None:
    """Copy the tool's files into T and write conduit's config there; an error message, or None."""
    adapter = ADAPTERS[tool]
    try:
        user_targets: list[Target] = adapter.plan(resolver.tool_settings(tool), home.user)
    except (NotFound, Unsupported, ConduitError):
        user_targets = []
    try:
        home.copy_tool(tool, user_targets)
        targets = _plan_in_home(tool, _user_folders(settings, home.user.home), home.env)
    except (NotFound, Unsupported, ConduitError) as exc:
        return str(exc)
    writer = Writer(BackupStore(home.root / ".conduit-verify-backups"), secrets=[settings.key_or_placeholder])
    for target in targets:
        result = writer.apply(tool, target)
        if result.error:
            return result.error
    return None


def _user_folders(settings: ToolSettings, user_home: Path) -> ToolSettings:
    """``settings`` with ``~`` in folder options (``[tools.gemini] trust``) pinned to the user's real HOME:
    in T, ``~`` would name T's folders, not the user's project folders the tool runs in."""
    trust = getattr(settings.options, "trust", None)
    if not isinstance(trust, list | tuple):
        return settings
    pinned = [str(user_home) + t.strip()[1:] if isinstance(t, str) and (t.strip() == "~" or t.strip().startswith("~/"))
              else t for t in trust]
    return replace(settings, options=settings.options.model_copy(update={"trust": pinned}))


def _plan_in_home(tool: str, settings: ToolSettings, env: Env) -> list[Target]:
    """The adapter's targets in T; when the tool has no files yet, again with its ``fresh_options`` (the options
    that let it write into a fresh HOME: the tool is installed but was never configured). A tool whose key
    reference runs conduit (``RUNS_CONDUIT``: Claude Code's ``apiKeyHelper``) gets a copy of the key in T: the
    helper would look for conduit's profile and key sources in T, where they are not."""
    adapter = ADAPTERS[tool]
    if tool in RUNS_CONDUIT:
        option, values = DELIVERY_OPTIONS[tool]
        settings = replace(settings, options=settings.options.model_copy(update={option: values["copy"]}))
    try:
        return adapter.plan(settings, env)
    except NotFound:
        forced = {} if "fresh_options" in missing_declarations(adapter) else dict(adapter.fresh_options)
        if not forced:
            raise
        return adapter.plan(replace(settings, options=settings.options.model_copy(update=forced)), env)


def run_env(home: TempHome, tool: str, session: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The run's environment: the user's, HOME and remapped variables in T, the opt-outs, loopback added to
    ``NO_PROXY``, and the adapter's ``verify_env`` (each a path in T: Aider's history files, which it writes in
    the working directory by default)."""
    env = {**home.env.environ, **OPT_OUT_ENV, **ONE_SHOTS[tool].extra_env}
    for var in ("NO_PROXY", "no_proxy"):  # an exported proxy must not swallow the loopback canary's requests
        env[var] = ",".join(filter(None, [env.get(var, ""), "127.0.0.1", "localhost"]))
    for var, rel in ADAPTERS[tool].verify_env.items():
        env[var] = str(home.root / rel)
    for var, value in (session or {}).items():  # an environment-configured tool's run_env (None: unset)
        if value is None:
            env.pop(var, None)
        else:
            env[var] = value
    return env


def _run_and_judge(check: ToolCheck, home: TempHome, box: Sandbox, want: Expected, *, environ: Mapping[str, str],
                   cwd: Path, timeout_s: float, session: Mapping[str, str | None] | None = None) -> None:
    """Run the one-shot command in the sandbox and fill ``check`` from what the canary recorded."""
    spec = ONE_SHOTS[check.tool]
    argv = spec.argv(check.binary or spec.binaries[0], PROMPT)
    reached = _reached_by_walking_up(check.tool, home)
    if reached and not box.isolated:  # it would send the real key to the real gateway: do not run it
        check.verdict = "not_run"
        check.detail = (f"without a mount namespace ({box.isolation}) {check.display} would read {reached} (the "
                        "real gateway) by walking up from the working directory; run from a folder outside HOME")
        return
    unsafe = [] if box.isolated else unsafe_without_isolation(check.tool, environ, cwd)
    if unsafe:  # with the network open, these could take the real key to the real gateway
        check.verdict = "not_run"
        check.detail = (f"without network isolation ({box.isolation}) {check.display} could reach the real gateway "
                        f"through {', '.join(unsafe)}; unset it, or run where `unshare` is allowed")
        return
    if box.isolated:  # lay the copies over the user's files inside the sandbox (conduit.daemon.verify.shadow)
        pairs = home.root / ".conduit-verify-shadow.json"
        pairs.write_text(json.dumps([[str(home.map(p)), str(p)] for p in home.copied if home.map(p)]))
        argv = [sys.executable, "-I", "-m", "conduit.daemon.verify.shadow", str(pairs), "--", *argv]
    try:
        result = box.run(ToolRun(argv=argv, env=run_env(home, check.tool, session), cwd=cwd, timeout_s=timeout_s))
    except ConduitError as exc:
        check.verdict, check.detail = "sandbox_error", redact(str(exc), [want.key])
        return
    check.seconds = round(result.duration_s, 2)
    check.exit_code, check.timed_out = result.exit_code, result.timed_out
    check.dns_names, check.isolation = list(result.dns_names), result.isolation
    check.leftovers = [mask_key_flags(cmd) for cmd in result.leftovers]  # a leftover's argv may hold a key
    check.copied = [str(p) for p in home.copied]
    v = judge(check.tool, want, result.requests, exit_code=result.exit_code, timed_out=result.timed_out,
              dns_names=result.dns_names, stderr_tail=result.stderr_tail, environ=environ, cwd=cwd)
    check.verdict, check.detail = v.verdict, v.detail
    rec = v.request
    if rec is not None:
        check.method, check.path, check.auth_header, check.model = rec.method, rec.route, rec.auth_header, rec.model
        check.key_fingerprint = fingerprint(rec.auth_value) if rec.auth_value else None


def _reached_by_walking_up(tool: str, home: TempHome) -> Path | None:
    """A user file (one copied into T) the tool would also read as a project file: Gemini CLI looks for
    ``.gemini/.env`` and ``.env`` from the working directory up (so from a project under HOME it reaches
    ``~/.gemini/.env``); the others read their project files in the working directory only (Claude Code run from
    HOME reads ``~/.claude/settings.json`` as project settings), and whose copy conduit rewrote. None when none."""
    cwd = home.env.cwd.resolve() if home.env.cwd.exists() else home.env.cwd
    src = sources(tool)  # Gemini CLI's walks_up: its findEnvFile; settings.json it reads in the working directory
    folders = [cwd, *cwd.parents] if src.walks_up else [cwd]
    rels = src.walks_up or src.files
    copied = set(home.copied)
    for folder in folders:
        for rel in rels:
            path = folder / rel
            if path in copied and _differs(path, home.map(path)):
                return path
    return None


def _differs(user: Path, temp: Path | None) -> bool:
    """True when conduit's rewrite made the copy differ from the user's file (or either cannot be read)."""
    try:
        return temp is None or user.read_bytes() != temp.read_bytes()
    except OSError:
        return True


def exit_code(checks: Sequence[ToolCheck]) -> int:
    """0 when every check passed (``ToolCheck.passed``) and at least one tool ran, else 1."""
    ran = [c for c in checks if c.verdict != "not_installed"]
    return 0 if ran and all(c.passed for c in checks) else 1


__all__ = ["PROMPT", "ToolCheck", "canary_settings", "exit_code", "expected_prefix", "select_tools", "verify"]
