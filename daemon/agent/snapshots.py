"""The typed snapshots the agent's GPU and host sampling produce: units in the field names
(``free_bytes``), ``None`` plus a reason for what NVML refused, and each field's ``nvidia-smi`` twin in its
docstring. ``conduit.daemon.agent.gpu`` fills them (and re-exports them).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One compute process on a GPU (``nvidia-smi --query-compute-apps=pid,used_memory``).

    Attributes:
        pid: host process id (``pid``).
        used_bytes: device memory it holds, bytes (``used_memory``); None when NVML cannot tell.
        vllm: whether the pid belongs to the vLLM server the agent supervises.
    """

    pid: int
    used_bytes: int | None
    vllm: bool = False


@dataclass(frozen=True, slots=True)
class MigSnapshot:
    """One MIG instance of a GPU (``nvidia-smi -L`` lists them; memory as in ``nvidia-smi mig -lgi``).

    Attributes:
        index: MIG device index under its parent (``nvmlDeviceGetMigDeviceHandleByIndex``).
        uuid: ``MIG-...`` uuid, or None.
        total_bytes / used_bytes / free_bytes: the instance's memory, bytes, or None.
        processes: compute processes running in this instance.
    """

    index: int
    uuid: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """One GPU at one sample. Every measured field is None when NVML refused it (reason in ``errors``).

    Attributes:
        index: NVML index (``--query-gpu=index``).
        name: product name (``name``).
        uuid: ``GPU-...`` (``uuid``).
        total_bytes: installed memory, bytes (``memory.total``, MiB there).
        used_bytes: used memory, bytes (``memory.used``); with memory v2 it excludes ``reserved_bytes``.
        free_bytes: free memory, bytes (``memory.free``): the headroom figure.
        reserved_bytes: driver-reserved memory, bytes (``memory.reserved``); None before memory v2.
        utilization_gpu_pct: % of time a kernel ran over the last sample period (``utilization.gpu``).
        utilization_memory_pct: % of time memory was read or written (``utilization.memory``).
        mig_enabled: MIG mode is on (``mig.mode.current``); None when the GPU has no MIG.
        mig: MIG instances, when ``mig_enabled``.
        processes: compute processes (``--query-compute-apps``).
        errors: field -> NVML's reason, for every field that came back None.
        compute_capability: CUDA compute capability as major x 10 + minor (``compute_cap``, 70 for a V100);
            None when NVML cannot say (not recorded in ``errors``: only the planner's checks use it).
    """

    index: int
    name: str | None
    uuid: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    reserved_bytes: int | None
    utilization_gpu_pct: int | None
    utilization_memory_pct: int | None
    mig_enabled: bool | None
    mig: tuple[MigSnapshot, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    errors: dict[str, str] = field(default_factory=dict)
    compute_capability: int | None = None


@dataclass(frozen=True, slots=True)
class GpuReport:
    """All GPUs at one sample.

    Attributes:
        gpus: one snapshot per GPU; empty when there is no NVIDIA GPU.
        reason: why ``gpus`` is empty ("no NVIDIA GPU: NVML Shared Library Not Found"), else None.
        sampled_at: Unix time of the sample, seconds.
    """

    gpus: tuple[GpuSnapshot, ...]
    reason: str | None
    sampled_at: float


@dataclass(frozen=True, slots=True)
class HostSnapshot:
    """Host memory (what a CPU vLLM uses), from psutil (``free -b``'s columns).

    Attributes:
        total_bytes: physical memory, bytes (``total``).
        available_bytes: memory that can be given to new processes without swapping, bytes (``available``).
        used_bytes: ``total - available`` as psutil computes it, bytes.
        percent: used share, 0..100.
        swap_total_bytes / swap_used_bytes: swap, bytes.
        cpu_count: logical CPUs.
        load_avg_1m: 1-minute load average.
        sampled_at: Unix time, seconds.
    """

    total_bytes: int
    available_bytes: int
    used_bytes: int
    percent: float
    swap_total_bytes: int
    swap_used_bytes: int
    cpu_count: int | None
    load_avg_1m: float | None
    sampled_at: float
