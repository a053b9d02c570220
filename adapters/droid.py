"""Factory Droid: a conduit custom model in ``~/.factory/settings.json``, selected as the session default.

Facts, read in the ``droid`` 0.215.0 npm package (its ``bin/droid`` is the compiled binary, whose bundled JS
holds the code quoted here; the registry's ``@factory/cli`` installs without its platform binary) and Factory's
docs (``docs.factory.ai``: "Settings", "Custom Models (BYOK)", "Hierarchical Settings & Org Control"):
- Directory: ``<home>/.factory`` where home is ``$FACTORY_HOME_OVERRIDE``, else the OS home directory
  (``$HOME``). User settings: ``settings.json`` there, read as JSON with comments (a comment is kept);
  ``settings.local.json`` beside it is merged on top, key by key (a top-level key there replaces this file's).
- ``customModels``: a list of ``{"model", "displayName", "baseUrl", "apiKey", "provider", "maxOutputTokens",
  "maxContextLimit", "id", ...}``; an entry needs ``model``, ``provider`` and ``baseUrl``, and one whose
  ``apiKey`` is ``YOUR_API_KEY``/``YOUR_OPENAI_API_KEY`` is dropped. ``provider`` is
  ``generic-chat-completion-api`` (an OpenAI SDK client requesting ``baseUrl + "/chat/completions"``; the
  version segment is in ``baseUrl``), ``openai`` (the Responses API) or ``anthropic``. ``apiKey`` takes
  ``${VAR}`` references to the environment (no ``.env`` file is read), so conduit writes the key itself (the
  file kept 0600), or ``${CONDUIT_API_KEY}`` with ``key_source = "env"``. An entry's ``apiKeyHelper`` (a command
  printing the key) is in the 0.215.0 binary's schema, but Droid drops it from every settings level except the
  organisation's (checked with that binary: an entry in the user's settings.json with ``apiKeyHelper`` and no
  ``apiKey`` sends no ``Authorization`` at all), so conduit does not use it.
- An entry's id is its ``id`` when given, else ``custom:<displayName, whitespace runs as "-">-<n>`` (n counts
  earlier entries of the same name); conduit writes ``id = "custom:conduit"``.
- The default model of a session is ``sessionDefaultSettings.model`` (what Droid itself saves); a top-level
  ``model`` is used only when that is unset. conduit writes ``sessionDefaultSettings.model``.
- ``maxOutputTokens`` is sent as ``max_tokens``; ``maxContextLimit`` is the model's context window (tokens).
- Levels, highest first: org (remote), ``--settings`` / ``$FACTORY_RUNTIME_SETTINGS_PATH``, folder and project
  ``.factory/settings.json`` (+ ``settings.local.json``) from the working directory up to the git root, then
  the user's. Legacy ``~/.factory/config.json`` ``custom_models`` are added after the user's ``customModels``.
- ``droid exec PROMPT`` answers once with the session default model and needs no Factory login for a custom
  model; ``FACTORY_DROID_AUTO_UPDATE_ENABLED=false`` turns its update check off.
Proven with the 0.215.0 binary (docs/formats/droid.md).
- MCP servers: ``~/.factory/mcp.json`` (``droid_entry``; docs/formats/droid.md).
"""

from __future__ import annotations

import dataclasses
import json
import re
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
from conduit.adapters.formats.jsonc import _SpanParser, edit_jsonc, jsonc_target, parse_jsonc, strip_jsonc
from conduit.adapters.formats.mcpmap import mcp_json_targets
from conduit.adapters.formats.textformats import tool_version
from conduit.adapters.mcp import McpServer, McpSupport, standard_entry
from conduit.adapters.opencode import read_config
from conduit.adapters.precedence import Cite, Order, ProjectScope, Rule
from conduit.errors import ToolFileError

MODEL_ID = "custom:conduit"
"""The ``id`` of conduit's entry in ``customModels`` (how conduit finds its entry again) and the selected model."""
KEY_VAR = "CONDUIT_API_KEY"
PROVIDER = "generic-chat-completion-api"
OWNED = ("id", "model", "displayName", "baseUrl", "apiKey", "provider", "maxOutputTokens", "maxContextLimit")
"""The keys of conduit's entry that conduit sets (any other key a person adds to the entry is kept)."""
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
BUNDLE = "npm droid"
"""Droid's source is not published: its rules are cited from the compiled ``bin/droid`` (its bundled JavaScript)."""
PROJECT_SCOPE = ProjectScope(
    (".factory/settings.json", ".factory/settings.local.json"), "root_to_cwd",
    Cite(BUNDLE, "bin/droid", "settings paths (lCt): projectPath <git root>/.factory (outside git <cwd>/.factory, none "
         "in HOME); folderPaths: each <dir>/.factory from the working folder up to the git root", "0.215.0"))
"""The folder and project settings Droid applies: ``.factory/settings[.local].json`` from the git root down to the
working folder (outside git, the working folder's only), no trust gate (trust only gates permission rules)."""
LEVEL_ORDER = Order(
    "model", ("org (remote)", "FACTORY_RUNTIME_SETTINGS_PATH / --settings", "folder .factory", "project .factory",
              "~/.factory/settings.local.json", "~/.factory/settings.json"),
    Cite(BUNDLE, "bin/droid", "resolveReadySettingsHierarchy: org-remote, runtime overlay, folders, project-settings, "
         "user-settings", "0.215.0"),
    note="per file, sessionDefaultSettings.model, else its top-level model; the highest file choosing one decides "
         "(a project's top-level model beats the user's sessionDefaultSettings.model: checked with 0.215.0)")
"""Which settings file's model choice Droid follows, highest first."""
RULES: tuple[Rule, ...] = (PROJECT_SCOPE, LEVEL_ORDER)


class DroidOptions(CreateOptions):
    """``[tools.droid]`` options.

    Attributes:
        key_source: ``file`` (the key in ``settings.json``, kept 0600) or ``env`` (``${CONDUIT_API_KEY}``, a
            reference: start Droid with ``conduit run droid``, which sets the variable, or export it yourself).
    """

    key_source: Literal["file", "env"] = "file"


def droid_entry(server: McpServer) -> dict[str, Any]:
    """Droid's ``mcpServers.NAME`` as ``droid mcp add`` 0.215.0 writes it: ``{"type": "stdio", "command", "args",
    "env", "disabled": false}`` or ``{"type": "http"|"sse", "url", "headers", "disabled": false}`` (values as they
    are: no reference to a variable is documented for ``mcp.json``)."""
    return {**standard_entry(server, http_type="http", stdio_type="stdio"), "disabled": False}


def factory_dir(env: Env) -> Path:
    """``$FACTORY_HOME_OVERRIDE/.factory`` or ``~/.factory``."""
    return env.path_from("FACTORY_HOME_OVERRIDE", env.home) / ".factory"


def settings_file(env: Env) -> Path:
    """The user settings file, ``<factory dir>/settings.json``."""
    return factory_dir(env) / "settings.json"


def entry_ids(models: list[Any]) -> list[str | None]:
    """The id Droid gives each ``customModels`` entry (None for an entry that is not an object): its ``id``,
    else ``custom:<displayName or model, whitespace runs as "-">-<n>`` (n: earlier entries of that name)."""
    seen: dict[str, int] = {}
    out: list[str | None] = []
    for m in models:
        if not isinstance(m, dict):
            out.append(None)
            continue
        name = re.sub(r"\s+", "-", str(m.get("displayName") or m.get("model") or "").strip())
        n = seen.get(name, 0)
        seen[name] = n + 1
        out.append(m["id"] if isinstance(m.get("id"), str) else f"custom:{name}-{n}")
    return out


def selected_model(doc: dict[str, Any]) -> Any:
    """The session default model id: ``sessionDefaultSettings.model``, else the top-level ``model``."""
    defaults = doc.get("sessionDefaultSettings")
    chosen = defaults.get("model") if isinstance(defaults, dict) else None
    return chosen if chosen is not None else doc.get("model")


def _entry(old: Any, settings: ToolSettings, api_key: str) -> dict[str, Any]:
    """conduit's entry: the person's other keys of ``old`` kept, ``OWNED`` set (limits only when known)."""
    kept = {k: v for k, v in old.items() if k not in OWNED} if isinstance(old, dict) else {}
    entry: dict[str, Any] = {"id": MODEL_ID, "model": settings.model,
                             "displayName": f"conduit ({settings.channel}): {settings.model}",
                             "baseUrl": settings.root.openai_base(), "apiKey": api_key, "provider": PROVIDER}
    if settings.max_output_tokens is not None:
        entry["maxOutputTokens"] = settings.max_output_tokens
    if settings.context_window is not None:
        entry["maxContextLimit"] = settings.context_window
    return {**entry, **kept}


def _array_items(stripped: str, start: int) -> list[tuple[int, int]]:
    """The spans of the items of the array that opens at ``start`` in comment-stripped text."""
    p = _SpanParser(stripped)
    p.i = start + 1
    spans: list[tuple[int, int]] = []
    p.ws()
    while stripped[p.i] != "]":
        node = p.value()
        spans.append((node.start, node.end))
        p.ws()
        if stripped[p.i] == ",":
            p.i += 1
            p.ws()
    return spans


def _indented(value: Any, unit: str, base: str) -> str:
    return json.dumps(value, ensure_ascii=False, indent=unit).replace("\n", "\n" + base)


def _put_entry(text: str, index: int | None, entry: dict[str, Any]) -> str:
    """``text`` with ``customModels[index]`` replaced by ``entry`` (None: appended after the last item of the
    non-empty list), nothing else moved."""
    stripped = strip_jsonc(text)
    root = _SpanParser(stripped).value()
    _, array = root.members["customModels"]
    spans = _array_items(stripped, array.start)
    m = re.search(r"\n([ \t]+)\S", text)
    unit = m.group(1) if m else "  "
    if index is not None:
        a, b = spans[index]
        base = text[text.rfind("\n", 0, a) + 1:a]
        base = base if not base.strip() else ""
        return text[:a] + _indented(entry, unit, base) + text[b:]
    line = text[text.rfind("\n", 0, array.start) + 1:array.start]
    outer = line[:len(line) - len(line.lstrip())]
    a, b = spans[-1]
    base = text[text.rfind("\n", 0, a) + 1:a]
    base = base if not base.strip() else outer + unit
    return text[:b] + f",\n{base}{_indented(entry, unit, base)}" + text[b:]


def render_settings(text: str | None, settings: ToolSettings, api_key: str, path: Path) -> str:
    """``settings.json`` with conduit's entry in ``customModels`` (replaced in place, or appended) and
    ``sessionDefaultSettings.model`` selecting it; comments, other entries and keys kept.

    Raises:
        ToolFileError: not JSONC, ``customModels`` is not a list, or the edit would not read back as intended.
    """
    doc = parse_jsonc(text, path=path)
    models = doc.get("customModels")
    if models is not None and not isinstance(models, list):
        raise ToolFileError(f"{path}: \"customModels\" is not a list", "fix it by hand; the file is unchanged")
    ids = entry_ids(models or [])
    index = ids.index(MODEL_ID) if MODEL_ID in ids else None
    entry = _entry(models[index] if models and index is not None else None, settings, api_key)
    want_models = list(models or [])
    if index is None:
        want_models.append(entry)
    else:
        want_models[index] = entry
    defaults = doc.get("sessionDefaultSettings")
    wanted = {**doc, "customModels": want_models,
              "sessionDefaultSettings": {**(defaults if isinstance(defaults, dict) else {}), "model": MODEL_ID}}
    edits: list[tuple[tuple[str, ...], Any]] = [(("sessionDefaultSettings", "model"), MODEL_ID)]
    out, base = "", text
    try:
        if not models:  # missing or empty: set the whole list
            edits.insert(0, (("customModels",), [entry]))
        elif index is None or models[index] != entry:
            base = _put_entry(text or "", index, entry)
        out = edit_jsonc(base, edits, path=path)
        ok = parse_jsonc(out, path=path) == wanted
    except (ToolFileError, AssertionError, IndexError, KeyError, ValueError):
        ok = False
    if not ok:
        raise ToolFileError(f"{path}: conduit could not edit \"customModels\" without disturbing the file",
                            "set the values shown by `conduit sync --dry-run` by hand; the file is unchanged")
    return out


class Droid(AdapterDefaults):
    """Adapter for Factory Droid's user ``settings.json`` (a conduit custom model, selected by default)."""

    name: ClassVar[str] = "droid"
    writes_context: ClassVar[bool] = True  # maxContextLimit / maxOutputTokens of conduit's entry
    display_name: ClassVar[str] = "Factory Droid"
    protocol: ClassVar[Protocol_] = "openai"
    owned_keys: ClassVar[tuple[str, ...]] = (
        "~/.factory/settings.json: the customModels entry with id \"custom:conduit\" (model, displayName, baseUrl, "
        "apiKey, provider, maxOutputTokens and maxContextLimit, removed when unknown), "
        "sessionDefaultSettings.model",
    )
    restart_hint: ClassVar[str | None] = "start a new Droid session: it reads its settings at start-up"
    Options: ClassVar[type[BaseModel]] = DroidOptions
    env_vars: ClassVar[tuple[str, ...]] = ("FACTORY_HOME_OVERRIDE", "FACTORY_RUNTIME_SETTINGS_PATH", KEY_VAR)

    one_shot: ClassVar[OneShot | None] = OneShot(("droid",), ("exec",),
                                                 opt_outs={"FACTORY_DROID_AUTO_UPDATE_ENABLED": "false"})
    package: ClassVar[Package | None] = Package("npm", "droid", "0.215.0", ("droid",))
    # The project and folder files are read by ``outranks`` (only a model set there counts).
    competing: ClassVar[Competing] = Competing()
    precedence: ClassVar[tuple[Rule, ...]] = RULES
    tool_dirs: ClassVar[Mapping[str, str]] = {"FACTORY_HOME_OVERRIDE": "."}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.factory/mcp.json", key=("mcpServers",), format="json",
        transports=frozenset({"stdio", "http", "sse"}), list_argv=("droid", "mcp", "list"),
        project_files=(".factory/mcp.json",),
        source="docs.factory.ai \"MCP\"; `droid mcp add` 0.215.0 (its stdio/http/sse types)",
        proven="`droid mcp list` 0.215.0 (real-tool tier)")

    def mcp_path(self, env: Env) -> Path | None:
        """``mcp.json`` in ``factory_dir``."""
        return factory_dir(env) / "mcp.json"

    def verify_files(self, env: Env) -> list[Path]:
        """``settings.local.json`` and the legacy ``config.json`` beside the settings file."""
        d = factory_dir(env)
        return [d / "settings.local.json", d / "config.json"]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """One target: ``settings.json`` (0600 while it holds the key)."""
        opts = settings.options_as(DroidOptions)
        path = settings_file(env)
        self.require_dir(path.parent, opts.create, "Droid")
        api_key = settings.key_or_placeholder if opts.key_source == "file" else f"${{{KEY_VAR}}}"
        target = jsonc_target(path, lambda doc: [], secret_keys=("apiKey",), label=path.name)  # for its mask
        out: list[Target] = [dataclasses.replace(target, render=lambda text: render_settings(text, settings, api_key,
                                                                                             path))]
        return out + mcp_json_targets(self.mcp_path(env), self.mcp, settings.mcp, settings.mcp_ledger,
                                      entry=droid_entry)

    def run_env(self, settings: ToolSettings, env: Env) -> dict[str, str | None]:
        """``{CONDUIT_API_KEY: key}`` for ``key_source = "env"`` (what ``${CONDUIT_API_KEY}`` reads: ``conduit run
        droid`` and ``conduit env droid`` give it to the session); ``{}`` otherwise (files only)."""
        if settings.options_as(DroidOptions).key_source == "env":
            return {KEY_VAR: settings.key_or_placeholder}
        return {}

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the file, conduit's entry (key masked) and the selected model."""
        path = settings_file(env)
        doc, error = read_config(path)
        entry = _conduit_entry(doc)
        key = entry.get("apiKey")
        owned = {"baseUrl": entry.get("baseUrl"), "model": entry.get("model"),
                 "apiKey": key if isinstance(key, str) and _VAR.fullmatch(key) else
                 ("(literal key)" if key else None),
                 "sessionDefaultSettings.model": selected_model(doc)}
        return ToolFacts.of_file(path, error, owned, tool_version("droid"))

    def client_view(self, env: Env) -> ClientView | None:
        """What Droid sends for its selected custom model: ``baseUrl + "/chat/completions"`` with ``apiKey``
        (``${VAR}`` read from the environment) and ``model``; None when the selection is not such an entry."""
        path = settings_file(env)
        doc, _ = read_config(path)
        models = _models(doc)
        ids = entry_ids(models)
        chosen = selected_model(doc)
        if chosen not in ids:
            return None
        entry = models[ids.index(chosen)]
        if entry.get("provider") != PROVIDER or not entry.get("baseUrl"):
            return None
        key = str(entry.get("apiKey") or "")
        literal = not _VAR.search(key)
        key = _VAR.sub(lambda m: env.get(m.group(1)) or "", key)
        return ClientView(str(entry["baseUrl"]), key, str(entry.get("model") or ""),
                          key_files=(path,) if literal else ())

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """Files above the user's ``settings.json`` (``LEVEL_ORDER``) that choose another model:
        ``settings.local.json`` beside it (its ``sessionDefaultSettings`` or ``customModels`` replace the file's),
        ``$FACTORY_RUNTIME_SETTINGS_PATH``, and the project files Droid applies (``PROJECT_SCOPE``)."""
        user = factory_dir(env)
        files = [user / "settings.local.json"]
        runtime = env.get("FACTORY_RUNTIME_SETTINGS_PATH")
        if runtime:
            files.append(Path(runtime).expanduser())
        files += [p for p in reversed(PROJECT_SCOPE.candidates(env.cwd)) if p.parent != user]
        out: list[Blocker] = []
        for f in files:
            doc, error = read_config(f)
            why = [] if error is not None else _outranking(doc, f.parent == user)
            if why:
                out.append(Blocker("overridden", str(f), f"it {' and '.join(why)}, and ranks above "
                                   "~/.factory/settings.json", f"remove those settings from {f}"))
        return out


def _outranking(doc: dict[str, Any], beside_user: bool) -> list[str]:
    """What in a higher-ranking settings file takes the model from conduit's entry: another session default, or
    (``settings.local.json`` beside the user's, merged key by key) a ``customModels`` list without conduit's."""
    why = []
    chosen = selected_model(doc)
    if chosen is not None and chosen != MODEL_ID:
        why.append(f"chooses the model {chosen!r}")
    models = doc.get("customModels")
    if beside_user and "customModels" in doc and MODEL_ID not in entry_ids(models if isinstance(models, list) else []):
        why.append("replaces customModels without conduit's entry")
    return why


def _models(doc: dict[str, Any]) -> list[Any]:
    """``customModels``, or ``[]`` when it is missing or not a list."""
    models = doc.get("customModels")
    return models if isinstance(models, list) else []


def _conduit_entry(doc: dict[str, Any]) -> dict[str, Any]:
    """conduit's ``customModels`` entry, or ``{}``."""
    models = _models(doc)
    ids = entry_ids(models)
    return models[ids.index(MODEL_ID)] if MODEL_ID in ids else {}


__all__ = ["Droid", "DroidOptions", "entry_ids", "factory_dir", "render_settings", "selected_model",
           "settings_file"]
