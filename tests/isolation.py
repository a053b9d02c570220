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


def isolated_vars() -> tuple[str, ...]:
    """Every variable to clear: XDG, conduit's own, and each registered adapter's ``env_vars``; sorted."""
    return tuple(sorted({*XDG_VARS, *CONDUIT_VARS, *declared_env_vars()}))


def env_for_subprocess(home: Path) -> dict[str, str]:
    """os.environ as the tests left it (HOME already temporary), for real subprocesses. (Here, not in
    conftest.py: ``from conftest import`` resolves to whichever of the three conftest files was imported last.)"""
    return dict(os.environ, HOME=str(home))
