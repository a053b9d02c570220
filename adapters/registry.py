"""The one explicit, sorted registry of adapters.

Its keys are the valid ``[tools.<name>]`` names in the profile; the sync engine, ``conduit doctor``,
``conduit init`` discovery and the test suite (the variables it clears, the OpenAI field cases) all iterate
over it, so adding a tool is one adapter module and one line here (docs/adding-a-tool.md).

Each line names the adapter's module and class; the module is imported, and the adapter built, the first time
its entry is read (``ADAPTERS["codex"]``, or iterating the values). The names alone (``in``, ``list(ADAPTERS)``)
import nothing, so ``conduit sync`` of a profile with one tool loads that one adapter's module (its file
formats, its pydantic ``Options`` model) and not the other seven (tests/cli/test_cli_start.py). Typed as
``Mapping[str, Adapter]``; mypy checks every class against the ``Adapter`` protocol through ``_CHECKED`` below.

Test hook: the mapping is one object shared by every importer, so a test registers a throwaway adapter
with ``monkeypatch.setitem(registry.ADAPTERS, "name", adapter)`` (undone when the test ends) and every part of
conduit sees it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING

from conduit.adapters.base import Adapter

_TABLE: dict[str, str] = {
    "aider": "aider:Aider",
    "cc_switch": "cc_switch:CCSwitch",
    "claude_code": "claude_code:ClaudeCode",
    "cline": "cline:Cline",
    "codex": "codex:Codex",
    "continue": "continue_dev:Continue",
    "copilot": "copilot:Copilot",
    "crush": "crush:Crush",
    "droid": "droid:Droid",
    "gemini": "gemini:Gemini",
    "goose": "goose:Goose",
    "hermes": "hermes:Hermes",
    "kilo": "kilo:Kilo",
    "kimi": "kimi:Kimi",
    "openclaw": "openclaw:OpenClaw",
    "opencode": "opencode:OpenCode",
    "pi": "pi:Pi",
    "qwen": "qwen:Qwen",
    "roo": "roo:Roo",
    "vibe": "vibe:Vibe",
    "zed": "zed:Zed",
}
"""name -> ``module:Class`` under ``conduit.adapters``, sorted by name."""

if TYPE_CHECKING:  # the static twin of _TABLE: mypy checks each class against the Protocol (nothing at run time)
    from conduit.adapters.aider import Aider
    from conduit.adapters.cc_switch import CCSwitch
    from conduit.adapters.claude_code import ClaudeCode
    from conduit.adapters.cline import Cline
    from conduit.adapters.codex import Codex
    from conduit.adapters.continue_dev import Continue
    from conduit.adapters.copilot import Copilot
    from conduit.adapters.crush import Crush
    from conduit.adapters.droid import Droid
    from conduit.adapters.gemini import Gemini
    from conduit.adapters.goose import Goose
    from conduit.adapters.hermes import Hermes
    from conduit.adapters.kilo import Kilo
    from conduit.adapters.kimi import Kimi
    from conduit.adapters.openclaw import OpenClaw
    from conduit.adapters.opencode import OpenCode
    from conduit.adapters.pi import Pi
    from conduit.adapters.qwen import Qwen
    from conduit.adapters.roo import Roo
    from conduit.adapters.vibe import Vibe
    from conduit.adapters.zed import Zed

    _CHECKED: Mapping[str, Adapter] = {
        "aider": Aider(), "cc_switch": CCSwitch(), "claude_code": ClaudeCode(), "cline": Cline(), "codex": Codex(),
        "continue": Continue(), "copilot": Copilot(), "crush": Crush(),
        "droid": Droid(), "gemini": Gemini(), "goose": Goose(), "hermes": Hermes(),
        "kilo": Kilo(), "kimi": Kimi(), "openclaw": OpenClaw(), "opencode": OpenCode(),
        "pi": Pi(), "qwen": Qwen(), "roo": Roo(), "vibe": Vibe(), "zed": Zed(),
    }


class _Registry(MutableMapping[str, Adapter]):
    """``name -> Adapter`` in ``_TABLE``'s order; an entry's module is imported when the entry is first read.

    Entries set later (the test hook) come after the table's, and deleting one removes it; both act on this
    one shared object. Raises KeyError for a name it does not hold, like a dict.
    """

    def __init__(self, table: Mapping[str, str]) -> None:
        self._specs: dict[str, str | Adapter] = dict(table)

    def __getitem__(self, name: str) -> Adapter:
        spec = self._specs[name]
        if isinstance(spec, str):
            module, cls = spec.split(":")
            spec = self._specs[name] = getattr(importlib.import_module(f"conduit.adapters.{module}"), cls)()
        return spec

    def __setitem__(self, name: str, adapter: Adapter) -> None:
        self._specs[name] = adapter

    def __delitem__(self, name: str) -> None:
        del self._specs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __repr__(self) -> str:
        return f"ADAPTERS({', '.join(self._specs)})"


ADAPTERS: Mapping[str, Adapter] = _Registry(_TABLE)


REQUIRED: tuple[str, ...] = ("one_shot", "package", "competing", "verify_files", "tool_dirs", "base_forms",
                             "model_routes", "fresh_options")
"""The declarations every adapter must make itself (``base.Adapter``: none has a default in ``AdapterDefaults``;
a tool without a command line declares ``one_shot = None``, ``package = None`` and empty values, never omits)."""


def missing_declarations(adapter: object) -> list[str]:
    """The names in ``REQUIRED`` that ``adapter`` lacks, in that order (``[]`` when it declares them all).

    The tables built from the registry (``conduit verify``'s, the real-tool tier's) skip or fail such a tool at run
    time, naming these, and never at import.
    """
    return [name for name in REQUIRED if not hasattr(adapter, name)]


def declared_env_vars() -> tuple[str, ...]:
    """Every environment variable any registered adapter reads (``Adapter.env_vars``), sorted, no repeats."""
    return tuple(sorted({var for adapter in ADAPTERS.values() for var in adapter.env_vars}))
