"""The real-tool tier: the CLIs the adapters declare (``package``), at pinned versions in a cache outside the repo
(tests/realtools/ensure_tools.sh), each run once per case in the verify sandbox against a recording gateway on
loopback.

When a package registry cannot be reached to build the cache, every test here is SKIPPED with a loud line
saying why; any other failure to build it fails the tier. At the end the tier prints one table row per run
(tool, version, base URL form, path hit, auth ok, model ok, seconds) and writes the rows as JSON to
``$CONDUIT_TIER_REPORT`` when that is set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
ENSURE = HERE / "ensure_tools.sh"
# Decided at import time, before the autouse fixture points HOME at a temporary directory.
CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
EXPLICIT_CACHE = os.environ.get("CONDUIT_TOOLS_CACHE")
REPORT_ENV = os.environ.get("CONDUIT_TIER_REPORT")
REGISTRY_UNREACHABLE = 3

#: One dict per tool run, appended by the tests, printed by ``pytest_terminal_summary``.
ROWS: list[dict[str, Any]] = []


def _loud(config: pytest.Config, text: str) -> None:
    tr = config.pluginmanager.get_plugin("terminalreporter")
    banner = "!" * 100
    if tr is not None:
        tr.write_line(banner, red=True, bold=True)
        tr.write_line(text, red=True, bold=True)
        tr.write_line(banner, red=True, bold=True)
    else:  # pragma: no cover
        print(f"{banner}\n{text}\n{banner}", file=sys.stderr)


@pytest.fixture(scope="session")
def tool_cache(pytestconfig: pytest.Config) -> Path:
    """The cache directory (``bin/`` holds one link per command), installed or reused."""
    env = dict(os.environ, HOME=str(Path.home()), XDG_CACHE_HOME=str(CACHE_ROOT), CONDUIT_PYTHON=sys.executable)
    if EXPLICIT_CACHE:
        env["CONDUIT_TOOLS_CACHE"] = EXPLICIT_CACHE
    r = subprocess.run(["bash", str(ENSURE)], env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode == REGISTRY_UNREACHABLE:
        reason = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "registry unreachable"
        _loud(pytestconfig, f"SKIPPED the real-tool tier: cannot install the tools: {reason}")
        pytest.skip(f"real-tool tier SKIPPED: {reason}")
    if r.returncode != 0:
        pytest.fail(f"cannot install the tools ({ENSURE}, exit {r.returncode}): {r.stderr.strip()[-2000:]}")
    return Path(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def tool_path(tool_cache: Path) -> str:
    """PATH for a tool run: the cache's links, the directory of ``node``, then the system's."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: the real-tool tier needs Node.js 20 (and npm) installed")
    dirs = [str(tool_cache / "bin"), str(Path(node).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    return os.pathsep.join(dict.fromkeys(dirs))


@pytest.fixture(scope="session")
def sandbox() -> Any:
    """One verify sandbox for the whole tier (the isolation is decided once)."""
    from conduit.daemon.verify.runner import Sandbox

    return Sandbox.create()


@pytest.fixture(scope="session")
def tier_rows() -> list[dict[str, Any]]:
    """The rows the tier's summary prints: each test appends one dict per tool run."""
    return ROWS


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the tier's table (and write ``$CONDUIT_TIER_REPORT``) when any tool ran."""
    if not ROWS:
        return
    cols = ("tool", "version", "form", "key", "path_hit", "auth_ok", "model_ok", "seconds", "exit", "leftovers")
    rows = [[str(r.get(c, "")) for c in cols] for r in ROWS]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    terminalreporter.section("real-tool tier")
    terminalreporter.write_line("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for row in rows:
        terminalreporter.write_line("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    isolation = {r.get("isolation") for r in ROWS}
    terminalreporter.write_line(f"isolation: {', '.join(sorted(str(i) for i in isolation))}")
    if REPORT_ENV:
        Path(REPORT_ENV).write_text(json.dumps(ROWS, indent=2) + "\n")
        terminalreporter.write_line(f"wrote {REPORT_ENV}")
