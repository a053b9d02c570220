"""A stand-in ``vllm`` executable for an ``mp`` follower (``vllm serve MODEL ... --headless``): no HTTP at all.

Installed by a test as ``<bin>/vllm`` (a copy of this file with this interpreter's shebang) on the launch's
``PATH``. Each run appends its argv (as one JSON line) to ``FAKE_FOLLOWER_ARGV``, prints vLLM's headless start-up
line, then:

    FAKE_FOLLOWER_MODE     stay (default): sleep until killed | exit: print FAKE_FOLLOWER_MESSAGE, exit 1 |
                           refuse: print FAKE_FOLLOWER_MESSAGE and exit 2 before the start-up line (a flag refused)
    FAKE_FOLLOWER_AFTER_S  seconds before ``exit`` acts (default 0.3)
    FAKE_FOLLOWER_MESSAGE  the line printed before exiting (a vLLM / torch error)

Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    record = os.environ.get("FAKE_FOLLOWER_ARGV")
    if record:
        with open(record, "a", encoding="utf-8") as f:
            f.write(json.dumps(sys.argv[1:]) + "\n")
    mode = os.environ.get("FAKE_FOLLOWER_MODE", "stay")
    if mode == "refuse":
        print(os.environ.get("FAKE_FOLLOWER_MESSAGE", "vllm serve: error: unrecognized arguments"), flush=True)
        return 2
    print("INFO Launching vLLM (v0.32.0) headless multiproc executor, with head node address "
          f"{_flag('--master-addr')}:{_flag('--master-port')} for torch.distributed process group.", flush=True)
    if mode == "exit":
        time.sleep(float(os.environ.get("FAKE_FOLLOWER_AFTER_S", "0.3")))
        print(os.environ.get("FAKE_FOLLOWER_MESSAGE", "RuntimeError: the follower died"), flush=True)
        return 1
    while True:
        time.sleep(3600)


def _flag(name: str) -> str:
    args = sys.argv[1:]
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else "?"


if __name__ == "__main__":
    sys.exit(main())
