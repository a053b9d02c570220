"""`conduit demo` (what `make demo` runs) succeeds end to end and shows each step's effect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_demo_runs_end_to_end(temp_home: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "demo"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    out = r.stdout
    assert "Claude Code hooks, permissions and statusLine kept: True" in out
    assert out.count("deepseek-chat") >= 3 and "sk-...91ab" in out  # model switch and key rotation reached tools
    assert "sk-demo-second-key-91ab" not in out.replace("printf 'sk-demo-second-key-91ab", "")
    assert "live: healthy" in out and "demo finished" in out
    assert not list(temp_home.iterdir())  # the demo never touches the real HOME
    heads = [line for line in out.splitlines() if line.startswith("--- ")]
    assert heads and len(heads) == len(set(heads)), heads  # each diff shown once
    warnings = [line for line in out.splitlines() if line.startswith("warning")]
    assert "stand-in" in out and not [w for w in warnings if "127.0.0.1" in w or "models channel" in w], warnings
    assert "by reference (apiKeyHelper)" in out  # Claude Code's key: a reference by default
    assert len(out.splitlines()) <= 96, len(out.splitlines())  # 96: the apiKeyHelper line of the first diff
