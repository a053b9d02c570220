"""Continue: a conduit-managed model entry in ``~/.continue/config.yaml``.

Facts (continuedev/continue docs "config.yaml reference" and "OpenAI compatible providers"; ``core/llm/index.ts``
and ``packages/openai-adapters``):
- File: ``$CONTINUE_GLOBAL_DIR/config.yaml``, default ``~/.continue/config.yaml`` (``name``, ``version``,
  ``schema: v1``, ``models: [...]``, plus ``context``, ``rules``, ``mcpServers``...). The older
  ``config.json`` is deprecated; conduit does not write it.
- A model entry: ``name``, ``provider: openai``, ``model``, ``apiBase``, ``apiKey``, ``roles``. Continue adds a
  trailing ``/`` to ``apiBase`` and requests ``apiBase + "chat/completions"``: ``apiBase`` carries the version
  segment. conduit owns the entry named ``conduit`` (its ``provider``, ``model``, ``apiBase`` and ``apiKey``;
  other fields such as ``roles`` are the person's); the literal key is in the file, which conduit keeps 0600.
- Comments and the rest of the file are kept (ruamel.yaml round-trip). Continue reloads config.yaml when it
  changes; pick ``conduit`` in its model list once.
- A model's ``defaultCompletionOptions: {contextLength: N, maxTokens: M}`` (tokens): ``contextLength`` is the
  window Continue checks a prompt against ("Context length exceeded"), ``maxTokens`` what it asks for as
  output (docs "config.yaml reference", ``defaultCompletionOptions``; both read in ``@continuedev/cli`` 1.5's
  bundle). Other completion options there are the person's.
- MCP servers: the ``mcpServers`` list of the same file (``continue_entry``; docs/formats/continue.md).
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
    Unsupported,
)
from conduit.adapters.declarations import (
    OPENAI_BASE,
    OPENAI_FORMS,
    OPENAI_KEY,
    OPENAI_MODEL,
    OPENAI_ROUTES,
    Competing,
    OneShot,
    Package,
)
from conduit.adapters.formats.jsonfile import read_json_quietly
from conduit.adapters.formats.mcpmap import mcp_secret_keys, wanted_entries
from conduit.adapters.formats.mcpshapes import merge_named_list
from conduit.adapters.formats.textformats import parse_yaml, yaml_target
from conduit.adapters.limits import LimitLedger
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport
from conduit.adapters.precedence import Cite, Order, Rule
from conduit.errors import ToolFileError
from conduit.redact import fingerprint

ENTRY_NAME = "conduit"
CLI = "npm @continuedev/cli"
CONFIG_ORDER = Order(
    "config", ("--config", "<continue dir>/config.yaml", "the hub's default config"),
    Cite(CLI, "src/configLoader.ts", "determineConfigSource: the --config flag, else config.yaml in "
         "env.continueHome ($CONTINUE_GLOBAL_DIR or ~/.continue)", "1.5.47"),
    note="no project file: a .continue/config.yaml in the working folder or the repository is not read by cn")
"""Which config ``cn`` loads, highest first."""
MODEL_ORDER = Order(
    "model", ("--model / agent file model", "saved selection (cliSelectedModel)", "first chat model"),
    Cite(CLI, "src/services/ModelService.ts", "doInitialize: the agent file's model, else getModelName (the "
         "cliSelectedModel of <continue dir>/index/globalContext.json) when it names a chat model, else getLlmApi "
         "(src/config.ts): the first model whose roles include chat or are unset", "1.5.47"),
    note="a saved selection matches a model's name (its model id when it has no name)")
"""Which model ``cn`` asks for, highest first: conduit's entry is used only when it is selected or is the first
chat model of the list (checked with 1.5.47)."""
RULES: tuple[Rule, ...] = (CONFIG_ORDER, MODEL_ORDER)


def continue_dir(env: Env) -> Path:
    """``$CONTINUE_GLOBAL_DIR`` or ``~/.continue``."""
    return env.path_from("CONTINUE_GLOBAL_DIR", env.home / ".continue")


class Continue(AdapterDefaults):
    """Adapter for Continue's config.yaml (one model entry named ``conduit``)."""

    name: ClassVar[str] = "continue"
    writes_context: ClassVar[bool] = True  # context_window / max_output_tokens land in its files
    display_name: ClassVar[str] = "Continue"
    protocol: ClassVar[Protocol_] = "openai"
    owned_keys: ClassVar[tuple[str, ...]] = ("config.yaml: models[name=conduit].{provider,model,apiBase,apiKey}, "
                                             "models[name=conduit].defaultCompletionOptions.{contextLength,maxTokens} "
                                             "(while conduit's: a value the person set is kept)",)
    restart_hint: ClassVar[str | None] = None  # Continue reloads config.yaml when it changes
    Options: ClassVar[type[BaseModel]] = CreateOptions
    env_vars: ClassVar[tuple[str, ...]] = ("CONTINUE_GLOBAL_DIR",)

    one_shot: ClassVar[OneShot | None] = OneShot(("cn",), ("-p",))
    package: ClassVar[Package | None] = Package("npm", "@continuedev/cli", "1.5.47", ("cn",))
    # cn 1.5.47 reads no project config (CONFIG_ORDER); the variables only fill a model without its own values.
    competing: ClassVar[Competing] = Competing(OPENAI_MODEL, OPENAI_KEY, OPENAI_BASE)
    precedence: ClassVar[tuple[Rule, ...]] = RULES
    tool_dirs: ClassVar[Mapping[str, str]] = {"CONTINUE_GLOBAL_DIR": ".continue"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.continue/config.yaml", key=("mcpServers",), format="yaml", shape="list",
        transports=frozenset({"stdio", "http", "sse"}), list_argv=None,
        source="continuedev/continue packages/config-yaml/src/schemas/mcp (stdio and URL servers), as bundled in "
               "@continuedev/cli 1.5.47; docs \"config.yaml reference\" mcpServers",
        proven="")

    def mcp_path(self, env: Env) -> Path | None:
        """``config.yaml`` in ``continue_dir``: its ``mcpServers`` list."""
        return continue_dir(env) / "config.yaml"

    def verify_files(self, env: Env) -> list[Path]:
        """``continue_dir`` (copied whole)."""
        return [continue_dir(env)]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """One YAML target: upsert the ``conduit`` model entry, keep every other entry, key and comment."""
        opts = settings.options_as(CreateOptions)
        d = continue_dir(env)
        path = d / "config.yaml"
        self.require_dir(d, opts.create)
        if not path.exists() and (d / "config.json").exists():
            raise Unsupported(f"{d / 'config.json'} is Continue's deprecated JSON config; let Continue migrate "
                              "it to config.yaml (or create config.yaml), then sync again")
        owned = {"provider": "openai", "model": settings.model, "apiBase": settings.root.openai_base(),
                 "apiKey": settings.key_or_placeholder}

        def transform(doc: Any) -> None:
            from ruamel.yaml.comments import CommentedMap, CommentedSeq  # lazy: YAML only when Continue syncs

            if not doc:
                doc.update({"name": "Local Config", "version": "1.0.0", "schema": "v1"})
            models = doc.get("models")
            if not isinstance(models, list):
                models = CommentedSeq()
                doc["models"] = models
            entry = next((m for m in models if isinstance(m, dict) and m.get("name") == ENTRY_NAME), None)
            if entry is None:
                entry = CommentedMap(name=ENTRY_NAME)
                models.append(entry)
                entry.update(owned)
                entry["roles"] = CommentedSeq(["chat", "edit", "apply"])
            for k, v in owned.items():
                if entry.get(k) != v:
                    entry[k] = v
            _set_limits(entry, settings, settings.limits or LimitLedger(), path)
            _merge_mcp(doc, servers, settings.mcp_ledger or McpLedger(), path)

        servers = wanted_entries(settings.mcp, self.mcp, continue_entry) if self.mcp else None
        return [yaml_target(path, transform, secret_keys={"apiKey", *mcp_secret_keys(settings.mcp)},
                            label="config.yaml")]

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the file and conduit's entry (key masked)."""
        path = continue_dir(env) / "config.yaml"
        models, error = _models(path)
        entry = _entry(models) or {}
        details = {"file": str(path), "exists": path.exists(), "parse_error": error,
                   "mode": oct(path.stat().st_mode & 0o777) if path.exists() else None,
                   "owned": {"apiBase": entry.get("apiBase"), "model": entry.get("model"),
                             "provider": entry.get("provider"), "apiKey": fingerprint(entry.get("apiKey"))
                             if entry.get("apiKey") else None},
                   "models": [m.get("name") for m in models if isinstance(m, dict)]}
        return ToolFacts(summary=f"{path} ({'found' if path.exists() else 'missing'})", details=details,
                         effective={})

    def client_view(self, env: Env) -> ClientView | None:
        """What Continue sends for the ``conduit`` entry: ``apiBase`` with the ``/`` Continue adds, ``apiKey``,
        ``model``; None unless that entry has ``provider: openai``."""
        path = continue_dir(env) / "config.yaml"
        entry = _entry(_models(path)[0])
        if entry is None or entry.get("provider") != "openai" or not entry.get("apiBase"):
            return None
        base = str(entry["apiBase"])
        return ClientView(base if base.endswith("/") else base + "/", str(entry.get("apiKey") or ""),
                          str(entry.get("model") or ""), key_files=(path,))


    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """An ``overridden`` blocker when ``cn`` would ask another model than conduit's entry (``MODEL_ORDER``):
        the saved selection names another chat model, or none is saved (or it names no chat model) and another
        chat model comes first in config.yaml; ``[]`` otherwise (no conduit entry: that is drift)."""
        d = continue_dir(env)
        models, _ = _models(d / "config.yaml")
        chat = [m for m in models if isinstance(m, dict) and _is_chat(m.get("roles"))]
        if _entry(models) is None or not chat:
            return []
        saved_at = d / "index" / "globalContext.json"
        saved = read_json_quietly(saved_at)[0].get("cliSelectedModel")
        picked = next((m for m in chat if (m.get("name") or m.get("model")) == saved), None) if saved else None
        chosen = picked or chat[0]
        if chosen.get("name") == ENTRY_NAME:
            return []
        other = chosen.get("name") or chosen.get("model")
        where, why = ((saved_at, f"cn's saved selection (cliSelectedModel) is \"{other}\"") if picked is not None else
                      (d / "config.yaml", f"\"{other}\" is the first chat model in config.yaml and no saved "
                       "selection names conduit's entry"))
        return [Blocker("overridden", str(where), f"{why}, so cn asks for it instead of conduit's \"{ENTRY_NAME}\"",
                        f"pick \"{ENTRY_NAME}\" with /model in cn (it saves the choice), or move the \"{ENTRY_NAME}\" "
                        f"entry first in {d / 'config.yaml'}")]


def continue_entry(server: McpServer) -> dict[str, Any]:
    """Continue's ``mcpServers`` item: ``{"name", "command", "args", "env", "cwd"}``, or ``{"name", "type":
    "streamable-http"|"sse", "url", "requestOptions": {"headers"}}``; values as they are (the file is 0600: it
    holds the model key)."""
    if server.transport == "stdio":
        entry: dict[str, Any] = {"name": server.name, "command": server.command}
        entry.update({k: v for k, v in (("args", list(server.args)), ("env", dict(server.env))) if v})
        return entry | ({"cwd": server.cwd} if server.cwd is not None else {})
    headers = server.all_headers()
    return {"name": server.name, "type": "sse" if server.transport == "sse" else "streamable-http",
            "url": server.url, **({"requestOptions": {"headers": headers}} if headers else {})}


def _merge_mcp(doc: Any, wanted: Mapping[str, Any] | None, ledger: McpLedger, path: Path) -> None:
    """Merge ``wanted`` into the ``mcpServers`` list of ``doc`` (created only when there is a server to write).

    Raises:
        ToolFileError: ``mcpServers`` is not a list.
    """
    if wanted is None:
        return
    current = doc.get("mcpServers")
    if current is None and not wanted:
        ledger.begin(path)
        return
    if current is None:
        from ruamel.yaml.comments import CommentedSeq

        current = doc["mcpServers"] = CommentedSeq()
    if not isinstance(current, list):
        raise ToolFileError(f"{path}: mcpServers is not a list", "make mcpServers a list of servers (each with a "
                            "name); conduit left the file unchanged")
    merge_named_list(current, wanted, ledger, path)


def _set_limits(entry: Any, settings: ToolSettings, ledger: LimitLedger, path: Path) -> None:
    """``defaultCompletionOptions.contextLength`` / ``maxTokens`` from ``settings`` where known. Unknown, a value
    conduit wrote goes and the one it replaced comes back; a value the person set or changed stays
    (``conduit.adapters.limits``). The person's other completion options are kept; an options map conduit
    created and emptied goes too."""
    opts = entry.get("defaultCompletionOptions")
    if opts is not None and not isinstance(opts, dict):
        return  # not Continue's map: left as it is
    had_opts = isinstance(opts, dict) and bool(opts)
    if opts is None:
        from ruamel.yaml.comments import CommentedMap  # lazy, as in transform()

        opts = CommentedMap()
    for key, wanted in (("contextLength", settings.context_window), ("maxTokens", settings.max_output_tokens)):
        ledger.settle_key(path, opts, key, wanted, f"models[name=conduit].defaultCompletionOptions.{key}",
                          keep_equal=True)
    if opts and "defaultCompletionOptions" not in entry:
        entry["defaultCompletionOptions"] = opts
    elif not opts and had_opts:
        del entry["defaultCompletionOptions"]


def _models(path: Path) -> tuple[list[Any], str | None]:
    """The ``models`` list of config.yaml (``[]`` when missing or not a list) and a parse error, or None."""
    try:
        doc, error = parse_yaml(path.read_text(encoding="utf-8"), path=path), None
    except FileNotFoundError:
        doc, error = {}, None
    except (ToolFileError, OSError, UnicodeDecodeError) as exc:
        doc, error = {}, str(exc)
    models = doc.get("models")
    return (models if isinstance(models, list) else []), error


def _is_chat(roles: Any) -> bool:
    """A model ``cn`` may chat with: ``roles`` unset, or a list holding ``chat`` (``src/config.ts`` ``getLlmApi``)."""
    return roles is None or (isinstance(roles, list) and "chat" in roles)


def _entry(models: list[Any]) -> dict[str, Any] | None:
    return next((m for m in models if isinstance(m, dict) and m.get("name") == ENTRY_NAME), None)


__all__ = ["Continue", "continue_dir"]
