"""Qwen Code: conduit's ``modelProviders.openai`` entry and the selected model in ``~/.qwen/settings.json``; the
key in ``~/.qwen/.env``, referenced by the entry's ``envKey``.

Facts, read in the npm package ``@qwen-code/qwen-code`` 0.24.4 (its bundled ``chunks/*.js``; the sources they
name are QwenLM/qwen-code ``packages/cli/src/config/settings.ts``, ``environment.ts``, ``settingsSchema.ts`` and
``packages/core/src/models/modelConfigResolver.ts``) and QwenLM/qwen-code ``docs/users/configuration/
model-providers.md``; proven with the 0.24.4 binary (docs/formats/qwen.md):
- Directory: ``$QWEN_HOME`` (``~`` expanded), else ``~/.qwen`` (``Storage.getGlobalQwenDir``). ``settings.json``
  is read through ``strip-json-comments`` and ``JSON.parse``: comments are fine, a trailing comma is not. Layers,
  later wins: ``system-defaults.json`` < user < workspace ``<cwd>/.qwen/settings.json`` (not when the working
  folder is the home folder) < system ``$QWEN_CODE_SYSTEM_SETTINGS_PATH`` or ``/etc/qwen-code/settings.json``;
  ``modelProviders`` is merged by replacement (a workspace's list replaces the user's whole). At start-up Qwen
  Code adds ``"$version": 4`` to a settings file that lacks it, keeping its layout.
- ``security.auth.selectedType = "openai"`` picks the OpenAI protocol; ``model.name`` the model (it ranks above
  ``OPENAI_MODEL``/``QWEN_MODEL``); ``model.baseUrl`` chooses among ``modelProviders`` entries sharing an id
  (the first entry with that id is used otherwise). The chosen ``modelProviders.openai[]`` entry
  (``{"id", "name", "baseUrl", "envKey", "generationConfig"}``) gives the base URL (above ``OPENAI_BASE_URL``)
  and the key ``process.env[envKey]`` (above ``OPENAI_API_KEY``). The OpenAI SDK requests
  ``baseUrl + "/chat/completions"``: ``baseUrl`` carries the version segment.
- ``.env`` files (``environment.ts`` ``findEnvFiles``/``loadEnvironment``): walking up from the working folder,
  the first ``.qwen/.env`` or ``.env`` found (when the folder is trusted), then ``$QWEN_HOME/.env`` (or
  ``~/.qwen/.env``) and ``~/.env``, always; a variable is set only when the environment lacks it (the first file
  wins). conduit writes ``CONDUIT_API_KEY`` into ``~/.qwen/.env`` (0600) and ``envKey = "CONDUIT_API_KEY"``;
  with ``key_source = "env"`` only ``envKey`` (a reference: ``conduit run qwen`` sets the variable).
- Limits: ``generationConfig.contextWindowSize`` (tokens) and ``generationConfig.samplingParams.max_tokens``
  (the output ceiling; without it Qwen Code sends its own ``max_tokens``) in the model's entry.
- Folder trust is off by default (``security.folderTrust.enabled``); when on, an untrusted folder loses its
  workspace settings and project ``.env`` files, not the user's: conduit's files still apply.
- Opt-outs: ``QWEN_USAGE_STATISTICS_ENABLED=false`` (above ``privacy.usageStatisticsEnabled``) and
  ``QWEN_TELEMETRY_ENABLED=false`` (above ``telemetry.enabled``), both read in ``packages/cli/src/config/config.ts``.
- MCP servers: ``mcpServers`` in the same ``settings.json`` (``qwen_entry``; docs/formats/qwen.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from conduit.adapters.base import (
    AdapterDefaults,
    Blocker,
    ClientView,
    CreateOptions,
    Env,
    Protocol_,
    Target,
    ToolFacts,
    ToolSettings,
)
from conduit.adapters.declarations import OPENAI_FORMS, OPENAI_ROUTES, Competing, OneShot, Package
from conduit.adapters.formats.masking import shown
from conduit.adapters.formats.mcpmap import jsonc_server_edits, mcp_secret_keys, wanted_entries
from conduit.adapters.formats.mcpshapes import needs_private, referenced
from conduit.adapters.formats.textformats import (
    dotenv_target,
    jsonc_target,
    parse_jsonc,
    read_dotenv,
    read_parsed,
)
from conduit.adapters.formats.versions import installed_version
from conduit.adapters.limits import ABSENT, LimitLedger
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport
from conduit.adapters.precedence import Rule
from conduit.adapters.qwen_precedence import DEFAULTS_VAR, FOLDERS_VAR, RULES, project_blockers

AUTH_TYPE = "openai"
KEY_VAR = "CONDUIT_API_KEY"
BINARIES = ("qwen",)
HOME_VAR = "QWEN_HOME"
SYSTEM_VAR = "QWEN_CODE_SYSTEM_SETTINGS_PATH"
SYSTEM_DEFAULT = Path("/etc/qwen-code/settings.json")


class QwenOptions(CreateOptions):
    """``[tools.qwen]`` options.

    Attributes:
        key_source: ``dotenv`` (the key in ``.env`` beside settings.json, 0600; ``envKey`` names it) or ``env``
            (``envKey`` only, a reference: start Qwen Code with ``conduit run qwen``, which sets
            ``CONDUIT_API_KEY``; a ``CONDUIT_API_KEY`` line conduit left in that ``.env`` is removed).
    """

    key_source: Literal["dotenv", "env"] = "dotenv"


def qwen_dir(env: Env) -> Path:
    """``$QWEN_HOME`` (``~`` expanded; a relative one from the working folder) or ``~/.qwen``."""
    base = env.get(HOME_VAR)
    if not base:
        return env.home / ".qwen"
    path = env.home / base[2:] if base.startswith("~/") else (env.home if base == "~" else Path(base))
    return path if path.is_absolute() else env.cwd / path


def _read(path: Path) -> tuple[dict[str, Any], str | None]:
    """A settings file: (document, None); ``({}, None)`` when missing; ``({}, message)`` when unreadable."""
    return read_parsed(path, parse_jsonc)


def _dig(doc: Any, *keys: str) -> Any:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def _entries(doc: dict[str, Any]) -> list[Any]:
    found = _dig(doc, "modelProviders", AUTH_TYPE)
    return found if isinstance(found, list) else []


def _ours(entry: Any) -> bool:
    """conduit's entries are those whose ``envKey`` is conduit's variable."""
    return isinstance(entry, dict) and entry.get("envKey") == KEY_VAR


class Qwen(AdapterDefaults):
    """Adapter for Qwen Code's user ``settings.json`` and ``.env``."""

    name: ClassVar[str] = "qwen"
    display_name: ClassVar[str] = "Qwen Code"
    protocol: ClassVar[Protocol_] = "openai"
    writes_context: ClassVar[bool] = True  # contextWindowSize / samplingParams.max_tokens of conduit's entry
    owned_keys: ClassVar[tuple[str, ...]] = (
        "settings.json: security.auth.selectedType, model.name, model.baseUrl, the modelProviders.openai entries "
        f"with envKey = \"{KEY_VAR}\" (id, name, baseUrl, envKey; generationConfig.contextWindowSize and "
        "samplingParams.max_tokens while they are conduit's)",
        f".env: {KEY_VAR}",
    )
    restart_hint: ClassVar[str | None] = "start a new Qwen Code session: it reads settings.json and .env at start-up"
    Options: ClassVar[type[BaseModel]] = QwenOptions
    env_vars: ClassVar[tuple[str, ...]] = (HOME_VAR, SYSTEM_VAR, KEY_VAR, DEFAULTS_VAR, FOLDERS_VAR)
    precedence: ClassVar[tuple[Rule, ...]] = RULES  # conduit.adapters.qwen_precedence

    # The two variables: packages/cli/src/config/config.ts (usageStatisticsEnabled, resolveTelemetrySettings).
    one_shot: ClassVar[OneShot | None] = OneShot(BINARIES, ("-p",), opt_outs={
        "QWEN_USAGE_STATISTICS_ENABLED": "false", "QWEN_TELEMETRY_ENABLED": "false"})
    package: ClassVar[Package | None] = Package("npm", "@qwen-code/qwen-code", "0.24.4", BINARIES)
    # OPENAI_* variables rank below a modelProviders entry; an exported CONDUIT_API_KEY ranks above the .env.
    competing: ClassVar[Competing] = Competing(key=(KEY_VAR,), files=(".qwen/settings.json", ".qwen/.env", ".env"),
                                               walks_up=(".qwen/.env", ".env"))
    tool_dirs: ClassVar[Mapping[str, str]] = {HOME_VAR: ".qwen"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.qwen/settings.json", key=("mcpServers",), format="jsonc",
        transports=frozenset({"stdio", "http", "sse"}), list_argv=("qwen", "mcp", "list"),
        project_files=(".qwen/settings.json",),
        source="QwenLM/qwen-code packages/cli/src/config/settingsSchema.ts (mcpServers), "
               "packages/core/src/utils/envVarResolver.ts; `qwen mcp add` 0.24.4",
        proven="`qwen mcp list` 0.24.4 (real-tool tier)")

    def mcp_path(self, env: Env) -> Path | None:
        """``settings.json`` in ``qwen_dir``: its ``mcpServers`` object."""
        return qwen_dir(env) / "settings.json"

    def verify_files(self, env: Env) -> list[Path]:
        """``trustedFolders.json`` and ``QWEN.md`` in ``qwen_dir`` and the ``.env`` beside it."""
        d = qwen_dir(env)
        return [d / "trustedFolders.json", d / "QWEN.md", env.home / ".env"]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets: the key in ``.env``; auth type, model and conduit's provider entries in ``settings.json``."""
        opts = settings.options_as(QwenOptions)
        d = qwen_dir(env)
        self.require_dir(d, opts.create)
        path = d / "settings.json"
        base_url = settings.root.openai_base()
        ledger = settings.limits or LimitLedger()
        servers = wanted_entries(settings.mcp, self.mcp, qwen_entry) if self.mcp else None
        mcp_ledger = settings.mcp_ledger or McpLedger()

        def edits(doc: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
            ledger.begin(path)
            return [(("security", "auth", "selectedType"), AUTH_TYPE), (("model", "name"), settings.model),
                    (("model", "baseUrl"), base_url),
                    (("modelProviders", AUTH_TYPE), _provider_list(doc, settings, base_url, ledger, path)),
                    *jsonc_server_edits(doc, ("mcpServers",), servers, mcp_ledger, path)]

        private = needs_private(settings.mcp, REF)  # the model key is in .env; an MCP secret may be here
        by_env = opts.key_source == "env"
        dotenv: list[Target] = [] if by_env and not (d / ".env").is_file() else [
            dotenv_target(d / ".env", {KEY_VAR: None if by_env else settings.key_or_placeholder},
                          secret_keys=(KEY_VAR,), create=not by_env, label=".env")]
        return [*dotenv, jsonc_target(path, edits, secret_keys={KEY_VAR, *mcp_secret_keys(settings.mcp)},
                                      mode=0o600 if private else 0o644, label="settings.json",
                                      no_trailing_commas="Qwen Code")]

    def run_env(self, settings: ToolSettings, env: Env) -> dict[str, str | None]:
        """``{CONDUIT_API_KEY: key}`` for ``key_source = "env"`` (the variable ``envKey`` names: ``conduit run qwen``
        and ``conduit env qwen`` give it to the session); ``{}`` otherwise (files only)."""
        if settings.options_as(QwenOptions).key_source == "env":
            return {KEY_VAR: settings.key_or_placeholder}
        return {}

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the files, the owned values (key masked) and the version."""
        d = qwen_dir(env)
        doc, error = _read(d / "settings.json")
        entry = _selected(doc)
        dotenv = _read_env(d / ".env")
        details = {"dir": str(d), "settings": str(d / "settings.json"), "parse_error": error,
                   "owned": {"selectedType": _dig(doc, "security", "auth", "selectedType"),
                             "model.name": _dig(doc, "model", "name"), "model.baseUrl": _dig(doc, "model", "baseUrl"),
                             "baseUrl": entry.get("baseUrl"), "envKey": entry.get("envKey"),
                             KEY_VAR: shown(dotenv.get(KEY_VAR), secret=True) if KEY_VAR in dotenv else None},
                   "version": installed_version(BINARIES)}
        return ToolFacts(summary=f"{d} ({'found' if d.is_dir() else 'missing'})", details=details)

    def client_view(self, env: Env) -> ClientView | None:
        """What Qwen Code sends: the selected ``modelProviders.openai`` entry's ``baseUrl``, the value of its
        ``envKey`` (exported, else from ``~/.qwen/.env``, else ``~/.env``), ``model.name``."""
        d = qwen_dir(env)
        doc, _ = _read(d / "settings.json")
        entry = _selected(doc)
        if _dig(doc, "security", "auth", "selectedType") != AUTH_TYPE or not entry.get("baseUrl"):
            return None
        var = str(entry.get("envKey") or "OPENAI_API_KEY")
        key: str = env.get(var) or ""
        key_files: tuple[Path, ...] = ()
        if not key:
            for candidate in (d / ".env", env.home / ".env"):
                value = _read_env(candidate).get(var)
                if value:
                    key, key_files = value, (candidate,)
                    break
        return ClientView(str(entry["baseUrl"]), key, str(entry.get("id") or ""), "chat/completions", key_files)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """An exported ``CONDUIT_API_KEY`` with another value, a project ``.env`` that sets it first, and the
        workspace or system settings that replace the auth type, the model or the provider list, each as Qwen Code
        really applies it (``conduit.adapters.qwen_precedence``: the walk up for ``.env``, folder trust, a
        ``model.name`` only where an entry offers it)."""
        out: list[Blocker] = []
        shell = env.get(KEY_VAR)
        if shell is not None and shell != settings.key_or_placeholder:
            out.append(Blocker("overridden", "shell environment", f"{KEY_VAR} is exported as "
                               f"{shown(shell, secret=True)}; Qwen Code never lets a .env file replace an exported "
                               "variable", f"unset {KEY_VAR}"))
        wanted = {"security.auth.selectedType": AUTH_TYPE, "model.name": settings.model,
                  "model.baseUrl": settings.root.openai_base()}
        return out + project_blockers(env, qwen_dir(env), wanted, shell, _ours)


REF = "${%s}"
"""Qwen Code expands ``$VAR`` and ``${VAR}`` in every string of ``settings.json`` when it loads it
(``packages/core/src/utils/envVarResolver.ts``), so a value from ``{ env = "VAR" }`` is written as ``${VAR}``."""


def qwen_entry(server: McpServer) -> dict[str, Any]:
    """Qwen Code's ``mcpServers.NAME`` (``MCPServerConfig``, what ``qwen mcp add`` 0.24.4 writes):
    ``{"command", "args", "env", "cwd"}``; streamable HTTP ``{"httpUrl", "headers"}``; SSE ``{"url", "headers"}``."""
    env, headers = referenced(server, REF)
    if server.transport == "stdio":
        entry: dict[str, Any] = {"command": server.command}
        entry.update({k: v for k, v in (("args", list(server.args)), ("env", env)) if v})
        return entry | ({"cwd": server.cwd} if server.cwd is not None else {})
    url_key = "httpUrl" if server.transport == "http" else "url"
    return {url_key: server.url, **({"headers": headers} if headers else {})}


def _provider_list(doc: dict[str, Any], settings: ToolSettings, base_url: str, ledger: LimitLedger,
                   path: Path) -> list[Any]:
    """``modelProviders.openai`` with conduit's entries first (one per profile model, keeping keys a person added
    to them), then every other entry in its order."""
    current = _entries(doc)
    known = {e.get("id"): e for e in current if _ours(e)}
    ids = [settings.model] + ([settings.small_model] if settings.small_model
                              and settings.small_model != settings.model else [])
    ours = []
    for mid in ids:
        entry = {**known.get(mid, {}), "id": mid, "name": f"{mid} (conduit {settings.channel})", "baseUrl": base_url,
                 "envKey": KEY_VAR}
        ours.append(_with_limits(entry, settings, ledger, path) if mid == settings.model else entry)
    return ours + [e for e in current if not _ours(e)]


def _with_limits(entry: dict[str, Any], settings: ToolSettings, ledger: LimitLedger, path: Path) -> dict[str, Any]:
    """``entry`` with ``generationConfig.contextWindowSize`` and ``generationConfig.samplingParams.max_tokens``
    settled (``conduit.adapters.limits``); an emptied ``samplingParams`` or ``generationConfig`` goes. A value
    that is not an object where conduit expects one is the person's and is left alone."""
    got = entry.get("generationConfig")
    if not isinstance(got, dict | None):
        return entry
    gen = dict(got or {})
    _settle(gen, "contextWindowSize", ledger.settle(path, "contextWindowSize", gen.get("contextWindowSize", ABSENT),
                                                    settings.context_window))
    params = gen.get("samplingParams")
    if isinstance(params, dict | None):
        sp = dict(params or {})
        _settle(sp, "max_tokens", ledger.settle(path, "max_tokens", sp.get("max_tokens", ABSENT),
                                                settings.max_output_tokens))
        _settle(gen, "samplingParams", sp or ABSENT)
    out = {k: v for k, v in entry.items() if k != "generationConfig"}
    return {**out, "generationConfig": gen} if gen else out


def _settle(doc: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` to ``value``, or remove it when ``value`` is ``ABSENT``."""
    if value is ABSENT:
        doc.pop(key, None)
    else:
        doc[key] = value


def _selected(doc: dict[str, Any]) -> dict[str, Any]:
    """The ``modelProviders.openai`` entry Qwen Code picks for ``model.name``: the one whose ``baseUrl`` is
    ``model.baseUrl``, else the first with that id; ``{}`` for none."""
    name, base = _dig(doc, "model", "name"), _dig(doc, "model", "baseUrl")
    same = [e for e in _entries(doc) if isinstance(e, dict) and e.get("id") == name]
    exact = [e for e in same if base and e.get("baseUrl") == base]
    return (exact or same or [{}])[0]


def _read_env(path: Path) -> dict[str, str]:
    try:
        return read_dotenv(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return {}


__all__ = ["Qwen", "QwenOptions", "qwen_dir", "qwen_entry"]
