"""conduit's own error types; foreign errors are translated into these at the boundary.

Exception tree (OS, TOML, JSON, SQLite, HTTP and NVML errors become one of these, with a message a person can
act on)::

    ConduitError                 message + optional hint; the CLI prints both, never a traceback
    ├── ProfileError             the profile is unreadable or invalid (file, line, key path, fix)
    ├── KeyError_                a key source failed or the key holds a forbidden character
    ├── ToolFileError            a tool's file cannot be parsed or written; that tool is skipped
    ├── AgentUnreachable         the agent socket does not answer (exit code 2 for scripts)
    └── BadArguments             a command-line value conduit cannot use (exit code 3, like a usage error)

Messages never contain a key: code that builds them uses fingerprints (``conduit.redact.fingerprint``).
"""

from __future__ import annotations


class ConduitError(Exception):
    """A failure a person can act on.

    Args:
        message: what went wrong, naming the file and key path where there is one.
        hint: what to do about it (one sentence), or None.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ProfileError(ConduitError):
    """The profile file cannot be read, parsed or validated."""


class KeyError_(ConduitError):  # noqa: N801 - trailing underscore avoids shadowing builtins.KeyError
    """A key could not be read from its source, or was refused by the cleaning rules."""


class ToolFileError(ConduitError):
    """A tool's own file cannot be parsed or written; the file is left exactly as it was."""


class AgentUnreachable(ConduitError):
    """The agent's Unix socket does not answer."""

    exit_code = 2


class BadArguments(ConduitError):
    """A command-line value conduit cannot use: unknown tool, template, channel (exit code 3)."""

    exit_code = 3
