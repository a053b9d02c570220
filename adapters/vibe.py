"""Mistral Vibe: a conduit provider and model in ``~/.vibe/config.toml``, the key in ``~/.vibe/.env``.

Facts (PyPI ``mistral-vibe`` 3.0.3, read in the installed package: ``vibe/`` and its
``mistralai_vibe_local_harness``):
- Files (``vibe/utils/vibe_home.py``, ``vibe/core/paths/_vibe_home.py``, ``vibe/core/config/layers/user.py``):
  ``$VIBE_HOME/config.toml`` and ``$VIBE_HOME/.env``, default ``~/.vibe``. Layers, later wins
  (``vibe/core/config/default_orchestrator.py``): built-in defaults < model catalog < the user file < a trusted
  project's ``.vibe/config.toml`` (found in the working folder or above) < ``VIBE_*`` variables (pydantic
  settings, ``vibe/core/config/layers/environment.py``: ``VIBE_ACTIVE_MODEL``, ``VIBE_PROVIDERS``...) <
  session overrides < an administrator's config. A ``-p`` run trusts no folder unless ``--trust`` is given or the
  folder is in ``trusted_folders.toml``.
- Schema (``vibe/core/config/models.py`` ``ProviderConfig``, ``ModelConfig``; ``vibe_schema.py``):
  ``active_model = "<alias>"``; ``[[providers]]`` tables (merged by ``name``) with ``name``, ``api_base``,
  ``api_key_env_var`` (the variable holding the key), ``api_style`` (``openai``...), ``backend`` (``generic``
  or ``mistral``); ``[[models]]`` tables (by ``alias``) with ``name`` (the id sent), ``provider``, ``alias``,
  ``max_context_length`` (tokens, the window) and ``max_output_tokens`` (tokens; sent as Anthropic's
  ``max_tokens`` only; a window under 13 334 tokens is refused, ``MINIMUM_CONTEXT``). conduit owns
  ``active_model``, the provider named ``conduit`` and the model aliased ``conduit``; every other table, key
  and comment is the person's.
- URL (``mistralai_vibe_local_harness/vibe/adapters/generic/_execute.py``, ``_openai_chat.py``): a ``generic``
  provider with ``api_style = "openai"`` requests ``api_base.rstrip("/") + "/chat/completions"``, so
  ``api_base`` carries the version segment; the key goes as ``Authorization: Bearer`` (``_base.py``).
- The key (``vibe/core/config/vibe_schema.py`` ``load_dotenv_values``, called by ``vibe/app_server/stdio.py``
  at start-up; ``vibe/utils/api_keys.py``): ``$VIBE_HOME/.env`` fills variables the shell does not set, so an
  exported ``CONDUIT_API_KEY`` outranks the one conduit writes there (0600); the system keyring is read only
  when neither holds the variable.
- One-shot: ``vibe -p PROMPT`` (the Rust launcher ``vibe-rs`` in the wheel runs ``vibe-app-server``).
  ``enable_update_checks`` and ``enable_telemetry`` can be turned off with ``VIBE_ENABLE_UPDATE_CHECKS`` /
  ``VIBE_ENABLE_TELEMETRY`` (the ``VIBE_*`` layer).
Proven with the binary: docs/formats/vibe.md.
- MCP servers: ``[[mcp_servers]]`` tables in the same ``config.toml`` (``vibe_entry``; docs/formats/vibe.md).
"""

from __future__ import annotations

import dataclasses
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
from conduit.adapters.formats.mcpmap import mcp_secret_keys, wanted_entries
from conduit.adapters.formats.mcpshapes import merge_named_list, toml_item
from conduit.adapters.formats.textformats import (
    dotenv_target,
    read_parsed,
    toml_data,
    toml_target,
)
from conduit.adapters.formats.tomltables import aot_entry, set_root
from conduit.adapters.formats.versions import installed_version
from conduit.adapters.limits import ABSENT, LimitLedger
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport
from conduit.adapters.precedence import Rule
from conduit.adapters.vibe_precedence import RULES, project_blockers
from conduit.errors import ToolFileError
from conduit.redact import fingerprint

ENTRY = "conduit"
"""The ``name`` of conduit's ``[[providers]]`` table and the ``alias`` of its ``[[models]]`` table."""
KEY_VAR = "CONDUIT_API_KEY"
BINARIES = ("vibe",)
OVERRIDES = ("VIBE_ACTIVE_MODEL", "VIBE_PROVIDERS", "VIBE_MODELS")
"""``VIBE_*`` variables that replace what conduit writes (the environment layer ranks above the user file)."""
LIMITS = (("max_context_length", "context_window"), ("max_output_tokens", "max_output_tokens"))
"""The model table's limit keys and the ``ToolSettings`` field each is written from."""
MINIMUM_CONTEXT = 13_334
"""Vibe refuses a model with a smaller window (``mistralai_vibe_local_harness/vibe/completion_profile/bounds.py``
``MINIMUM_CONTEXT_WINDOW``): seen with the binary ("the smallest is 13334"); conduit's sync says so."""


def vibe_home(env: Env) -> Path:
    """``$VIBE_HOME`` or ``~/.vibe``."""
    return env.path_from("VIBE_HOME", env.home / ".vibe")


class Vibe(AdapterDefaults):
    """Adapter for Mistral Vibe's config.toml (provider and model ``conduit``) and ``.env`` (the key)."""

    name: ClassVar[str] = "vibe"
    display_name: ClassVar[str] = "Mistral Vibe"
    protocol: ClassVar[Protocol_] = "openai"
    writes_context: ClassVar[bool] = True  # the model table's max_context_length / max_output_tokens
    owned_keys: ClassVar[tuple[str, ...]] = (
        "config.toml: active_model, providers[name=conduit].{api_base,api_key_env_var,api_style,backend}, "
        "models[alias=conduit].{name,provider}, models[alias=conduit].{max_context_length,max_output_tokens} "
        "(while conduit's: a value the person set is kept)",
        f".env: {KEY_VAR}",
    )
    restart_hint: ClassVar[str | None] = "run /reload in Vibe, or start a new session"
    Options: ClassVar[type[BaseModel]] = CreateOptions
    env_vars: ClassVar[tuple[str, ...]] = ("VIBE_HOME", KEY_VAR, *OVERRIDES)

    # VIBE_ENABLE_UPDATE_CHECKS / VIBE_ENABLE_TELEMETRY: the VIBE_* layer over vibe/core/config/vibe_schema.py.
    one_shot: ClassVar[OneShot | None] = OneShot(BINARIES, ("-p",), timeout_s=150.0,
                                                 opt_outs={"VIBE_ENABLE_UPDATE_CHECKS": "false",
                                                           "VIBE_ENABLE_TELEMETRY": "false"})
    package: ClassVar[Package | None] = Package("pypi", "mistral-vibe", "3.0.3", BINARIES, recipe="vibe_nodeps")
    competing: ClassVar[Competing] = Competing(("VIBE_ACTIVE_MODEL", "VIBE_MODELS"), (KEY_VAR,), ("VIBE_PROVIDERS",),
                                               (".vibe/config.toml",), (".vibe/config.toml",))
    precedence: ClassVar[tuple[Rule, ...]] = RULES  # conduit.adapters.vibe_precedence
    tool_dirs: ClassVar[Mapping[str, str]] = {"VIBE_HOME": ".vibe"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.vibe/config.toml", key=("mcp_servers",), format="toml", shape="list",
        transports=frozenset({"stdio", "http"}), list_argv=None, project_files=(".vibe/config.toml",),
        name_rule=r"^[A-Za-z0-9]([A-Za-z0-9_-]{0,62}[A-Za-z0-9])?$",
        source="vibe/core/config/models.py (MCPStdio, MCPStreamableHttp, MCPStaticAuth) of mistral-vibe 3.0.3; "
               "`vibe mcp add`",
        proven="")

    def mcp_path(self, env: Env) -> Path | None:
        """``config.toml`` in ``vibe_home``: its ``[[mcp_servers]]`` tables."""
        return vibe_home(env) / "config.toml"

    def verify_files(self, env: Env) -> list[Path]:
        """config.toml, .env and trusted_folders.toml in ``vibe_home``."""
        return [vibe_home(env) / n for n in ("config.toml", ".env", "trusted_folders.toml")]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets: config.toml (``active_model``, provider and model ``conduit``) and the key in .env."""
        opts = settings.options_as(CreateOptions)
        home = vibe_home(env)
        self.require_dir(home, opts.create, "Vibe")
        path = home / "config.toml"
        ledger = settings.limits or LimitLedger()
        provider = {"api_base": settings.root.openai_base(), "api_key_env_var": KEY_VAR, "api_style": "openai",
                    "backend": "generic"}

        def transform(doc: tomlkit.TOMLDocument) -> None:
            set_root(doc, "active_model", ENTRY)
            try:
                table, _ = aot_entry(doc, "providers", "name", ENTRY)
                _update(table, provider)
                model, _ = aot_entry(doc, "models", "alias", ENTRY)
            except ValueError as exc:
                raise ToolFileError(f"{path}: {exc}", "make it [[...]] tables (or remove it); conduit left the "
                                    "file unchanged") from None
            _update(model, {"name": settings.model, "provider": ENTRY})
            ledger.begin(path)
            for key, field in LIMITS:
                got = model.get(key, ABSENT)
                value = ledger.settle(path, f"models[alias=conduit].{key}",
                                      got.unwrap() if hasattr(got, "unwrap") else got, getattr(settings, field))
                if value is ABSENT:
                    model.pop(key, None)
                elif model.get(key, ABSENT) != value:
                    model[key] = value

            _merge_mcp(doc, servers, settings.mcp_ledger or McpLedger(), path)

        servers = wanted_entries(settings.mcp, self.mcp, vibe_entry) if self.mcp else None
        config = toml_target(path, transform, secret_keys={KEY_VAR, *mcp_secret_keys(settings.mcp)},
                             mode=0o600 if any(s.secrets or (s.bearer is not None and not s.bearer_env)
                                               for s in settings.mcp or ()) else 0o644,  # api_key_env: a name
                             label="config.toml")
        if settings.context_window is not None and settings.context_window < MINIMUM_CONTEXT:
            config.notices = (f"Mistral Vibe refuses a model whose window ({settings.context_window} tokens) is under "
                              f"{MINIMUM_CONTEXT}: it will not start with {settings.model}",)
        return [config,
                dotenv_target(home / ".env", {KEY_VAR: settings.key_or_placeholder}, secret_keys=(KEY_VAR,),
                              label=".env")]

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the files, conduit's tables (key masked), the variables that replace them."""
        home = vibe_home(env)
        path = home / "config.toml"
        doc, error = _read(path)
        provider, model = _entry(doc, "providers", "name", ENTRY), _entry(doc, "models", "alias", ENTRY)
        key = read_env_quietly(home / ".env").get(KEY_VAR)
        effective = {var: Effective("(set)" if var == KEY_VAR else env.get(var), "shell environment", True,
                                    "an exported variable ranks above the files conduit writes")
                     for var in (*OVERRIDES, KEY_VAR) if env.get(var)}
        owned = {"active_model": doc.get("active_model"), "api_base": provider.get("api_base"),
                 "api_key_env_var": provider.get("api_key_env_var"), "model": model.get("name"),
                 KEY_VAR: fingerprint(key) if key else None,
                 **{k: model.get(k) for k, _ in LIMITS}}
        return ToolFacts.of_file(path, error, owned, installed_version(BINARIES), effective)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """An exported ``VIBE_ACTIVE_MODEL``/``VIBE_MODELS``/``VIBE_PROVIDERS`` or ``CONDUIT_API_KEY``, and the
        project ``.vibe/config.toml`` Vibe applies (``conduit.adapters.vibe_precedence``: the nearest from the
        working folder up, only in a trusted folder, only when it sets a gateway value)."""
        out = dataclasses.replace(self.competing, files=()).blockers(env.environ, env.cwd)
        return out + project_blockers(env, vibe_home(env))

    def client_view(self, env: Env) -> ClientView | None:
        """What Vibe sends for ``active_model``: the model's ``name`` to its provider's ``api_base`` with the key
        of ``api_key_env_var`` (an exported one first, then ``.env``); None unless that provider is a
        ``generic`` OpenAI one with a base URL."""
        home = vibe_home(env)
        doc, _ = _read(home / "config.toml")
        model = _entry(doc, "models", "alias", str(doc.get("active_model") or ""))
        provider = _entry(doc, "providers", "name", str(model.get("provider") or ""))
        if not provider.get("api_base") or provider.get("backend", "generic") != "generic" \
                or provider.get("api_style", "openai") != "openai":
            return None
        var = str(provider.get("api_key_env_var") or "")
        key = env.get(var) if var == KEY_VAR else None
        key = key or read_env_quietly(home / ".env").get(var, "")
        return ClientView(str(provider["api_base"]).rstrip("/"), key, str(model.get("name") or ""),
                          key_files=(home / ".env",))


def vibe_entry(server: McpServer) -> dict[str, Any]:
    """Vibe's ``[[mcp_servers]]`` table, as ``vibe mcp add`` 3.0.3 writes it: ``{"name", "transport": "stdio",
    "command", "args", "env", "cwd"}`` or ``{"name", "transport": "streamable-http", "url", "auth": {"type":
    "static", "headers", "api_key_env"}}``: a bearer token from ``{ env = "VAR" }`` becomes ``api_key_env = "VAR"``
    (sent as ``Authorization: Bearer <value>``); other values are written as they are."""
    if server.transport == "stdio":
        entry: dict[str, Any] = {"name": server.name, "transport": "stdio", "command": server.command}
        entry.update({k: v for k, v in (("args", list(server.args)), ("env", dict(server.env))) if v})
        return entry | ({"cwd": server.cwd} if server.cwd is not None else {})
    headers = dict(server.headers)
    auth: dict[str, Any] = {"type": "static"}
    if server.bearer is not None and server.bearer_env:
        auth["api_key_env"] = server.bearer_env
    elif server.bearer is not None:
        headers["Authorization"] = f"Bearer {server.bearer}"
    if headers:
        auth["headers"] = headers
    return {"name": server.name, "transport": "streamable-http", "url": server.url,
            **({"auth": auth} if len(auth) > 1 else {})}


def _merge_mcp(doc: tomlkit.TOMLDocument, wanted: Mapping[str, Any] | None, ledger: McpLedger, path: Path) -> None:
    """Merge ``wanted`` into the ``[[mcp_servers]]`` tables of ``doc`` (created only when there is one to write).

    Raises:
        ToolFileError: ``mcp_servers`` is not an array of tables (Vibe refuses ``[mcp_servers.NAME]`` too).
    """
    if wanted is None:
        return
    current = doc.get("mcp_servers")
    if current is None and not wanted:
        ledger.begin(path)
        return
    if current is None:
        current = doc["mcp_servers"] = tomlkit.aot()
    if not isinstance(current, tomlkit.items.AoT | list):
        raise ToolFileError(f"{path}: mcp_servers is not a list of [[mcp_servers]] tables (Vibe refuses it too)",
                            "write each server as a [[mcp_servers]] table with a name; conduit left the file unchanged")
    merge_named_list(current, wanted, ledger, path, make=toml_item)


def _update(table: Any, owned: Mapping[str, Any]) -> None:
    """Set each of ``owned`` in ``table`` that differs (the table's other keys kept)."""
    for k, v in owned.items():
        if table.get(k) != v:
            table[k] = v


def _read(path: Path) -> tuple[dict[str, Any], str | None]:
    """The file as plain data and None; ``({}, None)`` when missing; ``({}, message)`` when unreadable."""
    return read_parsed(path, toml_data)


def _entry(doc: Mapping[str, Any], array: str, key: str, value: str) -> dict[str, Any]:
    """The table of ``[[array]]`` whose ``key`` is ``value``, or ``{}``."""
    tables = doc.get(array)
    found = next((t for t in tables if isinstance(t, dict) and t.get(key) == value), None) \
        if isinstance(tables, list) and value else None
    return found if isinstance(found, dict) else {}


__all__ = ["Vibe", "vibe_home"]
