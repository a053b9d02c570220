"""Roo Code: a settings file Roo Code imports when VS Code starts it, named in VS Code's user settings;
documented format only.

Roo Code is a VS Code extension (no command line, no npm or PyPI package to run here), so every fact below
comes from RooCodeInc/Roo-Code's source and the tests prove conduit's files against that format only
(docs/formats/roo.md).

- At each activation (VS Code start, window reload) Roo Code reads the VS Code setting
  ``roo-cline.autoImportSettingsPath`` (``~/`` and relative paths are taken from the home directory) and, when
  the file exists, imports it (``src/utils/autoImportSettings.ts``). The import file is JSON:
  ``{"providerProfiles": {"currentApiConfigName": NAME, "apiConfigs": {NAME: {...}}, "modeApiConfigs"?: {...}},
  "globalSettings"?: {...}}``; its profiles are merged over the stored ones (same name wins), and
  ``currentApiConfigName`` becomes the active profile (``src/core/config/importExport.ts``
  ``importSettingsFromPath``).
- An OpenAI-compatible profile: ``apiProvider: "openai"``, ``openAiBaseUrl``, ``openAiApiKey``,
  ``openAiModelId``. Roo's handler builds the OpenAI SDK client with ``baseURL = openAiBaseUrl``, which
  requests ``baseURL + "/chat/completions"`` with ``Authorization: Bearer`` (``src/api/providers/openai.ts``
  ``OpenAiHandler``), so ``openAiBaseUrl`` carries the version segment.
- VS Code's user settings on Linux: ``$XDG_CONFIG_HOME/Code/User/settings.json`` (default
  ``~/.config/Code/User/settings.json``), JSON with comments, kept by conduit's JSONC edits.
- conduit writes the import file (it holds the key: 0600) under its own config directory, and points the
  setting at it. The profile ``conduit`` becomes the active one at every start-up (a profile chosen in Roo's
  window in between is replaced then); Roo keeps the imported key in VS Code's secret storage.
- MCP servers: ``mcp_settings.json`` in Roo Code's VS Code storage (``roo_entry``; docs/formats/roo.md).
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
    Effective,
    Env,
    Protocol_,
    Target,
    ToolFacts,
    ToolSettings,
)
from conduit.adapters.declarations import Competing, OneShot, Package
from conduit.adapters.formats.jsonfile import json_target, read_json_quietly
from conduit.adapters.formats.mcpmap import mcp_json_targets
from conduit.adapters.formats.mcpshapes import needs_private, referenced
from conduit.adapters.formats.textformats import jsonc_target, parse_jsonc
from conduit.adapters.mcp import McpServer, McpSupport
from conduit.errors import ToolFileError
from conduit.redact import fingerprint

PROFILE = "conduit"
SETTING = "roo-cline.autoImportSettingsPath"


EXTENSION_ID = "rooveterinaryinc.roo-cline"
REF = "${env:%s}"
"""Roo Code replaces ``${env:VAR}`` in each server's entry before starting it (``McpHub.ts`` ``injectVariables``),
so a value from ``{ env = "VAR" }`` is written ``${env:VAR}``."""


def roo_entry(server: McpServer) -> dict[str, Any]:
    """Roo Code's ``mcpServers.NAME`` (``McpHub.ts`` ``ServerConfigSchema``): ``{"command", "args", "env",
    "cwd"}``, or ``{"type": "streamable-http"|"sse", "url", "headers"}`` (a URL entry must name its type)."""
    env, headers = referenced(server, REF)
    if server.transport == "stdio":
        entry: dict[str, Any] = {"command": server.command}
        entry.update({k: v for k, v in (("args", list(server.args)), ("env", env)) if v})
        return entry | ({"cwd": server.cwd} if server.cwd is not None else {})
    kind = "sse" if server.transport == "sse" else "streamable-http"
    return {"type": kind, "url": server.url, **({"headers": headers} if headers else {})}


def vscode_settings(env: Env) -> Path:
    """VS Code's user settings: ``$XDG_CONFIG_HOME/Code/User/settings.json`` or ``~/.config/Code/...``."""
    return env.config_home() / "Code" / "User" / "settings.json"


def import_file(env: Env) -> Path:
    """conduit's import file for Roo Code: ``<conduit config>/tool-keys/roo-code-settings.json`` (0600)."""
    return env.config_home() / "conduit" / "tool-keys" / "roo-code-settings.json"


class Roo(AdapterDefaults):
    """Adapter for Roo Code: the import file and VS Code's ``roo-cline.autoImportSettingsPath``."""

    name: ClassVar[str] = "roo"
    display_name: ClassVar[str] = "Roo Code"
    protocol: ClassVar[Protocol_] = "openai"
    owned_keys: ClassVar[tuple[str, ...]] = (
        f"VS Code settings.json: {SETTING}",
        "<conduit config>/tool-keys/roo-code-settings.json: providerProfiles.currentApiConfigName, "
        "providerProfiles.apiConfigs.conduit.{apiProvider,openAiBaseUrl,openAiApiKey,openAiModelId,id}",
    )
    restart_hint: ClassVar[str | None] = ("reload the VS Code window (Developer: Reload Window): Roo Code imports "
                                          "its settings file when it starts")
    Options: ClassVar[type[BaseModel]] = CreateOptions
    env_vars: ClassVar[tuple[str, ...]] = ("XDG_CONFIG_HOME",)

    one_shot: ClassVar[OneShot | None] = None  # a VS Code extension: no command line
    package: ClassVar[Package | None] = None  # documented format only
    competing: ClassVar[Competing] = Competing()
    tool_dirs: ClassVar[Mapping[str, str]] = {}
    base_forms: ClassVar[tuple[str, ...]] = ()
    model_routes: ClassVar[tuple[str, ...]] = ()
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.config/Code/User/globalStorage/rooveterinaryinc.roo-cline/settings/mcp_settings.json",
        key=("mcpServers",), format="json", transports=frozenset({"stdio", "http", "sse"}), list_argv=None,
        project_files=(".roo/mcp.json",),
        source="RooCodeInc/Roo-Code src/services/mcp/McpHub.ts (ServerConfigSchema, getMcpSettingsFilePath, "
               "injectVariables)",
        proven="")

    def mcp_path(self, env: Env) -> Path | None:
        """``mcp_settings.json`` in Roo Code's VS Code global storage (``settings/``)."""
        return vscode_settings(env).parent / "globalStorage" / EXTENSION_ID / "settings" / "mcp_settings.json"

    def verify_files(self, env: Env) -> list[Path]:
        """None besides ``plan``'s targets."""
        return []

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets: the import file (the ``conduit`` profile, made current) and the VS Code setting."""
        vs = vscode_settings(env)
        self.require_dir(vs.parent, settings.options_as(CreateOptions).create, "VS Code and Roo Code", missing="VS Code")
        path = import_file(env)
        owned = {"apiProvider": "openai", "openAiBaseUrl": settings.root.openai_base(),
                 "openAiApiKey": settings.key_or_placeholder, "openAiModelId": settings.model, "id": PROFILE}

        def transform(doc: dict[str, Any]) -> dict[str, Any]:
            profiles = _mapping(doc.get("providerProfiles"))
            configs = _mapping(profiles.get("apiConfigs"))
            current = _mapping(configs.get(PROFILE))
            configs[PROFILE] = {**current, **owned}
            doc["providerProfiles"] = {**profiles, "currentApiConfigName": PROFILE, "apiConfigs": configs}
            return doc

        out: list[Target] = [
            json_target(path, transform, secret_keys=("openAiApiKey",), label=f"tool-keys/{path.name}"),
            jsonc_target(vs, lambda _doc: [((SETTING,), str(path))], secret_keys=(), label="settings.json")]
        mcp = mcp_json_targets(self.mcp_path(env), self.mcp, settings.mcp, settings.mcp_ledger, entry=roo_entry)
        for target in mcp:
            target.mode = 0o600 if needs_private(settings.mcp, REF) else 0o644  # references hold no secret
            out.append(target)
        return out

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the VS Code setting, the file it names and its current profile (key masked)."""
        vs = vscode_settings(env)
        named, error = _setting(vs)
        target = _resolve(named, env) if named else None
        profile = _current(target)
        key = profile.get("openAiApiKey")
        details = {"file": str(vs), "exists": vs.exists(), "parse_error": error, "import_file": str(target or ""),
                   "owned": {SETTING: named, "openAiBaseUrl": profile.get("openAiBaseUrl"),
                             "openAiModelId": profile.get("openAiModelId"),
                             "openAiApiKey": fingerprint(str(key)) if key else None}}
        effective: dict[str, Effective] = {}
        if named and target != import_file(env):
            effective[SETTING] = Effective(named, str(vs), True, "names another file than conduit's")
        return ToolFacts(summary=f"{vs} ({'found' if vs.exists() else 'missing'})", details=details,
                         effective=effective)

    def client_view(self, env: Env) -> ClientView | None:
        """What Roo Code sends after importing the file the setting names: the current profile's
        ``openAiBaseUrl`` (``/chat/completions`` appended), key and model; None unless it is ``openai``."""
        named, _ = _setting(vscode_settings(env))
        target = _resolve(named, env) if named else None
        profile = _current(target)
        if target is None or profile.get("apiProvider") != "openai" or not profile.get("openAiBaseUrl"):
            return None
        return ClientView(str(profile["openAiBaseUrl"]), str(profile.get("openAiApiKey") or ""),
                          str(profile.get("openAiModelId") or ""), key_files=(target,))


def _mapping(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else ``{}``."""
    return value if isinstance(value, dict) else {}


def _setting(path: Path) -> tuple[str | None, str | None]:
    """The ``roo-cline.autoImportSettingsPath`` value in VS Code's settings (None when unset) and a parse error."""
    try:
        doc = parse_jsonc(path.read_text(encoding="utf-8"), path=path)
    except FileNotFoundError:
        return None, None
    except (ToolFileError, OSError, UnicodeDecodeError) as exc:
        return None, str(exc)
    value = doc.get(SETTING)
    return (value.strip() or None if isinstance(value, str) else None), None


def _resolve(named: str, env: Env) -> Path:
    """The path as Roo Code resolves it: ``~/`` and relative paths from the home directory."""
    if named.startswith("~/"):
        return env.home / named[2:]
    return Path(named) if Path(named).is_absolute() else env.home / named


def _current(path: Path | None) -> dict[str, Any]:
    """The import file's current profile (``apiConfigs[currentApiConfigName]``), or ``{}``."""
    if path is None:
        return {}
    doc, _ = read_json_quietly(path)
    profiles = doc.get("providerProfiles")
    if not isinstance(profiles, dict) or not isinstance(profiles.get("apiConfigs"), dict):
        return {}
    profile = profiles["apiConfigs"].get(profiles.get("currentApiConfigName"))
    return profile if isinstance(profile, dict) else {}


__all__ = ["Roo", "import_file", "vscode_settings"]
