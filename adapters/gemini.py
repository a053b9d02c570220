"""Gemini CLI: ``~/.gemini/.env`` (gateway URL, key, model) and the auth type in ``~/.gemini/settings.json``.

Facts (google-gemini/gemini-cli ``packages/cli/src/config/settings.ts`` ``findEnvFile``/``loadEnvironment``/
``loadSettings``; the ``@google/genai`` SDK's environment variables):
- ``.env``: the first found of ``<dir>/.gemini/.env`` then ``<dir>/.env`` walking up from the working
  directory, then ``~/.gemini/.env``, then ``~/.env``. Only that one file is loaded, and a variable is set
  only when the real environment does not already have it: an exported variable outranks every file, and a
  project ``.env`` hides ``~/.gemini/.env`` completely. ``inspect`` reports both. ``~`` is ``$GEMINI_CLI_HOME``
  when set.
- ``GOOGLE_GEMINI_BASE_URL``: the SDK's base URL for the Gemini API; it appends ``/<apiVersion>/models/...``
  (``v1beta``), so the value is the gateway root without a version segment. ``GEMINI_API_KEY``: the key
  (``x-goog-api-key``). ``GEMINI_MODEL``: the default model.
- ``settings.json`` is JSON with comments (read through ``strip-json-comments``); nested format (>= 0.3):
  ``security.auth.selectedType``; the flat format before it: ``selectedAuthType``. ``"gemini-api-key"`` makes
  the CLI use ``GEMINI_API_KEY``. Layers: system defaults < user < workspace ``.gemini/settings.json`` <
  system ``/etc/gemini-cli/settings.json``.
- Environment and settings are read at start-up: restart running sessions.
- Folder trust decides whether any of this is read (``conduit.adapters.formats.trustedfolders``): ``[tools.gemini]
  trust = ["~/src", ...]`` adds those folders to ``trustedFolders.json`` as ``TRUST_FOLDER``, and doctor says
  ``untrusted`` for a working folder Gemini CLI does not trust.
- No context-window or output-limit key is written (read in the ``@google/gemini-cli`` 0.61.0 bundle,
  ``bundle/chunk-*.js``): a model's window is a fixed table in ``tokenLimit`` (1048576 for a model id it does
  not know), with no setting for it; ``model.compressionThreshold`` (default 0.5) is a fraction of that fixed
  figure, not a token count; the main chat sends no ``maxOutputTokens`` unless a ``modelConfigs`` override adds
  one, so no default output limit can overflow a small server. ``writes_context`` stays False.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field, field_validator

from conduit.adapters.base import (
    AdapterDefaults,
    CreateOptions,
    Effective,
    Env,
    Protocol_,
    Target,
    ToolFacts,
    ToolSettings,
)
from conduit.adapters.declarations import Blocker, Competing, OneShot, Package
from conduit.adapters.formats import trustedfolders as trust
from conduit.adapters.formats.masking import shown
from conduit.adapters.formats.mcpmap import jsonc_server_edits, mcp_secret_keys, wanted_entries
from conduit.adapters.formats.textformats import (
    dotenv_target,
    jsonc_target,
    parse_jsonc,
    read_dotenv,
    tool_version,
)
from conduit.adapters.mcp import McpLedger, McpSupport, standard_entry
from conduit.errors import ToolFileError

ENV_VARS = ("GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY", "GEMINI_MODEL")
SECRETS = ("GEMINI_API_KEY",)
AUTH_TYPE = "gemini-api-key"


class GeminiOptions(CreateOptions):
    """``[tools.gemini]`` options.

    Attributes:
        trust: folders (absolute, or starting with ``~``) to add to ``trustedFolders.json`` as ``TRUST_FOLDER``
            (each folder and everything below it); the user's own entries are never removed or changed.
    """

    trust: list[str] = Field(default_factory=list)

    @field_validator("trust")
    @classmethod
    def _absolute(cls, value: list[str]) -> list[str]:
        for entry in value:
            text = entry.strip()
            if not (text.startswith("/") or text == "~" or text.startswith("~/")):
                raise ValueError(f"trust entry {entry!r} is not an absolute folder: write it as \"/path\" or "
                                 "\"~/path\"")
        return value


def gemini_dir(env: Env) -> Path:
    """``$GEMINI_CLI_HOME/.gemini`` or ``~/.gemini``."""
    return env.path_from("GEMINI_CLI_HOME", env.home) / ".gemini"


def env_file_used(env: Env) -> Path | None:
    """The one .env file Gemini CLI will load from ``env.cwd`` (its ``findEnvFile``), or None."""
    home = gemini_dir(env).parent
    d = env.cwd.resolve() if env.cwd.exists() else env.cwd
    while True:
        for candidate in (d / ".gemini" / ".env", d / ".env"):
            if candidate.exists():
                return candidate
        if d.parent == d:
            break
        d = d.parent
    for candidate in (home / ".gemini" / ".env", home / ".env"):
        if candidate.exists():
            return candidate
    return None


class Gemini(AdapterDefaults):
    """Adapter for Gemini CLI's user ``.env`` and ``settings.json``."""

    name: ClassVar[str] = "gemini"
    display_name: ClassVar[str] = "Gemini CLI"
    protocol: ClassVar[Protocol_] = "gemini"
    owned_keys: ClassVar[tuple[str, ...]] = (
        ".gemini/.env: GOOGLE_GEMINI_BASE_URL, GEMINI_API_KEY, GEMINI_MODEL",
        ".gemini/settings.json: security.auth.selectedType (or the flat selectedAuthType of older versions)",
    )
    restart_hint: ClassVar[str | None] = "restart running Gemini CLI sessions: it reads .env and settings.json at start-up"
    Options: ClassVar[type[BaseModel]] = GeminiOptions
    env_vars: ClassVar[tuple[str, ...]] = ("GEMINI_CLI_HOME", *ENV_VARS, *trust.ENV_VARS)

    one_shot: ClassVar[OneShot | None] = OneShot(("gemini",), ("-p",), untrusted_exits=(41, 55))
    package: ClassVar[Package | None] = Package("npm", "@google/gemini-cli", "0.61.0", ("gemini",))
    # An exported variable outranks every .env file; a project .env hides ~/.gemini/.env (findEnvFile walks up).
    competing: ClassVar[Competing] = Competing(("GEMINI_MODEL",), ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
                                               ("GOOGLE_GEMINI_BASE_URL",),
                                               (".gemini/.env", ".env", ".gemini/settings.json"),
                                               walks_up=(".gemini/.env", ".env"))
    tool_dirs: ClassVar[Mapping[str, str]] = {"GEMINI_CLI_HOME": "."}
    base_forms: ClassVar[tuple[str, ...]] = ("/api", "/api/v1", "/api/v1beta")
    model_routes: ClassVar[tuple[str, ...]] = ("/api/v1beta/models/{model}:streamGenerateContent",
                                               "/api/v1beta/models/{model}:generateContent")
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.gemini/settings.json", key=("mcpServers",), format="jsonc",
        transports=frozenset({"stdio", "http", "sse"}), list_argv=("gemini", "mcp", "list"),
        project_files=(".gemini/settings.json",),
        source="google-gemini/gemini-cli docs/tools/mcp-server.md (mcpServers); `gemini mcp add` 0.61.0",
        proven="`gemini mcp list` (real-tool tier)")

    def mcp_path(self, env: Env) -> Path | None:
        """``settings.json`` in ``gemini_dir``: its ``mcpServers`` object."""
        return gemini_dir(env) / "settings.json"

    def verify_files(self, env: Env) -> list[Path]:
        """.env, settings.json, trustedFolders.json and GEMINI.md in ``gemini_dir``, and the ``.env`` beside it."""
        d = gemini_dir(env)
        return [d / n for n in (".env", "settings.json", "trustedFolders.json", "GEMINI.md")] + [d.parent / ".env"]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets: the three variables in ``.gemini/.env``; the auth type in ``settings.json`` (JSONC kept)."""
        opts = settings.options_as(GeminiOptions)
        d = gemini_dir(env)
        self.require_dir(d, opts.create)
        wanted = {"GOOGLE_GEMINI_BASE_URL": settings.root.url,
                  "GEMINI_API_KEY": settings.key_or_placeholder,
                  "GEMINI_MODEL": settings.model}

        servers = wanted_entries(settings.mcp, self.mcp, standard_entry) if self.mcp else None
        ledger, settings_path = settings.mcp_ledger or McpLedger(), d / "settings.json"

        def auth_edits(doc: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
            mcp = jsonc_server_edits(doc, ("mcpServers",), servers, ledger, settings_path)
            if "selectedAuthType" in doc and not isinstance(doc.get("security"), dict):
                return [(("selectedAuthType",), AUTH_TYPE), *mcp]  # the flat format of versions before 0.3
            return [(("security", "auth", "selectedType"), AUTH_TYPE), *mcp]

        targets: list[Target] = [
            dotenv_target(d / ".env", wanted, secret_keys=SECRETS, label=".env"),
            jsonc_target(settings_path, auth_edits, secret_keys={*SECRETS, *mcp_secret_keys(settings.mcp)},
                         mode=0o600 if any(s.holds_secret() for s in settings.mcp or ()) else 0o644,
                         label="settings.json", no_trailing_commas="Gemini CLI"),  # no key unless an MCP one
        ]
        if opts.trust:
            folders = [trust.expand(f, env) for f in opts.trust]
            targets.append(jsonc_target(trust.folders_path(env, d), trust.trust_edits(folders), secret_keys=(),
                                        mode=0o600, label="trustedFolders.json", no_trailing_commas="Gemini CLI"))
        return targets

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: which .env Gemini CLI really loads, and each variable's effective value and source."""
        d = gemini_dir(env)
        used = env_file_used(env)
        try:
            values = read_dotenv(trust.read_text_bounded(used)) if used else {}
        except (ToolFileError, OSError, UnicodeDecodeError):
            values = {}
        effective = {var: _effective(var, env, values, used, d / ".env") for var in ENV_VARS}
        settings_path = d / "settings.json"
        try:
            doc, error = parse_jsonc(trust.read_text_bounded(settings_path), path=settings_path), None
        except FileNotFoundError:
            doc, error = {}, None
        except (ToolFileError, OSError, UnicodeDecodeError) as exc:
            doc, error = {}, str(exc)
        auth = ((doc.get("security") or {}).get("auth") or {}).get("selectedType") or doc.get("selectedAuthType")
        model = doc.get("model")
        details = {"dir": str(d), "env_file": str(d / ".env"), "env_file_used": str(used) if used else None,
                   "settings": str(settings_path), "parse_error": error, "auth_type": auth,
                   "model_in_settings": model.get("name") if isinstance(model, dict) else model,
                   "version": tool_version("gemini"),
                   "trust": {"folder": str(env.cwd), **trust.decide(env.cwd, env, d).as_dict()}}
        return ToolFacts(summary=f"{d}; .env loaded: {used or 'none'}", details=details, effective=effective)


    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """An untrusted working folder; a variable exported with another value; a project ``.env`` that hides
        ``~/.gemini/.env`` (Gemini CLI loads only the first one it finds)."""
        d = gemini_dir(env)
        out = []
        verdict = trust.decide(env.cwd, env, d)
        if not verdict.trusted:
            out.append(Blocker("untrusted", str(trust.folders_path(env, d)),
                               f"Gemini CLI does not trust {env.cwd} ({verdict.source}): there it reads neither "
                               "~/.gemini/.env nor a base URL or model from any .env, and a headless run exits 41",
                               _trust_fix(verdict, settings, env, d)))
        wanted = {"GOOGLE_GEMINI_BASE_URL": settings.root.url, "GEMINI_API_KEY": settings.key_or_placeholder,
                  "GEMINI_MODEL": settings.model}
        for var, value in wanted.items():
            shell = env.get(var)
            if shell is not None and shell != value:
                out.append(Blocker("overridden", "shell environment",
                                   f"{var} is exported as {shown(shell, secret=var in SECRETS)}; Gemini CLI never "
                                   "lets a .env file replace an exported variable",
                                   f"unset {var} (and remove its export from your shell's start-up file)"))
        used, ours = env_file_used(env), d / ".env"
        if verdict.trusted and used is not None and used != ours:
            try:
                values = read_dotenv(trust.read_text_bounded(used))
            except (ToolFileError, OSError, UnicodeDecodeError):
                values = {}
            differ = [v for v, value in wanted.items() if env.get(v) is None and values.get(v) != value]
            if differ:
                out.append(Blocker("overridden", str(used),
                                   f"Gemini CLI loads only the first .env it finds: {used} hides {ours}, so "
                                   f"{', '.join(differ)} do not come from conduit",
                                   f"remove {used} (or its {', '.join(differ)} lines and add conduit's), or run "
                                   "Gemini CLI from another folder"))
        return out


def _trust_fix(verdict: trust.Verdict, settings: ToolSettings, env: Env, d: Path) -> str:
    """How to trust ``env.cwd``, for the verdict that left it untrusted."""
    if verdict.error is not None:
        return f"fix {trust.folders_path(env, d)} by hand: Gemini CLI refuses to start while it is invalid"
    if verdict.level == "DO_NOT_TRUST":
        return (f"the entry \"{verdict.rule}\": \"DO_NOT_TRUST\" is yours and conduit never changes it: set it to "
                f"\"TRUST_FOLDER\" in {trust.folders_path(env, d)}, or export GEMINI_CLI_TRUST_WORKSPACE=true")
    folders = [trust.expand(f, env) for f in settings.options_as(GeminiOptions).trust]
    if trust.deciding_rule(env.cwd, dict.fromkeys(folders, "TRUST_FOLDER")) is not None:
        return "run `conduit sync`: [tools.gemini] trust covers this folder but trustedFolders.json lacks it"
    return (f"add trust = [\"{env.cwd}\"] (or a folder above it, such as \"~/src\") to [tools.gemini] in the "
            "profile and run `conduit sync`; or run `gemini` here once and choose \"Trust folder\"; or export "
            "GEMINI_CLI_TRUST_WORKSPACE=true")


def _effective(var: str, env: Env, values: dict[str, str], used: Path | None, ours: Path) -> Effective:
    """Where Gemini CLI takes ``var`` from: an exported variable, else the one .env file it loads."""
    shell = env.get(var)
    secret = var in SECRETS
    if shell is not None:
        return Effective(shown(shell, secret=secret), "shell environment", True,
                         "Gemini CLI never lets a .env file replace an exported variable")
    value = shown(values.get(var), secret=secret)
    if used is not None and used != ours:
        return Effective(value, str(used), True, f"Gemini CLI loads only the first .env it finds; {used} hides {ours}")
    return Effective(value, str(ours) if var in values else None, False,
                     "conduit's ~/.gemini/.env" if var in values else "not set anywhere")


__all__ = ["Gemini", "GeminiOptions", "env_file_used", "gemini_dir"]
