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
from conduit.adapters.formats.mcpmap import mcp_secret_keys, wanted_entries
from conduit.adapters.formats.mcpshapes import merge_named_list
from conduit.adapters.formats.textformats import parse_yaml, yaml_target
from conduit.adapters.limits import LimitLedger
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport
from conduit.errors import ToolFileError
from conduit.redact import fingerprint

ENTRY_NAME = "conduit"


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
    competing: ClassVar[Competing] = Competing(OPENAI_MODEL, OPENAI_KEY, OPENAI_BASE, (".continue/config.yaml",))
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


def _entry(models: list[Any]) -> dict[str, Any] | None:
    return next((m for m in models if isinstance(m, dict) and m.get("name") == ENTRY_NAME), None)


__all__ = ["Continue", "continue_dir"]
