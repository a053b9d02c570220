"""Pi (pi-coding-agent): a ``conduit`` provider in ``models.json`` and the default model in ``settings.json``.

Facts, read in the npm package ``@mariozechner/pi-coding-agent`` 0.73.1 (its ``dist/`` JavaScript and
``docs/models.md``) and its dependency ``@mariozechner/pi-ai`` 0.73.1; proven with the 0.73.1 binary
(docs/formats/pi.md):
- Directory: ``$PI_CODING_AGENT_DIR`` (a leading ``~`` expanded), else ``~/.pi/agent`` (``dist/config.js``
  ``getAgentDir``); ``models.json``, ``settings.json`` and ``auth.json`` live there.
- ``models.json``: ``{"providers": {"<id>": {"baseUrl", "api", "apiKey", "models": [{"id", "name",
  "contextWindow", "maxTokens", ...}]}}}``. Pi removes ``//`` line comments and trailing commas, then
  ``JSON.parse`` (``dist/core/model-registry.js`` ``stripJsonComments``): block comments break the file, and a
  file that fails to load keeps only the built-in models. A provider that is not built in and lists models needs
  ``baseUrl``, ``apiKey`` and ``api`` (``validateConfig``).
- ``api = "openai-completions"``: pi-ai's ``providers/openai-completions.js`` builds ``new OpenAI({baseURL:
  model.baseUrl})``, which requests ``baseUrl + "/chat/completions"``: ``baseUrl`` carries the version segment.
- ``apiKey`` (``dist/core/resolve-config-value.js`` ``resolveConfigValue``): ``"!<command>"`` runs the command
  with the shell and uses its stdout, trimmed, at request time; otherwise the environment variable of that name
  when set, else the literal value. conduit writes ``!cat '<conduit config>/tool-keys/<channel>.key'`` and that
  0600 key file (``key_source = "file"``, the default), or the key itself (``"inline"``; models.json 0600).
- ``auth.json``: a credential stored there for the provider id outranks ``apiKey`` (``getApiKeyAndHeaders``
  asks ``authStorage.getApiKey`` first).
- ``settings.json`` is strict JSON (``dist/core/settings-manager.js``: ``JSON.parse``); ``defaultProvider`` +
  ``defaultModel`` pick the model (``dist/core/model-resolver.js`` ``findInitialModel``, after ``--provider``/
  ``--model`` and the scoped models). ``<cwd>/.pi/settings.json`` (the working folder only) is merged over it
  (``FileSettingsStorage``, ``deepMergeSettings``). ``enabledModels`` (scoped models) wins unless the default
  model is one of them (``dist/main.js``).
- Limits: a model's ``maxTokens`` (default 16384) is sent as ``max_completion_tokens = min(maxTokens, 32000)``
  (pi-ai ``providers/simple-options.js``); ``contextWindow`` (default 128000) drives compaction.
- Start-up network: ``PI_OFFLINE=1`` (version check, tool downloads) and ``PI_TELEMETRY=0`` (install
  telemetry): ``dist/cli/args.js`` help, ``dist/utils/version-check.js``, ``dist/core/telemetry.js``. No folder
  trust. Pi reads its files at start-up (``/model`` reloads ``models.json``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
import shlex
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
from conduit.adapters.formats.jsonc import jsonc_target
from conduit.adapters.formats.jsonfile import json_target, read_json_quietly
from conduit.adapters.formats.textformats import plain_target, read_parsed
from conduit.adapters.formats.versions import installed_version
from conduit.adapters.limits import LimitLedger
from conduit.adapters.precedence import Cite, Order, ProjectScope, Rule
from conduit.errors import ToolFileError

PROVIDER_ID = "conduit"
API = "openai-completions"
BINARIES = ("pi",)
DIR_VAR = "PI_CODING_AGENT_DIR"
LIMIT_KEYS = ("contextWindow", "maxTokens")
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_STRING_OR_COMMENT = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*')
_STRING_OR_COMMA = re.compile(r'"(?:\\.|[^"\\])*"|,(\s*[}\]])')
PACKAGE = "npm @mariozechner/pi-coding-agent"
PROJECT_SCOPE = ProjectScope(
    (".pi/settings.json",), "cwd",
    Cite(PACKAGE, "dist/core/settings-manager.js", "FileSettingsStorage: join(cwd, CONFIG_DIR_NAME, \"settings.json\"); "
         "deepMergeSettings(global, project)", "0.73.1"))
"""The project settings Pi merges over ``settings.json``: ``.pi/settings.json`` in the working folder only (one at
the repository root is not read from a subfolder: checked with 0.73.1). No folder trust."""
MODEL_ORDER = Order(
    "model", ("--provider/--model", "enabledModels", "defaultProvider + defaultModel"),
    Cite(PACKAGE, "dist/core/model-resolver.js", "findInitialModel (scoped models from dist/main.js)", "0.73.1"),
    note="the merged settings (project over global); enabledModels decides unless the saved default is one of them")
"""Which model Pi starts on, highest first."""
KEY_ORDER = Order(
    "key", ("auth.json credential", "models.json apiKey"),
    Cite(PACKAGE, "dist/core/model-registry.js", "getApiKeyAndHeaders: authStorage.getApiKey before the provider's "
         "apiKey", "0.73.1"),
    note="a custom provider reads no OPENAI_* variable (an exported OPENAI_API_KEY/OPENAI_BASE_URL is ignored)")
"""Where Pi takes the key of a custom provider, highest first."""


class PiOptions(CreateOptions):
    """``[tools.pi]`` options.

    Attributes:
        key_source: ``file`` (``apiKey = "!cat '<key file>'"``, the key in conduit's 0600 key file) or ``inline``
            (the key itself in models.json, kept 0600).
    """

    key_source: Literal["file", "inline"] = "file"


def agent_dir(env: Env) -> Path:
    """``$PI_CODING_AGENT_DIR`` (``~`` expanded; a relative one from the working folder) or ``~/.pi/agent``."""
    base = env.get(DIR_VAR)
    if not base:
        return env.home / ".pi" / "agent"
    path = env.home / base[2:] if base.startswith("~/") else (env.home if base == "~" else Path(base))
    return path if path.is_absolute() else env.cwd / path


def key_file(channel: str, env: Env) -> Path:
    """conduit's key file for the ``!cat`` reference: ``<conduit config>/tool-keys/<channel>.key`` (the one
    OpenCode's ``{file:...}`` reference uses)."""
    return env.config_home() / "conduit" / "tool-keys" / f"{channel}.key"


def parse_models(text: str | None, *, path: Path) -> dict[str, Any]:
    """``models.json`` read as Pi reads it: ``//`` comments and trailing commas removed, then strict JSON.

    Raises:
        ToolFileError: Pi could not read it (a block comment, a syntax error, not an object).
    """
    if text is None or not text.strip():
        return {}
    plain = _STRING_OR_COMMENT.sub(lambda m: m[0] if m[0].startswith('"') else "", text)
    plain = _STRING_OR_COMMA.sub(lambda m: m[1] if m[1] is not None else m[0], plain)
    try:
        doc = json.loads(plain)
    except json.JSONDecodeError as exc:
        raise ToolFileError(f"{path}: Pi cannot read this file (it strips only // comments and trailing commas, "
                            f"then parses JSON): {exc.msg} at line {exc.lineno}",
                            "fix it by hand; Pi ignores every custom model while it fails, and conduit left it "
                            "unchanged") from exc
    if not isinstance(doc, dict):
        raise ToolFileError(f"{path}: not a JSON object", "fix it by hand; conduit left it unchanged")
    return doc


def _read_models(path: Path) -> tuple[dict[str, Any], str | None]:
    """``models.json`` for reporting: (document, None), ``({}, None)`` when missing, ``({}, message)``."""
    return read_parsed(path, parse_models)


def _provider(doc: dict[str, Any], pid: str = PROVIDER_ID) -> dict[str, Any]:
    providers = doc.get("providers")
    found = providers.get(pid) if isinstance(providers, dict) else None
    return found if isinstance(found, dict) else {}


class Pi(AdapterDefaults):
    """Adapter for Pi's ``models.json`` (the ``conduit`` provider) and ``settings.json`` (its default model)."""

    name: ClassVar[str] = "pi"
    display_name: ClassVar[str] = "Pi"
    protocol: ClassVar[Protocol_] = "openai"
    writes_context: ClassVar[bool] = True  # contextWindow / maxTokens of conduit's model entry
    owned_keys: ClassVar[tuple[str, ...]] = (
        "models.json: providers.conduit (baseUrl, api, apiKey, models: the profile's model and small model; "
        "contextWindow/maxTokens while they are conduit's)",
        "settings.json: defaultProvider, defaultModel",
        "<conduit config>/tool-keys/<channel>.key (key_source = file)",
    )
    restart_hint: ClassVar[str | None] = "start a new Pi session: it reads settings.json and models.json at start-up"
    Options: ClassVar[type[BaseModel]] = PiOptions
    env_vars: ClassVar[tuple[str, ...]] = (DIR_VAR, "XDG_CONFIG_HOME")  # the latter: where conduit's key file is

    # PI_OFFLINE / PI_TELEMETRY: dist/cli/args.js (help), dist/utils/version-check.js, dist/core/telemetry.js.
    one_shot: ClassVar[OneShot | None] = OneShot(BINARIES, ("-p",), opt_outs={"PI_OFFLINE": "1", "PI_TELEMETRY": "0"})
    package: ClassVar[Package | None] = Package("npm", "@mariozechner/pi-coding-agent", "0.73.1", BINARIES)
    # A custom provider reads no OPENAI_* variable; the project settings file may pick another model.
    competing: ClassVar[Competing] = Competing(files=(".pi/settings.json",))
    precedence: ClassVar[tuple[Rule, ...]] = (PROJECT_SCOPE, MODEL_ORDER, KEY_ORDER)
    tool_dirs: ClassVar[Mapping[str, str]] = {DIR_VAR: ".pi/agent"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}

    def verify_files(self, env: Env) -> list[Path]:
        """``auth.json`` (its credentials outrank ``apiKey``) in ``agent_dir``."""
        return [agent_dir(env) / "auth.json"]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets: the key file (``file``), the provider in models.json, the default model in settings.json."""
        opts = settings.options_as(PiOptions)
        d = agent_dir(env)
        self.require_dir(d, opts.create)
        targets: list[Target] = []
        if opts.key_source == "file":
            kf = key_file(settings.channel, env)
            targets.append(plain_target(kf, settings.key_or_placeholder, label=f"tool-keys/{kf.name}"))
            api_key = f"!cat {shlex.quote(str(kf))}"
        else:
            api_key = settings.key_or_placeholder
        targets.append(_models_target(d / "models.json", settings, api_key, inline=opts.key_source == "inline"))

        def defaults(doc: dict[str, Any]) -> dict[str, Any]:
            doc["defaultProvider"] = PROVIDER_ID
            doc["defaultModel"] = settings.model
            return doc

        targets.append(json_target(d / "settings.json", defaults, secret_keys=(), mode=0o644, label="settings.json"))
        return targets

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the files, conduit's provider (key masked), the default model, the version."""
        d = agent_dir(env)
        doc, error = _read_models(d / "models.json")
        settings, settings_error = read_json_quietly(d / "settings.json")
        provider = _provider(doc)
        api_key = provider.get("apiKey")
        details = {"dir": str(d), "models": str(d / "models.json"), "parse_error": error or settings_error,
                   "owned": {"baseUrl": provider.get("baseUrl"), "api": provider.get("api"),
                             "apiKey": api_key if isinstance(api_key, str) and api_key.startswith("!") else
                             ("(literal key)" if api_key else None),
                             "defaultProvider": settings.get("defaultProvider"),
                             "defaultModel": settings.get("defaultModel")},
                   "version": installed_version(BINARIES)}
        return ToolFacts(summary=f"{d} ({'found' if d.is_dir() else 'missing'})", details=details)

    def client_view(self, env: Env) -> ClientView | None:
        """What Pi sends for its default model: the provider's ``baseUrl``, the key its ``apiKey`` resolves to
        (``!cat <file>`` read here, an exported variable's value, or the literal), ``chat/completions`` or
        ``responses`` by ``api``."""
        d = agent_dir(env)
        settings, _ = read_json_quietly(d / "settings.json")
        pid, model = str(settings.get("defaultProvider") or ""), str(settings.get("defaultModel") or "")
        doc, _ = _read_models(d / "models.json")
        provider = _provider(doc, pid)
        if not provider.get("baseUrl"):
            return None
        key, key_files = _resolve_key(str(provider.get("apiKey") or ""), env, d / "models.json")
        endpoint = "responses" if provider.get("api") == "openai-responses" else "chat/completions"
        return ClientView(str(provider["baseUrl"]), key, model, endpoint, key_files)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """A stored ``auth.json`` credential for the provider (``KEY_ORDER``), the project ``.pi/settings.json``
        Pi applies (``PROJECT_SCOPE``: the working folder's) when it picks another model, and ``enabledModels``
        (global or project) that leave conduit's model out (``MODEL_ORDER``)."""
        d = agent_dir(env)
        out: list[Blocker] = []
        auth, _ = read_json_quietly(d / "auth.json")
        if PROVIDER_ID in auth:
            out.append(Blocker("overridden", str(d / "auth.json"),
                               f"a stored credential for \"{PROVIDER_ID}\" outranks the apiKey in models.json",
                               f"remove the \"{PROVIDER_ID}\" entry from {d / 'auth.json'} (or /logout in Pi)"))
        layers = [(d / "settings.json", read_json_quietly(d / "settings.json")[0])]
        for project in PROJECT_SCOPE.applied(env.cwd, env.environ, skip=d / "settings.json"):
            pdoc, _ = read_json_quietly(project)
            layers.append((project, pdoc))
            for k, value in (("defaultProvider", PROVIDER_ID), ("defaultModel", settings.model)):
                if k in pdoc and pdoc[k] != value:
                    out.append(Blocker("overridden", str(project),
                                       f"{k} = \"{pdoc[k]}\" in this project's settings ranks above "
                                       f"{d / 'settings.json'} (conduit's \"{value}\")", f"remove {k} from {project}"))
        return out + _scope_blockers(layers, settings.model)


def _models_target(path: Path, settings: ToolSettings, api_key: str, *, inline: bool) -> Target:
    """The ``providers.conduit`` edits in ``models.json``: base URL, API, key (or its reference), and one model
    entry per profile model (keys a person added to those entries are kept; limits through ``settings.limits``)."""
    ledger = settings.limits or LimitLedger()
    wanted_ids = [settings.model] + ([settings.small_model] if settings.small_model
                                     and settings.small_model != settings.model else [])

    def edits(doc: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
        ledger.begin(path)
        known = {m.get("id"): m for m in _provider(doc).get("models") or [] if isinstance(m, dict)}
        models = []
        for mid in wanted_ids:
            entry = dict(known.get(mid) or {"id": mid})
            if mid == settings.model:
                entry = _with_limits(entry, settings, ledger, path)
            models.append(entry)
        base = ("providers", PROVIDER_ID)
        return [((*base, "baseUrl"), settings.root.openai_base()), ((*base, "api"), API),
                ((*base, "apiKey"), api_key), ((*base, "models"), models)]

    target = jsonc_target(path, edits, secret_keys=("apiKey",) if inline else (), mode=0o600 if inline else 0o644,
                          label="models.json")
    render = target.render

    def render_checked(text: str | None) -> str:
        parse_models(text, path=path)  # refuse what Pi cannot read (block comments) before editing it
        return render(text)

    return dataclasses.replace(target, render=render_checked)


def _with_limits(entry: dict[str, Any], settings: ToolSettings, ledger: LimitLedger, path: Path) -> dict[str, Any]:
    """``entry`` with ``contextWindow``/``maxTokens`` settled: the profile's when known; unknown, conduit's own
    value goes (the one it replaced comes back) and a person's stays (``conduit.adapters.limits``)."""
    out = dict(entry)
    for slot, wanted in zip(LIMIT_KEYS, (settings.context_window, settings.max_output_tokens), strict=True):
        ledger.settle_key(path, out, slot, wanted)
    return out


def _resolve_key(value: str, env: Env, models: Path) -> tuple[str, tuple[Path, ...]]:
    """The key ``apiKey`` resolves to and the files holding it: ``!cat <file>`` reads the file (other commands
    are not run here: ``""``), the name of an exported variable (upper case, digits, ``_``) gives its value, else the
    literal (in models.json)."""
    if value.startswith("!"):
        parts = shlex.split(value[1:]) if value[1:].strip() else []
        if len(parts) == 2 and parts[0] == "cat":
            kf = Path(parts[1]).expanduser()
            try:
                return kf.read_text(encoding="utf-8").strip(), (kf,)
            except (OSError, UnicodeDecodeError):
                return "", ()
        return "", ()
    if _ENV_NAME.fullmatch(value) and env.get(value):  # Pi tries any name; here only a variable-like one
        return env.get(value) or "", ()
    return value, (models,)


def _scope_blockers(layers: list[tuple[Path, dict[str, Any]]], model: str) -> list[Blocker]:
    """An ``overridden`` blocker when the effective ``enabledModels`` (the last layer setting it) is a non-empty
    list matching neither ``conduit/<model>`` nor ``<model>`` (exactly or as a glob): Pi then starts on the first
    scoped model."""
    source, patterns = None, None
    for path, doc in layers:
        if "enabledModels" in doc:
            source, patterns = path, doc["enabledModels"]
    if not isinstance(patterns, list) or not patterns:
        return []
    names = (f"{PROVIDER_ID}/{model}", model)
    if any(isinstance(p, str) and any(fnmatch.fnmatchcase(n, p.split(":")[0]) for n in names) for p in patterns):
        return []
    return [Blocker("overridden", str(source), f"enabledModels {patterns} leaves out {PROVIDER_ID}/{model}, so Pi "
                    "starts on the first scoped model", f"add \"{PROVIDER_ID}/{model}\" to enabledModels in "
                    f"{source}, or remove enabledModels")]


__all__ = ["Pi", "PiOptions", "agent_dir", "key_file", "parse_models"]
