"""The one explicit, sorted registry of adapters (STYLE.md habit 3).

Its keys are the valid ``[tools.<name>]`` names in the profile; the sync engine, ``conduit doctor``,
``conduit init`` discovery and the test suite (the variables it clears, the OpenAI field cases) all iterate
over it, so adding a tool is one adapter module and one line here (README "Adding a tool").

Typed as ``Mapping[str, Adapter]`` so that mypy checks every entry against the ``Adapter`` protocol.

Test hook: the mapping is a plain ``dict`` shared by every importer, so a test registers a throwaway adapter
with ``monkeypatch.setitem(registry.ADAPTERS, "name", adapter)`` (undone when the test ends) and every part of
conduit sees it.
"""

from __future__ import annotations

from collections.abc import Mapping

from conduit.adapters.aider import Aider
from conduit.adapters.base import Adapter
from conduit.adapters.cc_switch import CCSwitch
from conduit.adapters.claude_code import ClaudeCode
from conduit.adapters.cline import Cline
from conduit.adapters.codex import Codex
from conduit.adapters.continue_dev import Continue
from conduit.adapters.gemini import Gemini
from conduit.adapters.opencode import OpenCode

ADAPTERS: Mapping[str, Adapter] = {
    "aider": Aider(),
    "cc_switch": CCSwitch(),
    "claude_code": ClaudeCode(),
    "cline": Cline(),
    "codex": Codex(),
    "continue": Continue(),
    "gemini": Gemini(),
    "opencode": OpenCode(),
}


def declared_env_vars() -> tuple[str, ...]:
    """Every environment variable any registered adapter reads (``Adapter.env_vars``), sorted, no repeats."""
    return tuple(sorted({var for adapter in ADAPTERS.values() for var in adapter.env_vars}))
