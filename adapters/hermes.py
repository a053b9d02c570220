"""Hermes Agent: a named custom provider in ``~/.hermes/config.yaml``, its key in ``~/.hermes/.env``.

Facts (PyPI ``hermes-agent`` 0.19.0, read in the installed package):
- Files (``hermes_constants.py`` ``get_hermes_home``, ``hermes_cli/config.py`` ``load_config``):
  ``$HERMES_HOME/config.yaml``, default ``~/.hermes/config.yaml`` (YAML, deep-merged over the built-in defaults;
  an optional managed ``config.yaml`` of the machine ranks above it). ``model`` may be a string (the model) or a
  mapping (``default``, ``provider``, ``base_url``, ``api_key``, ``api_mode``, ``context_length``,
  ``max_tokens``...).
- A named custom provider (``hermes_cli/runtime_provider.py`` ``_get_named_custom_provider``,
  ``_resolve_named_custom_runtime``): ``providers.<name>`` with ``base_url`` (or ``url``/``api``), ``key_env``
  (a variable holding the key; an inline ``api_key`` is the fallback), ``api_mode`` (``chat_completions``,
  ``codex_responses``, ``anthropic_messages``; detected from the URL when absent), selected by
  ``model.provider = "custom:<name>"``, the form Hermes's own ``hermes model`` writes
  (``hermes_cli/model_setup_flows.py``). conduit owns ``providers.conduit`` (``name``, ``base_url``,
  ``key_env``, ``api_mode``) and ``model.default`` / ``model.provider``; every other key is the person's.
- ``api_mode: chat_completions`` makes the OpenAI SDK client request ``base_url + "/chat/completions"``
  (``run_agent.py``), so ``base_url`` carries the version segment; the key goes as ``Authorization: Bearer``.
- The key (``hermes_cli/env_loader.py`` ``load_hermes_dotenv``): ``$HERMES_HOME/.env`` is loaded at start-up
  with override, so its ``CONDUIT_API_KEY`` beats an exported one; conduit writes the key there (0600).
- Limits (``agent/agent_init.py``): ``model.context_length`` (tokens) replaces Hermes's detected window;
  ``model.max_tokens`` is sent as the request's ``max_tokens``. Both written only while known and conduit's.
  Hermes refuses a model whose window is under 64 000 tokens (``MINIMUM_CONTEXT``).
- One-shot (``hermes_cli/oneshot.py``): ``hermes -z PROMPT`` prints the final answer; its model is
  ``--model``, else ``HERMES_INFERENCE_MODEL``, else ``model.default``; the provider is the config's
  ``model.provider`` (``HERMES_INFERENCE_PROVIDER`` only when the config names none).
Proven with the binary: docs/formats/hermes.md.
- MCP servers: ``mcp_servers`` in the same ``config.yaml`` (``hermes_entry``; docs/formats/hermes.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

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
    OPENAI_FORMS,
    OPENAI_ROUTES,
    Blocker,
    Competing,
    OneShot,
    Package,
    read_env_quietly,
)
from conduit.adapters.env_precedence import HERMES_MODEL_ORDER, HERMES_RULES, exported_over
from conduit.adapters.formats.mcpmap import mcp_secret_keys, merge_server_map, wanted_entries
from conduit.adapters.formats.mcpshapes import needs_private, referenced
from conduit.adapters.formats.textformats import dotenv_target, parse_yaml, read_parsed, yaml_target
from conduit.adapters.formats.versions import installed_version
from conduit.adapters.limits import LimitLedger
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport
from conduit.adapters.precedence import Rule
from conduit.errors import ToolFileError
from conduit.redact import fingerprint

PROVIDER_ID = "conduit"
SELECTOR = f"custom:{PROVIDER_ID}"
"""``model.provider``: how Hermes names the user-defined provider ``providers.conduit``."""
KEY_VAR = "CONDUIT_API_KEY"
BINARIES = ("hermes",)
LIMITS = (("context_length", "context_window"), ("max_tokens", "max_output_tokens"))
"""``model.<key>`` and the ``ToolSettings`` field it is written from."""
MINIMUM_CONTEXT = 64_000
"""Hermes refuses to run a model with a smaller window (``agent/model_metadata.py`` ``MINIMUM_CONTEXT_LENGTH``):
seen with the binary ("below the minimum 64,000 required by Hermes Agent"); conduit's sync says so."""


def hermes_home(env: Env) -> Path:
    """``$HERMES_HOME`` or ``~/.hermes``."""
    return env.path_from("HERMES_HOME", env.home / ".hermes")


class Hermes(AdapterDefaults):
    """Adapter for Hermes Agent's config.yaml (provider ``conduit``, ``model``) and ``.env`` (the key)."""

    name: ClassVar[str] = "hermes"
    display_name: ClassVar[str] = "Hermes Agent"
    protocol: ClassVar[Protocol_] = "openai"
    writes_context: ClassVar[bool] = True  # model.context_length / model.max_tokens
    owned_keys: ClassVar[tuple[str, ...]] = (
        "config.yaml: model.default, model.provider, providers.conduit.{name,base_url,key_env,api_mode}, "
        "model.context_length and model.max_tokens (while conduit's: a value the person set is kept)",
        f".env: {KEY_VAR}",
    )
    restart_hint: ClassVar[str | None] = "start a new Hermes session: it reads config.yaml and .env at start-up"
    Options: ClassVar[type[BaseModel]] = CreateOptions
    env_vars: ClassVar[tuple[str, ...]] = ("HERMES_HOME", "HERMES_INFERENCE_MODEL")

    one_shot: ClassVar[OneShot | None] = OneShot(BINARIES, ("-z",), timeout_s=150.0)
    package: ClassVar[Package | None] = Package("pypi", "hermes-agent[anthropic]", "0.19.0", BINARIES)
    competing: ClassVar[Competing] = Competing(("HERMES_INFERENCE_MODEL",))
    precedence: ClassVar[tuple[Rule, ...]] = HERMES_RULES  # conduit.adapters.env_precedence
    tool_dirs: ClassVar[Mapping[str, str]] = {"HERMES_HOME": ".hermes"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.hermes/config.yaml", key=("mcp_servers",), format="yaml",
        transports=frozenset({"stdio", "http", "sse"}), list_argv=("hermes", "mcp", "list"),
        source="tools/mcp_tool.py (module docstring, _interpolate_env_vars) of hermes-agent 0.19.0",
        proven="`hermes mcp list` 0.19.0 (real-tool tier)")

    def mcp_path(self, env: Env) -> Path | None:
        """``config.yaml`` in ``hermes_home``: its ``mcp_servers`` mapping."""
        return hermes_home(env) / "config.yaml"

    def verify_files(self, env: Env) -> list[Path]:
        """config.yaml, .env and auth.json (credential pools) in ``hermes_home``."""
        return [hermes_home(env) / n for n in ("config.yaml", ".env", "auth.json")]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets: config.yaml (``providers.conduit``, ``model``) and the key in .env."""
        opts = settings.options_as(CreateOptions)
        home = hermes_home(env)
        self.require_dir(home, opts.create, "Hermes")
        path = home / "config.yaml"
        ledger = settings.limits or LimitLedger()
        provider = {"name": PROVIDER_ID, "base_url": settings.root.openai_base(), "key_env": KEY_VAR,
                    "api_mode": "chat_completions"}

        def transform(doc: Any) -> None:
            from ruamel.yaml.comments import CommentedMap  # lazy: YAML only when Hermes syncs

            model = doc.get("model")
            if not isinstance(model, dict):
                model = CommentedMap(default=model) if isinstance(model, str) and model else CommentedMap()
                doc["model"] = model
            for k, v in (("default", settings.model), ("provider", SELECTOR)):
                if model.get(k) != v:
                    model[k] = v
            ledger.begin(path)
            for key, field in LIMITS:
                ledger.settle_key(path, model, key, getattr(settings, field), f"model.{key}", keep_equal=True)
            providers = doc.get("providers")
            if providers is None:
                providers = doc["providers"] = CommentedMap()
            elif not isinstance(providers, dict):
                raise ToolFileError(f"{path}: providers is not a mapping",
                                    "make providers a mapping (name: settings); conduit left the file unchanged")
            entry = providers.get(PROVIDER_ID)
            if not isinstance(entry, dict):
                entry = providers[PROVIDER_ID] = CommentedMap()
            for k, v in provider.items():
                if entry.get(k) != v:
                    entry[k] = v
            _merge_mcp(doc, servers, settings.mcp_ledger or mcp_ledger, path)

        servers, mcp_ledger = wanted_entries(settings.mcp, self.mcp, hermes_entry) if self.mcp else None, McpLedger()
        # config.yaml holds no model key (key_env names it): its mode is kept unless an MCP secret is in it
        config = yaml_target(path, transform, secret_keys={"api_key", *mcp_secret_keys(settings.mcp)},
                             mode=0o600 if needs_private(settings.mcp, REF) else 0o644, label="config.yaml")
        if settings.context_window is not None and settings.context_window < MINIMUM_CONTEXT:
            config.notices = (f"Hermes Agent refuses a model whose window ({settings.context_window} tokens) is under "
                              f"{MINIMUM_CONTEXT}: it will not start with {settings.model}",)
        return [config,
                dotenv_target(home / ".env", {KEY_VAR: settings.key_or_placeholder}, secret_keys=(KEY_VAR,),
                              label=".env")]

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the files, conduit's values (key masked), the variable that picks another model."""
        home = hermes_home(env)
        path = home / "config.yaml"
        doc, error = _read(path)
        model = _model(doc)
        entry = _provider(doc, PROVIDER_ID)
        key = read_env_quietly(home / ".env").get(KEY_VAR)
        effective: dict[str, Effective] = {}
        if env.get("HERMES_INFERENCE_MODEL"):
            effective["model"] = Effective(env.get("HERMES_INFERENCE_MODEL"), "shell environment", True,
                                           "HERMES_INFERENCE_MODEL replaces model.default in one-shot runs")
        owned = {"model.default": model.get("default"), "model.provider": model.get("provider"),
                 "base_url": entry.get("base_url"), "key_env": entry.get("key_env"),
                 "api_mode": entry.get("api_mode"), KEY_VAR: fingerprint(key) if key else None,
                 "context_length": model.get("context_length"), "max_tokens": model.get("max_tokens")}
        return ToolFacts.of_file(path, error, owned, installed_version(BINARIES), effective)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """``HERMES_INFERENCE_MODEL`` exported with another model: one-shot runs use it instead of
        ``model.default`` (``HERMES_MODEL_ORDER``). An exported key never wins over ``~/.hermes/.env``, and
        ``HERMES_INFERENCE_PROVIDER`` never over ``model.provider`` (``HERMES_RULES``)."""
        found = exported_over(HERMES_MODEL_ORDER, env.environ, "model.default", settings.model)
        return [found] if found is not None else []

    def client_view(self, env: Env) -> ClientView | None:
        """What Hermes sends for ``model.provider = "custom:<name>"``: that provider's ``base_url``, the key from
        ``key_env`` in ``.env`` (else its inline ``api_key``), ``model.default``, and the endpoint of its
        ``api_mode``; None when the selected provider is not a named custom one with a base URL."""
        home = hermes_home(env)
        doc, _ = _read(home / "config.yaml")
        model = _model(doc)
        selected = str(model.get("provider") or "")
        entry = _provider(doc, selected.removeprefix("custom:"))
        base = entry.get("base_url") or entry.get("url") or entry.get("api")
        if not base or entry.get("api_mode") not in (None, "chat_completions", "codex_responses"):
            return None
        key_env = str(entry.get("key_env") or "")
        dotenv = read_env_quietly(home / ".env")
        key, files = (dotenv.get(key_env, ""), (home / ".env",)) if key_env in dotenv else \
            (str(entry.get("api_key") or ""), (home / "config.yaml",))
        endpoint = "responses" if entry.get("api_mode") == "codex_responses" else "chat/completions"
        return ClientView(str(base), key, str(model.get("default") or ""), endpoint, files)


REF = "${%s}"
"""Hermes expands ``${VAR}`` in every string of an MCP server's entry (``tools/mcp_tool.py``
``_interpolate_env_vars``; the variables of ``~/.hermes/.env`` included), so a value from ``{ env = "VAR" }`` is
written as ``${VAR}``."""


def hermes_entry(server: McpServer) -> dict[str, Any]:
    """Hermes's ``mcp_servers.NAME`` (``tools/mcp_tool.py``): ``{"command", "args", "env"}`` (no working folder:
    a ``cwd`` is not written), ``{"url", "headers"}`` (streamable HTTP) or ``{"url", "headers", "transport":
    "sse"}``."""
    env, headers = referenced(server, REF)
    if server.transport == "stdio":
        return {"command": server.command, **{k: v for k, v in (("args", list(server.args)), ("env", env)) if v}}
    extra = {"transport": "sse"} if server.transport == "sse" else {}
    return {"url": server.url, **({"headers": headers} if headers else {}), **extra}


def _merge_mcp(doc: Any, wanted: Mapping[str, Any] | None, ledger: McpLedger, path: Path) -> None:
    """Merge ``wanted`` into ``doc["mcp_servers"]`` (created only when there is a server to write)."""
    if wanted is None:
        return
    servers = doc.get("mcp_servers")
    if servers is None and not wanted:
        ledger.begin(path)
        return
    if servers is None:
        from ruamel.yaml.comments import CommentedMap

        servers = doc["mcp_servers"] = CommentedMap()
    if not isinstance(servers, dict):
        raise ToolFileError(f"{path}: mcp_servers is not a mapping",
                            "make mcp_servers a mapping (name: settings); conduit left the file unchanged")
    merge_server_map(servers, wanted, ledger, path)


def _read(path: Path) -> tuple[dict[str, Any], str | None]:
    """config.yaml as a mapping and None; ``({}, None)`` when missing; ``({}, message)`` when unreadable."""
    return read_parsed(path, parse_yaml)


def _model(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """``model`` as a mapping (a string ``model`` is ``{"default": it}``)."""
    model = doc.get("model")
    if isinstance(model, str):
        return {"default": model}
    return model if isinstance(model, dict) else {}


def _provider(doc: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """``providers.<name>``, or ``{}``."""
    providers = doc.get("providers")
    entry = providers.get(name) if isinstance(providers, dict) and name else None
    return entry if isinstance(entry, dict) else {}


__all__ = ["Hermes", "hermes_home"]
