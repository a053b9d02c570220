"""What the supervisor reports about vLLM -- the last failure, warnings, the KV cache line -- always masked.

A launcher can print its key (its command line, its environment, an ``Authorization`` header); the log tail
of a failure used to be served as it was. Every text that ``Reports`` keeps passes through ``mask``: the
values of key-like flags (``conduit.redact.mask_key_flags``) and then every key its
``conduit.redact.Redactor`` knows (``[vllm].api_key``, taught at each settings change; the agent's redactor
also holds the channel keys). The masking happens when a text is recorded, so no snapshot holds a key.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.diagnose import Diagnosis
from conduit.daemon.vllm.logs import VllmLog
from conduit.redact import Redactor, mask_key_flags

log = logging.getLogger("conduit.daemon.vllm.supervisor")

#: How many lines of the log's end a failure keeps.
TAIL_LINES = 40
#: How many warnings the snapshot keeps.
WARNINGS_KEPT = 20


class Reports:
    """The reported texts of one supervisor (a base class of ``Supervisor``).

    Args:
        redactor: the secrets to mask (default: a new one).

    Attributes: ``last_failure`` (``{kind, reason, fix, log_tail, exit_code, at}`` or None), ``warnings``
    (the last ``WARNINGS_KEPT``), ``kv_cache`` (``{tokens, line, line_number, log_path}`` or None).
    """

    def __init__(self, redactor: Redactor | None = None) -> None:
        self.redactor = redactor if redactor is not None else Redactor()
        self.last_failure: dict[str, Any] | None = None
        self.warnings: list[str] = []
        self.kv_cache: dict[str, Any] | None = None

    def mask(self, text: str) -> str:
        """``text`` with key-like flag values and every key the redactor knows masked."""
        return self.redactor(mask_key_flags(text))

    def teach(self, settings: VllmSettings) -> None:
        """Remember ``settings.api_key`` as a secret to mask."""
        self.redactor.add([settings.api_key.get_secret_value()] if settings.api_key else [])

    def warnings_push(self, text: str) -> None:
        """Add a warning to the snapshot (the last ``WARNINGS_KEPT`` are kept), masked."""
        self.warnings.append(self.mask(text))
        del self.warnings[:-WARNINGS_KEPT]

    def record_failure(self, d: Diagnosis, exit_code: int | None, tail: str, quiet: bool = False) -> None:
        """Keep ``d`` with the last ``TAIL_LINES`` lines of ``tail`` (the log's end) as ``last_failure``,
        every text masked, and log its kind and reason (not when ``quiet``: a fuller word follows)."""
        lines = tail.splitlines()[-TAIL_LINES:]
        failure = {**d.to_dict(), "exit_code": exit_code, "log_tail": "\n".join(lines), "at": time.time()}
        self.last_failure = {k: self.mask(v) if isinstance(v, str) else v for k, v in failure.items()}
        if not quiet:
            log.warning("%s %s: %s", getattr(self, "label", "vLLM"), self.last_failure["kind"],
                        self.last_failure["reason"])

    def note_left(self, left: list[str]) -> None:
        """Warn about processes that outlived SIGKILL (``"pid command line"`` strings)."""
        if left:
            self.warnings_push(f"processes of the vLLM launch still alive after SIGKILL: {', '.join(left)}")

    def read_kv_cache_line(self, vlog: VllmLog) -> None:
        """Take vLLM's ``KV cache size`` line from ``vlog`` when it has one (masked)."""
        found = vlog.kv_cache()
        if found:
            self.kv_cache = {**found, "line": self.mask(found["line"])}


__all__ = ["TAIL_LINES", "WARNINGS_KEPT", "Reports"]
