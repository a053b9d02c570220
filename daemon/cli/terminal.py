"""The terminal side of ``conduit status --watch``: keys one at a time, a wait that wakes on a key or a signal.

Standard library only (``termios``, ``tty``, ``select``, ``signal``). ``tty.setcbreak`` turns off canonical
mode and echo but keeps ``ISIG``, so Ctrl-C still raises ``KeyboardInterrupt``; the saved attributes are put back
with ``tcsetattr`` on the way out, also on an exception. Signals reach the wait through
``signal.set_wakeup_fd`` (the interpreter writes a byte to a pipe for every signal), so a terminal resize
(SIGWINCH) ends the wait at once instead of after the rest of the second; SIGTERM raises ``SystemExit(143)`` so
the context managers above restore the screen and the terminal before the process exits.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import termios
import threading
import time
import tty
from types import TracebackType
from typing import Any


class Keys:
    """stdin in cbreak mode (when it is a terminal) and a wake-up pipe for signals (SIGWINCH redraws at once).

    Use as a context manager; ``wait(timeout_s)`` blocks in ``select`` for at most ``timeout_s`` seconds and
    returns ``"quit"`` (``q`` or ``Q`` was pressed), ``"redraw"`` (a signal arrived) or None (time is up).
    The terminal's attributes, the wake-up fd and the signal handlers are restored on exit.
    """

    def __init__(self, stream: Any = None) -> None:
        stream = sys.stdin if stream is None else stream
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            fd = -1
        self.fd = fd if fd >= 0 and os.isatty(fd) else -1
        self._saved: list[Any] | None = None
        self._pipe: tuple[int, int] | None = None
        self._old_wakeup = -1
        self._old_handlers: dict[int, Any] = {}

    def __enter__(self) -> Keys:
        if self.fd >= 0:
            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd, termios.TCSANOW)
        try:
            self._watch_signals()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _watch_signals(self) -> None:
        if not _main_thread():  # handlers and wake-ups need the main thread
            return
        r, w = os.pipe()
        self._pipe = (r, w)
        os.set_blocking(w, False)
        self._old_wakeup = signal.set_wakeup_fd(w)
        self._old_handlers[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, lambda *_: None)
        self._old_handlers[signal.SIGTERM] = signal.signal(signal.SIGTERM, _exit_on_sigterm)

    def wait(self, timeout_s: float) -> str | None:
        """Wait up to ``timeout_s`` seconds for a key or a signal; see the class docstring."""
        fds = [f for f in (self.fd, self._pipe[0] if self._pipe else -1) if f >= 0]
        if not fds:
            time.sleep(max(0.0, timeout_s))
            return None
        ready, _, _ = select.select(fds, [], [], max(0.0, timeout_s))
        result = None
        if self._pipe and self._pipe[0] in ready:
            os.read(self._pipe[0], 512)
            result = "redraw"
        if self.fd in ready:
            data = os.read(self.fd, 64)
            if b"q" in data or b"Q" in data:
                return "quit"
        return result

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        if self._pipe is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            os.close(self._pipe[0])
            os.close(self._pipe[1])
            self._pipe = None


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the context managers, so the terminal is restored


__all__ = ["Keys"]
