"""`conduit doctor` and `conduit status` on an 80-column terminal (``COLUMNS=80``, a real subprocess): one channel
and three tools fit in about 25 lines, every problem's fix is on its row, no path is cut (``~`` for ``$HOME``,
folded rather than ellipsized), status names tools as doctor does, and a tool whose command is absent is "not
installed" with no restart advice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers.agentproc import AgentProc, fake_gpu
from helpers.toolfiles import cc_switch_db, claude_settings, cline_gen_c, write_profile

from conduit.daemon.sync.drift import changed_keys, drift_remedy, drift_summary
from conduit.daemon.sync.state import DriftRecord

CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]
MAX_LINES = 25


def narrow(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI on an 80-column terminal, with no tool's command on PATH."""
    run_env = dict(os.environ, HOME=str(home), NO_COLOR="1", COLUMNS="80", PATH="/usr/bin:/bin", **(env or {}))
    return subprocess.run([*CONDUIT, *args], capture_output=True, text=True, env=run_env, timeout=90,
                          stdin=subprocess.DEVNULL)


def _three_tools(home: Path) -> None:
    write_profile(home, tools=("claude_code", "cline", "cc_switch"))
    claude_settings(home)
    cline_gen_c(home)
    cc_switch_db(home)


def _fits(text: str) -> list[str]:
    lines = text.rstrip("\n").splitlines()
    assert len(lines) <= MAX_LINES, text
    assert all(len(line) <= 80 for line in lines), text
    assert "…" not in text, text  # nothing ellipsized, paths least of all
    return lines


def test_doctor_shows_each_fix_on_its_row_in_80_columns(temp_home: Path) -> None:
    _three_tools(temp_home)
    r = narrow(temp_home, "doctor")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = _fits(r.stdout)
    assert str(temp_home) not in r.stdout and "~/.cc-switch/settings.json differs:" in " ".join(r.stdout.split())
    row = [ln for ln in lines if ln.startswith("CC Switch")][0]
    assert "drifted" in row
    at = lines.index(row)
    block = " ".join(" ".join(lines[at:at + 5]).split())
    assert "ANTHROPIC_BASE_URL" in block and "fix: run `conduit sync`" in block
    # the sample's top-level "model" decides while no env.ANTHROPIC_MODEL outranks it (what the binary does)
    row = [ln for ln in lines if ln.startswith("Claude Code")][0]
    assert "overridden" in row
    at = lines.index(row)
    block = " ".join(" ".join(lines[at:at + 8]).split())
    assert "fix: run `conduit sync`" in block and 'remove "model"' in block
    assert "conduit doctor --all" in r.stdout and "conduit doctor --diff" in r.stdout
    assert "--- " not in r.stdout  # the diffs only with --diff
    assert "+++ " in narrow(temp_home, "doctor", "--diff").stdout


def test_doctor_says_not_installed_without_restart_advice(temp_home: Path) -> None:
    _three_tools(temp_home)
    assert narrow(temp_home, "sync").returncode == 0
    r = narrow(temp_home, "doctor")
    lines = _fits(r.stdout)
    row = [ln for ln in lines if ln.startswith("Claude Code")][0]
    assert "not installed" in row and "version unknown" not in r.stdout
    assert not [ln for ln in lines if "Claude Code" in ln and "restart" in ln.lower()]


def test_status_fits_80_columns_and_shows_display_names(temp_home: Path) -> None:
    _three_tools(temp_home)
    assert narrow(temp_home, "sync").returncode == 0
    with AgentProc(temp_home, gpus={"devices": [fake_gpu(0)]}) as agent:
        agent.wait_for("/v1/status", lambda b: (b.get("tools") or {}).get("tools"), timeout=30)
        r = narrow(temp_home, "status", env={"CONDUIT_AGENT_SOCKET": str(agent.sock)})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = _fits(r.stdout)
    names = [ln.split("  ")[0] for ln in lines]
    assert {"Claude Code", "Cline", "CC Switch"} <= set(names), r.stdout
    assert "claude_code" not in r.stdout


def test_drift_line_names_the_keys_and_the_remedy() -> None:
    diff = ('--- a\n+++ b\n@@ -1,3 +1,3 @@\n   "env": {\n-    "ANTHROPIC_BASE_URL": "https://x",\n'
            '+    "ANTHROPIC_BASE_URL": "https://gw",\n   }\n')
    assert changed_keys(diff) == ["ANTHROPIC_BASE_URL"]
    record = DriftRecord(detected_at="t", files=["/h/.claude/settings.json"], diff=diff, policy="report",
                         reapplied=False)
    line = drift_summary(record, "report")
    assert line.startswith("ANTHROPIC_BASE_URL in /h/.claude/settings.json changed behind conduit's back")
    assert "conduit sync" in line and 'on_drift = "reapply"' in line
    assert "writes the profile back" in drift_remedy("reapply")
    assert changed_keys("-model = \"a\"\n+model = \"b\"\n+[model_providers.conduit]\n") == [
        "model", "model_providers.conduit"]
