"""OpenCode: a conduit provider in the global ``opencode.json`` / ``opencode.jsonc``.

Facts (sst/opencode docs ``config``, ``providers`` ("Custom provider"), and ``packages/opencode/src/config``):
- Global config: ``$XDG_CONFIG_HOME/opencode/`` (default ``~/.config/opencode/``), file ``opencode.jsonc``,
  ``opencode.json`` or the older ``config.json``; JSON with comments and trailing commas. Comments survive
  conduit's edits (surgical JSONC edits, ``conduit.adapters.formats.textformats``); a file that cannot be edited
  safely is refused with a message.
- A custom OpenAI-compatible provider: ``provider.<id> = {"npm": "@ai-sdk/openai-compatible", "name": ...,
  "options": {"baseURL": ..., "apiKey": ...}, "models": {"<model id>": {"name": ...}}}``; ``model`` /
  ``small_model`` are ``"<provider id>/<model id>"``. The AI SDK requests ``baseURL + "/chat/completions"``,
  so ``baseURL`` carries the version segment.
- Variable substitution: ``{env:VAR}`` and ``{file:PATH}`` (``~/`` or absolute path; the file's text, trimmed).
  conduit writes ``{file:<conduit config>/tool-keys/<channel>.key}`` and that key file (0600, conduit's own),
  so the literal key never appears in OpenCode's config; ``key_source = "env"`` writes ``{env:CONDUIT_API_KEY}``
  instead (``conduit run opencode`` sets it, or export it yourself).
- Layers, later wins: remote ``.well-known/opencode`` < global < ``$OPENCODE_CONFIG`` < project
  ``opencode.json[c]`` < ``.opencode/`` < ``$OPENCODE_CONFIG_CONTENT``. OpenCode reads its config at start-up.
- A model's ``limit = {"context": N, "output": M}`` (tokens; both required when ``limit`` is given: the model
  schema in ``packages/opencode/src/provider`` is ``limit: {context, input?, output}``). OpenCode sends
  ``max_tokens = min(limit.output, OUTPUT_TOKEN_MAX) || OUTPUT_TOKEN_MAX`` (32 000), so ``output: 0`` means
  "unknown" and keeps its default; ``context`` drives its compaction. Read from the 1.18 binary's bundle.
- MCP servers: ``mcp`` in the same file (``OPENCODE_MCP``, ``conduit.adapters.formats.mcpshapes.opencode_entry``;
  docs/formats/opencode.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

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
    OPENAI_ROUTES,
    Blocker,
    Competing,
    OneShot,
    Package,
)
from conduit.adapters.formats.jsonc import _SpanParser, strip_jsonc
from conduit.adapters.formats.mcpmap import jsonc_server_edits, mcp_secret_keys, wanted_entries
from conduit.adapters.formats.mcpshapes import opencode_entry
from conduit.adapters.formats.textformats import (
    jsonc_target,
    parse_jsonc,
    plain_target,
    read_parsed,
    tool_version,
)
from conduit.adapters.limits import ABSENT, LimitLedger
from conduit.adapters.mcp import McpLedger, McpSupport
from conduit.adapters.opencode_precedence import RULES, project_blockers, project_files
from conduit.adapters.precedence import Rule
from conduit.errors import ToolFileError

PROVIDER_ID = "conduit"
KEY_VAR = "CONDUIT_API_KEY"
FILE_NAMES = ("opencode.jsonc", "opencode.json", "config.json")


class OpenCodeOptions(CreateOptions):
    """``[tools.opencode]`` options.

    Attributes:
        key_source: ``file`` (conduit writes a 0600 key file and references it) or ``env``
            (``{env:CONDUIT_API_KEY}``: ``conduit run opencode`` sets it, or export it yourself).
    """

    key_source: Literal["file", "env"] = "file"


OPENCODE_MCP = McpSupport(
    file="~/.config/opencode/opencode.json", key=("mcp",), format="jsonc",
    transports=frozenset({"stdio", "http", "sse"}), list_argv=("opencode", "mcp", "list"),
    project_files=("opencode.json", "opencode.jsonc", ".opencode/opencode.json", ".opencode/opencode.jsonc"),
    source="sst/opencode packages/opencode/src/config/config.ts (McpLocal, McpRemote), docs `mcp-servers`; "
           "the 1.18.33 binary's schema",
    proven="`opencode mcp list` 1.18.33 (real-tool tier)")
"""OpenCode's MCP servers: ``mcp.NAME`` in the config file conduit already edits (``opencode_entry``); a remote
server is tried as streamable HTTP, then SSE, so both HTTP transports are written ``type = "remote"``. The file
is kept 0600 (it may hold the key), whatever the servers hold."""


def config_dir(env: Env) -> Path:
    """``$XDG_CONFIG_HOME/opencode`` or ``~/.config/opencode``."""
    return env.config_home() / "opencode"


def config_file(env: Env) -> Path:
    """The global config file OpenCode uses: the first existing of ``FILE_NAMES``, else ``opencode.json``."""
    d = config_dir(env)
    return next((d / n for n in FILE_NAMES if (d / n).exists()), d / "opencode.json")


def key_file(channel: str, env: Env) -> Path:
    """conduit's own key file for tools that reference a key by path:
    ``<conduit config>/tool-keys/<channel>.key`` (``$XDG_CONFIG_HOME/conduit``, as the daemon's paths)."""
    return env.config_home() / "conduit" / "tool-keys" / f"{channel}.key"


class OpenCode(AdapterDefaults):
    """Adapter for OpenCode's global config (a conduit provider plus ``model``/``small_model``)."""

    name: ClassVar[str] = "opencode"
    writes_context: ClassVar[bool] = True  # context_window / max_output_tokens land in its files
    display_name: ClassVar[str] = "OpenCode"
    protocol: ClassVar[Protocol_] = "openai"
    owned_keys: ClassVar[tuple[str, ...]] = (
        "opencode.json[c]: provider.conduit (npm, name, options.baseURL, options.apiKey, models), model, "
        "small_model (when the profile sets one; conduit's value goes when it sets none), "
        "provider.conduit.models.<model>.limit (removed when unknown)",
        "<conduit config>/tool-keys/<channel>.key (key_source = file)",
    )
    restart_hint: ClassVar[str | None] = "restart OpenCode: it reads its config at start-up"
    Options: ClassVar[type[BaseModel]] = OpenCodeOptions
    env_vars: ClassVar[tuple[str, ...]] = ("XDG_CONFIG_HOME", "OPENCODE_CONFIG", "OPENCODE_CONFIG_CONTENT", KEY_VAR,
                                          "OPENCODE_DISABLE_PROJECT_CONFIG")

    # OPENCODE_DISABLE_AUTOUPDATE: opencode packages/opencode/src/flag/flag.ts.
    one_shot: ClassVar[OneShot | None] = OneShot(("opencode",), ("run",), opt_outs={"OPENCODE_DISABLE_AUTOUPDATE": "1"})
    package: ClassVar[Package | None] = Package("npm", "opencode-ai", "1.18.33", ("opencode",))
    competing: ClassVar[Competing] = Competing(("OPENCODE_CONFIG_CONTENT", *OPENAI_MODEL), ("CONDUIT_API_KEY", *OPENAI_KEY),
                                               ("OPENCODE_CONFIG_CONTENT", *OPENAI_BASE),
                                               ("opencode.json", "opencode.jsonc", ".opencode/opencode.json",
                                                ".opencode/opencode.jsonc"))
    tool_dirs: ClassVar[Mapping[str, str]] = {}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = OPENCODE_MCP
    precedence: ClassVar[tuple[Rule, ...]] = RULES  # conduit.adapters.opencode_precedence

    def mcp_path(self, env: Env) -> Path | None:
        """The global config file (``config_file``): its ``mcp`` object."""
        return config_file(env)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """``OPENCODE_CONFIG_CONTENT`` exported (it ranks above every file), and each gateway value that
        ``$OPENCODE_CONFIG`` or the project files OpenCode applies from the working folder set to another value
        (``conduit.adapters.opencode_precedence``); a project file that sets none of them outranks nothing."""
        opts = settings.options_as(OpenCodeOptions)
        wanted = {"model": f"{PROVIDER_ID}/{settings.model}",
                  f"provider.{PROVIDER_ID}.options.baseURL": settings.root.openai_base(),
                  f"provider.{PROVIDER_ID}.options.apiKey": f"{{file:{key_file(settings.channel, env)}}}"
                  if opts.key_source == "file" else f"{{env:{KEY_VAR}}}"}
        if settings.small_model:
            wanted["small_model"] = f"{PROVIDER_ID}/{settings.small_model}"
        path = config_file(env)
        custom = [Path(env.get("OPENCODE_CONFIG") or "")] if env.get("OPENCODE_CONFIG") else []
        out = [Blocker("overridden", "shell environment", "OPENCODE_CONFIG_CONTENT is exported: OpenCode merges it "
                       "over every config file", "unset OPENCODE_CONFIG_CONTENT")] \
            if env.get("OPENCODE_CONFIG_CONTENT") else []
        return out + project_blockers(env, path, wanted, PROVIDER_ID,
                                      [p for p in custom if p.is_file()] + project_files(env, path))

    def verify_files(self, env: Env) -> list[Path]:
        """``config_dir`` (copied whole) and ``~/.local/share/opencode/auth.json``."""
        return [config_dir(env), env.home / ".local/share/opencode/auth.json"]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets: the key file (for ``file``) and the provider edits in the config file."""
        opts = settings.options_as(OpenCodeOptions)
        path = config_file(env)
        self.require_dir(path.parent, opts.create)
        return provider_targets(settings, path, env, opts.key_source)

    def run_env(self, settings: ToolSettings, env: Env) -> dict[str, str | None]:
        """``{CONDUIT_API_KEY: key}`` for ``key_source = "env"`` (what ``{env:CONDUIT_API_KEY}`` reads: ``conduit run
        opencode`` and ``conduit env opencode`` give it to the session); ``{}`` otherwise (files only)."""
        if settings.options_as(OpenCodeOptions).key_source == "env":
            return {KEY_VAR: settings.key_or_placeholder}
        return {}

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the file, the conduit provider, and the layers that override the global file."""
        path = config_file(env)
        doc, error = read_config(path)
        effective = _overrides(doc, path, env) | unexported_key(doc, env)
        if env.get("OPENCODE_CONFIG_CONTENT"):
            effective["OPENCODE_CONFIG_CONTENT"] = Effective("(set)", "shell environment", True,
                                                             "inline config ranks above every file")
        return ToolFacts.of_file(path, error, owned_values(doc), tool_version("opencode"), effective)

    def client_view(self, env: Env) -> ClientView | None:
        """What OpenCode sends for ``model = "<provider>/<model>"``: the provider's ``options.baseURL`` and its
        ``apiKey`` with ``{file:...}`` (the file's text, trimmed) and ``{env:...}`` substituted."""
        return provider_view(read_config(config_file(env))[0], env)


def provider_view(doc: dict[str, Any], env: Env) -> ClientView | None:
    """What an OpenCode-format client (OpenCode, Kilo CLI) sends for ``doc``'s ``model = "<provider>/<model>"``:
    the provider's ``options.baseURL`` and its ``apiKey`` with ``{file:...}`` (the file's text, trimmed) and
    ``{env:...}`` substituted; None when that provider has no ``baseURL``."""
    provider_id, _, model = str(doc.get("model") or "").partition("/")
    options = _options(doc, provider_id)
    if not options.get("baseURL"):
        return None
    key = str(options.get("apiKey") or "")
    key_files: tuple[Path, ...] = ()
    if key.startswith("{file:") and key.endswith("}"):
        kf = Path(key[6:-1]).expanduser()
        try:
            key, key_files = kf.read_text(encoding="utf-8").strip(), (kf,)
        except (OSError, UnicodeDecodeError):
            key = ""
    elif key.startswith("{env:") and key.endswith("}"):
        key = env.get(key[5:-1]) or ""
    return ClientView(str(options["baseURL"]), key, model, key_files=key_files)


def provider_targets(settings: ToolSettings, path: Path, env: Env, key_source: str) -> list[Target]:
    """The targets that point an OpenCode-format config (OpenCode, Kilo CLI) at ``settings``: for ``key_source``
    ``file`` the key file (``key_file``, 0600) and an ``apiKey`` of ``{file:<it>}``, for ``env`` an ``apiKey`` of
    ``{env:CONDUIT_API_KEY}``; then the JSONC edits of ``path`` (``provider.conduit``, its models with ``limit``,
    ``model``, ``small_model``; comments and every other key kept). ``path`` may be missing (created)."""
    key = settings.key_or_placeholder
    targets: list[Target] = []
    if key_source == "file":
        kf = key_file(settings.channel, env)
        targets.append(plain_target(kf, key, label=f"tool-keys/{kf.name}"))
        api_key = f"{{file:{kf}}}"
    else:
        api_key = f"{{env:{KEY_VAR}}}"
    models = [settings.model] + ([settings.small_model] if settings.small_model
                                 and settings.small_model != settings.model else [])

    def edits(doc: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
        base = ("provider", PROVIDER_ID)
        current = (doc.get("provider") or {}).get(PROVIDER_ID) if isinstance(doc.get("provider"), dict) else None
        known = dict(current.get("models") or {}) if isinstance(current, dict) else {}
        out: list[tuple[tuple[str, ...], Any]] = [
            ((*base, "npm"), "@ai-sdk/openai-compatible"),
            ((*base, "name"), f"conduit ({settings.channel})"),
            ((*base, "options", "baseURL"), settings.root.openai_base()),
            ((*base, "options", "apiKey"), api_key),
        ]
        out += [((*base, "models", m), _with_limit(known.get(m) or {"name": m}, settings)
                 if m == settings.model else known.get(m) or {"name": m}) for m in models]
        out.append((("model",), f"{PROVIDER_ID}/{settings.model}"))
        small = _settle_small_model(doc, settings, ledger, path)
        drop[:] = [small is ABSENT and "small_model" in doc]
        if small is not ABSENT and small != doc.get("small_model", ABSENT):
            out.append((("small_model",), small))
        return out + jsonc_server_edits(doc, ("mcp",), servers, settings.mcp_ledger or mcp_ledger, path)

    ledger, drop, mcp_ledger = settings.limits or LimitLedger(), [False], McpLedger()
    servers = wanted_entries(settings.mcp, OPENCODE_MCP, opencode_entry)
    target = jsonc_target(path, edits, secret_keys={"apiKey", *mcp_secret_keys(settings.mcp)}, label=path.name)
    render = target.render

    def render_then_drop(text: str | None) -> str:
        new = render(text)  # runs edits, which say whether conduit's small_model goes
        return _drop_small_model(new, path) if drop[0] else new

    targets.append(dataclasses.replace(target, render=render_then_drop))
    return targets


def read_config(path: Path) -> tuple[dict[str, Any], str | None]:
    """A JSONC config file (OpenCode, Kilo CLI) and None; ``({}, None)`` when missing; ``({}, message)`` when unreadable."""
    return read_parsed(path, parse_jsonc)


def owned_values(doc: dict[str, Any]) -> dict[str, Any]:
    """The values conduit owns in an OpenCode-format config, for doctor: ``baseURL``, ``apiKey`` (a reference as
    written, a literal key only as ``(literal key)``), ``model``, ``small_model``."""
    options = _options(doc)
    api_key = options.get("apiKey")
    return {"baseURL": options.get("baseURL"),
            "apiKey": api_key if isinstance(api_key, str) and api_key.startswith("{") else
            ("(literal key)" if api_key else None),
            "model": doc.get("model"), "small_model": doc.get("small_model")}


def unexported_key(doc: dict[str, Any], env: Env) -> dict[str, Effective]:
    """``{VAR: Effective}`` when conduit's provider's ``apiKey`` is ``{env:VAR}`` and ``VAR`` is not exported;
    ``{}`` otherwise."""
    api_key = _options(doc).get("apiKey")
    if isinstance(api_key, str) and api_key.startswith("{env:") and not env.get(api_key[5:-1]):
        return {api_key[5:-1]: Effective(None, None, False, "the key is referenced from the environment but not "
                                                            "exported")}
    return {}


def _options(doc: dict[str, Any], provider_id: str = PROVIDER_ID) -> dict[str, Any]:
    """``provider.<id>.options``, or ``{}``."""
    providers = doc.get("provider")
    provider = providers.get(provider_id) if isinstance(providers, dict) else None
    options = provider.get("options") if isinstance(provider, dict) else None
    return options if isinstance(options, dict) else {}


def _overrides(doc: dict[str, Any], path: Path, env: Env) -> dict[str, Effective]:
    """``model`` set by a layer above the global file: ``$OPENCODE_CONFIG``, then the project's files."""
    layers = [("OPENCODE_CONFIG", Path(env.get("OPENCODE_CONFIG") or ""))] if env.get("OPENCODE_CONFIG") else []
    layers += [(f"project {p.name}", p) for p in project_files(env, path)]
    return model_overrides(doc, path, layers)


def model_overrides(doc: dict[str, Any], path: Path, layers: list[tuple[str, Path]]) -> dict[str, Effective]:
    """``{"model": Effective}`` for each of ``layers`` (``(label, file)``, lowest first; the last that sets
    ``model`` wins) other than ``path`` that exists, parses and sets ``model``; ``{}`` when none does."""
    effective: dict[str, Effective] = {}
    for label, layer in layers:
        if layer == path or not layer.is_file():
            continue
        ldoc, error = read_config(layer)
        if error is None and "model" in ldoc:
            effective["model"] = Effective(ldoc["model"], f"{label} ({layer})", ldoc["model"] != doc.get("model"),
                                           "it ranks above the global config conduit writes")
    return effective


def _settle_small_model(doc: dict[str, Any], settings: ToolSettings, ledger: LimitLedger, path: Path) -> Any:
    """The ``small_model`` the file gets (``ABSENT``: none): ``conduit/<small_model>`` when the profile (or the
    fallback channel) sets one. With none set, conduit's value goes and the one it replaced comes back
    (``conduit.adapters.limits`` records; a value the person set or changed stays, even one naming conduit's
    provider)."""
    wanted = f"{PROVIDER_ID}/{settings.small_model}" if settings.small_model else None
    return ledger.settle(path, "small_model", doc.get("small_model", ABSENT), wanted)


def _drop_small_model(text: str, path: Path) -> str:
    """``text`` without its top-level ``small_model`` member (its own line when it has one); comments and
    layout elsewhere are kept.

    Raises:
        ToolFileError: the member cannot be cut out cleanly (the file is then left unchanged).
    """
    doc = parse_jsonc(text, path=path)
    if "small_model" not in doc:
        return text
    stripped = strip_jsonc(text)  # same length as text: comments blanked
    key_start, node = _SpanParser(stripped).value().members["small_model"]
    start, end = key_start, node.end
    after = len(stripped) - len(stripped[end:].lstrip(" \t"))
    if stripped.startswith(",", after):
        end = after + 1  # a comma after it: cut it with the member
    else:
        before = len(stripped[:start].rstrip())
        if stripped[before - 1] == ",":
            start = before - 1  # the last member: cut the comma before it
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    if not text[line_start:start].strip() and (line_end < 0 or not text[end:line_end].strip()):
        start, end = line_start, (len(text) if line_end < 0 else line_end + 1)  # the member's own line(s)
    out = text[:start] + text[end:]
    want = {k: v for k, v in doc.items() if k != "small_model"}
    if parse_jsonc(out, path=path) != want:
        raise ToolFileError(f"{path}: conduit could not remove its \"small_model\" without disturbing the file",
                            "delete the \"small_model\" line by hand; the file is unchanged")
    return out


def _with_limit(entry: Any, settings: ToolSettings) -> Any:
    """The model entry with ``limit`` from ``settings`` (context window, output limit) when either is known, an
    unknown part 0 (OpenCode's "unknown"); with neither known, ``limit`` is removed (a limit of the previous
    model or channel must not stay; OpenCode's schema requires both ``context`` and ``output`` in it, so it goes
    whole). Other keys kept."""
    if not isinstance(entry, dict):
        return entry
    got = entry.get("limit")
    old: dict[str, Any] = got if isinstance(got, dict) else {}
    if settings.context_window is None and settings.max_output_tokens is None:
        return {k: v for k, v in entry.items() if k != "limit"}
    return {**entry, "limit": {**old, "context": settings.context_window or 0,
                               "output": settings.max_output_tokens or 0}}


__all__ = ["OPENCODE_MCP", "OpenCode", "OpenCodeOptions", "config_dir", "config_file", "key_file", "model_overrides", "owned_values",
           "provider_targets", "provider_view", "read_config", "unexported_key"]
