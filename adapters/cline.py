"""Cline: OpenAI-compatible provider settings, in whichever storage generation is installed.

Facts (docs/formats/cline.md, read from the cline/cline sources, VS Code 4.1.x / CLI 3.0.x):
- ``<data>`` = ``$CLINE_DATA_DIR`` (trimmed), else ``$CLINE_DIR/data``, else ``~/.cline/data``.
- Generation A (VS Code <= 3.65): VS Code's ``state.vscdb`` + OS keychain; not writable from outside.
- Generation B (VS Code >= 3.66, JetBrains, CLI 1.x/2.x): ``<data>/globalState.json`` (``planModeApiProvider``,
  ``actModeApiProvider`` = ``"openai"``, ``openAiBaseUrl`` *with* the version segment, ``planModeOpenAiModelId``,
  ``actModeOpenAiModelId``) and ``<data>/secrets.json`` (``openAiApiKey``; mode 0600).
- Generation C (CLI >= 3.0): ``<data>/settings/providers.json`` (or ``$CLINE_PROVIDER_SETTINGS_PATH``):
  ``{"version": 1, "lastUsedProvider": "openai-compatible", "providers": {"openai-compatible": {"settings":
  {...}, "updatedAt": "...Z", "tokenSource": "manual"}}}``. One invalid entry empties the whole file for Cline,
  ``updatedAt`` must end in ``Z``.
- The OpenAI SDK requests ``baseURL + "/chat/completions"``; it never adds ``/v1``.
- Generation B caches both files in memory and rewrites them on its next save: reload Cline after a sync.
- Limits (tokens): generation B's ``planModeOpenAiModelInfo`` / ``actModeOpenAiModelInfo`` objects hold
  ``contextWindow`` and ``maxTokens`` (docs/formats/cline.md; cline/cline ``src/shared/api.ts`` ``ModelInfo``);
  generation C's provider ``settings`` has ``contextWindow`` and ``maxTokens`` (``@cline/core`` 3.0's
  ``ProviderSettingsSchema``, ``services/llms/provider-settings.d.ts``), which ``@cline/llms`` passes on as
  ``maxInputTokens`` and ``maxOutputTokens``. conduit writes them only when it knows them.
- MCP servers: ``<data>/settings/cline_mcp_settings.json`` (``cline_entry``; docs/formats/cline.md).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from conduit.adapters.base import (
    AdapterDefaults,
    Blocker,
    ClientView,
    Env,
    NotFound,
    Proposal,
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
from conduit.adapters.formats.jsonfile import as_object, json_target, read_json_quietly
from conduit.adapters.formats.mcpmap import mcp_json_targets
from conduit.adapters.limits import LimitLedger
from conduit.adapters.mcp import McpServer, McpSupport, standard_entry
from conduit.adapters.precedence import Cite, Order, Rule
from conduit.redact import fingerprint

PROVIDER_ID = "openai-compatible"
SECRET_KEYS = frozenset({"openAiApiKey", "apiKey"})
CLI = "npm cline"
"""The CLI's code ships compiled (``@cline/cli-linux-x64`` ``bin/cline``, its bundled JavaScript read as text)."""
PROVIDER_ORDER = Order(
    "provider and model", ("--provider/--model", "providers.json lastUsedProvider (its settings.model)",
                           "CLINE_PROVIDER / CLINE_MODEL"),
    Cite(CLI, "bin/cline", "getLastUsedProviderSettings()?.provider ?? process.env.CLINE_PROVIDER (and .model ?? "
         "CLINE_MODEL)", "3.0.65"),
    note="the variables only count when providers.json names no provider")
"""Which provider and model Cline CLI uses, highest first."""
KEY_ORDER = Order(
    "key", ("providers.json settings.apiKey", "OPENAI_API_KEY"),
    Cite(CLI, "bin/cline", "provider catalog: openai-compatible apiKeyEnv [\"OPENAI_API_KEY\"], a fallback for "
         "settings without apiKey", "3.0.65"),
    note="OPENAI_BASE_URL likewise yields to settings.baseUrl; Cline CLI reads no project file and no .env")
"""Where Cline CLI takes the key of its OpenAI-compatible provider, highest first."""
RULES: tuple[Rule, ...] = (PROVIDER_ORDER, KEY_ORDER)


class ClineOptions(BaseModel):
    """``[tools.cline]`` options.

    Attributes:
        generation: ``auto`` writes the generation(s) found on disk; ``B`` or ``C`` writes that one, creating
            its files when missing.
    """

    model_config = ConfigDict(extra="forbid")
    generation: Literal["auto", "B", "C"] = "auto"


def cline_entry(server: McpServer) -> dict[str, Any]:
    """Cline's ``mcpServers.NAME``: ``{"command", "args", "env", "cwd"}``, or ``{"type": "streamableHttp"|"sse",
    "url", "headers"}``: a URL entry without ``type`` is taken for SSE (@cline/core ``parseMcpServerRegistration``);
    values as they are."""
    return standard_entry(server, http_type="streamableHttp")


def data_dir(env: Env) -> Path:
    """Cline's data directory, resolved as Cline resolves it."""
    if env.get("CLINE_DATA_DIR"):
        return Path(env.get("CLINE_DATA_DIR") or "").expanduser()
    if env.get("CLINE_DIR"):
        return Path(env.get("CLINE_DIR") or "").expanduser() / "data"
    return env.home / ".cline" / "data"


def providers_path(env: Env) -> Path:
    """Generation C's providers.json (``$CLINE_PROVIDER_SETTINGS_PATH`` wins)."""
    return env.path_from("CLINE_PROVIDER_SETTINGS_PATH", data_dir(env) / "settings" / "providers.json")


def _vscode_state_dbs(env: Env) -> list[Path]:
    base = env.home / ".config"
    return [base / app / "User" / "globalStorage" / "state.vscdb" for app in ("Code", "Code - Insiders", "VSCodium")]


def detect_generations(env: Env) -> list[str]:
    """Which storage generations are present on disk: a sub-list of ``["B", "C"]``, or ``["A"]`` when only a
    VS Code database holding Cline's state exists, or ``[]``."""
    found = []
    data = data_dir(env)
    if (data / "globalState.json").exists() or (data / "secrets.json").exists():
        found.append("B")
    if providers_path(env).exists():
        found.append("C")
    if not found and any(_holds_cline_state(db) for db in _vscode_state_dbs(env)):
        found.append("A")
    return found


def _holds_cline_state(db: Path) -> bool:
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            row = conn.execute("SELECT 1 FROM ItemTable WHERE key = 'saoudrizwan.claude-dev'").fetchone()
        return row is not None
    except sqlite3.Error:
        return False


def utc_stamp() -> str:
    """ISO-8601 UTC with milliseconds and a trailing ``Z`` (``2026-01-01T00:00:00.000Z``), as Cline writes it;
    ``datetime.isoformat()`` would give ``+00:00``, which Cline rejects."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def _merged_limits(old: dict[str, Any], settings: ToolSettings, ledger: LimitLedger, path: Path,
                   where: str) -> dict[str, Any]:
    """``old`` (the object at ``where`` in ``path``) with ``contextWindow`` / ``maxTokens`` where known; an
    unknown one goes only while it is still what conduit wrote (the value it replaced comes back), so one the
    person or Cline's own settings window set stays (``conduit.adapters.limits``). Other keys kept, in order."""
    new = dict(old)
    for key, wanted in zip(_LIMIT_KEYS, (settings.context_window, settings.max_output_tokens), strict=True):
        ledger.settle_key(path, new, key, wanted, f"{where}.{key}")
    return new


_LIMIT_KEYS = ("contextWindow", "maxTokens")


class Cline(AdapterDefaults):
    """Adapter for Cline's OpenAI-compatible provider (generations B and C)."""

    name: ClassVar[str] = "cline"
    writes_context: ClassVar[bool] = True  # context_window / max_output_tokens land in its files
    display_name: ClassVar[str] = "Cline"
    protocol: ClassVar[Protocol_] = "openai"
    owned_keys: ClassVar[tuple[str, ...]] = (
        "globalState.json: planModeApiProvider, actModeApiProvider, openAiBaseUrl, planModeOpenAiModelId, "
        "actModeOpenAiModelId", "{plan,act}ModeOpenAiModelInfo.{contextWindow,maxTokens} (while conduit's: a "
        "value set in Cline is kept)",
        "secrets.json: openAiApiKey",
        "settings/providers.json: lastUsedProvider, providers.openai-compatible.settings.{provider,apiKey,model,"
        "baseUrl}, and .{contextWindow,maxTokens} (while conduit's: a value set in Cline is kept)",
    )
    discover_rank: ClassVar[int] = 1  # conduit init reads Claude Code, Cline, then CC Switch
    restart_hint: ClassVar[str | None] = ("reload Cline (VS Code: Developer: Reload Window; CLI: start a new session): "
                              "it caches its settings and may write the old ones back")
    Options: ClassVar[type[BaseModel]] = ClineOptions
    env_vars: ClassVar[tuple[str, ...]] = ("CLINE_DATA_DIR", "CLINE_DIR", "CLINE_PROVIDER_SETTINGS_PATH",
                                           "CLINE_MCP_SETTINGS_PATH")

    one_shot: ClassVar[OneShot | None] = OneShot(("cline",))
    package: ClassVar[Package | None] = Package("npm", "cline", "3.0.65", ("cline",))
    competing: ClassVar[Competing] = Competing(OPENAI_MODEL, OPENAI_KEY, OPENAI_BASE)
    precedence: ClassVar[tuple[Rule, ...]] = RULES  # the variables yield to providers.json (checked with 3.0.65)
    tool_dirs: ClassVar[Mapping[str, str]] = {"CLINE_DIR": ".cline", "CLINE_DATA_DIR": ".cline/data",
                                              "CLINE_PROVIDER_SETTINGS_PATH": ".cline/data/settings/providers.json",
                                              "CLINE_MCP_SETTINGS_PATH":
                                                  ".cline/data/settings/cline_mcp_settings.json"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"generation": "C"}  # Cline CLI 3.x is generation C
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.cline/data/settings/cline_mcp_settings.json", key=("mcpServers",), format="json",
        transports=frozenset({"stdio", "http", "sse"}), list_argv=None,
        source="@cline/shared storage paths (CLINE_MCP_SETTINGS_PATH, cline_mcp_settings.json) and @cline/core "
               "extensions/mcp config-loader of the cline 3.0.65 CLI",
        proven="")

    def mcp_path(self, env: Env) -> Path | None:
        """``$CLINE_MCP_SETTINGS_PATH``, else ``<data>/settings/cline_mcp_settings.json``."""
        return env.path_from("CLINE_MCP_SETTINGS_PATH", data_dir(env) / "settings" / "cline_mcp_settings.json")

    def verify_files(self, env: Env) -> list[Path]:
        """globalState.json and secrets.json in ``data_dir``, and ``providers_path``."""
        return [data_dir(env) / "globalState.json", data_dir(env) / "secrets.json", providers_path(env)]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets for each generation to write. Raises NotFound (nothing installed) or Unsupported (A)."""
        gen = settings.options_as(ClineOptions).generation
        gens = detect_generations(env) if gen == "auto" else [gen]
        if gens == ["A"]:
            raise Unsupported("only a Cline <= 3.65 VS Code store was found (state.vscdb + OS keychain), which "
                              "cannot be written from outside; upgrade Cline to >= 3.66")
        if not gens:
            raise NotFound(f"Cline not found: no {data_dir(env) / 'globalState.json'} and no "
                           f"{providers_path(env)}; install Cline, or set [tools.cline] generation = \"C\" "
                           "(CLI >= 3.0) or \"B\" to create its files")
        targets: list[Target] = []
        if "B" in gens:
            targets += self._generation_b(settings, env)
        if "C" in gens:
            targets.append(self._generation_c(settings, env))
        return targets + mcp_json_targets(self.mcp_path(env), self.mcp, settings.mcp, settings.mcp_ledger,
                                          entry=cline_entry)

    def _generation_b(self, settings: ToolSettings, env: Env) -> list[Target]:
        data = data_dir(env)
        base_url = settings.root.openai_base()
        owned_state = {
            "planModeApiProvider": "openai",
            "actModeApiProvider": "openai",
            "openAiBaseUrl": base_url,
            "planModeOpenAiModelId": settings.model,
            "actModeOpenAiModelId": settings.model,
        }

        ledger = settings.limits or LimitLedger()
        path = data / "globalState.json"

        def state(doc: dict[str, Any]) -> dict[str, Any]:
            doc.update(owned_state)
            ledger.begin(path)
            for k in ("planModeOpenAiModelInfo", "actModeOpenAiModelInfo"):
                old = doc.get(k)
                if old is not None and not isinstance(old, dict):
                    continue  # not Cline's object: left as it is
                new = _merged_limits(old or {}, settings, ledger, path, k)
                if new:
                    doc[k] = new
                elif old:  # only conduit's limits were in it: Cline's defaults apply again
                    del doc[k]
            return doc

        def secrets(doc: dict[str, Any]) -> dict[str, Any]:
            doc["openAiApiKey"] = settings.key_or_placeholder
            return doc

        return [
            json_target(path, state, secret_keys=SECRET_KEYS, mode=0o644,  # holds no key
                        label="globalState.json"),
            json_target(data / "secrets.json", secrets, secret_keys=SECRET_KEYS, label="secrets.json"),
        ]

    def _generation_c(self, settings: ToolSettings, env: Env) -> Target:
        wanted = {
            "provider": PROVIDER_ID,
            "apiKey": settings.key_or_placeholder,
            "model": settings.model,
            "baseUrl": settings.root.openai_base(),
        }
        ledger = settings.limits or LimitLedger()
        path = providers_path(env)

        def transform(doc: dict[str, Any]) -> dict[str, Any]:
            ledger.begin(path)
            doc.setdefault("version", 1)
            doc["lastUsedProvider"] = PROVIDER_ID
            where = f"{providers_path(env)}: providers"
            providers = as_object(doc.get("providers"), where=where)
            entry = dict(as_object(providers.get(PROVIDER_ID), where=f"{where}.{PROVIDER_ID}"))
            old = as_object(entry.get("settings"), where=f"{where}.{PROVIDER_ID}.settings")
            new = _merged_limits({**old, **wanted}, settings, ledger, path, f"providers.{PROVIDER_ID}.settings")
            # Cline's own key order for a new entry: settings, updatedAt, tokenSource.
            entry = {"settings": new, **{k: v for k, v in entry.items() if k != "settings"}}
            if new != old or "updatedAt" not in entry:
                # Only a real change moves updatedAt, so an unchanged profile writes nothing.
                entry["updatedAt"] = utc_stamp()
            entry.setdefault("tokenSource", "manual")
            providers[PROVIDER_ID] = entry
            doc["providers"] = providers
            return doc

        return json_target(path, transform, secret_keys=SECRET_KEYS, label="providers.json")

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: generations found, files, owned values (key masked)."""
        data = data_dir(env)
        gens = detect_generations(env)
        files: dict[str, Any] = {}
        if "B" in gens:
            state, err = read_json_quietly(data / "globalState.json")
            secrets, err2 = read_json_quietly(data / "secrets.json")
            files["globalState.json"] = {
                "path": str(data / "globalState.json"), "parse_error": err,
                "openAiBaseUrl": state.get("openAiBaseUrl"), "actModeApiProvider": state.get("actModeApiProvider"),
                "actModeOpenAiModelId": state.get("actModeOpenAiModelId")}
            sp = data / "secrets.json"
            files["secrets.json"] = {
                "path": str(sp), "parse_error": err2, "openAiApiKey": fingerprint(secrets.get("openAiApiKey")),
                "mode": oct(sp.stat().st_mode & 0o777) if sp.exists() else None}
        if "C" in gens:
            doc, err = read_json_quietly(providers_path(env))
            entry = (doc.get("providers") or {}).get(PROVIDER_ID) or {}
            s = entry.get("settings") or {}
            files["providers.json"] = {
                "path": str(providers_path(env)), "parse_error": err,
                "lastUsedProvider": doc.get("lastUsedProvider"), "baseUrl": s.get("baseUrl"),
                "model": s.get("model"), "apiKey": fingerprint(s.get("apiKey")), "updatedAt": entry.get("updatedAt")}
        summary = f"{data}; generations found: {', '.join(gens) or 'none'}"
        return ToolFacts(summary=summary, details={"data_dir": str(data), "generations": gens, "files": files})

    def discover(self, env: Env) -> Proposal | None:
        """The OpenAI-compatible provider of generation C (else B): base URL, model and key."""
        found = self._configured(env)
        return Proposal(self.name, found.base_url, "openai", found.model or None, found.key or None) \
            if found is not None else None

    def client_view(self, env: Env) -> ClientView | None:
        """What Cline's OpenAI client sends, from generation C's providers.json (else generation B's files)."""
        return self._configured(env)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """Generation C: an exported ``CLINE_PROVIDER`` when providers.json names no provider
        (``PROVIDER_ORDER``), an exported ``OPENAI_API_KEY`` when conduit's provider entry has no ``apiKey``
        (``KEY_ORDER``); ``[]`` otherwise (what conduit writes outranks both)."""
        if "C" not in detect_generations(env):
            return []
        path = providers_path(env)
        doc, _ = read_json_quietly(path)
        mine = ((doc.get("providers") or {}).get(PROVIDER_ID) or {}).get("settings") or {}
        checks = ((PROVIDER_ORDER, 1, doc.get("lastUsedProvider"), "CLINE_PROVIDER"),
                  (KEY_ORDER, 0, mine.get("apiKey"), "OPENAI_API_KEY"))
        return [Blocker("overridden", "shell environment", f"{var} is exported and {path} sets no {rule.what}, "
                        "so Cline uses the variable", f"run `conduit sync`, or unset {var}")
                for rule, at, value, var in checks
                if rule.winner({rule.sources[at]: value, rule.sources[at + 1]: env.get(var)}) == rule.sources[at + 1]]

    @staticmethod
    def _configured(env: Env) -> ClientView | None:
        gens = detect_generations(env)
        if "C" in gens:
            path = providers_path(env)
            pdoc, _ = read_json_quietly(path)
            s = ((pdoc.get("providers") or {}).get(PROVIDER_ID) or {}).get("settings") or {}
            if s.get("baseUrl"):
                return ClientView(str(s["baseUrl"]), str(s.get("apiKey") or ""), str(s.get("model") or ""),
                                  key_files=(path,))
        elif "B" in gens:
            state, _ = read_json_quietly(data_dir(env) / "globalState.json")
            secrets, _ = read_json_quietly(data_dir(env) / "secrets.json")
            if state.get("openAiBaseUrl"):
                return ClientView(str(state["openAiBaseUrl"]), str(secrets.get("openAiApiKey") or ""),
                                  str(state.get("actModeOpenAiModelId") or ""),
                                  key_files=(data_dir(env) / "secrets.json",))
        return None
