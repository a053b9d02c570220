"""The root cause of a failed vLLM start: the first specific error of the process that failed, not the last
generic line of the log.

vLLM 0.32 prints the engine's own error first and then wraps it: the engine core process
(``(EngineCore pid=N)``) prints its traceback and ``ValueError: ...``, then the API server
(``(APIServer pid=M)``) raises ``RuntimeError: Engine core initialization failed. See root cause above.
Failed core proc(s): {...}`` (``vllm/v1/engine/utils.py``, ``wait_for_engine_startup``). pydantic validation
of vLLM's config dataclasses prints ``N validation error(s) for ModelConfig`` and the message on a later line
as ``  Value error, <message> [type=value_error, ...]``.

Rules, in order: wrapper lines are skipped (``WRAPPERS``); a ``validation error(s) for X`` header is
replaced by the ``Value error, ...`` (or first field error) line after it; among the remaining error lines an
engine-core or worker line wins over an API-server line; within a process the first error wins (a later one
is usually the same failure re-raised).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: Lines that only say "the real error is elsewhere" (vLLM 0.32 ``v1/engine/utils.py``, ``v1/engine/core.py``,
#: ``entrypoints/cli/serve.py``), and Python's traceback chaining lines.
WRAPPERS = (
    "See root cause above",
    "Failed core proc(s)",
    "EngineCore failed to start",
    "Engine core initialization failed",
    "Frontend process failed during engine core initialization",
    "The above exception was the direct cause of the following exception",
    "During handling of the above exception, another exception occurred",
    "Traceback (most recent call last)",
)
_PROC = re.compile(r"^\((\w+)(?: pid=\d+)?\)\s*")
_LOGHDR = re.compile(r"^(?:[A-Z]+ \d\d-\d\d [\d:.]+ \[[^\]]*\]\s*)")
_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Exit))(?::\s*(.*))?$")
_VALIDATION = re.compile(r"\d+ validation errors? for (\w+)")
_VALUE_ERR = re.compile(r"^\s*(?:Value|Assertion) error, (.*?)(?:\s*\[type=[^\]]*\])?$")
_WORKERS = ("EngineCore", "Worker", "EngineCore_DP0", "VllmWorker", "RayWorkerWrapper")


@dataclass(frozen=True)
class RootCause:
    """The error a failed start comes down to.

    Attributes:
        exception: the exception class name (``ValueError``, ``ValidationError``...).
        message: its message (for a validation error, the ``Value error, ...`` text that follows the header).
        process: the ``(Name pid=N)`` prefix's name (``EngineCore``, ``APIServer``) or ``""`` when none.
        line: the message line as printed, without the process and log prefixes.
    """

    exception: str
    message: str
    process: str
    line: str

    @property
    def text(self) -> str:
        """``Exception: message``, one line."""
        return f"{self.exception}: {self.message}" if self.message else self.exception


def _split(line: str) -> tuple[str, str]:
    """``(process name, line without prefixes)``."""
    m = _PROC.match(line)
    proc = m.group(1) if m else ""
    rest = line[m.end():] if m else line
    return proc, _LOGHDR.sub("", rest).rstrip()


def _is_wrapper(s: str) -> bool:
    return any(w in s for w in WRAPPERS)


def _validation_message(lines: Sequence[tuple[str, str]], i: int) -> str | None:
    """The message a ``validation error for X`` header at ``i`` stands for (next few lines)."""
    for _, s in lines[i + 1:i + 8]:
        m = _VALUE_ERR.match(s)
        if m:
            return m.group(1).strip()
    for _, s in lines[i + 1:i + 4]:  # a plain field error: "field\n  Input should be ..."
        if s.strip().startswith(("Input should", "Field required", "Extra inputs")):
            return s.strip().split(" [type=")[0]
    return None


def _candidates(lines: Sequence[tuple[str, str]]) -> list[RootCause]:
    out = []
    for i, (proc, s) in enumerate(lines):
        if _is_wrapper(s) or s.startswith(("File ", "  ")):
            continue
        m = _ERROR.match(s.strip())
        if not m:
            continue
        exc, msg = m.group(1), (m.group(2) or "").strip()
        v = _VALIDATION.search(s)
        if v:
            msg = _validation_message(lines, i) or msg
        if not msg and exc in ("SystemExit", "KeyboardInterrupt"):
            continue
        out.append(RootCause(exc, msg, proc, s.strip()))
    return out


def root_cause(log_text: str) -> RootCause | None:
    """The root cause of the failure ``log_text`` records (rules in the module docstring), or None when the log
    holds no error line other than wrappers."""
    lines = [_split(ln) for ln in log_text.splitlines()]
    found = _candidates(lines)
    if not found:
        return None
    workers = [c for c in found if c.process.startswith(_WORKERS)]
    return (workers or found)[0]


__all__ = ["WRAPPERS", "RootCause", "root_cause"]
