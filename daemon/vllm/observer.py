"""Observe an engine someone else runs (``[vllm] manage = false``): a vLLM in docker, under systemd, on another
box, or an Ollama. Nothing is launched, stopped or restarted; the engine is read over HTTP.

``Observer`` has the supervisor's face (``run``, ``snapshot``, ``state``, ``wait_for``, ``apply_settings``,
``aclose``, ``recovering``), so the agent's status, live view, ``conduit wait``, the fallback judge and the
catalog treat an observed engine as a supervised one. ``start``/``stop``/``restart`` raise a ``ConduitError``
naming ``manage = false`` (the socket answers it as a 409 ``vllm_refused``).

Every ``health_interval_s`` it looks at the engine:

- vLLM: ``/health`` 200 and ``/v1/models`` listing the served name (``monitor.Monitor.check_ready``), then
  ``/metrics`` every ``metrics_interval_s`` (``monitor.Monitor.scrape``: KV use, queue, latencies);
- Ollama: ``/api/version`` 200, ``/v1/models`` listing the model (tag ``latest`` implied), ``/api/ps`` for the
  loaded models, and the served model's window: ``/api/ps``'s ``context_length`` when loaded, else
  ``/api/show`` (``conduit.daemon.vllm.ollama``); the window goes to ``on_windows`` (the agent puts it in the
  catalog, so tools get it).

The kind is ``[vllm].engine``, else detected once the engine answers (``/api/version`` with a version: Ollama).

States: ``ready`` while it answers; ``unhealthy`` once it stops answering (the fallback judge counts that as
down); ``failed`` when it has not answered for ``unhealthy_restart_s``, or was not answering when observation
began; back to ``ready`` (through ``starting``) when it answers again. When it stops answering, the
``log_command`` (if any) is run once, bounded (``LOG_TIMEOUT_S``, ``LOG_MAX_BYTES``), and its output is
diagnosed with ``diagnose.diagnose``: the same causes a supervised launch is explained with.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import httpx

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm import ollama
from conduit.daemon.vllm.diagnose import Diagnosis, diagnose
from conduit.daemon.vllm.lifecycle import Lifecycle, VllmState
from conduit.daemon.vllm.metrics import MetricsTracker
from conduit.daemon.vllm.monitor import MODELS_MAX_BYTES, Monitor, _client, _get
from conduit.daemon.vllm.reports import Reports
from conduit.errors import ConduitError
from conduit.redact import Redactor, mask_argv
from conduit.text import one_line

log = logging.getLogger("conduit.daemon.vllm.observer")

LOG_TIMEOUT_S = 10.0
"""The ``log_command`` is killed after this long, seconds (what it printed so far is used)."""
LOG_MAX_BYTES = 1 << 20
"""At most the last 1 MiB of the ``log_command``'s output is kept."""
SHOW_MAX_BYTES = 4 << 20
"""At most this much of an ``/api/show`` answer is read (it may hold the whole template and license)."""


async def read_log_command(argv: list[str], timeout_s: float = LOG_TIMEOUT_S,
                           max_bytes: int = LOG_MAX_BYTES) -> str:
    """Run ``argv`` (no shell, stdin closed, stderr with stdout) and return the end of its output: at most
    ``max_bytes`` bytes, decoded as UTF-8 with replacement; killed (with its process group) after ``timeout_s``
    seconds. A command that cannot start returns one line saying so. Never raises for the command's sake."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        return f"[conduit] cannot run log_command {argv[0]!r}: {exc.strerror or exc}"
    buf = bytearray()
    assert proc.stdout is not None

    async def drain() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            buf.extend(chunk)
            del buf[:-max_bytes]

    try:
        await asyncio.wait_for(drain(), timeout_s)
    except TimeoutError:
        pass
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError, ProcessLookupError):
            await asyncio.wait_for(proc.wait(), 2.0)
    return bytes(buf).decode("utf-8", "replace")


class Observer(Lifecycle, Reports):
    """Watches one engine that conduit does not run (see the module docstring). Asyncio only.

    Args:
        settings: the profile's ``[vllm]`` table, ``manage = false``.
        redactor: masks what the snapshot quotes (log tails, reasons), taught ``[vllm].api_key``.
        on_windows: called with ``{model id: context tokens}`` when an Ollama's window for the served model is
            learned or changes (the agent stores it in the catalog for the tools).
        table: the profile table it comes from, for hints (``[vllm]``, or ``[engines.NAME]``).
    """

    observes = True

    def __init__(self, settings: VllmSettings, *, redactor: Redactor | None = None,
                 on_windows: Callable[[dict[str, int]], None] | None = None, table: str = "[vllm]") -> None:
        Reports.__init__(self, redactor)
        Lifecycle.__init__(self)
        self.settings, self.table = settings, table
        if table != "[vllm]":  # side by side, the log must say which engine
            self.label = f"engine {table}"
        self.teach(settings)
        self.autostart = False
        self.recovering = True  # until the first look: the router takes no evidence before it
        self.restarts = 0
        self.version: str | None = None
        self.engine: str | None = settings.engine
        self.exit_seen_monotonic: float | None = None
        self.ollama: dict[str, Any] | None = None
        self._metrics = MetricsTracker()
        self._monitor = Monitor(lambda: self.settings, lambda ev: None, self._metrics, lambda: None)
        self._on_windows = on_windows
        self._windows: dict[str, int] = {}
        self._shown: dict[str, tuple[int | None, str]] = {}
        self._down_since: float | None = None
        self._next_metrics = 0.0
        self._running = False
        self._run_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ the supervisor's face
    async def run(self) -> None:
        """Look at the engine now and every ``health_interval_s`` until cancelled.

        Raises:
            ConduitError: this observer already runs.
        """
        if self._running:
            raise ConduitError("the engine observer is already running", "run one per agent")
        self._running, self._run_task = True, asyncio.current_task()
        try:
            async with _client() as client:
                while True:
                    try:
                        await self.look(client)
                    except Exception as exc:  # a bug must not end observation
                        log.exception("observing the engine failed")
                        self.warnings_push(f"internal error observing the engine: {exc!r}")
                    finally:
                        self.recovering = False
                    await asyncio.sleep(self.settings.health_interval_s)
        finally:
            self._running = False

    def _refuse(self, action: str) -> ConduitError:
        return ConduitError(
            f"cannot {action} the engine at {self.settings.base_url}: the profile's [vllm] has manage = false "
            "(conduit only observes an engine you run yourself)",
            f"{action} it the way you run it (docker, systemd...), or set manage = true for conduit to launch it")

    async def start(self) -> dict[str, Any]:
        """Refused. Raises: ConduitError naming ``manage = false``."""
        raise self._refuse("start")

    async def stop(self) -> dict[str, Any]:
        """Refused. Raises: ConduitError naming ``manage = false``."""
        raise self._refuse("stop")

    async def restart(self) -> dict[str, Any]:
        """Refused. Raises: ConduitError naming ``manage = false``."""
        raise self._refuse("restart")

    async def apply_settings(self, new: VllmSettings) -> bool:
        """Take new settings; never launches: returns False. A new URL (or kind) is another engine: logged, its
        figures and failure forgotten, the state back to ``starting`` (a fresh ``since``, no evidence for the
        fallback judge) until the next look."""
        if new.base_url != self.settings.base_url or new.engine != self.settings.engine:
            log.info("the observed engine changed: %s -> %s", self.settings.base_url, new.base_url)
            self.engine, self.version, self.ollama, self.last_failure = new.engine, None, None, None
            self._metrics.reset()
            self._shown.clear()
            self._down_since, self.recovering = None, True
            if self.state in (VllmState.READY, VllmState.UNHEALTHY):
                self._to(VllmState.STOPPING)
            if self.state is not VllmState.STARTING:
                self._to(VllmState.STARTING)
        self.settings = new
        self.teach(new)
        return False

    async def aclose(self, stop_vllm: bool) -> None:
        """Stop observing (``stop_vllm`` is ignored: the engine is not conduit's to stop)."""
        if self._run_task is not None and not self._run_task.done():
            self._run_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._run_task

    def pids(self) -> set[int]:
        """None known: the engine's processes are not conduit's (they may live in a container or elsewhere)."""
        return set()

    async def scrape_now(self) -> dict[str, Any] | None:
        """Scrape a vLLM's ``/metrics`` once now; None for an Ollama (it has none)."""
        return None if self.engine == "ollama" else await self._monitor.scrape()

    def snapshot(self) -> dict[str, Any]:
        """``Supervisor.snapshot``'s keys (``pid``, ``argv`` None: nothing launched) plus ``managed`` (False),
        ``engine`` (``vllm``, ``ollama`` or None before detection), ``log_command`` (masked) and ``ollama``
        (``{"version", "loaded": [...], "window": {"tokens", "source"}}`` for an Ollama, else None)."""
        m = self._metrics.last
        return {
            "state": self.state.value, "since": self.since, "pid": None, "pgid": None, "adopted": False,
            "restarts": 0, "last_failure": self.last_failure, "metrics": m,
            "served_model_name": self.settings.name, "base_url": self.settings.base_url,
            "warnings": list(self.warnings) + (list(m["warnings"]) if m else []),
            "version": self.version, "distribution": None, "argv": None, "log_path": None,
            "kv_cache": self.kv_cache, "history": [list(h) for h in self.history],
            "managed": False, "engine": self.engine,
            "log_command": mask_argv(self.settings.log_command) if self.settings.log_command else None,
            "ollama": self.ollama,
        }

    # ------------------------------------------------------------ looking
    async def look(self, client: httpx.AsyncClient) -> None:
        """One look at the engine: detect its kind (once), check it, read its figures, move the state."""
        if self.engine is None:
            self.engine = await self._detect(client)
        if self.engine == "ollama":
            ok, why = await self._look_ollama(client)
        else:
            ok, why = await self._monitor.check_ready(client)
            if not ok and why in _KEY_REFUSED:
                # /health answered: the engine is up, only its model list wants a key this table does not give;
                # "failed" would move the tools of a channel that works to the fallback
                ok = True
                text = (f"the engine at {self.settings.base_url} is up (/health) but {why}: its models are not "
                        "checked without its key")
                if text not in self.warnings:
                    self.warnings_push(text)
            if ok and time.monotonic() >= self._next_metrics:
                self._next_metrics = time.monotonic() + self.settings.metrics_interval_s
                await self._monitor.scrape(client)
                if self.version is None:
                    self.version = await self._json_field(client, "/version", "version")
        await self._judge(ok, why)

    async def _json_field(self, client: httpx.AsyncClient, path: str, key: str) -> str | None:
        """``GET base + path`` and the string at ``key`` of its JSON answer, or None."""
        try:
            r = await _get(client, self.settings.base_url + path, 65536)
            v = json.loads(r.body).get(key) if r.status == 200 else None
        except (httpx.HTTPError, OSError, ValueError, AttributeError, RecursionError):
            return None
        return one_line(v, 40) if isinstance(v, str) else None

    async def _detect(self, client: httpx.AsyncClient) -> str | None:
        """``ollama`` when ``/api/version`` answers a version, ``vllm`` when ``/health`` answers 200, else None
        (nothing answers yet: detected at a later look)."""
        version = await self._json_field(client, "/api/version", "version")
        if version is not None:
            self.version = version
            return "ollama"
        try:
            r = await _get(client, self.settings.base_url + "/health", 0)
        except (httpx.HTTPError, OSError):
            return None
        return "vllm" if r.status == 200 else None

    async def _ollama_json(self, client: httpx.AsyncClient, method: str, path: str, max_bytes: int,
                           body: Any = None) -> Any:
        """One bounded request to the Ollama, its JSON answer. Raises httpx.HTTPError, OSError, ValueError."""
        from conduit.daemon.config.gateway import aread_bounded
        from conduit.daemon.vllm.monitor import ENGINE_DEADLINE_S

        r = await aread_bounded(client, method, self.settings.base_url + path, headers=self._monitor._headers(),
                                max_bytes=max_bytes, deadline_s=ENGINE_DEADLINE_S, json_body=body)
        if r.status != 200 or r.truncated:
            raise ValueError(f"{path} answered {r.status}" + (" (too long)" if r.truncated else ""))
        return json.loads(r.body)

    async def _look_ollama(self, client: httpx.AsyncClient) -> tuple[bool, str]:
        """Check an Ollama and read its loaded models and the served model's window."""
        name = self.settings.name
        try:
            self.version = ollama.version_of(await self._ollama_json(client, "GET", "/api/version", 65536))
            if self.version is None:
                return False, "/api/version gave no version"
            listed = await self._ollama_json(client, "GET", "/v1/models", MODELS_MAX_BYTES)
            ids = [m.get("id") for m in listed.get("data", []) if isinstance(m, dict)]
            loaded = ollama.loaded_models(await self._ollama_json(client, "GET", "/api/ps", MODELS_MAX_BYTES))
        except (httpx.HTTPError, OSError, ValueError, AttributeError, RecursionError) as exc:
            return False, one_line(f"{type(exc).__name__}: {exc}", 200)
        if not any(isinstance(i, str) and ollama.same_model(i, name) for i in ids):
            return False, one_line(f"/v1/models lists {ids}, not {name!r} (ollama pull it?)", 300)
        mine = next((m for m in loaded if ollama.same_model(m["name"], name)), None)
        if mine is not None and mine["context_length"]:
            window: tuple[int | None, str] = (mine["context_length"], "api/ps context_length")
        else:
            window = await self._show(client, name)
        self.ollama = {"version": self.version, "loaded": loaded,
                       "window": {"tokens": window[0], "source": window[1]} if window[0] else None}
        if window[0] and self._windows.get(name) != window[0]:
            self._windows = {name: window[0]}
            if self._on_windows is not None:
                self._on_windows(dict(self._windows))
        return True, "ready"

    async def _show(self, client: httpx.AsyncClient, name: str) -> tuple[int | None, str]:
        """The window ``/api/show`` gives for ``name`` (asked once per model while it is not loaded)."""
        if name not in self._shown:
            try:
                body = await self._ollama_json(client, "POST", "/api/show", SHOW_MAX_BYTES, {"model": name})
                n, src = ollama.show_window(body)
                self._shown[name] = (n, f"api/show {src}" if n else "")
            except (httpx.HTTPError, OSError, ValueError, RecursionError):
                return None, ""
        return self._shown[name]

    async def _judge(self, ok: bool, why: str) -> None:
        """Move the state after a look (see the module docstring)."""
        now = time.monotonic()
        if ok:
            self._down_since = None
            if self.state is VllmState.FAILED:
                self._to(VllmState.STARTING)
            self._to(VllmState.READY)
            return
        if self.state in (VllmState.READY, VllmState.STARTING, VllmState.STOPPED):
            first = self.state is not VllmState.READY
            self._down_since = now
            self.record_failure(self._unreachable(why, ""), None, "", quiet=True)  # at once; logged by _diagnose
            self._to(VllmState.FAILED if first else VllmState.UNHEALTHY)
            self.warnings_push(f"the engine at {self.settings.base_url} does not answer: {why}")
            await self._diagnose(why)
        elif self.state is VllmState.UNHEALTHY and now - (self._down_since or now) >= self.settings.unhealthy_restart_s:
            self._to(VllmState.FAILED)

    async def _diagnose(self, why: str) -> None:
        """Record why the engine stopped answering: from its ``log_command`` output when there is one."""
        s = self.settings
        tail = await read_log_command(s.log_command) if s.log_command else ""
        d = diagnose(tail, model=s.model) if tail else None
        if d is None or d.kind == "exited":
            d = self._unreachable(why, d.reason.split(": ", 1)[-1] if d is not None and ": " in d.reason else "")
        self.record_failure(d, None, tail)

    def _unreachable(self, why: str, last: str) -> Diagnosis:
        """The engine does not answer (``why``); ``last``: its log's last error line, if known."""
        s = self.settings
        return Diagnosis("unreachable", f"the engine at {s.base_url} does not answer ({why})"
                         + (f"; its log ends: {last}" if last else ""),
                         "it is not conduit's to start: check the container or service that runs it"
                         + ("" if s.log_command else f"; set {self.table}.log_command to have its log diagnosed"))


#: ``Monitor.check_ready``'s reasons for a model list refused for want of a key (after ``/health`` answered 200)
_KEY_REFUSED = frozenset({"/v1/models answered 401", "/v1/models answered 403"})

__all__ = ["LOG_MAX_BYTES", "LOG_TIMEOUT_S", "Observer", "read_log_command"]
