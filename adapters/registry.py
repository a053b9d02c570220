"""The one explicit, sorted registry of adapters (STYLE.md habit 3).

Its keys are the valid ``[tools.<name>]`` names in the profile.
"""

from __future__ import annotations

from conduit.adapters.base import Adapter
from conduit.adapters.cc_switch import CCSwitch
from conduit.adapters.claude_code import ClaudeCode
from conduit.adapters.cline import Cline

ADAPTERS: dict[str, Adapter] = {
    "cc_switch": CCSwitch(),
    "claude_code": ClaudeCode(),
    "cline": Cline(),
}
