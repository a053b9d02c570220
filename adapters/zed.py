"""Zed: an OpenAI-compatible provider named ``conduit`` in Zed's ``settings.json``; documented format only.

No Zed binary runs on these machines (a desktop editor, no npm or PyPI package, no one-shot command line), so
every fact below comes from Zed's source (zed-industries/zed, read at commit 014676e4) and is proven by the
tests against that format only, not by the editor itself (docs/formats/zed.md).

- File: ``$FLATPAK_XDG_CONFIG_HOME/zed/settings.json``, else ``$XDG_CONFIG_HOME/zed/settings.json``
  (default ``~/.config/zed/settings.json``) on Linux (``crates/paths/src/paths.rs`` ``config_dir``). JSON with
  comments and trailing commas; comments survive conduit's edits (``conduit.adapters.formats.jsonc``).
- ``language_models.openai_compatible.<provider id>`` = ``{"api_url": ..., "available_models": [{"name",
  "display_name", "max_tokens", "max_output_tokens", "capabilities"...}]}``
  (``crates/settings_content/src/language_model.rs`` ``OpenAiCompatibleSettingsContent``,
  ``OpenAiCompatibleAvailableModel``). ``max_tokens`` (the context window, tokens) is required;
  ``max_output_tokens`` is optional and is what Zed asks for as output.
- The client requests ``api_url + "/chat/completions"`` with ``Authorization: Bearer <key>``
  (``crates/open_ai/src/open_ai.rs`` ``stream_completion``), so ``api_url`` carries the version segment; a model
  whose ``capabilities.chat_completions`` is false goes to ``/responses`` instead (default true).
- The key is never read from the file: ``<PROVIDER ID>_API_KEY`` in upper snake case from Zed's environment,
  else the OS keychain entry Zed keeps for ``api_url`` (the environment wins)
  (``crates/language_models/src/provider/open_ai_compatible.rs``, ``api_key_env_var_name``). conduit's
  provider id is ``conduit``, so the variable is ``CONDUIT_API_KEY``; conduit writes no key into Zed's file and
  ``inspect`` says where the key must come from.
- ``agent.default_model = {"provider": "conduit", "model": <model>}`` selects it for the agent
  (``crates/settings_content/src/agent.rs`` ``LanguageModelSelection``). Zed reloads ``settings.json`` when it
  changes; its environment (the key variable) is read when it starts.
- MCP servers: ``context_servers`` in the same ``settings.json`` (``zed_entry``; docs/formats/zed.md).
"""

from __future__ import annotations

import re
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
from conduit.adapters.declarations import Competing, OneShot, Package
from conduit.adapters.formats.mcpmap import jsonc_server_edits, mcp_secret_keys, wanted_entries
from conduit.adapters.formats.textformats import jsonc_target, parse_jsonc, read_parsed
from conduit.adapters.limits import LimitLedger
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport

PROVIDER_ID = "conduit"
DEFAULT_MAX_TOKENS = 128000
"""``max_tokens`` written while the context window is unknown: Zed requires the field (the value of its docs'
OpenAI-compatible example)."""


def config_dir(env: Env) -> Path:
    """``$FLATPAK_XDG_CONFIG_HOME/zed``, else ``$XDG_CONFIG_HOME/zed`` or ``~/.config/zed``."""
    return env.path_from("FLATPAK_XDG_CONFIG_HOME", env.config_home()) / "zed"


def key_variable(provider_id: str) -> str:
    """The variable Zed reads an OpenAI-compatible provider's key from: the id in upper snake case plus
    ``_API_KEY`` (``my-gateway`` -> ``MY_GATEWAY_API_KEY``, ``conduit`` -> ``CONDUIT_API_KEY``)."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", provider_id)
    words = [w for w in re.split(r"[^A-Za-z0-9]+", spaced) if w]
    return "_".join(w.upper() for w in [*words, "API", "KEY"])


KEY_VAR = key_variable(PROVIDER_ID)


class Zed(AdapterDefaults):
    """Adapter for Zed's ``settings.json`` (provider ``conduit`` plus ``agent.default_model``)."""

    name: ClassVar[str] = "zed"
    display_name: ClassVar[str] = "Zed"
    protocol: ClassVar[Protocol_] = "openai"
    writes_context: ClassVar[bool] = True  # max_tokens / max_output_tokens of conduit's model entry
    owned_keys: ClassVar[tuple[str, ...]] = (
        "settings.json: language_models.openai_compatible.conduit.api_url, its available_models entry for the "
        "profile's model (name, max_tokens, max_output_tokens; the person's other entries and fields kept), "
        "agent.default_model",
    )
    restart_hint: ClassVar[str | None] = None  # Zed reloads settings.json; the key variable needs a restart
    Options: ClassVar[type[BaseModel]] = CreateOptions
    env_vars: ClassVar[tuple[str, ...]] = ("XDG_CONFIG_HOME", "FLATPAK_XDG_CONFIG_HOME", KEY_VAR)

    one_shot: ClassVar[OneShot | None] = None  # an editor: no non-interactive command line
    package: ClassVar[Package | None] = None  # no npm or PyPI package: documented format only
    competing: ClassVar[Competing] = Competing()
    tool_dirs: ClassVar[Mapping[str, str]] = {}
    base_forms: ClassVar[tuple[str, ...]] = ()
    model_routes: ClassVar[tuple[str, ...]] = ()
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.config/zed/settings.json", key=("context_servers",), format="jsonc",
        transports=frozenset({"stdio", "http"}), list_argv=None, project_files=(".zed/settings.json",),
        source="zed-industries/zed crates/settings_content/src/project.rs (ContextServerSettingsContent, "
               "ContextServerCommand)",
        proven="")

    def mcp_path(self, env: Env) -> Path | None:
        """``settings.json`` in ``config_dir``: its ``context_servers`` object."""
        return config_dir(env) / "settings.json"

    def verify_files(self, env: Env) -> list[Path]:
        """None besides ``plan``'s target (the key is not in a file)."""
        return []

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """One JSONC target: conduit's provider and the agent's default model; no key."""
        path = config_dir(env) / "settings.json"
        self.require_dir(path.parent, settings.options_as(CreateOptions).create)
        ledger = settings.limits or LimitLedger()

        def edits(doc: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
            ledger.begin(path)
            base = ("language_models", "openai_compatible", PROVIDER_ID)
            models = _models(doc)
            found = next((m for m in models if isinstance(m, dict) and m.get("name") == settings.model), None)
            entry = _with_limits(found or {"name": settings.model}, settings, ledger, path)
            if found is None:
                models = [entry, *models]
            else:
                models = [entry if m is found else m for m in models]
            return [((*base, "api_url"), settings.root.openai_base()),
                    ((*base, "available_models"), models),
                    (("agent", "default_model"), {"provider": PROVIDER_ID, "model": settings.model}),
                    *jsonc_server_edits(doc, ("context_servers",), servers, mcp_ledger, path)]

        servers = wanted_entries(settings.mcp, self.mcp, zed_entry) if self.mcp else None
        mcp_ledger = settings.mcp_ledger or McpLedger()
        return [jsonc_target(path, edits, secret_keys=mcp_secret_keys(settings.mcp), label=path.name)]

    def run_env(self, settings: ToolSettings, env: Env) -> dict[str, str | None]:
        """``{CONDUIT_API_KEY: key}``: the variable Zed reads the key of provider ``conduit`` from (a reference,
        always: Zed's file holds no key), for ``eval "$(conduit env zed --show-key)"`` before starting Zed."""
        return {KEY_VAR: settings.key_or_placeholder}

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the file, conduit's provider, the default model, and where the key comes from."""
        path = config_dir(env) / "settings.json"
        doc, error = _read(path)
        provider = _provider(doc, PROVIDER_ID)
        selected = _selection(doc)
        exported = env.get(KEY_VAR) is not None
        details = {"file": str(path), "exists": path.exists(), "parse_error": error,
                   "owned": {"api_url": provider.get("api_url"), "default_model": selected or None},
                   "key_source": f"{KEY_VAR} in Zed's environment, else Zed's keychain entry for the api_url; "
                                 "conduit writes no key into settings.json",
                   "key_exported_here": exported}
        warnings = () if exported or not provider else (
            f"Zed reads the key of provider `{PROVIDER_ID}` from {KEY_VAR} (not exported in this shell) or its "
            "keychain; export it where Zed starts (a login shell profile), or enter it once in Zed's LLM "
            "Providers settings",)
        effective: dict[str, Effective] = {}
        if selected and selected.get("provider") != PROVIDER_ID:
            effective["agent.default_model"] = Effective(selected, str(path), True,
                                                         "the agent uses another provider")
        return ToolFacts(summary=f"{path} ({'found' if path.exists() else 'missing'})", details=details,
                         effective=effective, warnings=warnings)

    def client_view(self, env: Env) -> ClientView | None:
        """What Zed's agent sends when its default model is conduit's provider: its ``api_url``
        (``/chat/completions`` appended, or ``/responses`` for a model without chat completions), the key from
        ``CONDUIT_API_KEY`` (empty when unset: the keychain is not read here), the model. None for another
        provider (``inspect`` reports it) or no ``api_url``."""
        doc, _ = _read(config_dir(env) / "settings.json")
        selected = _selection(doc)
        provider_id, model = str(selected.get("provider") or ""), str(selected.get("model") or "")
        provider = _provider(doc, provider_id)
        if provider_id != PROVIDER_ID or not provider.get("api_url"):
            return None
        entry = next((m for m in _models(doc, provider_id) if isinstance(m, dict) and m.get("name") == model), {})
        caps = entry.get("capabilities")
        caps = caps if isinstance(caps, dict) else {}
        endpoint = "chat/completions" if caps.get("chat_completions", True) is not False else "responses"
        return ClientView(str(provider["api_url"]), env.get(KEY_VAR) or "", model, endpoint=endpoint,
                          key_env=KEY_VAR)


def zed_entry(server: McpServer) -> dict[str, Any]:
    """Zed's ``context_servers.NAME`` (``ContextServerSettingsContent``, untagged): ``{"command", "args", "env"}``
    (``args`` always written; no working folder: a ``cwd`` is not written) or ``{"url", "headers"}`` (streamable
    HTTP); values as they are (the file is 0600)."""
    if server.transport == "stdio":
        entry: dict[str, Any] = {"command": server.command, "args": list(server.args)}
        return entry | ({"env": dict(server.env)} if server.env else {})
    headers = server.all_headers()
    return {"url": server.url, **({"headers": headers} if headers else {})}


def _read(path: Path) -> tuple[dict[str, Any], str | None]:
    """The settings (JSONC) and None; ``({}, None)`` when missing; ``({}, message)`` when unreadable."""
    return read_parsed(path, parse_jsonc)


def _provider(doc: dict[str, Any], provider_id: str) -> dict[str, Any]:
    """``language_models.openai_compatible.<id>``, or ``{}``."""
    node: Any = doc
    for key in ("language_models", "openai_compatible", provider_id):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _models(doc: dict[str, Any], provider_id: str = PROVIDER_ID) -> list[Any]:
    """The provider's ``available_models`` list (a copy), ``[]`` when none."""
    models = _provider(doc, provider_id).get("available_models")
    return list(models) if isinstance(models, list) else []


def _selection(doc: dict[str, Any]) -> dict[str, Any]:
    """``agent.default_model``, or ``{}``."""
    agent = doc.get("agent")
    selected = agent.get("default_model") if isinstance(agent, dict) else None
    return selected if isinstance(selected, dict) else {}


def _with_limits(entry: dict[str, Any], settings: ToolSettings, ledger: LimitLedger, path: Path) -> dict[str, Any]:
    """The model entry with ``max_tokens`` / ``max_output_tokens`` from ``settings`` where known. Unknown, a
    value conduit wrote goes back to what it replaced (``conduit.adapters.limits``); ``max_tokens``, which Zed
    requires, then falls back to ``DEFAULT_MAX_TOKENS``. Other fields are the person's and stay."""
    out = dict(entry)
    slot = f"openai_compatible.conduit.available_models[name={settings.model}]"
    for key, wanted in (("max_tokens", settings.context_window), ("max_output_tokens", settings.max_output_tokens)):
        ledger.settle_key(path, out, key, wanted, f"{slot}.{key}")
    out.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    return out


__all__ = ["DEFAULT_MAX_TOKENS", "KEY_VAR", "Zed", "config_dir", "key_variable"]
