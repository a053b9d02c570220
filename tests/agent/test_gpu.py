"""GPU probing through the fake device set (same tolerant code as with real NVML), and host memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conduit.daemon.agent.gpu import (
    FakeNvml,
    GpuHistory,
    GpuProbe,
    GpuReport,
    GpuSnapshot,
    capability_by_index,
    host_snapshot,
    memory_by_index,
    report_json,
)

GiB = 1024**3


def dev(i: int, **kw: Any) -> dict[str, Any]:
    d = {"name": f"NVIDIA H100 #{i}", "uuid": f"GPU-{i}", "total": 80 * GiB, "used": 10 * GiB,
         "free": 69 * GiB, "reserved": 1 * GiB, "util": [40, 20], "processes": []}
    d.update(kw)
    return d


def sample(spec: dict[str, Any], pids: set[int] = frozenset()) -> GpuReport:  # type: ignore[assignment]
    return GpuProbe(FakeNvml(spec), retry_init_s=0).sample(pids)


@pytest.mark.parametrize(("error", "words"), [("library_not_found", "NVML Shared Library Not Found"),
                                              ("driver_not_loaded", "Driver Not Loaded")])
def test_no_library_or_no_driver_is_an_empty_list_with_a_reason(error: str, words: str) -> None:
    rep = sample({"error": error, "devices": [dev(0)]})
    assert rep.gpus == ()
    assert rep.reason == f"no NVIDIA GPU: {words}"
    assert report_json(rep)["gpus"] == []


def test_real_nvml_on_this_machine_never_raises() -> None:
    rep = GpuProbe().sample()  # the real pynvml: on a machine without a driver, a reason instead of an error
    if rep.gpus:
        assert rep.reason is None and all(g.total_bytes for g in rep.gpus)
    else:
        assert rep.reason and rep.reason.startswith("no NVIDIA GPU")


def test_two_gpus_with_all_fields() -> None:
    rep = sample({"devices": [dev(0, processes=[{"pid": 42, "used": 3 * GiB}]), dev(1, free=1 * GiB)]}, {42})
    assert rep.reason is None and len(rep.gpus) == 2
    g0, g1 = rep.gpus
    assert (g0.name, g0.uuid, g0.total_bytes, g0.used_bytes, g0.free_bytes, g0.reserved_bytes) == (
        "NVIDIA H100 #0", "GPU-0", 80 * GiB, 10 * GiB, 69 * GiB, 1 * GiB)
    assert (g0.utilization_gpu_pct, g0.utilization_memory_pct) == (40, 20)
    assert g0.processes[0].pid == 42 and g0.processes[0].used_bytes == 3 * GiB and g0.processes[0].vllm
    assert g1.free_bytes == 1 * GiB and g1.errors == {} and g1.mig_enabled is None


def test_field_not_supported_is_null_with_the_reason() -> None:
    rep = sample({"devices": [dev(0, unsupported=["utilization", "name"])]})
    g = rep.gpus[0]
    assert g.utilization_gpu_pct is None and g.utilization_memory_pct is None and g.name is None
    assert g.errors["utilization"] == "Not Supported" and g.errors["name"] == "Not Supported"
    assert g.free_bytes == 69 * GiB  # the rest of the device is still there


def test_memory_v1_fallback_leaves_reserved_null() -> None:
    g = sample({"devices": [dev(0, reserved=None)]}).gpus[0]
    assert g.reserved_bytes is None and g.free_bytes == 69 * GiB
    assert "memory v2 unavailable" in g.errors["reserved_bytes"]


def test_processes_with_unknown_memory() -> None:
    g = sample({"devices": [dev(0, processes=[{"pid": 7, "used": None}, {"pid": 8, "used": GiB}])]}).gpus[0]
    assert [(p.pid, p.used_bytes, p.vllm) for p in g.processes] == [(7, None, False), (8, GiB, False)]
    body = json.dumps(report_json(sample({"devices": [dev(0, processes=[{"pid": 7, "used": None}])]})))
    assert '"used_bytes": null' in body


def test_mig_instances_have_their_own_memory_and_processes() -> None:
    mig = [{"uuid": "MIG-a", "total": 10 * GiB, "used": 2 * GiB, "free": 8 * GiB,
            "processes": [{"pid": 9, "used": None}]},
           {"uuid": "MIG-b", "total": 20 * GiB, "used": 0, "free": 20 * GiB}]
    g = sample({"devices": [dev(0, mig=mig)]}, {9}).gpus[0]
    assert g.mig_enabled is True and [m.uuid for m in g.mig] == ["MIG-a", "MIG-b"]
    assert g.mig[0].free_bytes == 8 * GiB and g.mig[1].total_bytes == 20 * GiB
    assert g.mig[0].processes[0].pid == 9 and g.mig[0].processes[0].vllm
    off = sample({"devices": [dev(0, mig=[])]}).gpus[0]
    assert off.mig_enabled is False and off.mig == ()


def test_history_window_min_free_and_peak_used() -> None:
    h = GpuHistory(window_s=60)

    def snap(free: int, used: int, t: float) -> GpuReport:
        g = GpuSnapshot(index=0, name="x", uuid="GPU-0", total_bytes=100, used_bytes=used, free_bytes=free,
                        reserved_bytes=0, utilization_gpu_pct=0, utilization_memory_pct=0, mig_enabled=None)
        return GpuReport(gpus=(g,), reason=None, sampled_at=t)

    h.add(snap(5, 95, 900.0))  # older than the window: ignored
    h.add(snap(50, 50, 1000.0))
    h.add(snap(30, 70, 1010.0))
    h.add(snap(60, 40, 1020.0))
    w = h.window(now=1030.0)["GPU-0"]
    assert w == {"min_free_bytes": 30, "peak_used_bytes": 70, "samples": 3, "window_s": 30.0}
    assert h.latest is not None and h.latest.gpus[0].free_bytes == 60


def test_fake_reads_its_file_again_each_sample(tmp_path: Path) -> None:
    f = tmp_path / "gpus.json"
    f.write_text(json.dumps({"devices": [dev(0)]}))
    probe = GpuProbe(FakeNvml(f), retry_init_s=0)
    assert probe.sample().gpus[0].free_bytes == 69 * GiB
    f.write_text(json.dumps({"devices": [dev(0, free=3 * GiB)]}))
    assert probe.sample().gpus[0].free_bytes == 3 * GiB


def test_memory_by_index_is_free_and_total_per_gpu() -> None:
    probe = GpuProbe(FakeNvml({"devices": [dev(0), dev(1, free=2 * GiB, unsupported=["name"])]}), retry_init_s=0)
    assert memory_by_index(probe) == [(0, 69 * GiB, 80 * GiB), (1, 2 * GiB, 80 * GiB)]
    memless = GpuProbe(FakeNvml({"devices": [dev(0, unsupported=["memory"])]}), retry_init_s=0)
    assert memory_by_index(memless) is None  # NVML refused the memory: "cannot check"
    assert memory_by_index(GpuProbe(FakeNvml({"error": "driver_not_loaded"}), retry_init_s=0)) is None


def test_capability_by_index_reads_nvml_and_leaves_out_what_it_cannot_say() -> None:
    devices = [{**dev(0), "capability": [7, 0]}, {**dev(1), "capability": [9, 0]}, dev(2)]
    probe = GpuProbe(FakeNvml({"devices": devices}), retry_init_s=0)
    assert capability_by_index(probe) == {0: 70, 1: 90}
    assert capability_by_index(GpuProbe(FakeNvml({"devices": [dev(0)]}), retry_init_s=0)) is None
    assert capability_by_index(GpuProbe(FakeNvml({"error": "driver_not_loaded"}), retry_init_s=0)) is None


def test_memory_by_index_default_probe_honours_the_fake_device_set(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "gpus.json"
    f.write_text(json.dumps({"devices": [dev(0, free=7 * GiB)]}))
    monkeypatch.setenv("CONDUIT_FAKE_GPUS", str(f))
    assert memory_by_index() == [(0, 7 * GiB, 80 * GiB)]


def test_host_snapshot() -> None:
    h = host_snapshot()
    assert h.total_bytes > 0 and 0 <= h.available_bytes <= h.total_bytes
    assert h.used_bytes == h.total_bytes - h.available_bytes
