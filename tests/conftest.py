"""Shared fixtures: every test runs against a temporary HOME with no XDG overrides.

Real files, real processes: nothing in the user's own HOME is ever read or written by the suite.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def temp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HOME at a fresh directory and clear variables that would redirect conduit or the tools."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in (
        "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR",
        "CONDUIT_PROFILE", "CONDUIT_AGENT_SOCKET", "CLAUDE_CONFIG_DIR", "CLINE_DATA_DIR", "CLINE_DIR",
        "CLINE_PROVIDER_SETTINGS_PATH", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(home)
    return home


def env_for_subprocess(home: Path) -> dict[str, str]:
    """os.environ as the tests left it (HOME already temporary), for real subprocesses."""
    return dict(os.environ, HOME=str(home))
