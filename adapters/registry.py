"""The one explicit, sorted registry of adapters (STYLE.md habit 3).

Its keys are the valid ``[tools.<name>]`` names in the profile.
"""

from __future__ import annotations

from conduit.adapters.aider import Aider
from conduit.adapters.base import Adapter
from conduit.adapters.cc_switch import CCSwitch
from conduit.adapters.claude_code import ClaudeCode
from conduit.adapters.cline import Cline
from conduit.adapters.codex import Codex
from conduit.adapters.continue_dev import Continue
from conduit.adapters.gemini import Gemini
from conduit.adapters.opencode import OpenCode

ADAPTERS: dict[str, Adapter] = {
    "aider": Aider(),
    "cc_switch": CCSwitch(),
    "claude_code": ClaudeCode(),
    "cline": Cline(),
    "codex": Codex(),
    "continue": Continue(),
    "gemini": Gemini(),
    "opencode": OpenCode(),
}
