"""The variables a tool configured only by its environment (``configured_by == "environment"``: Copilot) gets in
the real-tool tier: what ``conduit env TOOL --show-key`` prints, run as a person runs it (a real subprocess,
HOME=home), so the tier proves that command's output too."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from conduit.adapters.registry import ADAPTERS


def session_env(home: Path, tool: str) -> dict[str, str]:
    """``{VAR: value}`` of the ``export`` lines of ``conduit env TOOL --show-key`` under ``home``; ``{}`` for a tool
    configured by its files (``conduit sync`` wrote them). Fails the test when the command fails."""
    if ADAPTERS[tool].configured_by != "environment":
        return {}
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "CONDUIT_STABLE_INSTALL": "1"}
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "env", tool, "--show-key"], env=env, cwd=home,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"conduit env {tool} exit {r.returncode}:\n{r.stderr[-2000:]}"
    out: dict[str, str] = {}
    for line in r.stdout.splitlines():
        if line.startswith("export "):
            name, _, value = shlex.split(line[len("export "):])[0].partition("=")
            out[name] = value
    return out
