"""Shared fixtures: every test runs against a temporary HOME with no XDG, conduit or tool overrides.

Real files, real processes: nothing in the user's own HOME, or in a tool directory an exported variable
points at, is ever read or written by the suite (tests/adapters/test_registry.py proves it with sentinel directories).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.isolation import clear_terminal_size, env_for_subprocess, isolated_vars  # noqa: F401 (re-exported)

clear_terminal_size()  # once per process, before any test: see isolation.TERMINAL_VARS


@pytest.fixture(autouse=True)
def temp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HOME at a fresh directory and clear every variable that would redirect conduit or a tool:
    ``isolation.isolated_vars()`` (XDG, ``CONDUIT_*`` and each adapter's declared ``env_vars``).
    (``COLUMNS``/``LINES`` are removed once, when this file is imported: ``isolation.TERMINAL_VARS``.)"""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in isolated_vars():
        monkeypatch.delenv(var, raising=False)
    # The checkout (and its .venv) may lie under /tmp (a CI clone): Claude Code's key reference would then fall
    # back to a copy (adapters/keyref.py unstable_reason). Tests of that fallback unset it.
    monkeypatch.setenv("CONDUIT_STABLE_INSTALL", "1")
    monkeypatch.chdir(home)
    return home


@pytest.fixture
def leaders() -> Iterator[set[int]]:
    """Process groups a test saw (add a vLLM launch's leader pid); whatever is left of them is killed afterwards,
    so a failing test leaves nothing running."""
    seen: set[int] = set()
    yield seen
    for pgid in seen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
