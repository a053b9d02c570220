"""What adapters report without writing anything: doctor's facts, init's proposal, and the client's view.

- ``ToolFacts`` (from ``Adapter.inspect``): read-only facts ``conduit doctor`` renders: one summary line for
  its table, the tool-specific details for ``--json``, and per setting the value the tool will really use and
  why (``Effective``).
- ``Proposal`` (from ``Adapter.discover``): the gateway a tool is configured for today, for ``conduit init``.
- ``ClientView`` (from ``Adapter.client_view``): what an OpenAI-protocol tool's client will send, read back from
  its files; the shared field-case tests (tests/adapters/test_openai_tools_cases.py) iterate over it.

Keys are held only where a caller must move them (``Proposal.key``, ``ClientView.key``: not in ``repr``);
everything in ``ToolFacts`` is already masked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Protocol_ = Literal["openai", "anthropic", "gemini"]


@dataclass(frozen=True)
class Effective:
    """Which value a tool will use for one setting, where it comes from, and whether that beats conduit.

    Attributes:
        value: the value (a key as its fingerprint), or None when set nowhere.
        source: the file or ``shell environment`` it comes from, or None.
        overrides_conduit: a layer above the file conduit writes decides (doctor warns).
        why: the reason, in words (``"a trusted project's .codex/config.toml ranks above ~/.codex"``).
    """

    value: Any
    source: str | None
    overrides_conduit: bool
    why: str

    def as_dict(self) -> dict[str, Any]:
        """``{"value", "source", "overrides_conduit", "why"}`` as in ``conduit doctor --json``."""
        return {"value": self.value, "source": self.source, "overrides_conduit": self.overrides_conduit,
                "why": self.why}


@dataclass(frozen=True)
class ToolFacts:
    """Read-only facts about one tool for ``conduit doctor`` (keys masked).

    Attributes:
        summary: one line for doctor's table (file found or missing, version, store...).
        details: the tool's own facts, JSON-ready (``file``, ``exists``, ``parse_error``, ``version``...).
        effective: per setting, the value the tool will really use; None for a tool that reports none.
        warnings: problems a person should fix that are not overrides (both auth variables set...).
    """

    summary: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)
    effective: Mapping[str, Effective] | None = None
    warnings: tuple[str, ...] = ()

    @classmethod
    def of_file(cls, path: Path, error: str | None, owned: Mapping[str, Any], version: str | None,
                effective: Mapping[str, Effective] | None = None, **extra: Any) -> ToolFacts:
        """The facts of a tool set up by one file: ``file``, ``exists``, ``parse_error`` (``error``), ``owned``,
        ``version`` and ``extra`` details, summarized as the file found or missing."""
        details = {"file": str(path), "exists": path.exists(), "parse_error": error, "owned": owned,
                   "version": version, **extra}
        return cls(summary=f"{path} ({'found' if path.exists() else 'missing'})", details=details, effective=effective)

    def as_dict(self) -> dict[str, Any]:
        """The facts as ``conduit doctor --json`` shows them: the details, plus ``effective`` when reported."""
        out = dict(self.details)
        if self.effective is not None:
            out["effective"] = {name: e.as_dict() for name, e in self.effective.items()}
        return out

    def override_warnings(self, tool: str) -> list[str]:
        """One line per setting a higher layer decides, then ``warnings``, each prefixed with ``tool``."""
        out = [f"{tool}: {name} = {e.value} comes from {e.source}: {e.why}"
               for name, e in (self.effective or {}).items() if e.overrides_conduit]
        return out + [f"{tool}: {w}" for w in self.warnings]


@dataclass(frozen=True)
class Proposal:
    """A gateway a tool is already configured for, as ``conduit init`` proposes a profile from it.

    Attributes:
        tool: the registry name.
        base_url: the base URL as the tool holds it (init normalizes it to a channel root).
        protocol: the wire protocol the tool speaks to it.
        model: the model the tool uses, or None.
        key: the key the tool holds (moved into conduit's secrets file, never shown), or None.
    """

    tool: str
    base_url: str
    protocol: Protocol_
    model: str | None
    key: str | None = field(repr=False)


@dataclass(frozen=True)
class ClientView:
    """What an OpenAI-protocol tool's client will send, read back from the files the tool reads.

    Attributes:
        base_url: the base URL the client appends ``endpoint`` to.
        key: the key it sends as ``Authorization: Bearer`` (resolved from a referenced file or .env).
        model: the model id it requests.
        endpoint: the path it appends: ``chat/completions`` or ``responses``.
        key_files: the files that hold the key (created 0600).
        key_env: the environment variable the client reads its key from instead of its files (Zed: conduit
            delivers no key to the tool), or None when the key is in ``key_files``.
    """

    base_url: str
    key: str = field(repr=False)
    model: str
    endpoint: str = "chat/completions"
    key_files: tuple[Path, ...] = ()
    key_env: str | None = None
