"""OpenClaw: a conduit provider in ``openclaw.json``, its key read from conduit's own key file.

Facts (npm ``openclaw@2026.9.6``: its ``dist/`` bundle, whose region comments name the source files, and its
``docs/``; facts in docs/formats/openclaw.md):
- File (``src/config/paths.ts``, ``src/config/state-dir.ts``): ``$OPENCLAW_CONFIG_PATH`` when set; else the
  first existing of ``$OPENCLAW_STATE_DIR/{openclaw,clawdbot}.json`` (when that variable is set),
  ``~/.openclaw/{openclaw,clawdbot}.json``, ``~/.clawdbot/{openclaw,clawdbot}.json``; else ``openclaw.json`` in
  the state directory (``$OPENCLAW_STATE_DIR``, else ``~/.openclaw``). ``~`` is ``$OPENCLAW_HOME`` when set,
  else ``$HOME``. JSON5 (docs ``gateway/configuration.md``); OpenClaw writes it as plain JSON, mode 0600. conduit
  edits it as JSON with comments and trailing commas (comments and order kept); a file using JSON5-only syntax
  (unquoted keys, single quotes) is refused, unchanged. OpenClaw refuses unknown keys (strict validation), so
  conduit writes only documented ones.
- Provider (docs ``gateway/config-tools/custom-providers.md``): ``models.providers.<id> = {baseUrl, apiKey, api,
  models: [{id, name, contextWindow, maxTokens}]}``; ``api = "openai-completions"`` requests
  ``baseUrl + "/chat/completions"`` (the OpenAI SDK), so ``baseUrl`` carries the version segment. The model is
  ``agents.defaults.model``: a ``"<provider>/<model>"`` string or ``{primary, fallbacks}``.
- Key: ``apiKey`` takes a SecretRef ``{source: "file", provider: P, id: "value"}`` with ``secrets.providers.P =
  {source: "file", path, mode: "singleValue"}`` (docs ``gateway/config-secrets-env.md``; ``src/secrets/resolve.ts``
  reads the file, refuses one others may read, drops a BOM and one trailing newline). conduit points it at its
  own key file (``<conduit config>/tool-keys/<channel>.key``, 0600), so the key never enters OpenClaw's files,
  and a SecretRef-managed key is never replaced by a stale one kept in an agent's ``models.json``.
- Limits: a model entry's ``contextWindow`` (tokens) and ``maxTokens`` (output cap; sent as
  ``max_completion_tokens``); written when known, through ``conduit.adapters.limits``.
- What outranks the file: an agent's own ``agents.entries.<id>.model``; and an agent's generated
  ``<state>/agents/<id>/agent/models.json`` (or ``$OPENCLAW_AGENT_DIR/models.json``), whose non-empty
  ``baseUrl`` for a provider wins over the config's when both name the same ``api``
  (``src/agents/models-config.merge.ts``, ``shouldPreserveExistingBaseUrl``). OpenClaw reads no project config.
- One-shot: ``openclaw agent exec PROMPT`` (docs ``cli/agent.md``): one embedded turn without a Gateway, in a
  temporary state directory, against the ordinary config. Needs Node >= 24.16.
- MCP servers: ``mcp.servers`` in the same file (``openclaw_entry``; docs/formats/openclaw.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

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
from conduit.adapters.formats.jsonc import Edit
from conduit.adapters.formats.mcpmap import jsonc_server_edits, mcp_secret_keys, wanted_entries
from conduit.adapters.formats.mcpshapes import UPPER_NAME, referenced
from conduit.adapters.formats.textformats import jsonc_target, parse_jsonc, plain_target, read_parsed
from conduit.adapters.formats.versions import installed_version
from conduit.adapters.limits import LimitLedger
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport
from conduit.adapters.opencode import key_file
from conduit.adapters.precedence import Cite, Order, Rule

PROVIDER_ID = "conduit"
SECRET_PROVIDER = "conduit"
API = "openai-completions"
BINARIES = ("openclaw",)
CONFIG_NAMES = ("openclaw.json", "clawdbot.json")
STATE_DIRS = (".openclaw", ".clawdbot")
LIMIT_KEYS = {"contextWindow": "context_window", "maxTokens": "max_output_tokens"}
"""A model entry's limit key -> the ``ToolSettings`` attribute it is written from."""
PACKAGE = "npm openclaw"
GATEWAY_ORDER = Order(
    "key and base URL", ("openclaw.json models.providers.<id> (apiKey SecretRef, baseUrl)", "process environment",
                         "working folder .env", "$OPENCLAW_STATE_DIR/.env", "config env block"),
    Cite(PACKAGE, "docs/help/environment.md", "Precedence (highest to lowest); Provider credentials and workspace "
         ".env", "2026.9.6"),
    note="the environment only fills ${VAR} strings and env SecretRefs: an exported OPENAI_API_KEY/OPENAI_BASE_URL "
         "does not replace a provider's own apiKey/baseUrl, and a working folder .env never sets credentials or "
         "*_BASE_URL; OpenClaw reads no project config")
"""What decides the key and base URL OpenClaw sends for conduit's provider, highest first."""
MODEL_ORDER = Order(
    "model", ("--model", "the running agent's agents.entries.<id>.model", "agents.defaults.model"),
    Cite(PACKAGE, "dist/agent-scope-config-*.mjs", "src/agents/agent-scope-config.ts resolveDefaultAgentId: the "
         "one entry marked default, else the sole configured agent; its own model over agents.defaults",
         "2026.9.6"),
    note="with several agents and none marked default, the agent is chosen per run (--agent)")
"""Which model an OpenClaw run asks for, highest first."""
BASE_ORDER = Order(
    "base URL", ("an agent's generated models.json baseUrl", "openclaw.json baseUrl"),
    Cite(PACKAGE, "dist/ (src/agents/models-config.merge.ts)", "shouldPreserveExistingBaseUrl: kept when both "
         "name the same api", "2026.9.6"))
"""An agent's generated catalog above the config for a provider's base URL."""
RULES: tuple[Rule, ...] = (GATEWAY_ORDER, MODEL_ORDER, BASE_ORDER)


def openclaw_home(env: Env) -> Path:
    """``$OPENCLAW_HOME`` (``~`` expanded against ``$HOME``), else ``$HOME``."""
    value = env.get("OPENCLAW_HOME")
    return _expand(value, env.home) if value else env.home


def _expand(value: str, home: Path) -> Path:
    """``value`` as OpenClaw resolves a user path: a leading ``~`` is ``home``; relative to the working folder."""
    if value == "~" or value.startswith("~/"):
        return home / value[2:]
    return Path(value).absolute()


def state_dir(env: Env) -> Path:
    """``$OPENCLAW_STATE_DIR``; else ``~/.openclaw``, or ``~/.clawdbot`` when only that one exists."""
    home = openclaw_home(env)
    override = env.get("OPENCLAW_STATE_DIR")
    if override:
        return _expand(override, home)
    return next((home / d for d in STATE_DIRS if (home / d).exists()), home / STATE_DIRS[0])


def config_file(env: Env) -> Path:
    """The config file OpenClaw reads (``resolveConfigPathCandidate``): ``$OPENCLAW_CONFIG_PATH``, else the first
    existing candidate, else ``openclaw.json`` in ``state_dir``."""
    home = openclaw_home(env)
    explicit = env.get("OPENCLAW_CONFIG_PATH")
    if explicit:
        return _expand(explicit, home)
    dirs = ([_expand(env.get("OPENCLAW_STATE_DIR") or "", home)] if env.get("OPENCLAW_STATE_DIR") else [])
    dirs += [home / d for d in STATE_DIRS]
    found = next((d / n for d in dirs for n in CONFIG_NAMES if (d / n).exists()), None)
    return found or state_dir(env) / CONFIG_NAMES[0]


class OpenClaw(AdapterDefaults):
    """Adapter for OpenClaw's ``openclaw.json`` (a conduit provider, its key by reference, the default model)."""

    name: ClassVar[str] = "openclaw"
    display_name: ClassVar[str] = "OpenClaw"
    protocol: ClassVar[Protocol_] = "openai"
    writes_context: ClassVar[bool] = True  # contextWindow / maxTokens land in its file
    owned_keys: ClassVar[tuple[str, ...]] = (
        "openclaw.json: models.providers.conduit (baseUrl, apiKey, api, models[<model>].{id,name,contextWindow,"
        "maxTokens}), secrets.providers.conduit (source, path, mode), agents.defaults.model (its primary)",
        "<conduit config>/tool-keys/<channel>.key",
    )
    restart_hint: ClassVar[str | None] = ("restart a running OpenClaw Gateway if it did not reload openclaw.json; "
                                          "one-shot runs read it at start-up")
    Options: ClassVar[type[BaseModel]] = CreateOptions
    env_vars: ClassVar[tuple[str, ...]] = ("OPENCLAW_HOME", "OPENCLAW_STATE_DIR", "OPENCLAW_CONFIG_PATH",
                                           "OPENCLAW_AGENT_DIR", "XDG_CONFIG_HOME")

    # OPENCLAW_NO_AUTO_UPDATE, OPENCLAW_OFFLINE: openclaw docs help/environment.md ("Feature and runtime toggles").
    one_shot: ClassVar[OneShot | None] = OneShot(BINARIES, ("agent", "exec"), timeout_s=240.0,
                                                 opt_outs={"OPENCLAW_NO_AUTO_UPDATE": "1", "OPENCLAW_OFFLINE": "1"})
    package: ClassVar[Package | None] = Package("npm", "openclaw", "2026.9.6", BINARIES, recipe="node24")
    competing: ClassVar[Competing] = Competing()
    precedence: ClassVar[tuple[Rule, ...]] = RULES
    tool_dirs: ClassVar[Mapping[str, str]] = {"OPENCLAW_HOME": ".", "OPENCLAW_STATE_DIR": ".openclaw",
                                              "OPENCLAW_CONFIG_PATH": ".openclaw/openclaw.json"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.openclaw/openclaw.json", key=("mcp", "servers"), format="jsonc",
        transports=frozenset({"stdio", "http", "sse"}), list_argv=("openclaw", "mcp", "list"),
        source="docs/cli/mcp.md and docs/cli/mcp/transports.md of openclaw 2026.9.6; `openclaw mcp set`",
        proven="`openclaw mcp list` 2026.9.6 (real-tool tier)")

    def mcp_path(self, env: Env) -> Path | None:
        """``config_file``: its ``mcp.servers`` object."""
        return config_file(env)

    def verify_files(self, env: Env) -> list[Path]:
        """``openclaw.json`` and the state directory's ``.env`` (the agents' ``models.json`` are regenerated)."""
        return [config_file(env), state_dir(env) / ".env"]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets: conduit's key file and the provider, secret provider and model edits in ``openclaw.json``.

        Raises:
            NotFound: no OpenClaw state directory and ``create`` is off.
        """
        opts = settings.options_as(CreateOptions)
        path = config_file(env)
        self.require_dir(path.parent, opts.create)
        kf = key_file(settings.channel, env)
        ledger = settings.limits or LimitLedger()

        def edits(doc: dict[str, Any]) -> list[Edit]:
            ledger.begin(path)
            provider = ("models", "providers", PROVIDER_ID)
            secret = ("secrets", "providers", SECRET_PROVIDER)
            out: list[Edit] = [((*secret, "source"), "file"), ((*secret, "path"), str(kf)),
                               ((*secret, "mode"), "singleValue"),
                               ((*provider, "baseUrl"), settings.root.openai_base()),
                               ((*provider, "apiKey"), {"source": "file", "provider": SECRET_PROVIDER, "id": "value"}),
                               ((*provider, "api"), API),
                               ((*provider, "models"), _models(_dig(doc, *provider), settings, ledger, path))]
            current = _dig(doc, "agents", "defaults").get("model")
            ref = f"{PROVIDER_ID}/{settings.model}"
            out.append((("agents", "defaults", "model"), ref) if isinstance(current, str)
                       else (("agents", "defaults", "model", "primary"), ref))
            return out + jsonc_server_edits(doc, ("mcp", "servers"), servers, mcp_ledger, path)

        servers = wanted_entries(settings.mcp, self.mcp, openclaw_entry) if self.mcp else None
        mcp_ledger = settings.mcp_ledger or McpLedger()
        return [plain_target(kf, settings.key_or_placeholder, label=f"tool-keys/{kf.name}"),
                jsonc_target(path, edits, secret_keys={"apiKey", *mcp_secret_keys(settings.mcp)}, label=path.name)]

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the file, conduit's provider (key shown as its reference), the model, the version."""
        path = config_file(env)
        doc, error = _read(path)
        provider = _dig(doc, "models", "providers", PROVIDER_ID)
        api_key = provider.get("apiKey")
        owned = {"baseUrl": provider.get("baseUrl"), "api": provider.get("api"),
                 "apiKey": api_key if isinstance(api_key, dict) or _is_env_ref(api_key) else
                 ("(literal key)" if api_key else None),
                 "model": _primary(doc)}
        return ToolFacts.of_file(path, error, owned, installed_version(BINARIES))

    def client_view(self, env: Env) -> ClientView | None:
        """What OpenClaw sends for its default model: the provider's ``baseUrl`` and its ``apiKey`` resolved
        (a literal, ``${VAR}``, or a SecretRef to an env variable or a ``singleValue`` file)."""
        doc, _ = _read(config_file(env))
        provider_id, _, model = (_primary(doc) or "").partition("/")
        provider = _dig(doc, "models", "providers", provider_id)
        if not provider.get("baseUrl"):
            return None
        key, key_files = _resolve_key(doc, provider.get("apiKey"), env)
        endpoint = "responses" if provider.get("api") == "openai-responses" else "chat/completions"
        return ClientView(str(provider["baseUrl"]), key, model, endpoint, key_files)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """Sources that win over ``openclaw.json``: the running agent's own model (``MODEL_ORDER``: the agent
        marked default or the sole one; every agent with its own model when several could run), and an agent's
        generated ``models.json`` keeping another ``baseUrl`` for conduit's provider (``BASE_ORDER``). Exported
        variables and ``.env`` files never outrank the provider conduit writes (``GATEWAY_ORDER``)."""
        path = config_file(env)
        doc, _ = _read(path)
        ref = f"{PROVIDER_ID}/{settings.model}"
        out: list[Blocker] = []
        entries = running_agents(_dig(doc, "agents", "entries"))
        for agent, entry in entries.items():
            model = entry.get("model") if isinstance(entry, dict) else None
            own = model.get("primary") if isinstance(model, dict) else model
            if own and own != ref:
                out.append(Blocker("overridden", f"{path} agents.entries.{agent}.model",
                                   f"agent \"{agent}\" has its own model \"{own}\", which replaces conduit's \"{ref}\"",
                                   f"remove model from agents.entries.{agent} in {path}"))
        base = settings.root.openai_base()
        for models_json in _agent_models_files(env):
            mdoc, _ = _read(models_json)
            kept = _dig(mdoc, "providers", PROVIDER_ID)
            if kept.get("baseUrl") and kept.get("baseUrl") != base and kept.get("api", API) == API:
                out.append(Blocker("overridden", str(models_json),
                                   f"this agent's generated models.json keeps baseUrl \"{kept['baseUrl']}\" for "
                                   f"provider \"{PROVIDER_ID}\", which wins over openclaw.json's \"{base}\"",
                                   f"delete the \"{PROVIDER_ID}\" entry from {models_json} (OpenClaw rebuilds it "
                                   "from openclaw.json)"))
        return out


def running_agents(entries: dict[str, Any]) -> dict[str, Any]:
    """The ``agents.entries`` a run without ``--agent`` may use (``MODEL_ORDER``): the one marked ``default:
    true``, else the sole entry, else all of them (OpenClaw then asks which)."""
    marked = {k: v for k, v in entries.items() if isinstance(v, dict) and v.get("default") is True}
    return marked if len(marked) == 1 else entries


def openclaw_entry(server: McpServer) -> dict[str, Any]:
    """OpenClaw's ``mcp.servers.NAME`` (docs ``cli/mcp/transports.md``): ``{"command", "args", "env", "cwd"}``;
    streamable HTTP ``{"url", "transport": "streamable-http", "headers"}``; SSE ``{"url", "headers"}`` (a URL
    without ``transport`` is SSE). A value from ``{ env = "VAR" }`` with an upper-case name is written ``${VAR}``
    (OpenClaw substitutes those in every config string: docs ``gateway/configuration/environment-variables.md``)."""
    env, headers = referenced(server, "${%s}", UPPER_NAME)
    if server.transport == "stdio":
        entry: dict[str, Any] = {"command": server.command}
        entry.update({k: v for k, v in (("args", list(server.args)), ("env", env)) if v})
        return entry | ({"cwd": server.cwd} if server.cwd is not None else {})
    extra = {"transport": "streamable-http"} if server.transport == "http" else {}
    return {"url": server.url, **extra, **({"headers": headers} if headers else {})}


def _models(provider: dict[str, Any], settings: ToolSettings, ledger: LimitLedger, path: Path) -> list[Any]:
    """Conduit's provider's ``models`` list with the profile's model entry in place (other entries, and the
    person's other keys in that entry, kept): ``id``, ``name``, and each limit key settled by the ledger."""
    current = provider.get("models")
    models = list(current) if isinstance(current, list) else []
    at = next((i for i, m in enumerate(models) if isinstance(m, dict) and m.get("id") == settings.model), None)
    entry: dict[str, Any] = dict(models[at]) if at is not None else {}
    entry["id"] = settings.model
    entry.setdefault("name", settings.model)
    for key, attr in LIMIT_KEYS.items():
        ledger.settle_key(path, entry, key, getattr(settings, attr), f"{settings.model}.{key}")
    if at is None:
        models.append(entry)
    else:
        models[at] = entry
    return models


def _dig(doc: Any, *keys: str) -> dict[str, Any]:
    """The object at ``keys`` under ``doc``, or ``{}`` when missing or not an object."""
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc if isinstance(doc, dict) else {}


def _primary(doc: dict[str, Any]) -> str | None:
    """``agents.defaults.model`` as a ``provider/model`` string (its ``primary`` in the object form), or None."""
    model = _dig(doc, "agents", "defaults").get("model")
    model = model.get("primary") if isinstance(model, dict) else model
    return model if isinstance(model, str) else None


def _is_env_ref(value: Any) -> bool:
    """``${VAR}`` (OpenClaw's env substitution; upper-case names only)."""
    return isinstance(value, str) and value.startswith("${") and value.endswith("}")


def _resolve_key(doc: dict[str, Any], api_key: Any, env: Env) -> tuple[str, tuple[Path, ...]]:
    """The key ``api_key`` stands for and the files holding it: a literal (in the config file), ``${VAR}``, or a
    SecretRef (``env``: the variable; ``file`` with a ``singleValue`` provider: that file, BOM and one trailing
    newline dropped). ``("", ())`` when it cannot be resolved."""
    if _is_env_ref(api_key):
        return env.get(api_key[2:-1]) or "", ()
    if isinstance(api_key, str):
        return api_key, (config_file(env),)
    if not isinstance(api_key, dict):
        return "", ()
    if api_key.get("source") == "env":
        return env.get(str(api_key.get("id") or "")) or "", ()
    secret = _dig(doc, "secrets", "providers", str(api_key.get("provider") or ""))
    if api_key.get("source") != "file" or secret.get("mode") != "singleValue" or not secret.get("path"):
        return "", ()
    kf = _expand(str(secret["path"]), openclaw_home(env))
    try:
        text = kf.read_text(encoding="utf-8").removeprefix("\ufeff")
    except (OSError, UnicodeDecodeError):
        return "", ()
    return text.removesuffix("\n").removesuffix("\r"), (kf,)


def _agent_models_files(env: Env) -> list[Path]:
    """The agents' generated ``models.json`` files that exist: ``$OPENCLAW_AGENT_DIR/models.json``, and
    ``<state>/agents/<id>/agent/models.json``."""
    found = [Path(env.get("OPENCLAW_AGENT_DIR") or "") / "models.json"] if env.get("OPENCLAW_AGENT_DIR") else []
    agents = state_dir(env) / "agents"
    try:
        found += sorted(agents.glob("*/agent/models.json"))
    except OSError:
        pass
    return [p for p in dict.fromkeys(found) if p.is_file()]


def _read(path: Path) -> tuple[dict[str, Any], str | None]:
    """A JSON/JSONC file and None; ``({}, None)`` when missing; ``({}, message)`` when unreadable."""
    return read_parsed(path, parse_jsonc)


__all__ = ["OpenClaw", "config_file", "openclaw_home", "running_agents", "state_dir"]
