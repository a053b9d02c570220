"""``conduit demo``: the main job end to end, in a throwaway HOME, on an embedded default.

It lays out real-format configs of Claude Code, Cline (CLI generation C) and CC Switch (schema-17 database), writes
the starter profile, stores a key, shows the per-tool diffs, syncs, then switches the model and rotates the key and
shows both reaching every tool. Each step runs the real ``conduit`` command in a subprocess with ``HOME`` pointing
at the temporary directory, so nothing of the person's own setup is read or touched.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from conduit.daemon.cli.samples import CLAUDE_SETTINGS, cc_switch_db, claude_settings, cline_gen_c
from conduit.redact import fingerprint

# A pipe gets rich's 80 columns, too narrow for the state tables; a terminal keeps its own width.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)


_STATUS = re.compile(r"[A-Z][\w ]*: (updated|unchanged|would change|not found|error|disabled)\b|profile: |note|warning|error")


def _brief(text: str) -> str:
    """What a sync printed, cut to its status lines (``Claude Code: updated``), notes and warnings: for a step
    whose diffs the state table shows, so no diff is printed twice."""
    kept = [line for line in text.splitlines(keepends=True) if _STATUS.match(line)]
    left_out = len(kept) < len(text.splitlines())
    return "".join(kept) + ("  (diffs left out: the table below shows what each tool holds)\n" if left_out else "")


def _run(home: Path, *args: str, stdin: str | None = None, shown: str | None = None, brief: bool = False) -> int:
    """Run ``conduit ARGS`` under ``home`` and echo it like a terminal session (``brief``: without diffs)."""
    console.print(f"[bold cyan]$ {shown or 'conduit ' + shlex.join(args)}[/]")
    env = dict(os.environ, HOME=str(home), COLUMNS=str(1000 if brief else console.width))  # brief: whole lines
    for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "CONDUIT_PROFILE", "CLAUDE_CONFIG_DIR", "CLINE_DATA_DIR",
                "CLINE_DIR", "ANTHROPIC_BASE_URL"):
        env.pop(var, None)
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", *args], input=stdin, text=True,
                       capture_output=True, env=env, cwd=home)
    sys.stdout.write(_brief(r.stdout) if brief else r.stdout)
    sys.stdout.write(r.stderr)
    sys.stdout.flush()
    return r.returncode


def _state_table(home: Path, title: str) -> Table:
    """What each tool holds right now (keys as fingerprints)."""
    table = Table("tool", "file", "base URL", "model", "key", title=title)
    doc = json.loads((home / ".claude" / "settings.json").read_text())
    env = doc.get("env", {})
    held = ("by reference (apiKeyHelper)" if doc.get("apiKeyHelper") and not env.get("ANTHROPIC_AUTH_TOKEN")
            else fingerprint(env.get("ANTHROPIC_AUTH_TOKEN")))  # the reference is the default (docs/keys.md)
    table.add_row("Claude Code", "~/.claude/settings.json", env.get("ANTHROPIC_BASE_URL"), env.get("ANTHROPIC_MODEL"),
                  held)
    prov = json.loads((home / ".cline/data/settings/providers.json").read_text())
    s = (prov.get("providers", {}).get("openai-compatible") or {}).get("settings", {})
    table.add_row("Cline", "~/.cline/data/settings/providers.json", s.get("baseUrl"), s.get("model"),
                  fingerprint(s.get("apiKey")))
    with sqlite3.connect(home / ".cc-switch/cc-switch.db") as conn:
        row = conn.execute("SELECT settings_config, is_current FROM providers WHERE id LIKE 'conduit-%'").fetchone()
    conn.close()
    if row:
        cenv = json.loads(row[0])["env"]
        table.add_row("CC Switch", "~/.cc-switch/cc-switch.db" + (" (current)" if row[1] else ""),
                      cenv.get("ANTHROPIC_BASE_URL"), cenv.get("ANTHROPIC_MODEL"),
                      fingerprint(cenv.get("ANTHROPIC_AUTH_TOKEN")))
    return table


MODELS = ("claude-sonnet-4-20250514", "claude-3-5-haiku-20241022", "deepseek-chat")
"""What the stand-in gateway lists: every model the demo's profile names, so no warning is about the stand-in."""


class StandInGateway:
    """A loopback stand-in for the hosted gateway, so the demo's live checks send nothing off this machine.

    Serves ``GET /api/v1/models`` (what ``doctor --live`` probes) to any ``sk-demo-`` key, 401 otherwise.
    """

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                auth = self.headers.get("authorization", "") or self.headers.get("x-api-key", "")
                ok = self.path == "/api/v1/models" and "sk-demo-" in auth
                body = json.dumps({"data": [{"id": m} for m in MODELS]} if ok else {"error": "no"}).encode()
                self.send_response(200 if ok else (401 if self.path == "/api/v1/models" else 404))
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.root = f"http://127.0.0.1:{self.server.server_address[1]}/api"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_demo(keep: bool = False) -> int:
    """Run the demo; returns 0 when every step succeeded. ``keep`` leaves the temporary HOME in place."""
    home = Path(tempfile.mkdtemp(prefix="conduit-demo-"))
    gateway = StandInGateway()
    rc = 0
    try:
        console.print(Rule("conduit demo: one profile, three tools"))
        console.print(f"temporary HOME: {home}; the gateway: a stand-in on this machine, {gateway.root}",
                      markup=False)
        claude_settings(home, CLAUDE_SETTINGS)
        cline_gen_c(home)
        cc_switch_db(home)
        console.print("Laid out real-format configs: ~/.claude/settings.json (hooks, permissions, an old gateway), "
                      "~/.cline/data/settings/providers.json (Cline CLI 3.x), ~/.cc-switch/cc-switch.db (v3.20).\n")
        rc |= _run(home, "init", "--no-discover", "--base-url", gateway.root, "--channel", "taotoken")
        rc |= _run(home, "key", "set", "taotoken", stdin="sk-demo-first-key-7c1e\n",
                   shown="printf 'sk-demo-first-key-7c1e\\n' | conduit key set taotoken")
        console.print(Rule("1. see a diff (one tool's; every tool's without --tool), then write"))
        rc |= _run(home, "sync", "--dry-run", "--tool", "claude_code")
        rc |= _run(home, "sync", brief=True)
        hooks_kept = json.loads((home / ".claude/settings.json").read_text())["hooks"] == CLAUDE_SETTINGS["hooks"]
        console.print(f"Claude Code hooks, permissions and statusLine kept: {hooks_kept}")
        console.print(Rule("2. switch the model everywhere with one command"))
        rc |= _run(home, "use", "deepseek-chat", "--small-model", "deepseek-chat", brief=True)
        console.print(Rule("3. rotate the key in one place"))
        rc |= _run(home, "key", "set", "taotoken", stdin="sk-demo-second-key-91ab\n",
                   shown="printf 'sk-demo-second-key-91ab\\n' | conduit key set taotoken")
        rc |= _run(home, "sync", brief=True)
        console.print(_state_table(home, "every tool after the model switch and the key change"))
        console.print(Rule("4. doctor, with live checks"))
        rc |= _run(home, "doctor", "--live")
        console.print("\n[green]demo finished[/]" if rc == 0 else "\n[red]a step failed (see above)[/]")
    finally:
        gateway.close()
        if keep:
            console.print(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    return rc

