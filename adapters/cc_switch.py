"""CC Switch: keep one provider per conduit channel in its store, and mark it current.

If conduit changed Claude Code's files but not CC Switch's store, the user's next click in CC Switch would bring
the old key or model back. Facts (docs/formats/cc-switch.md, read from farion1231/cc-switch v3.20):
- v3.8+: SQLite ``<dir>/cc-switch.db`` (``PRAGMA user_version`` 17 in v3.20). Never create it, never change
  ``user_version``. Table ``providers`` has primary key ``(id, app_type)``; ``provider_endpoints`` references it
  with ON DELETE CASCADE, so ``INSERT OR REPLACE`` would silently drop endpoints: upsert with
  ``ON CONFLICT ... DO UPDATE``. ``created_at`` is epoch milliseconds. ``meta.apiKeyField =
  "ANTHROPIC_API_KEY"`` switches Claude auth to x-api-key. One row per ``app_type`` has ``is_current = 1``.
- The current provider has a second layer that wins: ``<dir>/settings.json`` key ``currentProviderClaude``.
  The running app caches that layer and may write it back: change it while the app is closed, or restart it.
- v3.0-3.7: JSON ``<dir>/config.json`` ``{"version": 2, "claude": {"providers": {id: {id, name,
  settingsConfig}}, "current": id}}``; renamed ``config.json.migrated`` once the database exists.
- CC Switch stores what it is given, so values must already be normalized: no ``/v1`` in a Claude base URL.

Coexistence: a provider chosen in CC Switch's own window is the user's choice. ``plan`` keeps conduit's row
current in content, but marks it current (both layers) only when the sync engine says the profile's choice for
CC Switch changed since the last sync, or ``conduit sync --force`` (the engine's ``take_current`` setting), or
when no provider is current at all. A fallback routing switch alone moves "current" only between conduit's own
rows of the route (``FROM_CONDUIT``), never away from a provider the user picked. ``selected_provider`` says which provider CC Switch has selected (doctor).
"""

from __future__ import annotations

import contextlib
import difflib
import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from conduit.adapters.base import (
    FROM_CONDUIT,
    AdapterDefaults,
    Env,
    NotFound,
    Proposal,
    Protocol_,
    SqliteTarget,
    TakeCurrent,
    Target,
    ToolFacts,
    ToolSettings,
)
from conduit.adapters.claude_code import SECRET_VARS, anthropic_env, anthropic_proposal, merge_env
from conduit.adapters.declarations import Competing, OneShot, Package
from conduit.adapters.formats.jsonfile import as_object, json_target, read_json_quietly
from conduit.adapters.formats.masking import mask_values, secret_values
from conduit.errors import ToolFileError

APP_TYPE = "claude"
KNOWN_SCHEMA = 17
PROVIDER_COLUMNS = {"id", "app_type", "name", "settings_config", "meta", "is_current", "created_at"}


class CCSwitchOptions(BaseModel):
    """``[tools.cc_switch]`` options.

    Attributes:
        dir: CC Switch's data directory when moved by its own path setting (default ``~/.cc-switch``).
        make_current: mark conduit's provider current in both layers (default true).
    """

    model_config = ConfigDict(extra="forbid")
    dir: str | None = Field(default=None, max_length=4096)  # PATH_MAX: a longer one is no directory
    make_current: bool = True


# ToolSettings.take_current (``TakeCurrent``, set by the engine): True when conduit should take
# ``is_current`` back (the profile's choice changed since the last sync, or ``--force``); (FROM_CONDUIT, channel,
# ...) when only the fallback routing moved the tool: then "current" moves from conduit's row of one of those
# channels to the new one, never away from a provider the user picked (an older ``conduit-*`` row included);
# False: keep whatever is current.
TakeMode = bool | frozenset[str]


def _take_mode(value: TakeCurrent) -> TakeMode:
    """The engine's ``take_current`` value: the provider ids "current" may move from for a routing switch, else
    its truth."""
    if isinstance(value, tuple) and value and value[0] == FROM_CONDUIT:
        return frozenset(provider_id(str(c)) for c in value[1:])
    return bool(value)


def _may_take(take: TakeMode, current: list[str]) -> bool:
    """Whether conduit's row may become current while ``current`` (provider ids) are: ``take`` True, or a set of
    ids (a routing switch) holding every current one."""
    if isinstance(take, frozenset):
        return all(c in take for c in current)
    return take is True


def provider_id(channel: str) -> str:
    """The stable provider id conduit owns for a channel: ``conduit-<channel>``."""
    return f"conduit-{channel}"


def _masked_config(config: dict[str, Any]) -> str:
    """A provider's settings_config as indented JSON, its keys (the secret ``env`` variables) redacted."""
    return mask_values(json.dumps(config, ensure_ascii=False, indent=2), secret_values(config, SECRET_VARS))


def _row_diff(pid: str, old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """A unified diff of a provider row's settings_config (keys masked), like the diffs of text files."""
    before = _masked_config(old).splitlines() if old is not None else []
    after = _masked_config(new).splitlines()
    name = f"cc-switch.db providers[{pid}, {APP_TYPE}].settings_config"
    return list(difflib.unified_diff(before, after, fromfile="/dev/null" if old is None else name, tofile=name,
                                     lineterm=""))


class CCSwitch(AdapterDefaults):
    """Adapter for CC Switch's provider store (SQLite v3.8+, or legacy config.json)."""

    name: ClassVar[str] = "cc_switch"
    display_name: ClassVar[str] = "CC Switch"
    protocol: ClassVar[Protocol_] = "anthropic"
    owned_keys: ClassVar[tuple[str, ...]] = (
        "cc-switch.db providers row (conduit-<channel>, claude): name, settings_config.env (same keys as "
        "Claude Code), meta.apiKeyField, is_current",
        "settings.json: currentProviderClaude",
        "config.json (v3.0-3.7): claude.providers.conduit-<channel>, claude.current",
    )
    discover_rank: ClassVar[int] = 2  # conduit init reads Claude Code, Cline, then CC Switch
    restart_hint: ClassVar[str | None] = ("restart CC Switch if it is running: it caches the current provider and may "
                              "write its old choice back")
    Options: ClassVar[type[BaseModel]] = CCSwitchOptions
    #: The user may choose another provider in CC Switch's window: the engine sets ``take_current``.
    keeps_user_choice: ClassVar[bool] = True

    # A desktop application with no command line: nothing to run once, no package for the real-tool tier.
    one_shot: ClassVar[OneShot | None] = None
    package: ClassVar[Package | None] = None
    competing: ClassVar[Competing] = Competing()
    tool_dirs: ClassVar[Mapping[str, str]] = {}
    base_forms: ClassVar[tuple[str, ...]] = ()
    model_routes: ClassVar[tuple[str, ...]] = ()
    fresh_options: ClassVar[Mapping[str, object]] = {}

    def verify_files(self, env: Env) -> list[Path]:
        """The store (``cc-switch.db``, and the legacy ``config.json``): what decides which provider CC Switch
        writes into Claude Code. ``conduit verify`` never runs CC Switch (no command line)."""
        d = self.store_dir(env)
        return [d / "cc-switch.db", d / "config.json"]

    @staticmethod
    def store_dir(env: Env, options: CCSwitchOptions | None = None) -> Path:
        """``[tools.cc_switch] dir`` or ``~/.cc-switch``."""
        d = options.dir if options is not None else None
        return Path(d).expanduser() if d else env.home / ".cc-switch"

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """The provider row (or legacy JSON entry) and the current-provider layer. Raises NotFound when CC Switch's
        store is missing (conduit never creates it)."""
        take = _take_mode(settings.take_current)
        opts = settings.options_as(CCSwitchOptions)
        d = self.store_dir(env, opts)
        db = d / "cc-switch.db"
        pid = provider_id(settings.channel)
        if db.exists():
            # The row holds the key: the database and its journal files are made 0600, as any file with a key.
            targets: list[Target] = [SqliteTarget(db, _row_writer(settings, pid, opts.make_current, take),
                                                  label="cc-switch.db", mode=0o600 if settings.key else None)]
            if opts.make_current:
                def current(doc: dict[str, Any]) -> dict[str, Any]:
                    now = doc.get("currentProviderClaude")
                    if not now or _may_take(take, [str(now)]):  # else: the user's choice in CC Switch
                        doc["currentProviderClaude"] = pid
                    return doc

                targets.append(json_target(d / "settings.json", current, secret_keys=(), mode=0o644,
                                           label="settings.json"))
            return targets
        legacy = d / "config.json"
        if legacy.exists():
            return [json_target(legacy, _legacy_transform(settings, pid, opts.make_current, take),
                                secret_keys=SECRET_VARS, label="config.json")]
        raise NotFound(f"CC Switch not found: no {db} (v3.8+) and no {legacy} (v3.0-3.7); conduit never creates "
                       "CC Switch's store. Install and start CC Switch once, or set [tools.cc_switch] dir")

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: store kind, schema version, conduit rows, current provider in both layers."""
        d = self.store_dir(env)
        db = d / "cc-switch.db"
        out: dict[str, Any] = {"dir": str(d), "running": _cc_switch_running()}
        if db.exists():
            out["store"] = "sqlite"
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2) as conn:
                    out["schema"] = conn.execute("PRAGMA user_version").fetchone()[0]
                    rows = conn.execute("SELECT id, name, is_current FROM providers WHERE app_type = ?",
                                        (APP_TYPE,)).fetchall()
                out["providers"] = [{"id": r[0], "name": r[1], "is_current": bool(r[2])} for r in rows]
            except sqlite3.Error as exc:
                out["error"] = f"cannot read {db}: {exc}"
            layer2, err = read_json_quietly(d / "settings.json")
            out["currentProviderClaude"] = layer2.get("currentProviderClaude")
            out["settings_error"] = err
        elif (d / "config.json").exists():
            out["store"] = "config.json"
            doc, err = read_json_quietly(d / "config.json")
            out["current"] = (doc.get("claude") or {}).get("current")
            out["parse_error"] = err
        else:
            out["store"] = None
        selected = selected_provider(env) if out["store"] else None
        out["selected"] = selected
        summary = (f"{out['dir']}; store: {out['store'] or 'not installed'}"
                   + (f" (schema {out['schema']})" if out.get("schema") is not None else "")
                   + ("; running" if out["running"] else "")
                   + (f"; selected in CC Switch: {_selected_words(selected)}" if selected else ""))
        return ToolFacts(summary=summary, details=out)

    def discover(self, env: Env) -> Proposal | None:
        """CC Switch's current Claude provider (its settings.json layer wins over ``is_current``), read-only."""
        d = self.store_dir(env)
        db = d / "cc-switch.db"
        if not db.exists():
            return None
        layer2, _ = read_json_quietly(d / "settings.json")
        current = layer2.get("currentProviderClaude")
        try:
            with contextlib.closing(sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=2)) as conn:
                row = conn.execute(
                    "SELECT settings_config FROM providers WHERE app_type = ? AND (id = ? OR is_current) "
                    "ORDER BY id = ? DESC LIMIT 1", (APP_TYPE, current, current)).fetchone()
            cfg = json.loads(row[0]) if row else {}
        except (sqlite3.Error, json.JSONDecodeError):
            return None
        cenv = cfg.get("env") if isinstance(cfg, dict) else None
        return anthropic_proposal(self.name, cenv if isinstance(cenv, dict) else {})


def selected_provider(env: Env, options: CCSwitchOptions | None = None) -> dict[str, Any] | None:
    """The Claude provider CC Switch has selected now, read-only: ``{"id", "name", "by_conduit", "layer"}``
    (``layer``: ``settings.json`` when its ``currentProviderClaude`` names it, which wins, else ``is_current``
    or ``config.json`` for v3.0-3.7), or None when CC Switch is not installed, nothing is selected, or the
    store cannot be read. ``by_conduit``: the id is one of conduit's (``conduit-<channel>``)."""
    d = CCSwitch.store_dir(env, options)
    db = d / "cc-switch.db"
    if db.exists():
        layer2, _ = read_json_quietly(d / "settings.json")
        current = layer2.get("currentProviderClaude")
        try:
            with contextlib.closing(sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=2)) as conn:
                rows = conn.execute("SELECT id, name, is_current FROM providers WHERE app_type = ?",
                                    (APP_TYPE,)).fetchall()
        except sqlite3.Error:
            return None
        names = {str(r[0]): r[1] for r in rows}
        chosen: str | None
        if isinstance(current, str) and current:
            chosen, layer = current, "settings.json"
        else:
            chosen, layer = next((str(r[0]) for r in rows if r[2]), None), "is_current"
        if chosen is None:
            return None
        return {"id": chosen, "name": names.get(chosen), "by_conduit": chosen.startswith("conduit-"), "layer": layer}
    doc, _ = read_json_quietly(d / "config.json")
    claude = doc.get("claude")
    legacy: dict[str, Any] = claude if isinstance(claude, dict) else {}
    pid = legacy.get("current")
    if not isinstance(pid, str) or not pid:
        return None
    providers = legacy.get("providers")
    entry = providers.get(pid) if isinstance(providers, dict) else None
    return {"id": pid, "name": entry.get("name") if isinstance(entry, dict) else None,
            "by_conduit": pid.startswith("conduit-"), "layer": "config.json"}


def _selected_words(selected: Mapping[str, Any]) -> str:
    """``conduit-taotoken (conduit's row)`` or ``My Relay (id 7; yours: sync keeps it selected)``."""
    name = selected.get("name") or selected["id"]
    if selected["by_conduit"]:
        return f"{name} (conduit's row)"
    return (f"{name} (id {selected['id']}; yours: sync keeps it selected until the profile's channel changes, "
            "or `conduit sync --force`)")


def _cc_switch_running() -> bool:
    import psutil  # lazy: only CC Switch's sync asks which processes run (psutil is ~x0.3 of a bare start)

    for proc in psutil.process_iter(["name"]):
        name = (proc.info.get("name") or "").lower()
        if "cc-switch" in name or name == "cc switch":
            return True
    return False


def _row_writer(settings: ToolSettings, pid: str, make_current: bool,
                take: TakeMode = True) -> Callable[[sqlite3.Connection, bool], list[str]]:
    """Build the SqliteTarget.apply function: upsert conduit's row, keep every column conduit does not own.
    ``take``: mark the row current even when another provider is (``FROM_CONDUIT``: only when that one is
    conduit's; else only when none is)."""
    wanted_env = anthropic_env(settings)
    name = f"conduit: {settings.channel}"

    def apply(conn: sqlite3.Connection, dry_run: bool) -> list[str]:
        cols = {r[1] for r in conn.execute("PRAGMA table_info(providers)")}
        if not PROVIDER_COLUMNS <= cols:
            missing = ", ".join(sorted(PROVIDER_COLUMNS - cols))
            raise ToolFileError(f"CC Switch database has no providers column(s) {missing}",
                                "this CC Switch version is not supported; upgrade it to v3.8 or later")
        row = conn.execute("SELECT name, settings_config, meta, is_current FROM providers "
                           "WHERE id = ? AND app_type = ?", (pid, APP_TYPE)).fetchone()
        changes: list[str] = []
        old_config = _loads(row[1], f"providers[{pid}].settings_config") if row else {}
        config = dict(old_config)
        config["env"] = merge_env(old_config.get("env"), wanted_env)
        old_meta = _loads(row[2], f"providers[{pid}].meta") if row else {}
        meta = dict(old_meta)
        if settings.auth == "x-api-key":
            meta["apiKeyField"] = "ANTHROPIC_API_KEY"
        else:
            meta.pop("apiKeyField", None)
        if row is None:
            values: dict[str, Any] = {
                "id": pid, "app_type": APP_TYPE, "name": name, "settings_config": json.dumps(config, ensure_ascii=False),
                "meta": json.dumps(meta), "is_current": 0, "created_at": int(time.time() * 1000)}  # epoch ms
            if "category" in cols:
                values["category"] = "custom"
            if "sort_index" in cols:
                values["sort_index"] = conn.execute(
                    "SELECT COALESCE(MAX(sort_index), 0) + 1 FROM providers WHERE app_type = ?", (APP_TYPE,)
                ).fetchone()[0]
            conn.execute(f"INSERT INTO providers ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                         tuple(values.values()))
            changes += _row_diff(pid, None, config)
        elif (row[0], config, meta) != (name, old_config, old_meta):
            # UPDATE, never INSERT OR REPLACE: a replace deletes the row's provider_endpoints (ON DELETE CASCADE).
            conn.execute("UPDATE providers SET name = ?, settings_config = ?, meta = ? WHERE id = ? AND app_type = ?",
                         (name, json.dumps(config, ensure_ascii=False), json.dumps(meta), pid, APP_TYPE))
            changes += _row_diff(pid, old_config, config)
        if make_current:
            others = conn.execute("SELECT id FROM providers WHERE app_type = ? AND is_current AND id != ?",
                                  (APP_TYPE, pid)).fetchall()
            may = _may_take(take, [str(o[0]) for o in others])
            if (may and (others or row is None or not row[3])) or (not may and not others and not (row and row[3])):
                conn.execute("UPDATE providers SET is_current = (id = ?) WHERE app_type = ?", (pid, APP_TYPE))
                changes.append(f"current {APP_TYPE} provider: {', '.join(o[0] for o in others) or '(none)'} -> {pid}")
        return changes

    return apply


def _loads(text: str | None, where: str) -> dict[str, Any]:
    """A JSON column of conduit's own row. Raises ToolFileError when it is not a JSON object: the row is left
    alone rather than overwritten (merge, never clobber)."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        raise ToolFileError(f"cc-switch.db {where} is not valid JSON",
                            "fix or delete conduit's row in CC Switch; conduit left the database unchanged") from None
    return as_object(value, where=f"cc-switch.db {where}")


def _legacy_transform(settings: ToolSettings, pid: str, make_current: bool,
                      take: TakeMode = True) -> Callable[[dict[str, Any]], dict[str, Any]]:
    wanted_env = anthropic_env(settings)

    def transform(doc: dict[str, Any]) -> dict[str, Any]:
        claude = as_object(doc.get("claude"), where="config.json: claude")
        providers = as_object(claude.get("providers"), where="config.json: claude.providers")
        entry = dict(as_object(providers.get(pid), where=f"config.json: claude.providers.{pid}"))
        entry.setdefault("id", pid)
        entry["name"] = f"conduit: {settings.channel}"
        config = as_object(entry.get("settingsConfig"), where=f"config.json: claude.providers.{pid}.settingsConfig")
        entry["settingsConfig"] = {**config, "env": merge_env(config.get("env"), wanted_env)}
        providers[pid] = entry
        claude["providers"] = providers
        if make_current and (not claude.get("current") or _may_take(take, [str(claude.get("current"))])):
            claude["current"] = pid
        doc["claude"] = claude
        return doc

    return transform
