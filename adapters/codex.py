"""Codex CLI: a conduit-owned ``[model_providers.conduit]`` table in ``$CODEX_HOME/config.toml``.

Facts (openai/codex: ``codex-rs/core/src/model_provider_info.rs``, ``codex-rs/arg0/src/lib.rs``,
``docs/config.md``; openai/codex issue #11698 and discussion #7782):
- Files: ``$CODEX_HOME/config.toml`` (``CODEX_HOME`` defaults to ``~/.codex``), TOML. Root keys must come
  before tables; tomlkit keeps the user's comments, MCP servers and other providers as they are.
- ``model_provider = "<id>"`` selects ``[model_providers.<id>]`` (``name``, ``base_url``, ``wire_api``,
  ``env_key``...). Overriding the built-in ``openai`` provider's ``base_url`` in TOML is ignored (issue
  #11698), so conduit uses its own id ``conduit``.
- Codex requests ``base_url + "/responses"`` (``wire_api = "responses"``) or ``base_url +
  "/chat/completions"`` (``"chat"``); it never adds ``/v1``, so ``base_url`` carries the version segment.
  ``"chat"`` was deprecated in late 2025 and is refused at start-up from ``CHAT_REFUSED_FROM`` on, for *any*
  provider table in the file (openai/codex issue #41816), so the default is ``responses``; ``[tools.codex]
  wire_api = "chat"`` serves older Codex versions and is written only when the installed version accepts it.
- Key: ``env_key`` names an environment variable; a missing or empty one is a hard error. The CLI loads
  ``$CODEX_HOME/.env`` at start-up and sets every variable in it (overriding the shell; names starting with
  ``CODEX_`` are refused), so conduit writes ``CONDUIT_API_KEY=<key>`` there (mode 0600) and the literal key
  stays out of config.toml. ``key_method = "inline"`` writes ``experimental_bearer_token`` in the provider
  table instead (for surfaces that do not read ``.env``); config.toml is then kept 0600. ``key_method = "env"``
  writes only ``env_key`` (a reference: no file holds the key, and a ``CONDUIT_API_KEY`` line conduit left in
  ``.env`` is removed); the person starts Codex with ``conduit run codex`` (or ``eval "$(conduit env codex
  --show-key)"``), which puts the key into its environment; started without it, Codex 0.171.0 exits 1 with
  ``Missing environment variable: `CONDUIT_API_KEY`.`` (docs/keys.md). ``auth.json`` is not
  needed: a custom provider does not ``requires_openai_auth``.
- Higher layers: ``-c``/``--config`` flags, ``--profile``/``profile = "..."`` (a profile may set its own
  ``model_provider``/``model``), a trusted project's ``.codex/config.toml`` files from the git root down to the
  working folder (``PROJECT_SCOPE``, ``project_trusted``; docs/formats/codex.md). Codex reads config.toml only
  at start-up.
- ``model_context_window = N`` (root key, tokens) tells Codex the model's context window, which it cannot know
  for a custom provider's model ("model metadata is unknown", docs/formats/real-tools.md); openai/codex
  ``docs/config.md`` ("model_context_window"), and the string is in the 0.171 binary. Codex has no output-limit
  key (no ``model_max_output_tokens`` in that binary), so ``max_output_tokens`` is not written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import tomlkit
from pydantic import BaseModel

from conduit.adapters.base import (
    AdapterDefaults,
    ClientView,
    CreateOptions,
    Effective,
    Env,
    Protocol_,
    Target,
    ToolFacts,
    ToolSettings,
)
from conduit.adapters.declarations import (
    OPENAI_BASE,
    OPENAI_FORMS,
    OPENAI_KEY,
    OPENAI_MODEL,
    Blocker,
    Competing,
    OneShot,
    Package,
)
from conduit.adapters.formats.mcpmap import mcp_secret_keys, merge_toml_servers, wanted_entries
from conduit.adapters.formats.textformats import (
    dotenv_target,
    read_dotenv,
    read_parsed,
    toml_data,
    toml_target,
)
from conduit.adapters.formats.versions import at_least, installed_version
from conduit.adapters.limits import ABSENT, LimitLedger
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport, standard_entry
from conduit.adapters.precedence import Cite, Order, ProjectScope, Rule, project_root
from conduit.redact import fingerprint

PROVIDER_ID = "conduit"
KEY_VAR = "CONDUIT_API_KEY"
SECRETS = ("experimental_bearer_token", KEY_VAR)
BINARIES = ("codex",)
CHAT_REFUSED_FROM = (0, 97, 0)
"""The first Codex release that refuses ``wire_api = "chat"`` (exit 1 at start-up, "`wire_api = "chat"` is no
longer supported"). Source: openai/codex commit d2394a2494 "chore: nuke chat/completions API" (PR #10157,
2026-02-03) replaced the chat wire API by that error in ``model_provider_info.rs``; the first release after it
is 0.97.0 (OpenRouterLabs/spawn PR #1608, 2026-02-21: ``wire_api = "responses"`` is "required by Codex
>=0.97.0"). Observed again with 0.171.0 (docs/formats/real-tools.md)."""


PROJECT_SCOPE = ProjectScope(
    (".codex/config.toml",), "root_to_cwd",
    Cite("openai/codex", "codex-rs/core/src/config_loader/mod.rs", "load_config_layers_state: project layers from "
         "the project root (project_root_markers, default .git) down to cwd, disabled unless the project is trusted; "
         "codex-rs/core/src/git_info.rs resolve_root_git_project_for_trust", "0.171.0"),
    trusted=True)
"""Codex's project files: ``.codex/config.toml`` in every folder from the project root (the git root; outside git
the working folder) down to the working folder, the nearer winning, and only in a trusted project (``trusted``)."""

MODEL_ORDER = Order(
    "model", ("-m / -c model=...", "[profiles.<profile>] model", "trusted project .codex/config.toml model",
              "$CODEX_HOME/config.toml model"),
    Cite("openai/codex", "codex-rs/core/src/config/mod.rs", "Config::load_from_base_config_with_overrides: "
         "override, then the selected profile, then the merged layers", "0.171.0"),
    note="OPENAI_MODEL and OPENAI_BASE_URL exported change nothing for model_provider = \"conduit\" (0.171.0)")
"""Where Codex takes its model from, highest first."""


def project_trusted(env: Env) -> bool:
    """Whether Codex trusts the project of ``env.cwd``: ``[projects."<path>"] trust_level = "trusted"`` in
    ``$CODEX_HOME/config.toml`` for the git root of the working folder (Codex's
    ``resolve_root_git_project_for_trust``: a subfolder's own entry is not consulted, either way: checked with
    0.171.0), or for the working folder itself outside git. Paths are compared resolved; an unreadable file
    trusts nothing."""
    doc, _ = _read_toml(codex_home(env) / "config.toml")
    projects = {str(Path(k).expanduser().resolve()): v for k, v in _table(doc, "projects").items()}
    entry = projects.get(str(project_root(env.cwd).resolve()))
    return isinstance(entry, dict) and entry.get("trust_level") == "trusted"


def project_files(env: Env) -> list[Path]:
    """The project ``.codex/config.toml`` files Codex applies from ``env.cwd``, lowest precedence first
    (``PROJECT_SCOPE``); ``[]`` in an untrusted project."""
    user = codex_home(env) / "config.toml"
    return PROJECT_SCOPE.applied(env.cwd, env.environ, lambda _cwd: project_trusted(env), skip=user)


class CodexOptions(CreateOptions):
    """``[tools.codex]`` options.

    Attributes:
        wire_api: ``responses`` (current Codex; the gateway must serve ``/v1/responses``) or ``chat`` (Codex
            versions before the chat wire API was removed).
        key_method: ``dotenv`` (``env_key`` + ``$CODEX_HOME/.env``), ``inline``
            (``experimental_bearer_token`` in config.toml) or ``env`` (``env_key`` only, a reference: start
            Codex with ``conduit run codex``, which sets ``CONDUIT_API_KEY``).
    """

    wire_api: Literal["responses", "chat"] = "responses"
    key_method: Literal["dotenv", "inline", "env"] = "dotenv"


def codex_home(env: Env) -> Path:
    """``$CODEX_HOME`` or ``~/.codex``."""
    return env.path_from("CODEX_HOME", env.home / ".codex")


def _set_root(doc: tomlkit.TOMLDocument, key: str, value: str | int) -> None:
    """Set a root key; a new one goes right after the last root key (not after a table's leading comment)."""
    if key in doc:
        if doc[key] != value:
            doc[key] = value
        return
    roots = [k for k, v in doc.items() if not isinstance(v, tomlkit.items.Table | tomlkit.items.AoT)]
    try:
        if roots:
            doc._insert_after(roots[-1], key, value)  # tomlkit's Container API: keeps the order a person reads
            return
    except Exception:  # an older or newer tomlkit without it: plain assignment is still valid TOML
        pass
    doc[key] = value


class Codex(AdapterDefaults):
    """Adapter for Codex CLI's config.toml (and its ``.env`` for the key)."""

    name: ClassVar[str] = "codex"
    writes_context: ClassVar[bool] = True  # context_window / max_output_tokens land in its files
    display_name: ClassVar[str] = "Codex CLI"
    protocol: ClassVar[Protocol_] = "openai"
    owned_keys: ClassVar[tuple[str, ...]] = (
        "config.toml: model, model_provider, model_providers.conduit.{name,base_url,wire_api,env_key,"
        "experimental_bearer_token}, model_context_window (while it is conduit's: a value the person set is kept)",
        f".env: {KEY_VAR}",
    )
    restart_hint: ClassVar[str | None] = "start a new Codex session: it reads config.toml and .env only at start-up"
    Options: ClassVar[type[BaseModel]] = CodexOptions
    env_vars: ClassVar[tuple[str, ...]] = ("CODEX_HOME", KEY_VAR, "OPENAI_BASE_URL")

    one_shot: ClassVar[OneShot | None] = OneShot(("codex",), ("exec", "--skip-git-repo-check"))
    package: ClassVar[Package | None] = Package("npm", "@openai/codex", "0.171.0", ("codex",))
    competing: ClassVar[Competing] = Competing(OPENAI_MODEL, ("CONDUIT_API_KEY", *OPENAI_KEY), OPENAI_BASE,
                                               (".codex/config.toml",))
    tool_dirs: ClassVar[Mapping[str, str]] = {"CODEX_HOME": ".codex"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = ("/api/v1/responses",)
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    precedence: ClassVar[tuple[Rule, ...]] = (PROJECT_SCOPE, MODEL_ORDER)
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.codex/config.toml", key=("mcp_servers",), format="toml", transports=frozenset({"stdio", "http"}),
        list_argv=("codex", "mcp", "list"), project_files=(".codex/config.toml",),
        source="openai/codex codex-rs/core/src/config/types.rs (McpServerConfig); `codex mcp add` 0.171.0",
        proven="`codex mcp list` (real-tool tier)")

    def mcp_path(self, env: Env) -> Path | None:
        """``config.toml`` in ``codex_home``: ``[mcp_servers.NAME]`` tables."""
        return codex_home(env) / "config.toml"

    def verify_files(self, env: Env) -> list[Path]:
        """config.toml, .env, auth.json and AGENTS.md in ``codex_home``."""
        return [codex_home(env) / n for n in ("config.toml", ".env", "auth.json", "AGENTS.md")]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets: config.toml (provider table, model, model_provider) and, for ``dotenv``, the key in .env."""
        opts = settings.options_as(CodexOptions)
        home = codex_home(env)
        self.require_dir(home, opts.create, "Codex")
        key = settings.key_or_placeholder
        inline = opts.key_method == "inline"
        wire = opts.wire_api
        notices: tuple[str, ...] = ()
        version = installed_version(BINARIES)
        if wire == "chat" and refuses_chat(version):
            wire = "responses"
            notices = (f"wrote wire_api = \"responses\", not the profile's \"chat\": the installed Codex {version} "
                       "refuses \"chat\" at start-up; the gateway must serve /v1/responses (or remove "
                       "wire_api = \"chat\" from [tools.codex] to silence this)",)
        path = home / "config.toml"
        ledger = settings.limits or LimitLedger()
        wanted: dict[str, Any] = {"name": f"conduit ({settings.channel})",
                                  "base_url": settings.root.openai_base(), "wire_api": wire}

        merge_mcp = _mcp_merger(settings, self.mcp, path)

        def transform(doc: tomlkit.TOMLDocument) -> None:
            merge_mcp(doc)
            _set_root(doc, "model", settings.model)
            _set_root(doc, "model_provider", PROVIDER_ID)
            _settle_context(doc, ledger, path, settings.context_window)
            providers = doc.get("model_providers")
            if providers is None:
                providers = tomlkit.table(is_super_table=True)
                doc["model_providers"] = providers
            table = providers.get(PROVIDER_ID)
            if table is None:
                table = tomlkit.table()
                for k, v in wanted.items():
                    table[k] = v
                table["env_key" if not inline else "experimental_bearer_token"] = KEY_VAR if not inline else key
                table.add(tomlkit.nl())
                providers[PROVIDER_ID] = table
            for k, v in wanted.items():
                if table.get(k) != v:
                    table[k] = v
            if inline:
                table.pop("env_key", None)
                if table.get("experimental_bearer_token") != key:
                    table["experimental_bearer_token"] = key
            else:
                table.pop("experimental_bearer_token", None)
                if table.get("env_key") != KEY_VAR:
                    table["env_key"] = KEY_VAR

        # config.toml holds the key only with key_method = "inline"; otherwise it keeps a world-readable mode.
        mcp_secret = any(codex_holds_secret(s) for s in settings.mcp or ())
        config = toml_target(path, transform, secret_keys={*SECRETS, *mcp_secret_keys(settings.mcp)},
                             mode=0o600 if inline or mcp_secret else 0o644, label="config.toml")
        config.notices = notices
        return [config, *_dotenv_targets(home / ".env", key, opts.key_method)]

    def run_env(self, settings: ToolSettings, env: Env) -> dict[str, str | None]:
        """``{CONDUIT_API_KEY: key}`` for ``key_method = "env"`` (the variable ``env_key`` names: ``conduit run
        codex`` and ``conduit env codex`` give it to the session); ``{}`` otherwise (files only)."""
        if settings.options_as(CodexOptions).key_method == "env":
            return {KEY_VAR: settings.key_or_placeholder}
        return {}

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: files, owned values (key masked), and what overrides conduit's choice."""
        home = codex_home(env)
        path = home / "config.toml"
        doc, error = _read_toml(path)
        provider = _table(_table(doc, "model_providers"), PROVIDER_ID)
        dotenv = _read_env(home / ".env")
        effective = _overrides(doc, path, env)
        if provider.get("env_key") == KEY_VAR and KEY_VAR not in dotenv:
            shell = env.get(KEY_VAR)
            hint = "" if shell else "; start Codex with `conduit run codex`, else it refuses to start"
            effective[KEY_VAR] = Effective(fingerprint(shell), "shell environment" if shell else None, False,
                                           f"not in {home / '.env'}{hint}")
        token = provider.get("experimental_bearer_token")
        details = {
            "file": str(path), "exists": path.exists(), "parse_error": error,
            "owned": {"model_provider": doc.get("model_provider"), "model": doc.get("model"),
                      "base_url": provider.get("base_url"), "wire_api": provider.get("wire_api"),
                      "env_key": provider.get("env_key"),
                      "experimental_bearer_token": fingerprint(token) if token else None,
                      KEY_VAR: fingerprint(dotenv.get(KEY_VAR)) if KEY_VAR in dotenv else None},
            "builtin_openai_override_ignored": "base_url" in _table(_table(doc, "model_providers"), "openai"),
            "version": installed_version(BINARIES),
        }
        if env.get("OPENAI_BASE_URL"):
            effective["OPENAI_BASE_URL"] = Effective(env.get("OPENAI_BASE_URL"), "shell environment", False,
                                                     "used only by Codex's built-in openai provider, not by "
                                                     f"model_provider = \"{PROVIDER_ID}\"")
        return ToolFacts(summary=f"{path} ({'found' if path.exists() else 'missing'})", details=details,
                         effective=effective)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """What stops Codex from using conduit's provider: a ``wire_api = "chat"`` table the installed version
        refuses, a selected ``profile`` with its own provider or model, a ``model``/``model_provider`` in a project
        ``.codex/config.toml`` Codex applies (``project_files``: trusted project, root down to the working folder)."""
        path = codex_home(env) / "config.toml"
        doc, _ = _read_toml(path)
        out = _refused(doc, path, installed_version(BINARIES))
        active = doc.get("profile")
        prof = _table(_table(doc, "profiles"), str(active)) if active else {}
        wanted = {"model_provider": PROVIDER_ID, "model": settings.model}
        for k, value in wanted.items():
            if k in prof and prof[k] != value:
                out.append(Blocker("overridden", f"{path} [profiles.{active}]",
                                   f"profile = \"{active}\" selects [profiles.{active}], whose {k} = "
                                   f"\"{prof[k]}\" replaces conduit's \"{value}\"",
                                   f"delete the line profile = \"{active}\" in {path}, or remove {k} from "
                                   f"[profiles.{active}]"))
        for k, value in wanted.items():  # the nearest project file that sets k wins
            hit = next(((p, d) for p, d in reversed([(p, _read_toml(p)[0]) for p in project_files(env)]) if k in d),
                       None)
            if hit is not None and hit[1][k] != value:
                out.append(Blocker("overridden", str(hit[0]),
                                   f"{k} = \"{hit[1][k]}\" in this trusted project's {hit[0]} ranks above ~/.codex "
                                   f"(conduit's \"{value}\")", f"remove {k} from {hit[0]}"))
        return out

    def client_view(self, env: Env) -> ClientView | None:
        """What Codex sends: the selected provider's ``base_url``, the key from ``env_key`` in ``.env`` (or the
        inline token), and ``/responses`` or ``/chat/completions`` by ``wire_api``."""
        home = codex_home(env)
        doc, _ = _read_toml(home / "config.toml")
        provider = _table(_table(doc, "model_providers"), str(doc.get("model_provider") or ""))
        if not provider.get("base_url"):
            return None
        if provider.get("experimental_bearer_token"):
            key, key_files = str(provider["experimental_bearer_token"]), (home / "config.toml",)
        else:
            key, key_files = _read_env(home / ".env").get(str(provider.get("env_key")), ""), (home / ".env",)
        endpoint = "responses" if provider.get("wire_api", "responses") == "responses" else "chat/completions"
        return ClientView(str(provider["base_url"]), key, str(doc.get("model") or ""), endpoint, key_files)


def _dotenv_targets(path: Path, key: str, key_method: str) -> list[Target]:
    """``.env``'s target: the key for ``dotenv``; for ``env``, the removal of the copy an earlier sync left (only
    when the file exists); none for ``inline``."""
    if key_method == "dotenv":
        return [dotenv_target(path, {KEY_VAR: key}, secret_keys=SECRETS, label=".env")]
    if key_method == "env" and path.is_file():
        return [dotenv_target(path, {KEY_VAR: None}, secret_keys=SECRETS, create=False, label=".env")]
    return []


def _mcp_merger(settings: ToolSettings, support: McpSupport | None,
                path: Path) -> Callable[[tomlkit.TOMLDocument], None]:
    """The step of config.toml's render that merges ``settings.mcp`` into ``[mcp_servers.NAME]``
    (``merge_toml_servers``: only conduit's entries change; nothing at all without an ``[mcp]`` profile table)."""
    servers = wanted_entries(settings.mcp, support, codex_entry) if support else None
    ledger = settings.mcp_ledger or McpLedger()
    return lambda doc: merge_toml_servers(doc, "mcp_servers", servers, ledger, path)


def codex_entry(server: McpServer) -> dict[str, Any]:
    """A ``[mcp_servers.NAME]`` table as plain data: stdio ``command``/``args``/``env``/``cwd``; streamable HTTP
    ``url``, ``bearer_token_env_var`` (the variable a bearer token came from: Codex reads it at start-up, so the
    file holds no token), ``env_http_headers`` for headers from ``{ env = ... }``, ``http_headers`` for the rest.
    Source: openai/codex ``codex-rs/core/src/config/types.rs`` (``McpServerTransportConfig``); the keys ``codex
    mcp add`` 0.171.0 writes."""
    if server.transport == "stdio":
        return standard_entry(server)  # command, args, env, cwd; no type key
    entry: dict[str, Any] = {"url": server.url}
    literal = {k: v for k, v in server.headers.items() if k not in server.env_refs}
    if server.bearer is not None and server.bearer_env:
        entry["bearer_token_env_var"] = server.bearer_env
    elif server.bearer is not None:
        literal["Authorization"] = f"Bearer {server.bearer}"
    if literal:
        entry["http_headers"] = literal
    refs = {k: server.env_refs[k] for k in server.headers if k in server.env_refs}
    if refs:
        entry["env_http_headers"] = refs
    return entry


def codex_holds_secret(server: McpServer) -> bool:
    """Whether ``codex_entry(server)`` holds a secret value itself (not a variable's name): config.toml is then
    written 0600."""
    inline_bearer = server.bearer is not None and not server.bearer_env
    return inline_bearer or any(name not in server.env_refs or name in server.env for name in server.secrets)


def _settle_context(doc: tomlkit.TOMLDocument, ledger: LimitLedger, path: Path, window: int | None) -> None:
    """``model_context_window``: ``window`` when known; unknown, conduit's own value goes (the person's earlier
    one comes back) and a value the person set or changed stays, comment and all (``conduit.adapters.limits``)."""
    ledger.begin(path)
    got = doc.get("model_context_window", ABSENT)
    current = got.unwrap() if hasattr(got, "unwrap") else got
    value = ledger.settle(path, "model_context_window", current, window)
    if value is ABSENT:
        doc.pop("model_context_window", None)
    else:
        _set_root(doc, "model_context_window", value)


def refuses_chat(version: str | None) -> bool:
    """Whether Codex ``version`` refuses ``wire_api = "chat"`` (False when the version is unknown)."""
    return at_least(version, CHAT_REFUSED_FROM)


def _refused(doc: dict[str, Any], path: Path, version: str | None) -> list[Blocker]:
    """A ``refused`` blocker for each provider table with ``wire_api = "chat"`` when ``version`` refuses it
    (Codex then refuses the whole config, even for a provider it does not use: openai/codex #41816)."""
    if not refuses_chat(version):
        return []
    out = []
    for pid, table in _table(doc, "model_providers").items():
        if isinstance(table, dict) and table.get("wire_api") == "chat":
            fix = ("run `conduit sync` (it writes \"responses\" for this version)" if pid == PROVIDER_ID else
                   f"set wire_api = \"responses\" in [model_providers.{pid}] of {path}, or delete that table")
            out.append(Blocker("refused", f"{path} [model_providers.{pid}]",
                               f"Codex {version} refuses wire_api = \"chat\" and then ignores the whole config.toml "
                               "(it exits at start-up)", fix))
    return out


def _read_toml(path: Path) -> tuple[dict[str, Any], str | None]:
    """A TOML file as plain data and None; ``({}, None)`` when missing; ``({}, message)`` when unreadable."""
    return read_parsed(path, toml_data)


def _read_env(path: Path) -> dict[str, str]:
    try:
        return read_dotenv(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return {}


def _table(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def _overrides(doc: dict[str, Any], path: Path, env: Env) -> dict[str, Effective]:
    """The layers above ``config.toml``'s root keys: the active ``profile``, a trusted project's config."""
    effective: dict[str, Effective] = {}
    active = doc.get("profile")
    prof = _table(doc, "profiles").get(active) if active else None
    for k in ("model_provider", "model"):
        if isinstance(prof, dict) and k in prof:
            effective[k] = Effective(prof[k], f"{path} [profiles.{active}]", prof[k] != doc.get(k),
                                     f"profile = \"{active}\" selects a profile that sets its own value")
    for project in project_files(env):  # nearest last: it wins
        pdoc, _ = _read_toml(project)
        if "model" in pdoc:
            effective["model"] = Effective(pdoc["model"], str(project), pdoc["model"] != doc.get("model"),
                                           "a trusted project's .codex/config.toml ranks above ~/.codex")
    return effective


__all__ = ["CHAT_REFUSED_FROM", "Codex", "CodexOptions", "codex_entry", "codex_holds_secret", "codex_home",
           "refuses_chat"]
