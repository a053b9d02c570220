"""``conduit init``: write a starter profile, or propose one built from the tools already configured.

When Claude Code or Cline already point at a gateway, the proposal reuses what they hold: one channel per
distinct gateway root, the model each tool uses, and the key moved into conduit's own secrets file (0600) so
the profile never holds it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

import tomlkit

from conduit.adapters.base import Env
from conduit.adapters.cc_switch import CCSwitch
from conduit.adapters.claude_code import ClaudeCode
from conduit.adapters.cline import PROVIDER_ID, data_dir, detect_generations, providers_path
from conduit.adapters.jsonfile import read_json_quietly
from conduit.daemon.config.keys import SecretsStore, clean_key
from conduit.daemon.config.normalize import normalize_base_url
from conduit.daemon.config.profile import save_profile
from conduit.errors import BadArguments, ConduitError, KeyError_, ProfileError
from conduit.redact import fingerprint

TEMPLATES = ("hosted", "local-vllm", "both")


def starter_text(template: str = "hosted") -> str:
    """The text of a shipped starter profile. Raises ConduitError for an unknown template name."""
    if template not in TEMPLATES:
        raise BadArguments(f"no starter profile `{template}`", f"choose one of: {', '.join(TEMPLATES)}")
    return resources.files("conduit.profiles").joinpath(f"{template}.toml").read_text(encoding="utf-8")


@dataclass
class Found:
    """A gateway a tool is already configured for (the key is held only to move it to the secrets file)."""

    tool: str
    base_url: str
    protocol: str
    model: str | None
    key: str | None = field(repr=False)


def discover(env: Env) -> list[Found]:
    """Read-only: what Claude Code and Cline are configured with today."""
    found: list[Found] = []
    doc, _ = read_json_quietly(ClaudeCode.settings_path(env))
    cenv = doc.get("env") if isinstance(doc.get("env"), dict) else {}
    if cenv.get("ANTHROPIC_BASE_URL"):
        found.append(Found("claude_code", str(cenv["ANTHROPIC_BASE_URL"]), "anthropic",
                           cenv.get("ANTHROPIC_MODEL"),
                           cenv.get("ANTHROPIC_AUTH_TOKEN") or cenv.get("ANTHROPIC_API_KEY")))
    found += _cc_switch_current(env)
    gens = detect_generations(env)
    if "C" in gens:
        pdoc, _ = read_json_quietly(providers_path(env))
        s = ((pdoc.get("providers") or {}).get(PROVIDER_ID) or {}).get("settings") or {}
        if s.get("baseUrl"):
            found.append(Found("cline", s["baseUrl"], "openai", s.get("model"), s.get("apiKey")))
    elif "B" in gens:
        state, _ = read_json_quietly(data_dir(env) / "globalState.json")
        secrets, _ = read_json_quietly(data_dir(env) / "secrets.json")
        if state.get("openAiBaseUrl"):
            found.append(Found("cline", state["openAiBaseUrl"], "openai", state.get("actModeOpenAiModelId"),
                               secrets.get("openAiApiKey")))
    return found


def _cc_switch_current(env: Env) -> list[Found]:
    """CC Switch's current Claude provider (its settings.json layer wins over ``is_current``), read-only."""
    d = CCSwitch.store_dir(env)
    db = d / "cc-switch.db"
    if not db.exists():
        return []
    layer2, _ = read_json_quietly(d / "settings.json")
    current = layer2.get("currentProviderClaude")
    try:
        with sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=2) as conn:
            row = conn.execute(
                "SELECT settings_config FROM providers WHERE app_type = 'claude' AND (id = ? OR is_current) "
                "ORDER BY id = ? DESC LIMIT 1", (current, current)).fetchone()
        conn.close()
        cfg = json.loads(row[0]) if row else {}
    except (sqlite3.Error, json.JSONDecodeError):
        return []
    cenv: dict[str, Any] = {}
    if isinstance(cfg, dict) and isinstance(cfg.get("env"), dict):
        cenv = cfg["env"]
    if not cenv.get("ANTHROPIC_BASE_URL"):
        return []
    return [Found("cc_switch", str(cenv["ANTHROPIC_BASE_URL"]), "anthropic", cenv.get("ANTHROPIC_MODEL"),
                  cenv.get("ANTHROPIC_AUTH_TOKEN") or cenv.get("ANTHROPIC_API_KEY"))]


def propose(found: list[Found], secrets: SecretsStore | None, notes: list[str]) -> str:
    """A profile text built from ``found``: one channel per distinct root. Keys go to ``secrets`` (when given).

    Appends what it did to ``notes`` (keys shown only as fingerprints).
    """
    doc = tomlkit.document()
    doc.add(tomlkit.comment("conduit profile proposed by `conduit init` from the tools already configured."))
    doc.add("version", 1)
    channels: dict[str, dict] = {}
    tool_channel: dict[str, str] = {}
    for f in found:
        try:
            root = normalize_base_url(f.base_url, where=f"{f.tool} config").root.url
        except ProfileError:
            notes.append(f"{f.tool}: ignored base URL that is not a URL")
            continue
        name = next((n for n, c in channels.items() if c["base_url"] == root), None)
        if name is None:
            name = "gateway" if not channels else f"gateway{len(channels) + 1}"
            channels[name] = {"base_url": root, "protocols": set(), "key": None}
        channels[name]["protocols"].add(f.protocol)
        if f.key and channels[name]["key"] is None and secrets is not None:
            try:
                key = clean_key(f.key, source=f"{f.tool} config").key
                secrets.set(name, key)
                channels[name]["key"] = name
                notes.append(f"moved {f.tool}'s key {fingerprint(key)} into the secrets file as `{name}`")
            except KeyError_ as exc:
                notes.append(f"{f.tool}: key not imported: {exc.message}")
        tool_channel[f.tool] = name
    if not channels:
        return ""  # nothing usable was found: the caller writes a starter profile instead
    first = next(iter(channels))
    main_model = next((f.model for f in found if f.model), None) or "MODEL-NAME"
    doc.add("channel", first)
    doc.add("model", main_model)
    chans = tomlkit.table(is_super_table=True)
    for name, c in channels.items():
        t = tomlkit.table()
        t.add("base_url", c["base_url"])
        t.add("protocols", sorted(c["protocols"]))  # what the tools were seen using; add the other if it speaks it
        if c["key"]:
            t.add("key", tomlkit.inline_table())
            t["key"]["secret"] = c["key"]
        chans.add(name, t)
    doc.add("channels", chans)
    tools = tomlkit.table(is_super_table=True)
    for f in found:
        t = tomlkit.table()
        if tool_channel.get(f.tool) and tool_channel[f.tool] != first:
            t.add("channel", tool_channel[f.tool])
        if f.model and f.model != main_model:
            t.add("model", f.model)
        tools.add(f.tool, t)
    doc.add("tools", tools)
    return tomlkit.dumps(doc)


def init_profile(path: Path, *, template: str = "hosted", force: bool = False, env: Env | None = None,
                 discover_tools: bool = True) -> tuple[str, list[str]]:
    """Write a starter (or proposed) profile to ``path``.

    Returns:
        (the text written, notes for the person).
    Raises:
        ConduitError: the profile exists and ``force`` is false (nothing is overwritten).
    """
    if path.exists() and not force:
        raise ConduitError(f"{path} already exists", "edit it, or pass --force to replace it (a copy is kept as .bak)")
    notes: list[str] = []
    found = discover(env or Env()) if discover_tools else []
    text = propose(found, SecretsStore(), notes) if found else ""
    if text:
        notes.insert(0, "found existing tool settings: " + ", ".join(f"{f.tool} -> {f.base_url}" for f in found))
    else:
        text = starter_text(template)
        if discover_tools:
            notes.insert(0, f"no usable Claude Code or Cline gateway settings found; wrote the `{template}` "
                         "starter profile")
    if path.exists():
        backup = path.with_suffix(path.suffix + ".bak")
        backup.write_bytes(path.read_bytes())
        notes.append(f"previous profile kept as {backup}")
    # A proposal is validated before it is written; the shipped starters are validated by the test suite.
    save_profile(path, text, validate=bool(found) and "conduit init" in text.splitlines()[0])
    return text, notes
