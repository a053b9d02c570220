"""Claude Code: the ``env`` object of the user settings file.

Facts (docs/formats/claude-code.md, from Claude Code's docs, changelog and issue threads):
- File: ``$CLAUDE_CONFIG_DIR/settings.json``, else ``~/.claude/settings.json``. Strict JSON: a comment or a
  trailing comma makes Claude Code ignore the whole file, so conduit refuses to edit such a file.
- Every ``env`` value is a JSON string. The SDK appends ``/v1/messages`` to ``ANTHROPIC_BASE_URL``, so the base
  URL carries no ``/v1``.
- Exactly one of ``ANTHROPIC_AUTH_TOKEN`` (Bearer) and ``ANTHROPIC_API_KEY`` (x-api-key): both set is an "auth
  conflict" some gateways reject.
- ``ANTHROPIC_SMALL_FAST_MODEL`` is the deprecated predecessor of ``ANTHROPIC_DEFAULT_HAIKU_MODEL``.
- Higher layers win over the user file: managed settings > ``--settings`` > project
  ``.claude/settings.local.json`` > project ``.claude/settings.json`` > user file. A settings ``env`` value
  beats the same variable exported in the shell.
- Env changes have needed a restart in some versions.
- What bypasses the gateway although the file matches (``outranks``): ``CLAUDE_CODE_USE_BEDROCK`` /
  ``_VERTEX`` / ``_FOUNDRY`` (truthy: ``1``, ``true``, ``yes``, ``on``) in the shell or any settings file's
  ``env`` send requests to that cloud instead; ``apiKeyHelper`` in any settings file competes with the key
  (its key goes out as ``x-api-key``); a top-level ``model`` setting only where no settings ``env`` nor the
  shell sets ``ANTHROPIC_MODEL`` (``conduit.adapters.claude_precedence``: the 2.1.197 binary sends
  ``ANTHROPIC_MODEL`` over it); the auth variable conduit does not write, exported in the shell, makes an auth
  conflict. Project settings are read in the working folder only (``claude_precedence.PROJECT_SCOPE``).

Limits and the local-server switch (read in the ``@anthropic-ai/claude-code`` 2.1.197 binary, ``bin/claude.exe``,
a compiled bundle whose JavaScript is plain text in it; proven with the real binary by
tests/realtools/test_realtools_context.py, details in docs/formats/claude-code.md):
- ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``: the request's ``max_tokens`` (parsed, capped at the model's upper limit; a
  model id Claude Code does not know gets the default 32000 and the upper limit 128000). A 32k-context vLLM
  answers that default with HTTP 400.
- ``CLAUDE_CODE_MAX_CONTEXT_TOKENS``: the context window of a model whose id does not start with ``claude-``
  (else 200000); the auto-compact threshold (window - min(output, 20000) - 13000) and ``/context``'s total
  follow from it. ``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` (and the ``autoCompactWindow`` setting) is raised to at
  least 100000 by the binary, so it cannot say 32768: not written.
- ``CLAUDE_CODE_ATTRIBUTION_HEADER``: a false value (``0``, ``false``, ``no``, ``off``) drops the first system
  block, ``x-anthropic-billing-header: cc_version=2.1.197.<3 hex>; cc_entrypoint=...;``, whose 3 hex digits
  hash characters of the first user message: each conversation starts with another system prompt, which
  defeats a local vLLM's prefix cache. Written for a local channel only (``is_local``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from conduit.adapters.base import (
    AdapterDefaults,
    Effective,
    Env,
    Proposal,
    Protocol_,
    Target,
    ToolFacts,
    ToolSettings,
)
from conduit.adapters.claude_precedence import (
    PROJECT_SCOPE,
    RULES,
    model_setting_blockers,
    model_setting_note,
)
from conduit.adapters.declarations import Blocker, Competing, OneShot, Package
from conduit.adapters.formats.jsonfile import json_target, read_json_quietly
from conduit.adapters.formats.masking import shown
from conduit.adapters.formats.mcpmap import mcp_json_targets
from conduit.adapters.formats.textformats import tool_version
from conduit.adapters.keyref import key_helper_command
from conduit.adapters.limits import ABSENT, LimitLedger
from conduit.adapters.mcp import McpSupport, standard_entry
from conduit.adapters.precedence import Rule
from conduit.errors import ToolFileError

AUTH_VARS = ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY")
SECRET_VARS = frozenset(AUTH_VARS)
MODEL_VARS = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
)
DEPRECATED_VARS = ("ANTHROPIC_SMALL_FAST_MODEL",)
MANAGED_SETTINGS = Path("/etc/claude-code/managed-settings.json")
CLOUD_SWITCHES = {"CLAUDE_CODE_USE_BEDROCK": "Amazon Bedrock", "CLAUDE_CODE_USE_VERTEX": "Google Vertex AI",
                  "CLAUDE_CODE_USE_FOUNDRY": "Microsoft Foundry"}
LIMIT_VARS = ("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "CLAUDE_CODE_MAX_CONTEXT_TOKENS", "CLAUDE_CODE_ATTRIBUTION_HEADER")
"""The variables conduit owns only while they hold what it wrote (``conduit.adapters.limits``), with
``API_TIMEOUT_MS``."""
LEDGER_VARS = ("API_TIMEOUT_MS", *LIMIT_VARS)
HELPER_KEY = "apiKeyHelper"
"""The settings key of a command whose stdout is the key (``key_delivery = "reference"``): Claude Code 2.1.197
runs it through a shell (timeout 600 s), caches its output for ``CLAUDE_CODE_API_KEY_HELPER_TTL_MS`` (default
300000 ms) and sends it as both ``x-api-key`` and ``Authorization: Bearer`` (``bin/claude.exe``: ``Ty()``,
``$Pd()``, ``mMd()``; docs/formats/claude-code.md)."""
LOCAL_CHANNEL = "local"
"""The channel a profile's ``[vllm]`` table defines (``conduit.daemon.config.profile.LOCAL_CHANNEL``)."""
OUTPUT_SHARE = 4
"""Claude Code's output limit is at most ``window // OUTPUT_SHARE``: its own first request (system prompt and
24 tool definitions, about 77 kB of JSON, some 19k tokens in 2.1.197) needs the other three quarters."""


def anthropic_env(settings: ToolSettings) -> dict[str, str | None]:
    """The owned environment of an Anthropic-protocol client, as ``{VAR: value}``; ``None`` means "remove".

    Shared by Claude Code's settings.json and CC Switch's claude provider rows (which hold the same object).
    Every model slot points at a model the gateway serves: the aliases (sonnet, opus) at the main model, the
    haiku (background) slot at ``small_model`` or else the main model. ``API_TIMEOUT_MS`` is the channel's
    ``timeout`` in milliseconds, ``None`` (remove) when the channel sets none.
    """
    key = settings.key_or_placeholder
    auth_var = "ANTHROPIC_API_KEY" if settings.auth == "x-api-key" else "ANTHROPIC_AUTH_TOKEN"
    env: dict[str, str | None] = {"ANTHROPIC_BASE_URL": settings.root.anthropic_base()}
    for var in AUTH_VARS:
        env[var] = key if var == auth_var else None
    env["ANTHROPIC_MODEL"] = settings.model
    env["ANTHROPIC_DEFAULT_SONNET_MODEL"] = settings.model
    env["ANTHROPIC_DEFAULT_OPUS_MODEL"] = settings.model
    env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] = settings.small_model or settings.model
    for var in DEPRECATED_VARS:
        env[var] = None
    # With no channel timeout now (a fallback channel's, or one removed from the profile) conduit's value must not
    # stay behind: removed here (CC Switch's row is conduit's); Claude Code's settings.json checks ownership first.
    env["API_TIMEOUT_MS"] = str(int(settings.timeout_s * 1000)) if settings.timeout_s is not None else None
    return env


def is_local(settings: ToolSettings) -> bool:
    """Whether the channel is a server of the person's own: the ``[vllm]`` table's channel (named ``local``), or
    a root whose host is ``localhost`` (or ``*.localhost``) or a loopback, private-network or link-local IP
    address. Host names are not resolved (a render never touches the network)."""
    host = (urlsplit(settings.root.url).hostname or "").lower()
    if settings.channel == LOCAL_CHANNEL or host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local


def output_limit(context_window: int | None, max_output: int | None) -> int | None:
    """Claude Code's ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` in tokens: the channel's output limit, at most a quarter
    of the window (``OUTPUT_SHARE``) when the window is known, the quarter when only the window is known, None
    when neither is. The catalog already keeps a limit to half the window (``conduit.daemon.catalog.context``);
    Claude Code's own prompt needs more than half of a small one, so a quarter here."""
    if context_window is None:
        return max_output
    quarter = max(1, context_window // OUTPUT_SHARE)
    return quarter if max_output is None else max(1, min(max_output, quarter))


def limit_env(settings: ToolSettings) -> dict[str, str | None]:
    """The wanted values of ``LIMIT_VARS`` (strings, as ``env`` holds them; None: "not conduit's now")."""
    out = output_limit(settings.context_window, settings.max_output_tokens)
    return {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": None if out is None else str(out),
            "CLAUDE_CODE_MAX_CONTEXT_TOKENS": (None if settings.context_window is None
                                               else str(settings.context_window)),
            "CLAUDE_CODE_ATTRIBUTION_HEADER": "0" if is_local(settings) else None}


def merge_env(current: Any, wanted: Mapping[str, str | None]) -> dict[str, Any]:
    """Apply ``wanted`` to an ``env`` object: set or remove owned variables, keep every other one in place.

    A variable already present keeps its position; a new one is appended.
    """
    env = dict(current) if isinstance(current, dict) else {}
    for var, value in wanted.items():
        if value is None:
            env.pop(var, None)
        else:
            env[var] = value
    return env


def _env_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The ``env`` object of a settings document, or ``{}`` when it has none (or not an object)."""
    env = doc.get("env")
    return env if isinstance(env, dict) else {}


class ClaudeCodeOptions(BaseModel):
    """``[tools.claude_code]`` options.

    Attributes:
        key_delivery: ``reference`` (the default: ``apiKeyHelper`` = ``<conduit> key print <channel>``, no key
            in settings.json, a rotation needs no rewrite) or ``copy`` (the key itself in
            ``env.ANTHROPIC_AUTH_TOKEN``/``ANTHROPIC_API_KEY``). Unset here, the channel's ``key_delivery``
            applies (this one wins). A channel with no key always gets ``copy`` (the placeholder), and so does
            a conduit run from a temporary place (``conduit.adapters.keyref.unstable_reason``).
    """

    model_config = ConfigDict(extra="forbid")

    key_delivery: Literal["copy", "reference"] = "reference"


def by_reference(settings: ToolSettings, env: Env) -> bool:
    """Whether a sync gives Claude Code the key by ``apiKeyHelper``: ``key_delivery = "reference"``, a channel
    with a key, and conduit's executable in a stable place (``conduit.adapters.keyref.key_helper_command``)."""
    return (settings.options_as(ClaudeCodeOptions).key_delivery == "reference" and settings.key is not None
            and key_helper_command(settings.channel, env) is not None)


def is_conduit_helper(value: object) -> bool:
    """Whether an ``apiKeyHelper`` value is the one conduit writes (``... conduit... key print <channel>``)."""
    return isinstance(value, str) and "conduit" in value and " key print " in value


class ClaudeCode(AdapterDefaults):
    """Adapter for Claude Code's user settings file (owned keys: the ``env`` entries below)."""

    name: ClassVar[str] = "claude_code"
    display_name: ClassVar[str] = "Claude Code"
    protocol: ClassVar[Protocol_] = "anthropic"
    owned_keys: ClassVar[tuple[str, ...]] = tuple(
        f"env.{v}" for v in ("ANTHROPIC_BASE_URL", *AUTH_VARS, *MODEL_VARS, *DEPRECATED_VARS, *LEDGER_VARS)) + (
        HELPER_KEY,)
    Options: ClassVar[type[BaseModel]] = ClaudeCodeOptions
    discover_rank: ClassVar[int] = 0  # conduit init reads Claude Code, Cline, then CC Switch
    writes_context: ClassVar[bool] = True  # CLAUDE_CODE_MAX_OUTPUT_TOKENS / _MAX_CONTEXT_TOKENS in its env
    restart_hint: ClassVar[str | None] = ("restart running Claude Code sessions: some versions read env only at "
                                          "start-up")
    env_vars: ClassVar[tuple[str, ...]] = ("CLAUDE_CONFIG_DIR", "ANTHROPIC_BASE_URL", *AUTH_VARS, "ANTHROPIC_MODEL",
                                           *CLOUD_SWITCHES, "CONDUIT_PROFILE")  # the last: apiKeyHelper's --profile

    # CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: Claude Code docs "Environment variables" (update checks,
    # telemetry, error reports, bug command); DISABLE_AUTOUPDATER likewise.
    one_shot: ClassVar[OneShot | None] = OneShot(("claude",), ("-p",), opt_outs={
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"})
    package: ClassVar[Package | None] = Package("npm", "@anthropic-ai/claude-code", "2.1.197", ("claude",))
    # A settings.json env value beats the shell, so only project files and managed settings win.
    competing: ClassVar[Competing] = Competing(("ANTHROPIC_MODEL",), ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"),
                                               ("ANTHROPIC_BASE_URL",),
                                               (".claude/settings.local.json", ".claude/settings.json"))
    tool_dirs: ClassVar[Mapping[str, str]] = {"CLAUDE_CONFIG_DIR": ".claude"}
    base_forms: ClassVar[tuple[str, ...]] = ("/api", "/api/v1", "/api/v1/messages")
    model_routes: ClassVar[tuple[str, ...]] = ("/api/v1/messages",)
    fresh_options: ClassVar[Mapping[str, object]] = {}
    precedence: ClassVar[tuple[Rule, ...]] = RULES  # conduit.adapters.claude_precedence
    # Entry shape as `claude mcp add` 2.1.197 writes it (type stdio/http/sse); project .mcp.json wins by name.
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.claude.json", key=("mcpServers",), format="json", transports=frozenset({"stdio", "http", "sse"}),
        list_argv=("claude", "mcp", "list"), project_files=(".mcp.json",),
        source="Claude Code docs \"Connect Claude Code to tools via MCP\" (user scope); `claude mcp add` 2.1.197",
        proven="`claude mcp list` (real-tool tier)",
        restart_hint="restart running Claude Code sessions to load the changed MCP servers")

    def mcp_path(self, env: Env) -> Path | None:
        """``$CLAUDE_CONFIG_DIR/.claude.json`` when set, else ``~/.claude.json``: the state file whose top-level
        ``mcpServers`` is the user scope. Claude Code rewrites this file itself, so only conduit's entries are
        ever compared or changed."""
        return env.path_from("CLAUDE_CONFIG_DIR", env.home) / ".claude.json"

    def run_env(self, settings: ToolSettings, env: Env) -> dict[str, str | None]:
        """The same ``env`` entries as the settings file (``anthropic_env``), for one session (``conduit run`` /
        ``conduit env``): ``None`` unsets the other auth variable and the deprecated one. A settings file's
        ``env`` beats an exported variable, so ``conduit run`` also points ``CLAUDE_CONFIG_DIR`` at a temporary
        copy of the user's files re-rendered with these settings. With the key by reference (``by_reference``)
        neither auth variable is set (both are unset): the re-rendered copy's ``apiKeyHelper`` gives the key."""
        wanted = anthropic_env(settings)
        return {**wanted, **dict.fromkeys(AUTH_VARS)} if by_reference(settings, env) else wanted

    def key_reference(self, env: Env) -> str | None:
        """``apiKeyHelper`` when the user settings hold conduit's helper (``is_conduit_helper``), else None."""
        doc, _ = read_json_quietly(self.settings_path(env))
        return HELPER_KEY if is_conduit_helper(doc.get(HELPER_KEY)) else None

    def verify_files(self, env: Env) -> list[Path]:
        """settings.json, settings.local.json, .credentials.json, CLAUDE.md and the state file ``.claude.json``
        (in ``$CLAUDE_CONFIG_DIR`` when set, else ``~``)."""
        d = self.settings_path(env).parent
        state = (d if env.get("CLAUDE_CONFIG_DIR") else env.home) / ".claude.json"
        return [d / "settings.json", d / "settings.local.json", d / ".credentials.json", d / "CLAUDE.md", state]

    @staticmethod
    def settings_path(env: Env) -> Path:
        """``$CLAUDE_CONFIG_DIR/settings.json`` or ``~/.claude/settings.json``."""
        return env.path_from("CLAUDE_CONFIG_DIR", env.home / ".claude") / "settings.json"

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """One JSON target: merge the owned ``env`` entries into settings.json, keep everything else."""
        wanted = {**anthropic_env(settings), **limit_env(settings)}
        path = self.settings_path(env)
        ledger = settings.limits or LimitLedger()
        helper = key_helper_command(settings.channel, env) if by_reference(settings, env) else None
        if helper is not None:
            wanted.update({var: None for var in AUTH_VARS})  # the key rests in conduit's source only

        def transform(doc: dict[str, Any]) -> dict[str, Any]:
            if "env" in doc and not isinstance(doc["env"], dict):
                raise ToolFileError(f"{path}: `env` is a {type(doc['env']).__name__}, not an object",
                                    "Claude Code expects \"env\": {...}; fix it by hand, conduit left the file alone")
            # API_TIMEOUT_MS and the limits are conduit's only while they hold what conduit wrote
            # (conduit.adapters.limits): with no channel timeout, window or local channel now, that value goes
            # (the one it replaced comes back); the person's own stays
            current = _env_of(doc)
            settled = {var: ledger.settle(path, f"env.{var}", current.get(var, ABSENT), wanted[var])
                       for var in LEDGER_VARS}
            doc["env"] = merge_env(doc.get("env"), {**wanted, **{var: None if value is ABSENT else value
                                                                 for var, value in settled.items()}})
            # apiKeyHelper is a slot too: a person's own helper that reference mode replaces comes back when the
            # channel goes back to a copy (a helper conduit wrote before these records goes, a person's stays)
            kept = ledger.settle(path, HELPER_KEY, doc.get(HELPER_KEY, ABSENT), helper)
            if kept is ABSENT or (helper is None and is_conduit_helper(kept)):
                doc.pop(HELPER_KEY, None)
            else:
                doc[HELPER_KEY] = kept
            return doc

        targets: list[Target] = [json_target(path, transform, secret_keys=SECRET_VARS, label="settings.json")]
        targets += mcp_json_targets(self.mcp_path(env), self.mcp, settings.mcp, settings.mcp_ledger,
                                    entry=lambda s: standard_entry(s, stdio_type="stdio"), label=".claude.json")
        return targets

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the file, the owned values (keys masked), the version, and who overrides whom."""
        path = self.settings_path(env)
        doc, error = read_json_quietly(path)
        user_env = _env_of(doc)
        layers = [
            ("managed settings", MANAGED_SETTINGS),
            ("project .claude/settings.local.json", env.cwd / ".claude" / "settings.local.json"),
            ("project .claude/settings.json", env.cwd / ".claude" / "settings.json"),
        ]
        effective = {var: _effective(var, user_env, layers, env, path)
                     for var in ("ANTHROPIC_BASE_URL", *AUTH_VARS, "ANTHROPIC_MODEL")}
        conflict = all(v in user_env for v in AUTH_VARS)
        version = tool_version("claude")
        base = effective["ANTHROPIC_BASE_URL"]
        summary = (f"{path} ({'found' if path.exists() else 'missing'}); version {version or 'unknown'}; "
                   f"base URL used: {base.value} ({base.source})"
                   + ("; " + base.why.split("; ", 1)[1] if base.why and "is ignored" in base.why else ""))
        details = {
            "file": str(path), "exists": path.exists(), "parse_error": error, "version": version,
            "owned": {k: _mask(k, user_env.get(k)) for k in ("ANTHROPIC_BASE_URL", *AUTH_VARS, *MODEL_VARS,
                                                              *LEDGER_VARS)
                      if k in user_env},
            "auth_conflict": conflict,
        }
        note = model_setting_note(_layers(env, path), env)  # a top-level "model" ANTHROPIC_MODEL shadows (C33)
        warnings: tuple[str, ...] = (
            *(("both ANTHROPIC_AUTH_TOKEN and ANTHROPIC_API_KEY are set; a sync keeps only one",) if conflict else ()),
            *((note,) if note else ()))
        return ToolFacts(summary=summary, details=details, effective=effective, warnings=warnings)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """Cloud-provider switches, ``apiKeyHelper``, a competing ``model`` key, a higher layer's own values, and
        the other auth variable exported in the shell (see the module docstring)."""
        docs = _layers(env, self.settings_path(env))
        wanted = {**anthropic_env(settings), **{k: v for k, v in limit_env(settings).items() if v is not None}}
        out = _cloud_switches(docs, env)
        for path, doc, above in docs:
            if doc.get("apiKeyHelper") and (above or not is_conduit_helper(doc["apiKeyHelper"])):
                out.append(Blocker("overridden", str(path), f"apiKeyHelper in {path} runs a command for a key that "
                                   "Claude Code sends as x-api-key, beside or instead of the profile's key",
                                   f"remove \"apiKeyHelper\" from {path}"))
        out += model_setting_blockers(docs, env, settings.model)  # C33: only where no ANTHROPIC_MODEL is set
        for path, doc, higher in docs:
            for var in ("ANTHROPIC_BASE_URL", *AUTH_VARS, "ANTHROPIC_MODEL", *(v for v in LIMIT_VARS if v in wanted)):
                if higher and var in _env_of(doc) and _env_of(doc)[var] != wanted.get(var):
                    out.append(Blocker("overridden", str(path), f"{var} = {_mask(var, _env_of(doc)[var])} in {path} "
                                       "ranks above the user settings.json that conduit writes",
                                       f"remove \"{var}\" from \"env\" in {path}"))
        for var in AUTH_VARS:
            if wanted.get(var) is None and env.get(var) and not any(var in _env_of(d) for _, d, _ in docs):
                other = next(v for v in AUTH_VARS if v != var)
                out.append(Blocker("overridden", "shell environment", f"{var} is exported in the shell while conduit "
                                   f"writes {other}: Claude Code sees both (an auth conflict) and may send the "
                                   "shell's key", f"unset {var} (and remove its export from your shell's start-up "
                                   "file)"))
            elif wanted.get(var) is not None and env.get(var) and by_reference(settings, env):
                out.append(Blocker("overridden", "shell environment", f"{var} is exported in the shell: Claude Code "
                                   f"sends it instead of the key conduit's {HELPER_KEY} prints",
                                   f"unset {var} (and remove its export from your shell's start-up file)"))
        return out

    def discover(self, env: Env) -> Proposal | None:
        """The gateway in the user settings' ``env`` (base URL, model, whichever auth variable is set)."""
        doc, _ = read_json_quietly(self.settings_path(env))
        cenv = _env_of(doc)
        return anthropic_proposal(self.name, cenv)


def anthropic_proposal(tool: str, cenv: dict[str, Any]) -> Proposal | None:
    """A ``Proposal`` from an Anthropic-client ``env`` object (Claude Code's settings, CC Switch's rows), or
    None when it sets no ``ANTHROPIC_BASE_URL``."""
    if not cenv.get("ANTHROPIC_BASE_URL"):
        return None
    return Proposal(tool, str(cenv["ANTHROPIC_BASE_URL"]), "anthropic", cenv.get("ANTHROPIC_MODEL"),
                    cenv.get("ANTHROPIC_AUTH_TOKEN") or cenv.get("ANTHROPIC_API_KEY"))


def _layers(env: Env, user: Path) -> list[tuple[Path, dict[str, Any], bool]]:
    """Every settings file Claude Code reads, highest first, as ``(path, document, ranks_above_user)``; a
    project file that is the user file itself (run from HOME) is listed once."""
    out = []
    project = reversed(PROJECT_SCOPE.candidates(env.cwd))  # the working folder's only, local above shared
    for path, higher in ((MANAGED_SETTINGS, True), *((p, True) for p in project), (user, False)):
        if higher and path.exists() and user.exists() and path.resolve() == user.resolve():
            continue
        doc, _ = read_json_quietly(path)
        out.append((path, doc, higher))
    return out


def _cloud_switches(docs: list[tuple[Path, dict[str, Any], bool]], env: Env) -> list[Blocker]:
    """A blocker per truthy ``CLAUDE_CODE_USE_*`` switch, from the highest settings ``env`` that sets it, else
    the shell (a settings ``env`` value beats the shell)."""
    out = []
    for var, cloud in CLOUD_SWITCHES.items():
        hit = next(((str(p), str(_env_of(d)[var])) for p, d, _ in docs if var in _env_of(d)), None)
        source, value = hit or ("shell environment", env.get(var) or "")
        if value.strip().lower() in ("1", "true", "yes", "on"):
            fix = (f"remove \"{var}\" from \"env\" in {source}" if hit else
                   f"unset {var} (and remove its export from your shell's start-up file)")
            out.append(Blocker("overridden", source, f"{var}={value} sends every request to {cloud}, not to "
                               "conduit's ANTHROPIC_BASE_URL", fix))
    return out


def _mask(var: str, value: Any) -> Any:
    return shown(value, secret=var in SECRET_VARS)


def _effective(var: str, user_env: dict[str, Any], layers: list[tuple[str, Path]], env: Env,
               user_path: Path) -> Effective:
    """Which value Claude Code will use for ``var`` and why (higher layers first; shell env lowest)."""
    for label, path in layers:
        if path.exists() and user_path.exists() and path.resolve() == user_path.resolve():
            continue  # run from HOME, the "project" file is the user file itself
        doc, _ = read_json_quietly(path)
        layer_env = _env_of(doc)
        if var in layer_env:
            return Effective(_mask(var, layer_env[var]), f"{label} ({path})", True,
                             f"{label} ranks above the user settings.json that conduit writes")
    shell = env.get(var)
    if var in user_env:
        why = "conduit's user settings.json"
        if shell is not None:
            why += f"; the exported shell value {_mask(var, shell)!s} is ignored (settings env beats the shell)"
        return Effective(_mask(var, user_env[var]), str(user_path), False, why)
    if shell is not None:
        return Effective(_mask(var, shell), "shell environment", True,
                         "not set in settings.json, so the exported variable is used")
    return Effective(None, None, False, "not set anywhere")


__all__ = ["ClaudeCode", "anthropic_env", "anthropic_proposal", "by_reference", "is_local", "limit_env", "merge_env",
           "output_limit"]
