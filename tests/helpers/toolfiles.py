"""Test helpers: write a profile under a temporary HOME, sync, and the lifecycle check every adapter's test file runs.

The real-format tool files come from conduit.daemon.cli.samples (shared with `conduit demo`).
"""

from __future__ import annotations

import json
from pathlib import Path

from conduit.adapters.base import Env
from conduit.daemon.cli.samples import (  # noqa: F401  re-exported for the tests
    CC_SWITCH_SCHEMA,
    CLAUDE_SETTINGS,
    DEEPSEEK_ID,
    add_endpoints,
    cc_switch_db,
    claude_settings,
    cline_gen_b,
    cline_gen_c,
    write_json,
)
from conduit.daemon.config.profile import load_profile
from conduit.daemon.sync.engine import SyncReport, sync


def write_profile(home: Path, base_url: str = "https://gw.example.com/api", *, key_text: str | None = "sk-test-abc\n",
                  tools: tuple[str, ...] = ("claude_code", "cline", "cc_switch"), extra: str = "",
                  model: str = "claude-sonnet-4-20250514", small_model: str | None = "claude-3-5-haiku-20241022",
                  auth: str = "bearer", key_delivery: str | None = None) -> Path:
    """Write a profile (and a key file holding ``key_text``) under ``home``; returns the profile path.
    ``key_delivery``: the channel's ``key_delivery`` (``copy`` for a test about the key in a tool's own file:
    Claude Code's default is a reference)."""
    cfg = home / ".config" / "conduit"
    cfg.mkdir(parents=True, exist_ok=True)
    key_line = ""
    if key_text is not None:
        keyfile = cfg / "keys" / "gw"
        keyfile.parent.mkdir(exist_ok=True)
        keyfile.write_text(key_text)
        keyfile.chmod(0o600)
        key_line = 'key = { file = "~/.config/conduit/keys/gw" }\n'
    small = f'small_model = "{small_model}"\n' if small_model else ""
    tables = "".join(f"[tools.{t}]\n" for t in tools)
    text = (f'version = 1\nchannel = "gw"\nmodel = "{model}"\n{small}\n[channels.gw]\n'
            f'base_url = {json.dumps(base_url)}\nprotocols = ["openai", "anthropic"]\n{key_line}'
            f'auth = "{auth}"\n' + (f'key_delivery = "{key_delivery}"\n' if key_delivery else "")
            + f'\n{tables}{extra}')
    path = cfg / "profile.toml"
    path.write_text(text)
    return path


def run_sync(home: Path, **kw) -> SyncReport:
    """Load the profile under ``home`` and sync every tool (env from the process, HOME=home)."""
    return sync(load_profile(home / ".config" / "conduit" / "profile.toml"), env=Env(), **kw)


def lifecycle(home: Path) -> SyncReport:
    """render -> write -> re-read -> sync again: the second sync must write nothing.

    Returns the first sync's report; raises AssertionError when the second sync changes anything.
    """
    first = run_sync(home)
    snapshot = {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and "backups" not in p.parts}
    second = run_sync(home)
    assert not second.changed, [t for t in second.tools if t.status == "changed"]
    after = {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and "backups" not in p.parts}
    assert snapshot == after, "a second sync changed files"
    return first
