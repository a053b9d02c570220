"""The environment variables a test must never inherit: conduit's own and every one an adapter declares.

``tests/conftest.py``'s autouse fixture clears all of them, so no test reads or writes a real tool's files
(a developer's exported ``CODEX_HOME`` or ``CLAUDE_CONFIG_DIR`` would otherwise redirect a sync there).
The adapters' part comes from the registry (``Adapter.env_vars``): a new adapter's variables are cleared
without editing this file.
"""

from __future__ import annotations

import os
from pathlib import Path

from conduit.adapters.registry import declared_env_vars

XDG_VARS = ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR")
"""Where conduit (through platformdirs) and some tools keep their files."""

CONDUIT_VARS = ("CONDUIT_PROFILE", "CONDUIT_AGENT_SOCKET", "CONDUIT_FAKE_GPUS")
"""conduit's own redirects: the profile, the agent's socket, the fake-GPU hook. (The real-vLLM tier's
``CONDUIT_VLLM_VENV``/``CONDUIT_VLLM_PYTHON`` are a developer's settings for that tier and are kept.)"""

TERMINAL_VARS = ("COLUMNS", "LINES")
"""The terminal size as variables: rich takes ``COLUMNS`` as a fixed width. A shell does not export them, but
pytest's capture plugin imports GNU readline (``_readline_workaround``), which puts ``COLUMNS=80``/``LINES=24``
into the C environment: every subprocess started without ``env=`` inherits them, and pytest-xdist workers start
with them in ``os.environ``, so an in-process console wrapped at 80 columns and a tmux pane's shell exported a
fixed ``COLUMNS`` that no resize changes. Cleared, but not redirects: not in ``isolated_vars()``
(tests/adapters/test_registry.py sets each of those to a sentinel directory)."""


def clear_terminal_size() -> None:
    """Remove ``TERMINAL_VARS`` from ``os.environ`` and from the C environment (``os.unsetenv``: readline set
    them there, where ``os.environ`` may not show them)."""
    for var in TERMINAL_VARS:
        os.environ.pop(var, None)
        os.unsetenv(var)


def isolated_vars() -> tuple[str, ...]:
    """Every variable to clear: XDG, conduit's own, and each registered adapter's ``env_vars``; sorted."""
    return tuple(sorted({*XDG_VARS, *CONDUIT_VARS, *declared_env_vars()}))


def env_for_subprocess(home: Path) -> dict[str, str]:
    """os.environ as the tests left it (HOME already temporary), for real subprocesses. (Here, not in
    conftest.py: ``from conftest import`` resolves to whichever of the three conftest files was imported last.)"""
    return dict(os.environ, HOME=str(home))
