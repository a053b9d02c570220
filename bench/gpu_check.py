"""Device check for a machine with an NVIDIA GPU: the agent's /v1/gpus sees a 10 GiB PyTorch allocation.

Steps (done when all hold):
1. start a real ``conduit agent`` (real NVML, no fake) on a temporary socket under a temporary HOME;
2. read ``/v1/gpus`` (GPU ``--gpu``, default 0): free_bytes before;
3. allocate 10 GiB on that GPU in this process, with PyTorch when it is installed, else straight through the
   CUDA driver API (``libcuda.so``: cuInit, cuCtxCreate, cuMemAlloc; no Python package needed), and wait for
   two more 1 s samples;
4. read ``/v1/gpus`` again: free must have dropped by at least 10 GiB (and by at most 10 GiB + ``--slack``
   for the CUDA context), and a process holding >= 10 GiB must be listed (this pid, unless the container's
   pid namespace hides it: NVML reports host pids);
5. free the tensor and check free memory comes back and the window's ``min_free_bytes`` remembers the dip.

Prints every figure and a JSON record (paste it when resolving the issue). Exit 0 pass, 1 fail, 2 cannot run
here (neither PyTorch with CUDA nor libcuda.so). Bounded: about 30 s plus PyTorch's import and CUDA start-up.

Usage: ``python bench/gpu_check.py [--gpu 0] [--gib 10] [--slack-gib 2]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GiB = 1024**3
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))


def get(sock: Path, path: str) -> Any:
    from helpers.agentproc import request  # stdlib http.client over the Unix socket

    status, body = request(sock, "GET", path)
    if status != 200:
        raise SystemExit(f"GET {path}: HTTP {status} {body}")
    return body


def gpu(body: dict[str, Any], index: int) -> dict[str, Any]:
    for g in body["gpus"]:
        if g["index"] == index:
            return g
    raise SystemExit(f"no GPU {index} in /v1/gpus: {json.dumps(body)[:500]}")


def wait_new_sample(sock: Path, after: float, timeout: float = 15) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = get(sock, "/v1/gpus")
        if body["sampled_at"] and body["sampled_at"] > after:
            return body
        time.sleep(0.2)
    raise SystemExit("the agent took no new GPU sample in time")


class Allocator:
    """Holds ``nbytes`` of device memory on GPU ``index``: PyTorch if importable, else the CUDA driver API."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.kind = ""
        self._t: Any = None
        self._ptr: Any = None
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.set_device(index)
                torch.zeros(1, device="cuda")  # the CUDA context first, so the drop measured is the tensor
                self.torch, self.kind = torch, "torch"
                return
        except ImportError:
            pass
        import ctypes

        try:
            self.cu = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise SystemExit(2) from exc
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        self._check(self.cu.cuInit(0), "cuInit")
        self._check(self.cu.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
        self._check(self.cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
        self.ctx, self.kind = ctx, "libcuda"

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed with CUDA error {rc}")

    def alloc(self, nbytes: int) -> None:
        if self.kind == "torch":
            self._t = self.torch.empty(nbytes, dtype=self.torch.uint8, device="cuda")
            self._t.fill_(1)
            self.torch.cuda.synchronize()
            return
        import ctypes

        ptr = ctypes.c_uint64()
        self._check(self.cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)), "cuMemAlloc")
        self._check(self.cu.cuMemsetD8_v2(ptr, 1, ctypes.c_size_t(nbytes)), "cuMemsetD8")
        self._check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
        self._ptr = ptr

    def free(self) -> None:
        if self.kind == "torch":
            self._t = None
            self.torch.cuda.empty_cache()
        elif self._ptr is not None:
            self._check(self.cu.cuMemFree_v2(self._ptr), "cuMemFree")
            self._ptr = None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--gib", type=float, default=10.0)
    ap.add_argument("--slack-gib", type=float, default=2.0, help="allowed extra drop (CUDA context), GiB")
    args = ap.parse_args()
    try:
        allocator = Allocator(args.gpu)
    except SystemExit:
        print("cannot run: neither PyTorch with CUDA nor libcuda.so.1 is available")
        return 2
    print(f"allocating with {allocator.kind}")

    tmp = Path(tempfile.mkdtemp(prefix="cg-", dir="/tmp"))
    (tmp / "home").mkdir()
    sock = tmp / "agent.sock"
    env = dict(os.environ, HOME=str(tmp / "home"), CONDUIT_AGENT_SOCKET=str(sock))
    env.pop("CONDUIT_FAKE_GPUS", None)
    conduit = str(Path(sys.executable).parent / "conduit")
    log = open(tmp / "agent.log", "wb")
    agent = subprocess.Popen([conduit, "agent"], env=env, stdout=log, stderr=subprocess.STDOUT)
    record: dict[str, Any] = {"gpu": args.gpu, "alloc_bytes": int(args.gib * GiB), "pid": os.getpid(),
                              "allocator": allocator.kind}
    ok = False
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        before = wait_new_sample(sock, time.time())
        g0 = gpu(before, args.gpu)
        record.update(name=g0["name"], uuid=g0["uuid"], total_bytes=g0["total_bytes"],
                      free_before=g0["free_bytes"], reason=before["reason"])
        print(f"GPU {args.gpu}: {g0['name']} {g0['uuid']}; free before: {g0['free_bytes'] / GiB:.2f} GiB")

        allocator.alloc(int(args.gib * GiB))
        wait_new_sample(sock, time.time())
        during = wait_new_sample(sock, time.time())
        g1 = gpu(during, args.gpu)
        drop = g0["free_bytes"] - g1["free_bytes"]
        procs = g1["processes"] + [p for m in g1.get("mig") or [] for p in m["processes"]]
        mine = [p for p in procs if p["pid"] == os.getpid()]
        big = [p for p in procs if (p["used_bytes"] or 0) >= args.gib * GiB]
        record.update(free_during=g1["free_bytes"], drop_bytes=drop, processes=procs,
                      own_pid_listed=bool(mine), window=g1.get("window"))
        print(f"free with {args.gib:g} GiB allocated: {g1['free_bytes'] / GiB:.2f} GiB (drop {drop / GiB:.2f} GiB)")
        print(f"processes: {procs}")

        allocator.free()
        wait_new_sample(sock, time.time())
        after = wait_new_sample(sock, time.time())
        g2 = gpu(after, args.gpu)
        record.update(free_after=g2["free_bytes"], window_after=g2.get("window"))
        print(f"free after release: {g2['free_bytes'] / GiB:.2f} GiB; window: {g2.get('window')}")

        checks = {
            "drop >= alloc": drop >= args.gib * GiB,
            "drop <= alloc + slack": drop <= (args.gib + args.slack_gib) * GiB,
            "a process holding >= alloc is listed (or NVML reports usage as null)":
                bool(big) or any(p["used_bytes"] is None for p in procs),
            "memory comes back": g2["free_bytes"] >= g1["free_bytes"] + args.gib * GiB * 0.9,
            "window min_free remembers the dip": (g2.get("window") or {}).get("min_free_bytes", 1 << 62)
                <= g1["free_bytes"],
        }
        record["checks"] = checks
        record["own_pid_note"] = ("this pid is listed" if mine else
                                  "this pid is not listed (container pid namespace: NVML reports host pids)")
        for name, passed in checks.items():
            print(f"  {'PASS' if passed else 'FAIL'}  {name}")
        print(f"  note: {record['own_pid_note']}")
        ok = all(checks.values())
        status = get(sock, "/v1/status")
        record["status_has_gpus"] = bool(status["gpus"]["gpus"])
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
        log.close()
        record["agent_log_tail"] = (tmp / "agent.log").read_text(errors="replace")[-1500:]
        print("RECORD " + json.dumps(record, default=str))
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
