"""Fallback switch times: the primary going down -> the last tool file written, and back.

One rig (tests/helpers/fallbackrig.py): a real `conduit agent` supervising tests/helpers/fake_vllm.py as the primary, a real
`conduit daemon`, a hosted stand-in on loopback as `[fallback]`, real tool files under a temporary HOME. Each
round: SIGKILL vLLM's process group -> every following tool's file names the fallback (down = the last file's
mtime - the kill); `POST /v1/vllm/start` -> every tool back on the primary (up = the last file's mtime - the
moment vLLM turned ready). Both include the hysteresis ``after_s`` by design: the goal is within 1 s of it.

    .venv/bin/python bench/fallback.py --runs 10 --after 2

Prints seconds (median, p90, min, max) for both directions next to ``after_s``, and the median's excess over it.
Wall-clock on a shared machine: read the excess, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from helpers.fallbackrig import Rig  # noqa: E402
from helpers.isolation import isolated_vars  # noqa: E402


def _line(name: str, xs: list[float], after_s: float) -> str:
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
    med = statistics.median(xs)
    return (f"{name:<22} median {med:6.2f} s  p90 {p90:6.2f}  min {xs[0]:6.2f}  max {xs[-1]:6.2f}   "
            f"after_s {after_s:g}  excess {med - after_s:+.2f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--after", type=float, default=2.0, help="[fallback].after_s, seconds")
    args = ap.parse_args()
    down: list[float] = []
    up: list[float] = []
    with tempfile.TemporaryDirectory(prefix="conduit-bench-fallback-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        os.environ["HOME"] = str(home)
        for var in isolated_vars():
            os.environ.pop(var, None)
        rounds(Rig(home, Path(tmp), after_s=args.after), args.runs, down, up)
    print(_line("primary down -> tools", down, args.after))
    print(_line("primary ready -> tools", up, args.after))
    return 0


def rounds(rig: Rig, runs: int, down: list[float], up: list[float]) -> None:
    """``runs`` rounds of kill -> fallback -> start -> primary, appending seconds to ``down`` and ``up``."""
    with rig:
        rig.wait_route("primary")
        for i in range(runs):
            killed = rig.kill_vllm()
            down.append(rig.wait_route("fallback") - killed)
            ready = rig.start_vllm()
            up.append(rig.wait_route("primary") - ready)
            print(f"run {i + 1}: down {down[-1]:.2f} s, up {up[-1]:.2f} s", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
