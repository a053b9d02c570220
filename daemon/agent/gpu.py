"""VRAM headroom through NVML, and host memory through psutil, as typed snapshots with units in the names.

The one NVML reader of conduit: the agent's loops, ``conduit plan`` and the vLLM launch preflight
(``memory_by_index``) all read the GPUs here; the ``vllm`` and ``plan`` packages are handed the numbers. The
snapshot types live in ``conduit.daemon.agent.snapshots`` and are re-exported here.

The NVML calls live behind one small interface, ``NvmlLib``: the handful of ``pynvml`` (nvidia-ml-py) functions
conduit uses, with pynvml's own signatures and error classes. The real implementation is the ``pynvml`` module
itself; ``FakeNvml`` implements the same functions over a JSON-able device description, so the tolerant query
code (``GpuProbe``) is the same code in tests and in the agent (one tolerant hardware path, after nvitop's
``libnvml.nvmlQuery``: lazy init, an explicit default, log once).

Rules (docs/formats/vllm-and-nvml.md, "NVML from Python"):
- ``nvmlInit`` raising ``NVMLError_LibraryNotFound`` or ``NVMLError_DriverNotLoaded`` means "no NVIDIA GPU":
  the report is ``gpus: []`` plus the reason, never an error. Init is retried at most every
  ``GpuProbe.retry_init_s`` seconds (a driver can be loaded later).
- Any per-field ``NVMLError`` (``NotSupported``, ``NoPermission``, ...) makes that field ``None`` and records
  the reason in the snapshot's ``errors`` map; the rest of the device is still reported.
- Memory: ``nvmlDeviceGetMemoryInfo(h, version=nvmlMemory_v2)`` (``reserved`` known; ``used`` then excludes
  it), falling back to v1 (``reserved_bytes`` None) on ``FunctionNotFound``/``NotSupported``. ``free`` means
  the same in both and is what headroom is measured with.
- MIG: with MIG mode on, each instance is listed under its parent with its own memory and processes
  (``nvmlDeviceGetMigDeviceHandleByIndex``).
- Process PIDs are host PIDs; ``usedGpuMemory`` None (unavailable, e.g. under MIG or Windows WDDM) stays None.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

from conduit.daemon.agent.snapshots import GpuProcess, GpuReport, GpuSnapshot, HostSnapshot, MigSnapshot

__all__ = [
    "FakeNvml", "GpuHistory", "GpuProbe", "GpuProcess", "GpuReport", "GpuSnapshot", "HostSnapshot", "MigSnapshot",
    "NvmlLib", "capability_by_index", "default_probe", "host_snapshot", "memory_by_index", "report_json",
]

log = logging.getLogger("conduit.agent.gpu")


class NvmlLib(Protocol):
    """The pynvml functions conduit uses (signatures as in nvidia-ml-py 12.535+). ``pynvml`` satisfies it."""

    NVMLError: type[Exception]
    nvmlMemory_v2: int

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]: ...
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]: ...


def host_snapshot() -> HostSnapshot:
    """Sample host memory with psutil. Raises nothing that psutil does not (it reads /proc/meminfo)."""
    import psutil

    vm = psutil.virtual_memory()
    sw = psutil.swap_memory()
    try:
        load: float | None = os.getloadavg()[0]
    except OSError:
        load = None
    return HostSnapshot(
        total_bytes=int(vm.total),
        available_bytes=int(vm.available),
        used_bytes=int(vm.total - vm.available),
        percent=float(vm.percent),
        swap_total_bytes=int(sw.total),
        swap_used_bytes=int(sw.used),
        cpu_count=psutil.cpu_count(),
        load_avg_1m=load,
        sampled_at=time.time(),
    )


# --------------------------------------------------------------------------------------------- probe


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class GpuProbe:
    """Samples every GPU through an ``NvmlLib`` without ever raising.

    Args:
        lib: the NVML implementation; None loads ``pynvml`` lazily on the first sample (a missing module is
            reported like a missing library).
        retry_init_s: after a failed ``nvmlInit``, seconds before trying again.

    Blocking: NVML calls can take milliseconds (tens on a busy driver); the agent runs ``sample`` in a worker
    thread so the event loop never waits on it.
    """

    NO_GPU_CODES = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED")

    def __init__(self, lib: NvmlLib | None = None, retry_init_s: float = 30.0) -> None:
        self._lib = lib
        self._initialized = False
        self._init_error: str | None = None
        self._next_init = 0.0
        self.retry_init_s = retry_init_s
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    def _log_once(self, key: str, msg: str) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.info(msg)

    def _ensure_init(self) -> str | None:
        """Initialize NVML once; returns None when ready, else the reason there is no GPU."""
        if self._initialized:
            return None
        now = time.monotonic()
        if self._init_error and now < self._next_init:
            return self._init_error
        if self._lib is None:
            try:
                import pynvml
            except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
                self._init_error = f"no NVIDIA GPU: the nvidia-ml-py package is missing ({exc})"
                self._next_init = now + self.retry_init_s
                return self._init_error
            self._lib = pynvml
        lib = self._lib
        assert lib is not None
        try:
            lib.nvmlInit()
        except lib.NVMLError as exc:
            self._init_error = f"no NVIDIA GPU: {exc}"
            self._next_init = now + self.retry_init_s
            self._log_once("init:" + str(exc), self._init_error)
            return self._init_error
        except OSError as exc:  # a broken libnvml.so raises OSError from ctypes
            self._init_error = f"no NVIDIA GPU: cannot load NVML ({exc})"
            self._next_init = now + self.retry_init_s
            return self._init_error
        self._initialized = True
        self._init_error = None
        return None

    def _q(self, errors: dict[str, str], name: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """Call one NVML function; on NVMLError record the reason under ``name`` and return None."""
        assert self._lib is not None
        try:
            return fn(*args, **kw)
        except self._lib.NVMLError as exc:
            errors[name] = str(exc)
            self._log_once(f"{name}:{exc}", f"NVML {name}: {exc} (reported as null)")
            return None

    def _memory(self, errors: dict[str, str], handle: Any) -> tuple[int | None, int | None, int | None, int | None]:
        """(total, used, free, reserved) in bytes; v2 with v1 fallback."""
        lib = self._lib
        assert lib is not None
        v2_errors: dict[str, str] = {}
        mem = self._q(v2_errors, "memory", lib.nvmlDeviceGetMemoryInfo, handle, version=lib.nvmlMemory_v2)
        if mem is not None:
            return int(mem.total), int(mem.used), int(mem.free), int(getattr(mem, "reserved", 0))
        mem = self._q(errors, "memory", lib.nvmlDeviceGetMemoryInfo, handle)
        if mem is None:
            return None, None, None, None
        errors["reserved_bytes"] = "memory v2 unavailable: " + v2_errors.get("memory", "unknown")
        return int(mem.total), int(mem.used), int(mem.free), None

    def _processes(self, errors: dict[str, str], handle: Any, vllm_pids: set[int]) -> tuple[GpuProcess, ...]:
        assert self._lib is not None
        procs = self._q(errors, "processes", self._lib.nvmlDeviceGetComputeRunningProcesses, handle)
        out = []
        for p in procs or ():
            used = getattr(p, "usedGpuMemory", None)
            out.append(GpuProcess(pid=int(p.pid), used_bytes=None if used is None else int(used),
                                  vllm=int(p.pid) in vllm_pids))
        return tuple(out)

    def _mig(self, errors: dict[str, str], handle: Any, vllm_pids: set[int]) -> tuple[bool | None, tuple[MigSnapshot, ...]]:
        lib = self._lib
        assert lib is not None
        mode_err: dict[str, str] = {}
        mode = self._q(mode_err, "mig_mode", lib.nvmlDeviceGetMigMode, handle)
        if mode is None:
            return None, ()  # not a MIG-capable GPU: not an error worth reporting
        enabled = bool(mode[0])
        if not enabled:
            return False, ()
        count = self._q(errors, "mig", lib.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        out = []
        for i in range(int(count)):
            try:
                mh = lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except lib.NVMLError:
                continue  # NotFound: that slot holds no instance
            merr: dict[str, str] = {}
            uuid = self._q(merr, "uuid", lib.nvmlDeviceGetUUID, mh)
            total, used, free, _ = self._memory(merr, mh)
            out.append(MigSnapshot(index=i, uuid=None if uuid is None else _text(uuid), total_bytes=total,
                                   used_bytes=used, free_bytes=free,
                                   processes=self._processes(merr, mh, vllm_pids)))
        return True, tuple(out)

    def _capability(self, handle: Any) -> int | None:
        """``nvmlDeviceGetCudaComputeCapability`` as major x 10 + minor, or None when NVML cannot say."""
        assert self._lib is not None
        try:
            major, minor = self._lib.nvmlDeviceGetCudaComputeCapability(handle)
        except (self._lib.NVMLError, AttributeError, TypeError, ValueError):
            return None
        return int(major) * 10 + int(minor)

    def sample(self, vllm_pids: Iterable[int] = ()) -> GpuReport:
        """Sample every GPU once. Never raises for NVML trouble: see the module docstring.

        Args:
            vllm_pids: host pids of the supervised vLLM's process tree; matching processes get ``vllm=True``.
        """
        with self._lock:
            pids = set(vllm_pids)
            reason = self._ensure_init()
            if reason is not None:
                return GpuReport(gpus=(), reason=reason, sampled_at=time.time())
            lib = self._lib
            assert lib is not None
            top: dict[str, str] = {}
            count = self._q(top, "count", lib.nvmlDeviceGetCount)
            if count is None:
                return GpuReport(gpus=(), reason=f"NVML cannot count devices: {top['count']}", sampled_at=time.time())
            gpus = []
            for i in range(int(count)):
                errors: dict[str, str] = {}
                h = self._q(errors, "handle", lib.nvmlDeviceGetHandleByIndex, i)
                if h is None:
                    gpus.append(GpuSnapshot(index=i, name=None, uuid=None, total_bytes=None, used_bytes=None,
                                            free_bytes=None, reserved_bytes=None, utilization_gpu_pct=None,
                                            utilization_memory_pct=None, mig_enabled=None, errors=errors))
                    continue
                name = self._q(errors, "name", lib.nvmlDeviceGetName, h)
                uuid = self._q(errors, "uuid", lib.nvmlDeviceGetUUID, h)
                total, used, free, reserved = self._memory(errors, h)
                util = self._q(errors, "utilization", lib.nvmlDeviceGetUtilizationRates, h)
                mig_enabled, migs = self._mig(errors, h, pids)
                procs = self._processes(errors, h, pids)
                gpus.append(GpuSnapshot(
                    index=i, name=None if name is None else _text(name), uuid=None if uuid is None else _text(uuid),
                    total_bytes=total, used_bytes=used, free_bytes=free, reserved_bytes=reserved,
                    utilization_gpu_pct=None if util is None else int(util.gpu),
                    utilization_memory_pct=None if util is None else int(util.memory),
                    mig_enabled=mig_enabled, mig=migs, processes=procs, errors=errors,
                    compute_capability=self._capability(h),
                ))
            return GpuReport(gpus=tuple(gpus), reason=None, sampled_at=time.time())


# --------------------------------------------------------------------------------------------- history


class GpuHistory:
    """A ring buffer of samples (one a second in the agent), like ``nvidia-smi -l 1`` without a subprocess.

    Args:
        window_s: how far back ``window`` looks, seconds (default 300 = the last five minutes).
        maxlen: samples kept; at one a second, ``window_s`` samples.
    """

    def __init__(self, window_s: float = 300.0, maxlen: int | None = None) -> None:
        self.window_s = window_s
        self._samples: deque[GpuReport] = deque(maxlen=maxlen or int(window_s) + 1)

    def add(self, report: GpuReport) -> None:
        """Append one sample (oldest dropped past ``maxlen``)."""
        self._samples.append(report)

    @property
    def latest(self) -> GpuReport | None:
        """The newest sample, or None before the first."""
        return self._samples[-1] if self._samples else None

    def window(self, now: float | None = None) -> dict[str, dict[str, Any]]:
        """Per GPU uuid (or ``index:N`` without one): ``min_free_bytes``, ``peak_used_bytes``, ``samples``
        and ``window_s`` (the span actually covered, seconds), over samples newer than ``window_s``."""
        now = time.time() if now is None else now
        out: dict[str, dict[str, Any]] = {}
        oldest: dict[str, float] = {}
        for rep in self._samples:
            if now - rep.sampled_at > self.window_s:
                continue
            for g in rep.gpus:
                key = g.uuid or f"index:{g.index}"
                cur = out.setdefault(key, {"min_free_bytes": None, "peak_used_bytes": None, "samples": 0})
                oldest.setdefault(key, rep.sampled_at)
                cur["samples"] += 1
                if g.free_bytes is not None:
                    cur["min_free_bytes"] = g.free_bytes if cur["min_free_bytes"] is None else min(cur["min_free_bytes"], g.free_bytes)
                if g.used_bytes is not None:
                    cur["peak_used_bytes"] = g.used_bytes if cur["peak_used_bytes"] is None else max(cur["peak_used_bytes"], g.used_bytes)
        for key, cur in out.items():
            cur["window_s"] = round(now - oldest[key], 1)
        return out


def report_json(report: GpuReport | None, history: GpuHistory | None = None) -> dict[str, Any]:
    """The ``/v1/gpus`` body: ``{"gpus": [...], "reason": str|None, "sampled_at": float, "window": {...}}``;
    each GPU carries its ``window`` figures (``min_free_bytes``, ``peak_used_bytes``) when there is history."""
    if report is None:
        return {"gpus": [], "reason": "not sampled yet", "sampled_at": None}
    win = history.window() if history else {}
    gpus = []
    for g in report.gpus:
        d = asdict(g)
        d["window"] = win.get(g.uuid or f"index:{g.index}")
        gpus.append(d)
    return {"gpus": gpus, "reason": report.reason, "sampled_at": report.sampled_at,
            "window_s": history.window_s if history else None}


# --------------------------------------------------------------------------------------------- fake


class FakeNvml:
    """A fake device set implementing ``NvmlLib`` with pynvml's real error classes (tests only).

    The description is a dict (or a JSON file re-read on every ``nvmlDeviceGetCount``, so a test can change
    free memory under a running agent)::

        {"error": null | "library_not_found" | "driver_not_loaded",
         "devices": [{"name": "NVIDIA H100", "uuid": "GPU-1", "total": 85899345920, "used": 0, "free": ...,
                      "reserved": 0 | null (null: memory v2 raises FunctionNotFound),
                      "util": [gpu_pct, mem_pct] | null (null: NotSupported),
                      "capability": [major, minor] (absent: NotSupported),
                      "unsupported": ["name", "processes", ...],   # fields raising NotSupported
                      "processes": [{"pid": 123, "used": 1073741824 | null}],
                      "mig": [{"uuid": "MIG-1", "total": ..., "used": ..., "free": ..., "processes": []}]}]}

    The agent uses it only when ``CONDUIT_FAKE_GPUS`` names such a file (documented as a test hook).
    """

    def __init__(self, spec: dict[str, Any] | Path) -> None:
        import pynvml

        self._pynvml = pynvml
        self.NVMLError = pynvml.NVMLError
        self.nvmlMemory_v2 = pynvml.nvmlMemory_v2
        self._path = spec if isinstance(spec, Path) else None
        self._spec: dict[str, Any] = {} if isinstance(spec, Path) else spec
        self._reload()

    def _reload(self) -> None:
        if self._path is not None:
            try:
                self._spec = json.loads(self._path.read_text())
            except (OSError, ValueError):
                pass  # keep the last good description while a test rewrites the file

    def _err(self, code: int) -> Exception:
        err: Exception = self._pynvml.NVMLError(code)
        return err

    def _check(self, handle: dict[str, Any], name: str) -> None:
        if name in handle.get("unsupported", ()):
            raise self._err(self._pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlInit(self) -> None:
        self._reload()
        err = self._spec.get("error")
        if err == "library_not_found":
            raise self._err(self._pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        if err == "driver_not_loaded":
            raise self._err(self._pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetCount(self) -> int:
        self._reload()
        return len(self._spec.get("devices", []))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        devs = self._spec.get("devices", [])
        if index >= len(devs):
            raise self._err(self._pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return devs[index]

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._check(handle, "name")
        return str(handle.get("name", "Fake GPU"))

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._check(handle, "uuid")
        return str(handle["uuid"])

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        self._check(handle, "memory")
        if version is not None:
            if handle.get("reserved", 0) is None:
                raise self._err(self._pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return SimpleNamespace(total=handle["total"], used=handle["used"], free=handle["free"],
                                   reserved=handle.get("reserved", 0), version=version)
        return SimpleNamespace(total=handle["total"], used=handle["used"], free=handle["free"])

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        self._check(handle, "utilization")
        util = handle.get("util", [0, 0])
        if util is None or "mig_parent" in handle:
            raise self._err(self._pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=util[0], memory=util[1])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        self._check(handle, "processes")
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p.get("used")) for p in handle.get("processes", [])]

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        if "mig" not in handle:
            raise self._err(self._pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [1, 1] if handle["mig"] else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        return 7

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        cap = handle.get("capability")
        if not isinstance(cap, list) or len(cap) != 2:
            raise self._err(self._pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(cap[0]), int(cap[1])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        migs = handle.get("mig") or []
        if index >= len(migs):
            raise self._err(self._pynvml.NVML_ERROR_NOT_FOUND)
        return dict(migs[index], mig_parent=True)


def default_probe() -> GpuProbe:
    """The agent's probe: real pynvml, or ``FakeNvml`` over ``$CONDUIT_FAKE_GPUS`` (a JSON file; tests)."""
    fake = os.environ.get("CONDUIT_FAKE_GPUS", "").strip()
    if fake:
        return GpuProbe(FakeNvml(Path(fake)), retry_init_s=0.0)
    return GpuProbe()


def capability_by_index(probe: GpuProbe | None = None) -> dict[int, int] | None:
    """``{index: compute capability}`` (major x 10 + minor, e.g. 90 for an H100/H200) per NVIDIA GPU, or None
    without NVML, a GPU, or a capability NVML reports.

    The reader of the launch preflight's capability check (``vllm.preflight.preflight_capability``). Source:
    ``nvmlDeviceGetCudaComputeCapability`` (``nvidia-smi --query-gpu=compute_cap``). Never raises for NVML
    trouble. Blocking (milliseconds).
    """
    report = (probe or default_probe()).sample()
    out = {g.index: g.compute_capability for g in report.gpus if g.compute_capability is not None}
    return out or None


def memory_by_index(probe: GpuProbe | None = None) -> list[tuple[int, int, int]] | None:
    """``[(index, free_bytes, total_bytes), ...]`` per NVIDIA GPU, or None without NVML or a GPU.

    The one NVML memory reader that the vLLM launch preflight (through the agent and ``conduit vllm run``) and
    ``conduit plan`` use: ``probe`` (default ``default_probe()``, which honours ``$CONDUIT_FAKE_GPUS``) samples
    every GPU. Source: ``nvmlDeviceGetMemoryInfo`` (``nvidia-smi --query-gpu=index,memory.free,memory.total``);
    ``free`` means the same with and without ``nvmlMemory_v2``. A GPU whose memory NVML refused is left out.
    Never raises for NVML trouble: it means "cannot check". Blocking (milliseconds; see ``GpuProbe``).
    """
    report = (probe or default_probe()).sample()
    out = [(g.index, g.free_bytes, g.total_bytes) for g in report.gpus
           if g.free_bytes is not None and g.total_bytes is not None]
    return out or None
