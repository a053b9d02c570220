"""Where conduit keeps its own files (platformdirs; XDG on Linux).

Every path is computed on each call from the current environment, so a test that sets ``HOME`` (and clears
the ``XDG_*`` variables) redirects all of conduit at once.

| what | default on Linux | override |
|---|---|---|
| profile | ``~/.config/conduit/profile.toml`` | ``--profile PATH``, ``CONDUIT_PROFILE`` |
| secrets file | ``~/.config/conduit/secrets.toml`` (0600) | |
| state (sync.json, backups, logs) | ``~/.local/state/conduit/`` | ``XDG_STATE_HOME`` |
| runtime (agent.sock) | ``$XDG_RUNTIME_DIR/conduit/`` | fallback ``/tmp/conduit-<uid>/`` when unset |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import platformdirs

APP = "conduit"


def config_dir() -> Path:
    """``~/.config/conduit`` (``$XDG_CONFIG_HOME/conduit``)."""
    return Path(platformdirs.user_config_dir(APP))


def profile_path(override: str | os.PathLike[str] | None = None) -> Path:
    """The profile file: ``override``, else ``$CONDUIT_PROFILE``, else ``config_dir()/profile.toml``."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get("CONDUIT_PROFILE", "").strip()
    if env:
        return Path(env).expanduser()
    return config_dir() / "profile.toml"


def secrets_path() -> Path:
    """conduit's own secrets file (written by ``conduit key set``; mode 0600)."""
    return config_dir() / "secrets.toml"


def state_dir() -> Path:
    """``~/.local/state/conduit`` (``$XDG_STATE_HOME/conduit``): sync.json, backups, logs."""
    return Path(platformdirs.user_state_dir(APP))


def backups_dir() -> Path:
    """Where the writer keeps the last backups of each tool's files, one folder per tool."""
    return state_dir() / "backups"


def runtime_dir() -> Path:
    """``$XDG_RUNTIME_DIR/conduit``; where the runtime dir is missing, ``/tmp/conduit-<uid>`` (documented
    fallback, created 0700 by its user)."""
    base = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if base and Path(base).is_dir():
        return Path(base) / APP
    return Path(f"/tmp/{APP}-{os.getuid()}")


def agent_socket_path() -> Path:
    """The agent's Unix socket: ``runtime_dir()/agent.sock`` unless ``CONDUIT_AGENT_SOCKET`` is set."""
    env = os.environ.get("CONDUIT_AGENT_SOCKET", "").strip()
    return Path(env) if env else runtime_dir() / "agent.sock"


def display_path(path: Path | str, environ: Mapping[str, str] | None = None) -> str:
    """``path`` with the home directory (``$HOME`` of ``environ``, default ``os.environ``) written as ``~``,
    for messages: ``~/.config/conduit/secrets.toml``."""
    home = (environ if environ is not None else os.environ).get("HOME", "")
    text = str(path)
    if home and home != "/" and (text == home or text.startswith(home.rstrip("/") + "/")):
        return "~" + text[len(home.rstrip("/")) :]
    return text
