"""The agent's logging: every line masked by the agent's ``Redactor``, malformed requests summarised, not traced.

- ``RedactFilter`` (on the one stderr handler): the message and its traceback folded together and passed through
  the agent's ``conduit.redact.Redactor`` (every key the profile resolves: channel keys and ``[vllm].api_key``),
  so a key reaches the log only as its fingerprint, whichever library logged it.
- ``MalformedRequests`` (on aiohttp's ``aiohttp.server`` logger): aiohttp logs one traceback per request its
  parser refuses (``HttpProcessingError``: a bad request line, a bad header, a line over 8190 bytes); 2,000
  such requests made 1.3 MB of log in a second. Instead the first one in a quiet period is logged as one line
  without a traceback, the next ones are counted, and one summary line per ``interval_s`` says how many were
  ignored and what the last one was (``ignored 1999 malformed requests in the last 10 s; last: ...``).
  ``flush()`` writes a pending summary (the agent calls it every interval and when it stops). Errors of the
  agent's own handlers are not counted: they keep their traceback.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable

from aiohttp.http_exceptions import HttpProcessingError

from conduit.redact import Redactor, mask_key_flags
from conduit.text import log_safe

log = logging.getLogger("conduit.agent")

#: Seconds between two summary lines about malformed requests.
MALFORMED_INTERVAL_S = 10.0
#: How much of the last malformed request's description a summary quotes, characters.
DESCRIPTION_MAX = 160


class RedactFilter(logging.Filter):
    """Mask every secret ``redactor`` knows in a record's message and traceback (folded into the message)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        """Replace the record's message by its redacted text (traceback included); keeps every record."""
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if record.stack_info:
            msg += "\n" + record.stack_info
            record.stack_info = None
        record.msg, record.args = log_safe(self.redactor(msg)), None  # no raw escapes, no forged lines
        return True


def describe_malformed(exc: HttpProcessingError) -> str:
    """One line about a refused request: ``400 Bad status line 'Invalid method encountered'``, at most
    ``DESCRIPTION_MAX`` characters, values of key-like headers masked (``mask_key_flags``)."""
    first = (str(exc.message).strip().splitlines() or [""])[0]
    text = mask_key_flags(f"{exc.code} {first}".strip())
    return text if len(text) <= DESCRIPTION_MAX else text[: DESCRIPTION_MAX - 3] + "..."


class MalformedRequests(logging.Filter):
    """Rate-limit aiohttp's "Error handling request" records caused by malformed requests (see the module).

    Args:
        interval_s: seconds between summary lines.
        clock: the time source (``time.monotonic``), seconds.
    """

    def __init__(self, interval_s: float = MALFORMED_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._window: float | None = None  # when the current period began; None: quiet
        self._count = 0  # ignored since the last line
        self._last = ""

    def _summary(self, count: int, last: str) -> str:
        noun = "request" if count == 1 else "requests"
        return f"ignored {count} malformed {noun} in the last {self.interval_s:g} s; last: {last}"

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a malformed request that is only counted; the record rewritten as one line (no
        traceback) when it is the first of a period or closes one; other records pass unchanged."""
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        desc = describe_malformed(exc)
        now = self._clock()
        with self._lock:
            if self._window is None:
                self._window, self._count = now, 0
                text = f"ignored a malformed request: {desc} (more are counted, one line per {self.interval_s:g} s)"
            elif now - self._window >= self.interval_s:
                text = self._summary(self._count + 1, desc)
                self._window, self._count = now, 0
            else:
                self._count += 1
                self._last = desc
                return False
        record.msg, record.args, record.exc_info, record.exc_text = text, None, None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True

    def flush(self, force: bool = False) -> None:
        """Log the pending summary when a period is over (or ``force``); a period with nothing ignored ends
        quietly, so the next malformed request is logged at once again."""
        with self._lock:
            if self._window is None or (not force and self._clock() - self._window < self.interval_s):
                return
            count, last = self._count, self._last
            self._window = None if count == 0 else self._clock()
            self._count = 0
        if count:
            log.warning("%s", self._summary(count, last))


def setup_logging(redactor: Redactor, level: str = "INFO") -> MalformedRequests:
    """One stderr handler on the root logger (``<time> conduit-agent <LEVEL> <message>``), masked by
    ``redactor``; aiohttp's malformed-request records rate-limited; httpx kept to its warnings (it logs every
    health and metrics poll at INFO). Replaces handlers an earlier call installed. Returns the limiter (call
    its ``flush`` periodically)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s conduit-agent %(levelname)s %(message)s"))
    handler.addFilter(RedactFilter(redactor))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server = logging.getLogger("aiohttp.server")
    for f in [f for f in server.filters if isinstance(f, MalformedRequests)]:
        server.removeFilter(f)
    limiter = MalformedRequests()
    server.addFilter(limiter)
    return limiter


__all__ = ["MALFORMED_INTERVAL_S", "MalformedRequests", "RedactFilter", "describe_malformed", "setup_logging"]
