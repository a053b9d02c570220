"""vLLM's log file: ``state_dir()/vllm/vllm.log``, rotated at each launch, copied and truncated when big.

The child writes the file itself (``open_for_child``: ``O_APPEND``), so rotation while it runs
is *copytruncate*: copy to ``vllm.log.1`` and truncate in place; the child's next write lands at offset 0.
At a launch the files simply move up (``vllm.log`` -> ``vllm.log.1`` -> ... -> ``vllm.log.<backups>``).

Every text taken from the log to be shown elsewhere (a failure's ``log_tail``, its reason, the KV cache line)
goes through ``mask_key_flags``: a launcher that echoes its command line or environment prints keys in flag
form (``--api-key X``, ``api_key=X``, ``VLLM_API_KEY=X``, ``Authorization: Bearer X``), and those values are
masked whether or not the key is one conduit knows (the known ones are also masked by the caller's
``conduit.redact.Redactor``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conduit.daemon.vllm.diagnose import find_kv_cache_line

#: How much of the log's end a failure report reads, bytes.
LOG_TAIL_BYTES = 64 * 1024

@dataclass(frozen=True)
class VllmLog:
    """One launch's log file and its numbered backups.

    Attributes:
        path: ``<state>/vllm/vllm.log``; earlier launches are ``vllm.log.1``, ``vllm.log.2``...
        backups: how many numbered files are kept (``[vllm].log_backups``).
        max_bytes: past this size the running log is copied and truncated (``[vllm].log_max_bytes``).
    """

    path: Path
    backups: int
    max_bytes: int

    def _shift_backups(self) -> None:
        """``vllm.log.{n-1}`` -> ``vllm.log.{n}`` ... ``vllm.log.1`` -> ``vllm.log.2`` (the oldest is replaced)."""
        for i in range(self.backups - 1, 0, -1):
            src = self.path.with_name(f"vllm.log.{i}")
            if src.exists():
                src.replace(self.path.with_name(f"vllm.log.{i + 1}"))

    def rotate(self) -> None:
        """Before a launch: move every file one number up, so the new launch starts an empty ``vllm.log``."""
        self._shift_backups()
        if self.path.exists():
            self.path.replace(self.path.with_name("vllm.log.1"))

    def open_for_child(self) -> int:
        """A write-only ``O_APPEND`` descriptor of the log (created 0600) for the child's stdout and stderr;
        the caller closes it once the child has started.

        Raises:
            OSError: the file cannot be opened.
        """
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def truncate_if_big(self) -> None:
        """copytruncate past ``max_bytes``: the child keeps writing (O_APPEND) to the same file, now from 0.
        OS errors are ignored (the next check tries again)."""
        try:
            if self.path.stat().st_size <= self.max_bytes:
                return
            self._shift_backups()
            shutil.copyfile(self.path, self.path.with_name("vllm.log.1"))
            os.truncate(self.path, 0)
        except OSError:
            pass

    def tail(self, nbytes: int = LOG_TAIL_BYTES) -> str:
        """The last ``nbytes`` of the log as text (undecodable bytes replaced); empty when there is no log."""
        try:
            with open(self.path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - nbytes))
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def kv_cache(self) -> dict[str, Any] | None:
        """vLLM's ``KV cache size: N tokens`` line: ``{tokens, line, line_number, log_path}``, or None."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        found = find_kv_cache_line(text)
        if not found:
            return None
        lineno, line, tokens = found
        return {"tokens": tokens, "line": line, "line_number": lineno, "log_path": str(self.path)}
