"""Kimi CLI: a conduit provider and model in ``~/.kimi/config.toml``.

Facts (PyPI ``kimi-cli`` 1.51.0, read in the installed package, and its ``kosong`` 0.56 dependency):
- Files (``kimi_cli/share.py``, ``kimi_cli/config.py``): ``$KIMI_SHARE_DIR/config.toml``, default
  ``~/.kimi/config.toml``, TOML read with tomlkit. A missing file is created with the defaults at start-up; a
  legacy ``config.json`` is migrated to ``config.toml`` only while ``config.toml`` does not exist. A ``--config``
  or ``--config-file`` flag replaces the file for one run; there is no project-level config file.
- Schema (``kimi_cli/config.py`` ``Config``, ``LLMProvider``, ``LLMModel``): ``default_model = "<models key>"``;
  ``[providers.<name>]`` with ``type`` (``kimi``, ``openai_legacy``, ``openai_responses``, ``anthropic``,
  ``gemini``...; ``kimi_cli/llm.py`` ``ProviderType``), ``base_url`` and ``api_key`` (a plain string: no
  reference to a variable or a file; ``env`` only sets variables for Vertex AI), ``custom_headers``...;
  ``[models.<name>]`` with ``provider``, ``model`` and ``max_context_size`` (required, tokens), ``capabilities``,
  ``display_name``. Validation refuses a ``default_model`` missing from ``models`` and a model whose provider
  is missing. conduit owns ``default_model``, ``[providers.conduit]`` and ``[models.conduit]``; the literal key
  is in the file, which conduit keeps 0600.
- ``type = "openai_legacy"`` builds ``kosong.contrib.chat_provider.openai_legacy.OpenAILegacy``, an OpenAI SDK
  client on ``base_url`` (``kimi_cli/llm.py`` ``create_llm``): requests go to ``base_url + "/chat/completions"``,
  so ``base_url`` carries the version segment; the key goes as ``Authorization: Bearer``.
- Variables (``kimi_cli/llm.py`` ``augment_provider_with_env_vars``): for an ``openai_legacy`` provider,
  exported ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` replace the file's ``base_url`` and ``api_key``
  (``KIMI_BASE_URL``, ``KIMI_API_KEY``, ``KIMI_MODEL_NAME`` act on ``type = "kimi"`` providers only).
- ``max_context_size`` is the window Kimi compacts against (``LoopControl`` in ``kimi_cli/config.py``); a model
  it does not know runs with 100 000 (``kimi_cli/app.py``), which conduit writes while the window is unknown.
  Kimi has no output-limit setting for an ``openai_legacy`` model (none is sent).
- One-shot: ``kimi --quiet -p PROMPT`` (``--print --output-format text --final-message-only``;
  ``kimi_cli/cli``). Auto-update runs in the interactive shell only and ``KIMI_CLI_NO_AUTO_UPDATE`` turns it off
  (``kimi_cli/ui/shell/__init__.py``). Kimi reads config.toml at start-up.
Proven with the binary: docs/formats/kimi.md.
- MCP servers: ``mcp.json`` beside ``config.toml`` (``kimi_entry``; docs/formats/kimi.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

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
    Unsupported,
)
from conduit.adapters.declarations import (
    OPENAI_FORMS,
    OPENAI_ROUTES,
    Blocker,
    Competing,
    OneShot,
    Package,
)
from conduit.adapters.env_precedence import KIMI_BASE_ORDER, KIMI_KEY_ORDER, KIMI_RULES, exported_over
from conduit.adapters.formats.mcpmap import mcp_json_targets
from conduit.adapters.formats.textformats import read_parsed, toml_data, toml_target
from conduit.adapters.formats.tomltables import set_root
from conduit.adapters.formats.versions import installed_version
from conduit.adapters.limits import ABSENT, LimitLedger
from conduit.adapters.mcp import McpServer, McpSupport, standard_entry
from conduit.adapters.precedence import Rule
from conduit.errors import ToolFileError
from conduit.redact import fingerprint

ENTRY = "conduit"
"""The name of conduit's ``[providers.*]`` and ``[models.*]`` tables, and ``default_model``'s value."""
PROVIDER_TYPE = "openai_legacy"
UNKNOWN_CONTEXT = 100_000
"""What Kimi assumes for a model it does not know (``kimi_cli/app.py``): written while the window is unknown
(``max_context_size`` is required)."""
BINARIES = ("kimi",)
ENV_OVERRIDES = {"OPENAI_BASE_URL": "base_url", "OPENAI_API_KEY": "api_key"}
"""Exported variables that replace an ``openai_legacy`` provider's values (``augment_provider_with_env_vars``)."""


def kimi_entry(server: McpServer) -> dict[str, Any]:
    """Kimi's ``mcpServers.NAME`` (fastmcp's ``MCPConfig``, as ``kimi mcp add`` 1.51.0 writes it): ``{"command",
    "args", "env", "cwd"}`` or ``{"url", "transport": "http"|"sse", "headers"}`` (values as they are: fastmcp
    expands no variable)."""
    return standard_entry(server, http_type=None) | ({} if server.transport == "stdio" else
                                                     {"transport": "sse" if server.transport == "sse" else "http"})


def kimi_dir(env: Env) -> Path:
    """``$KIMI_SHARE_DIR`` or ``~/.kimi``."""
    return env.path_from("KIMI_SHARE_DIR", env.home / ".kimi")


class Kimi(AdapterDefaults):
    """Adapter for Kimi CLI's config.toml (a ``conduit`` provider and model, selected by ``default_model``)."""

    name: ClassVar[str] = "kimi"
    display_name: ClassVar[str] = "Kimi CLI"
    protocol: ClassVar[Protocol_] = "openai"
    writes_context: ClassVar[bool] = True  # models.conduit.max_context_size
    owned_keys: ClassVar[tuple[str, ...]] = (
        "config.toml: default_model, providers.conduit.{type,base_url,api_key}, models.conduit.{provider,model,"
        "max_context_size} (the window while conduit's; Kimi's 100000 while unknown)",
    )
    restart_hint: ClassVar[str | None] = "start a new Kimi session: it reads config.toml at start-up"
    Options: ClassVar[type[BaseModel]] = CreateOptions
    env_vars: ClassVar[tuple[str, ...]] = ("KIMI_SHARE_DIR", *ENV_OVERRIDES)

    # KIMI_CLI_NO_AUTO_UPDATE: kimi_cli/ui/shell/__init__.py.
    one_shot: ClassVar[OneShot | None] = OneShot(BINARIES, ("--quiet", "-p"), opt_outs={"KIMI_CLI_NO_AUTO_UPDATE": "1"},
                                                 timeout_s=120.0)
    package: ClassVar[Package | None] = Package("pypi", "kimi-cli", "1.51.0", BINARIES, recipe="py313")
    competing: ClassVar[Competing] = Competing((), ("OPENAI_API_KEY",), ("OPENAI_BASE_URL",))
    precedence: ClassVar[tuple[Rule, ...]] = KIMI_RULES  # conduit.adapters.env_precedence
    tool_dirs: ClassVar[Mapping[str, str]] = {"KIMI_SHARE_DIR": ".kimi"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.kimi/mcp.json", key=("mcpServers",), format="json",
        transports=frozenset({"stdio", "http", "sse"}), list_argv=("kimi", "mcp", "list"),
        source="kimi_cli/cli/mcp.py (get_global_mcp_config_file, `kimi mcp add`) and fastmcp mcp_config.py "
               "(StdioMCPServer, RemoteMCPServer) of kimi-cli 1.51.0",
        proven="`kimi mcp list` 1.51.0 (real-tool tier)")

    def mcp_path(self, env: Env) -> Path | None:
        """``mcp.json`` in ``kimi_dir``."""
        return kimi_dir(env) / "mcp.json"

    def verify_files(self, env: Env) -> list[Path]:
        """config.toml in ``kimi_dir``."""
        return [kimi_dir(env) / "config.toml"]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """One TOML target: ``default_model``, ``[providers.conduit]`` and ``[models.conduit]``."""
        opts = settings.options_as(CreateOptions)
        d = kimi_dir(env)
        path = d / "config.toml"
        self.require_dir(d, opts.create)
        if not path.exists() and (d / "config.json").exists():
            raise Unsupported(f"{d / 'config.json'} is Kimi's legacy JSON config, which Kimi migrates only while "
                              "config.toml is missing: run kimi once to migrate it, then sync again")
        ledger = settings.limits or LimitLedger()
        provider = {"type": PROVIDER_TYPE, "base_url": settings.root.openai_base(),
                    "api_key": settings.key_or_placeholder}

        def transform(doc: tomlkit.TOMLDocument) -> None:
            set_root(doc, "default_model", ENTRY)
            _upsert(doc, "providers", provider)
            model = _upsert(doc, "models", {"provider": ENTRY, "model": settings.model})
            ledger.begin(path)
            current = model.get("max_context_size", ABSENT)
            value = ledger.settle(path, "models.conduit.max_context_size",
                                  current.unwrap() if hasattr(current, "unwrap") else current,
                                  settings.context_window)
            value = UNKNOWN_CONTEXT if value is ABSENT else value
            if model.get("max_context_size") != value:
                model["max_context_size"] = value

        out: list[Target] = [toml_target(path, transform, secret_keys=("api_key",), label="config.toml")]
        return out + mcp_json_targets(self.mcp_path(env), self.mcp, settings.mcp, settings.mcp_ledger, entry=kimi_entry)

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the file, conduit's entries (key masked), the variables that replace them."""
        path = kimi_dir(env) / "config.toml"
        doc, error = _read(path)
        provider, model = _table(_table(doc, "providers"), ENTRY), _table(_table(doc, "models"), ENTRY)
        key = provider.get("api_key")
        effective = {var: Effective("(set)" if var == "OPENAI_API_KEY" else env.get(var), "shell environment", True,
                                    f"replaces the {field} of an openai_legacy provider")
                     for var, field in ENV_OVERRIDES.items() if env.get(var)}
        owned = {"default_model": doc.get("default_model"), "type": provider.get("type"),
                 "base_url": provider.get("base_url"), "api_key": fingerprint(key) if key else None,
                 "model": model.get("model"), "max_context_size": model.get("max_context_size")}
        return ToolFacts.of_file(path, error, owned, installed_version(BINARIES), effective)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` exported with another value than conduit's: they replace an
        ``openai_legacy`` provider's values (``KIMI_KEY_ORDER``, ``KIMI_BASE_ORDER``); ``KIMI_*`` never do."""
        found = (exported_over(KIMI_KEY_ORDER, env.environ, "providers.<name>.api_key", settings.key_or_placeholder,
                               secret=True),
                 exported_over(KIMI_BASE_ORDER, env.environ, "providers.<name>.base_url", settings.root.openai_base()))
        return [b for b in found if b is not None]

    def client_view(self, env: Env) -> ClientView | None:
        """What Kimi sends for ``default_model``: its provider's ``base_url`` and ``api_key`` (replaced by the
        exported variables for an OpenAI provider), and the model's ``model``; None without a base URL."""
        path = kimi_dir(env) / "config.toml"
        doc, _ = _read(path)
        model = _table(_table(doc, "models"), str(doc.get("default_model") or ""))
        provider = _table(_table(doc, "providers"), str(model.get("provider") or ""))
        if not provider.get("base_url"):
            return None
        values = {"base_url": str(provider["base_url"]), "api_key": str(provider.get("api_key") or "")}
        if provider.get("type") in ("openai_legacy", "openai_responses"):
            values.update({field: env.get(var) or values[field] for var, field in ENV_OVERRIDES.items()})
        endpoint = "responses" if provider.get("type") == "openai_responses" else "chat/completions"
        return ClientView(values["base_url"], values["api_key"], str(model.get("model") or ""), endpoint, (path,))


def _upsert(doc: tomlkit.TOMLDocument, section: str, owned: dict[str, Any]) -> Any:
    """``[<section>.conduit]`` with the ``owned`` values (created when missing; its other keys kept)."""
    parent = doc.get(section)
    if parent is None:
        parent = tomlkit.table(is_super_table=True)
        doc[section] = parent
    elif not isinstance(parent, dict):
        raise ToolFileError(f"{section} in Kimi's config.toml is not a table",
                            f"make [{section}] a table (or remove it); conduit left the file unchanged")
    table = parent.get(ENTRY)
    if table is None:
        table = tomlkit.table()
        for k, v in owned.items():
            table[k] = v
        parent[ENTRY] = table
        return parent[ENTRY]
    for k, v in owned.items():
        if table.get(k) != v:
            table[k] = v
    return table


def _read(path: Path) -> tuple[dict[str, Any], str | None]:
    """The file as plain data and None; ``({}, None)`` when missing; ``({}, message)`` when unreadable."""
    return read_parsed(path, toml_data)


def _table(doc: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


__all__ = ["Kimi", "kimi_dir"]
