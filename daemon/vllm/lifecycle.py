"""vLLM's lifecycle as an enum with its allowed transitions, and the restart policy's arithmetic.

Lifecycles as enums (after httpx ``ClientState``): one comment per state, a clear error on an illegal transition.
``Lifecycle`` (the base of ``Supervisor``) holds the current state, when it was entered and the last 64 transitions, and lets callers wait
for a state; ``CrashWindow`` decides, after an unasked exit, between a restart after a doubling backoff and
giving up (restart mode ``never``, or more than ``max_restarts`` crashes inside ``window_s``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import deque

from conduit.daemon.config.vllm import RestartPolicy
from conduit.daemon.vllm.diagnose import Diagnosis
from conduit.errors import ConduitError

log = logging.getLogger("conduit.daemon.vllm.supervisor")


class VllmState(enum.Enum):
    """Where the supervised vLLM is in its life (httpx ``ClientState`` style: one comment per state)."""

    STOPPED = "stopped"  # no vLLM process of ours exists, and none is wanted
    STARTING = "starting"  # launched; waiting for /health 200 and /v1/models listing the served name
    READY = "ready"  # serving: /health 200 and the served name listed
    UNHEALTHY = "unhealthy"  # the process lives but /health fails (an engine death shows 503 before the exit)
    RESTARTING = "restarting"  # died unasked (or stayed unhealthy): group cleaned up, waiting the backoff
    FAILED = "failed"  # gave up: a diagnosed start-up failure, the crash-loop limit, or restart mode "never"
    STOPPING = "stopping"  # SIGTERM sent to the group; then grace, SIGKILL, and the check that nothing is left


S = VllmState
_ALLOWED: dict[VllmState, frozenset[VllmState]] = {
    S.STOPPED: frozenset({S.STARTING, S.READY, S.FAILED}),  # READY: adopting a server an earlier agent launched
    S.STARTING: frozenset({S.READY, S.FAILED, S.RESTARTING, S.STOPPING}),
    S.READY: frozenset({S.UNHEALTHY, S.RESTARTING, S.FAILED, S.STOPPING}),
    S.UNHEALTHY: frozenset({S.READY, S.RESTARTING, S.FAILED, S.STOPPING}),
    S.RESTARTING: frozenset({S.STARTING, S.FAILED, S.STOPPING}),
    S.FAILED: frozenset({S.STARTING, S.STOPPING}),
    S.STOPPING: frozenset({S.STOPPED, S.STARTING, S.FAILED}),  # STARTING: the second half of a restart
}
#: States with a process group that a changed launch setting has to replace.
ACTIVE = (S.STARTING, S.READY, S.UNHEALTHY, S.RESTARTING)

#: Start-up failures that a retry cannot fix (configuration or memory); kept for callers that classify.
DETERMINISTIC = frozenset({
    "unknown_argument", "invalid_argument", "model_not_found", "weights_not_found", "tokenizer_not_found",
    "max_model_len_too_long", "kv_cache_none", "kv_cache_max_len", "gpu_memory", "gpu_memory_changed",
    "port_in_use", "cuda_oom", "launch_error",
})
#: Exits before ``ready`` that a relaunch can cure: vLLM picks its internal ports afresh on each launch.
#: Every other exit before ``ready`` goes to ``failed`` at once.
RETRY_AT_START = frozenset({"internal_port_in_use"})


class IllegalTransition(ConduitError):
    """A state change the lifecycle does not allow (a bug in the caller or the supervisor, never user input)."""


class Lifecycle:
    """The current state (``state``), since when (``since``, epoch s) and the last 64 ``(state, epoch_s)``
    (``history``); ``Supervisor`` is a Lifecycle driven by its messages."""

    #: how the log names this engine: ``vLLM`` (the supervised one), ``engine [engines.NAME]`` (an observer)
    label = "vLLM"

    def __init__(self) -> None:
        self.state = VllmState.STOPPED
        self.since = time.time()
        self.history: deque[tuple[str, float]] = deque([(self.state.value, self.since)], maxlen=64)
        self._changed = asyncio.Event()

    def _to(self, new: VllmState) -> None:
        """Enter ``new`` (nothing when already there) and wake every ``wait_for``.

        Raises:
            IllegalTransition: ``new`` is not allowed from the current state.
        """
        if new is self.state:
            return
        if new not in _ALLOWED[self.state]:
            raise IllegalTransition(
                f"vLLM supervisor: illegal transition {self.state.value} -> {new.value}",
                "this is a bug in conduit; please report it with `conduit vllm logs`",
            )
        log.info("%s %s -> %s", self.label, self.state.value, new.value)
        self.state = new
        self.since = time.time()
        self.history.append((new.value, self.since))
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, *states: VllmState, timeout_s: float) -> VllmState:
        """Wait until the state is one of ``states``; return it.

        Raises:
            TimeoutError: not reached within ``timeout_s`` seconds.
        """
        async with asyncio.timeout(timeout_s):
            while self.state not in states:
                ev = self._changed
                await ev.wait()
        return self.state


class CrashWindow:
    """The times of recent unasked exits, and what the restart policy makes of the next one."""

    def __init__(self) -> None:
        self._times: deque[float] = deque()

    def clear(self) -> None:
        """Forget the history (a person started or restarted vLLM on purpose)."""
        self._times.clear()

    def record(self, policy: RestartPolicy, now: float | None = None) -> int:
        """Count one crash at ``now`` (time.monotonic()); returns the crashes inside ``policy.window_s``."""
        now = time.monotonic() if now is None else now
        self._times.append(now)
        while self._times and now - self._times[0] > policy.window_s:
            self._times.popleft()
        return len(self._times)

    @staticmethod
    def give_up(policy: RestartPolicy, n: int, d: Diagnosis) -> Diagnosis | None:
        """The failure to end in after the ``n``-th crash ``d``, or None to restart."""
        if policy.mode == "never":
            return Diagnosis(d.kind, d.reason, "restart policy is `never`: run `conduit vllm start`")
        if n > policy.max_restarts:
            fix = d.fix if d.kind != "crashed" else "read `conduit vllm logs`, fix the cause, then `conduit vllm start`"
            return Diagnosis("crash_loop", f"crash loop: {n} crashes within {policy.window_s:g} s; last: {d.reason}", fix)
        return None

    @staticmethod
    def backoff_s(policy: RestartPolicy, n: int) -> float:
        """Seconds before restart ``n``: ``backoff_initial_s x 2^(n-1)``, at most ``backoff_max_s``."""
        return float(min(policy.backoff_initial_s * 2 ** (n - 1), policy.backoff_max_s))
