"""``--save-result``: one JSON object per level whose field names are ``vllm bench serve``'s result file's where
they mean the same thing (``vllm/benchmarks/serve.py``: ``benchmark()``'s ``result`` and ``main_async``'s
``result_json``; read from vLLM's source), so tools that read vLLM's files read these.

Fields (vLLM's names): ``date``, ``endpoint_type`` and ``backend`` (``openai-chat`` for the OpenAI protocol,
``anthropic`` otherwise), ``label`` (``conduit``), ``model_id``, ``tokenizer_id`` (None: the server's own),
``num_prompts``, ``request_rate`` (``"inf"`` or req/s), ``burstiness``, ``max_concurrency``, ``duration`` (s),
``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``, ``request_throughput``,
``request_goodput`` (None without ``--goodput``), ``output_throughput``, ``total_token_throughput`` (per
second), ``max_concurrent_requests`` (the peak of requests in flight), and for each of ``ttft``, ``tpot``,
``itl``, ``e2el``: ``mean_<m>_ms``, ``median_<m>_ms``, ``std_<m>_ms`` and ``p<P>_<m>_ms`` per selected
percentile. Like vLLM, an empty statistic is 0 (``np.mean(xs or 0)``). Per-request lists (vLLM's
``--save-detailed``) are left out. Extra conduit fields start with ``conduit_``: ``conduit_concurrency`` (a
closed-loop level), ``conduit_marks`` and ``conduit_goodput_slos_ms``.

The file holds one object per line and level, as ``vllm bench serve --append-result`` appends runs; a
one-level file is therefore plain JSON too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from conduit.daemon.bench.stats import LevelStats, RequestResult, Summary, pct_name
from conduit.errors import ConduitError

METRICS: tuple[tuple[str, str], ...] = (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e"))


def _peak_in_flight(results: Sequence[RequestResult]) -> int:
    """The most successful requests in flight at once: a sweep over [t_send, t_send + e2e) (vLLM's rule)."""
    events = sorted([(r.t_send, 1) for r in results if r.ok] + [(r.t_send + r.e2e_s, -1) for r in results if r.ok])
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def _metric(out: dict[str, Any], name: str, s: Summary, percentiles: Sequence[float]) -> None:
    def ms(v: float | None) -> float:
        return 0.0 if v is None else v * 1000.0

    out[f"mean_{name}_ms"] = ms(s.mean)
    out[f"median_{name}_ms"] = ms(s.p50)
    out[f"std_{name}_ms"] = ms(s.std)
    for q in percentiles:
        out[f"{pct_name(q)}_{name}_ms"] = ms(s.pct(q))


def level_result(lv: LevelStats, config: Mapping[str, Any], percentiles: Sequence[float],
                 date: str | None = None) -> dict[str, Any]:
    """The vLLM-named result object of one level (see the module docstring)."""
    backend = "openai-chat" if config.get("protocol", "openai") == "openai" else "anthropic"
    rate = lv.request_rate if lv.request_rate is not None else math.inf
    dur = lv.wall_s
    out: dict[str, Any] = {
        "date": date or datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend,
        "backend": backend,
        "label": "conduit",
        "model_id": config.get("model"),
        "tokenizer_id": None,
        "num_prompts": lv.requests,
        "request_rate": "inf" if math.isinf(rate) else rate,
        "burstiness": config.get("burstiness", 1.0),
        "max_concurrency": (lv.concurrency or None) if lv.request_rate is not None else lv.concurrency,
        "duration": dur,
        "completed": lv.ok,
        "failed": lv.requests - lv.ok,
        "total_input_tokens": lv.input_tokens,
        "total_output_tokens": lv.output_tokens,
        "request_throughput": lv.requests_per_s,
        "request_goodput": lv.goodput_per_s,
        "output_throughput": lv.output_tokens_per_s,
        "total_token_throughput": (lv.input_tokens + lv.output_tokens) / dur if dur > 0 else 0.0,
        "max_concurrent_requests": _peak_in_flight(lv.results),
    }
    for name, attr in METRICS:
        _metric(out, name, getattr(lv, attr), percentiles)
    out["conduit_concurrency"] = lv.concurrency if lv.request_rate is None else None
    out["conduit_marks"] = list(lv.marks)
    out["conduit_goodput_slos_ms"] = config.get("goodput_slos_ms")
    return out


def write_result(path: Path, levels: Sequence[LevelStats], config: Mapping[str, Any],
                 percentiles: Sequence[float]) -> None:
    """Write one ``level_result`` object per line to ``path``.

    Raises:
        ConduitError: the file cannot be written.
    """
    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    text = "".join(json.dumps(level_result(lv, config, percentiles, date)) + "\n" for lv in levels)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConduitError(f"cannot write {path}: {exc.strerror or exc}", hint="choose a writable path") from None
