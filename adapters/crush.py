"""Crush (Charm): a conduit provider and the selected models in the global ``crush.json``. Documented format only.

Documented format only: npm ``@charmland/crush`` cannot install on these machines (its postinstall downloads a
release binary from outside the package registries), so no Crush binary has read what this adapter writes; the
real-tool tier has no case for it (``package = None``) and ``conduit verify`` runs ``one_shot`` where a person
has Crush installed. Facts from charmbracelet/crush at tag v0.90.0 (``internal/config/load.go``,
``internal/config/config.go``, ``internal/config/resolve.go``, ``internal/home/home.go``, ``internal/cmd/run.go``,
``internal/cmd/root.go``, ``schema.json``, ``README.md``); docs/formats/crush.md:
- Global config: ``$CRUSH_GLOBAL_CONFIG/crush.json``, else ``$XDG_CONFIG_HOME/crush/crush.json``, else
  ``~/.config/crush/crush.json`` (``GlobalConfig``). Strict JSON: Crush refuses to start on a file that is not
  (``json.Valid`` in ``loadFromConfigPaths``), so conduit refuses to edit one with comments.
- Layers, later wins (``lookupConfigs``; objects merged key by key): ``/etc/crush/crush.json`` < the global
  ``crush.json`` < ``crushrc`` beside it (Bash config) < the data file ``$CRUSH_GLOBAL_DATA/crush.json``, else
  ``$XDG_DATA_HOME/crush/crush.json``, else ``~/.local/share/crush/crush.json`` (where Crush saves the models
  picked in its window) < project files from the git root down to the working folder, in each folder
  ``crush.json`` < ``.crush.json`` < ``crushrc`` < ``.crushrc``.
- A custom provider: ``providers.<id> = {name, type, base_url, api_key, models: [{id, name, context_window,
  default_max_tokens}]}``; ``type = "openai-compat"`` is the OpenAI-compatible client, which requests
  ``base_url + "/chat/completions"`` (README: ``https://api.deepseek.com/v1``), so ``base_url`` carries the version
  segment. A provider with models listed is not auto-discovered. ``context_window`` 0 means unknown (no
  auto-summarize); ``default_max_tokens`` is the output cap sent.
- Selected models: ``models.large`` / ``models.small`` = ``{model, provider}`` (``SelectedModel``).
- ``api_key`` goes through shell expansion (``$VAR``, ``${VAR}``, ``$(command)``; ``internal/config/resolve.go``
  ``shellVariableResolver``; the README's providers use ``"api_key": "$DEEPSEEK_API_KEY"``): by default conduit
  writes the key itself and keeps the file 0600; ``key_source = "env"`` writes ``$CONDUIT_API_KEY`` (a reference,
  unproven by a binary here), which ``conduit run crush`` sets.
- One-shot: ``crush run --quiet PROMPT``; ``CRUSH_DISABLE_METRICS=1`` and ``CRUSH_DISABLE_PROVIDER_AUTO_UPDATE=1``
  are its own opt-outs.
- MCP servers: ``mcp`` in the same ``crush.json`` (``crush_entry``; docs/formats/crush.md).
"""

from __future__ import annotations

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
from conduit.adapters.formats.jsonfile import json_target, read_json_quietly
from conduit.adapters.formats.masking import shown
from conduit.adapters.formats.mcpmap import mcp_secret_keys, merge_json_servers, wanted_entries
from conduit.adapters.formats.mcpshapes import referenced
from conduit.adapters.formats.versions import installed_version
from conduit.adapters.limits import LimitLedger
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport

PROVIDER_ID = "conduit"
BINARIES = ("crush",)
PROJECT_FILES = ("crush.json", ".crush.json", "crushrc", ".crushrc")
LIMIT_KEYS = {"context_window": "context_window", "default_max_tokens": "max_output_tokens"}
"""A model entry's limit key -> the ``ToolSettings`` attribute it is written from."""


KEY_VAR = "CONDUIT_API_KEY"


class CrushOptions(CreateOptions):
    """``[tools.crush]`` options.

    Attributes:
        key_source: ``file`` (the key in ``crush.json``, kept 0600) or ``env`` (``$CONDUIT_API_KEY``, a reference:
            start Crush with ``conduit run crush``, which sets the variable).
    """

    key_source: Literal["file", "env"] = "file"


def config_file(env: Env) -> Path:
    """The global ``crush.json``: in ``$CRUSH_GLOBAL_CONFIG``, else ``<XDG config>/crush``."""
    return env.path_from("CRUSH_GLOBAL_CONFIG", env.config_home() / "crush") / "crush.json"


def data_file(env: Env) -> Path:
    """The data ``crush.json`` (ranks above the global one): ``$CRUSH_GLOBAL_DATA``, ``$XDG_DATA_HOME/crush``, else
    ``~/.local/share/crush``."""
    d = env.get("CRUSH_GLOBAL_DATA")
    if d:
        return Path(d).expanduser() / "crush.json"
    return env.path_from("XDG_DATA_HOME", env.home / ".local" / "share") / "crush" / "crush.json"


class Crush(AdapterDefaults):
    """Adapter for Crush's global ``crush.json`` (documented format only: no binary installs here)."""

    name: ClassVar[str] = "crush"
    display_name: ClassVar[str] = "Crush"
    protocol: ClassVar[Protocol_] = "openai"
    writes_context: ClassVar[bool] = True  # context_window / default_max_tokens land in its file
    owned_keys: ClassVar[tuple[str, ...]] = (
        "crush.json: providers.conduit (name, type, base_url, api_key, models[<model>].{id,name,context_window,"
        "default_max_tokens}), models.large and models.small (model, provider)",
    )
    restart_hint: ClassVar[str | None] = "restart Crush: it reads its config at start-up"
    Options: ClassVar[type[BaseModel]] = CrushOptions
    env_vars: ClassVar[tuple[str, ...]] = ("CRUSH_GLOBAL_CONFIG", "CRUSH_GLOBAL_DATA", "XDG_CONFIG_HOME",
                                           "XDG_DATA_HOME", KEY_VAR)

    # CRUSH_DISABLE_METRICS: internal/cmd/root.go; CRUSH_DISABLE_PROVIDER_AUTO_UPDATE: internal/config/load.go.
    one_shot: ClassVar[OneShot | None] = OneShot(BINARIES, ("run", "--quiet"),
                                                 opt_outs={"CRUSH_DISABLE_METRICS": "1",
                                                           "CRUSH_DISABLE_PROVIDER_AUTO_UPDATE": "1"})
    package: ClassVar[Package | None] = None  # @charmland/crush's postinstall downloads from outside the registries
    competing: ClassVar[Competing] = Competing(files=PROJECT_FILES, walks_up=PROJECT_FILES)
    tool_dirs: ClassVar[Mapping[str, str]] = {"CRUSH_GLOBAL_CONFIG": ".config/crush",
                                              "CRUSH_GLOBAL_DATA": ".local/share/crush"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.config/crush/crush.json", key=("mcp",), format="json",
        transports=frozenset({"stdio", "http", "sse"}), list_argv=None,
        project_files=(".crush.json", "crush.json"),
        source="charmbracelet/crush internal/config/config.go (MCPConfig, ResolvedEnv, ResolvedHeaders)",
        proven="")

    def mcp_path(self, env: Env) -> Path | None:
        """``config_file``: its ``mcp`` object."""
        return config_file(env)

    def verify_files(self, env: Env) -> list[Path]:
        """The global ``crush.json`` and ``crushrc`` beside it, and the data ``crush.json``."""
        return [config_file(env), config_file(env).with_name("crushrc"), data_file(env)]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Target: the provider and selected-model edits in the global ``crush.json`` (0600: it holds the key).

        Raises:
            NotFound: no Crush config directory and ``create`` is off.
        """
        opts = settings.options_as(CrushOptions)
        api_key = settings.key_or_placeholder if opts.key_source == "file" else f"${KEY_VAR}"
        path = config_file(env)
        self.require_dir(path.parent, opts.create)
        ledger = settings.limits or LimitLedger()

        def transform(doc: dict[str, Any]) -> dict[str, Any]:
            ledger.begin(path)
            providers = _obj(doc.get("providers"))
            provider = dict(_obj(providers.get(PROVIDER_ID)))
            provider.update({"name": f"conduit ({settings.channel})", "type": "openai-compat",
                             "base_url": settings.root.openai_base(), "api_key": api_key})
            provider["models"] = _models(provider, settings, ledger, path)
            doc["providers"] = {**providers, PROVIDER_ID: provider}
            selected = _obj(doc.get("models"))
            wanted = {"large": settings.model, "small": settings.small_model or settings.model}
            doc["models"] = {**selected, **{slot: {**_obj(selected.get(slot)), "model": model, "provider": PROVIDER_ID}
                                            for slot, model in wanted.items()}}
            merge_json_servers(doc, ("mcp",), servers, settings.mcp_ledger or mcp_ledger, path)
            return doc

        servers, mcp_ledger = wanted_entries(settings.mcp, self.mcp, crush_entry) if self.mcp else None, McpLedger()
        return [json_target(path, transform, secret_keys={"api_key", *mcp_secret_keys(settings.mcp)},
                            label=path.name)]

    def run_env(self, settings: ToolSettings, env: Env) -> dict[str, str | None]:
        """``{CONDUIT_API_KEY: key}`` for ``key_source = "env"`` (what ``$CONDUIT_API_KEY`` in ``api_key`` reads:
        ``conduit run crush`` and ``conduit env crush`` give it to the session); ``{}`` otherwise."""
        if settings.options_as(CrushOptions).key_source == "env":
            return {KEY_VAR: settings.key_or_placeholder}
        return {}

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the file, conduit's provider (key masked), the selected models."""
        path = config_file(env)
        doc, error = read_json_quietly(path)
        provider = _provider(doc, PROVIDER_ID)
        owned = {"base_url": provider.get("base_url"), "type": provider.get("type"),
                 "api_key": shown(provider.get("api_key"), secret=True),
                 "models": doc.get("models")}
        return ToolFacts.of_file(path, error, owned, installed_version(BINARIES),
                                 format="documented only (no binary verified here)")

    def client_view(self, env: Env) -> ClientView | None:
        """What Crush sends for ``models.large``: its provider's ``base_url`` + ``/chat/completions`` with its
        ``api_key`` (``$VAR`` / ``${VAR}`` read from the environment; a command substitution is not run)."""
        doc, _ = read_json_quietly(config_file(env))
        large = _obj(_obj(doc.get("models")).get("large"))
        if not large:
            return None
        provider = _provider(doc, str(large.get("provider") or ""))
        if not provider.get("base_url"):
            return None
        key = str(provider.get("api_key") or "")
        if key.startswith("$") and not key.startswith("$("):
            return ClientView(str(provider["base_url"]), env.get(key.strip("${}")) or "", str(large.get("model")))
        return ClientView(str(provider["base_url"]), key, str(large.get("model") or ""),
                          key_files=(config_file(env),))

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """What wins over the global ``crush.json``: project files, the ``crushrc`` beside it, and the data file's
        selected models or conduit provider."""
        out = self.competing.blockers(env.environ, env.cwd)
        rc = config_file(env).with_name("crushrc")
        if rc.is_file():
            out.append(Blocker("overridden", str(rc), "a crushrc beside crush.json ranks above it (Bash config)",
                               f"remove the provider and model settings from {rc}"))
        data = data_file(env)
        doc, _ = read_json_quietly(data)
        selected = _obj(doc.get("models"))
        for slot in ("large", "small"):
            pick = selected.get(slot)
            if isinstance(pick, dict) and pick.get("provider") not in (None, PROVIDER_ID):
                out.append(Blocker("overridden", f"{data} models.{slot}",
                                   f"Crush's data file selects provider \"{pick.get('provider')}\" for the {slot} "
                                   "model, which ranks above crush.json", f"remove models.{slot} from {data}, or "
                                   "pick the conduit provider in Crush's model list"))
        if _provider(doc, PROVIDER_ID):
            out.append(Blocker("overridden", f"{data} providers.{PROVIDER_ID}",
                               "Crush's data file has its own conduit provider, which ranks above crush.json",
                               f"remove providers.{PROVIDER_ID} from {data}"))
        return out


def crush_entry(server: McpServer) -> dict[str, Any]:
    """Crush's ``mcp.NAME`` (``internal/config/config.go`` ``MCPConfig``): ``{"type": "stdio", "command", "args",
    "env"}`` (no working folder: a ``cwd`` is not written) or ``{"type": "http"|"sse", "url", "headers"}``; Crush
    resolves ``$VAR``/``${VAR}`` in ``env`` and ``headers`` (``ResolvedEnv``, ``ResolvedHeaders``), so a value from
    ``{ env = "VAR" }`` is written ``${VAR}``."""
    env, headers = referenced(server, "${%s}")
    if server.transport == "stdio":
        entry: dict[str, Any] = {"type": "stdio", "command": server.command}
        return entry | {k: v for k, v in (("args", list(server.args)), ("env", env)) if v}
    return {"type": server.transport, "url": server.url, **({"headers": headers} if headers else {})}


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else ``{}``."""
    return value if isinstance(value, dict) else {}


def _provider(doc: dict[str, Any], provider_id: str) -> dict[str, Any]:
    """``providers.<id>``, or ``{}``."""
    return _obj(_obj(doc.get("providers")).get(provider_id))


def _models(provider: dict[str, Any], settings: ToolSettings, ledger: LimitLedger, path: Path) -> list[Any]:
    """The provider's ``models`` with an entry for the main and the small model (others, and the person's other
    keys in those entries, kept); the main model's limit keys settled by the ledger."""
    current = provider.get("models")
    models = list(current) if isinstance(current, list) else []
    for model in dict.fromkeys([settings.model, settings.small_model or settings.model]):
        at = next((i for i, m in enumerate(models) if isinstance(m, dict) and m.get("id") == model), None)
        entry: dict[str, Any] = dict(models[at]) if at is not None else {}
        entry["id"] = model
        entry.setdefault("name", model)
        if model == settings.model:
            for key, attr in LIMIT_KEYS.items():
                ledger.settle_key(path, entry, key, getattr(settings, attr), f"{model}.{key}")
        if at is None:
            models.append(entry)
        else:
            models[at] = entry
    return models


__all__ = ["Crush", "CrushOptions", "config_file", "data_file"]
