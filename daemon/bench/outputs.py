"""What a finished sweep tells people: the saturation point and the ``max_num_seqs`` advice, the table's
rows, the report lines under it, and the JSON, CSV and PNG files.

Plain data and files only: the CLI draws the table (rich) and prints the lines; matplotlib is the optional
``plot`` extra, imported only when a plot is drawn.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from conduit.daemon.bench.stats import DEFAULT_PERCENTILES, PERCENTILE_METHOD, LevelStats, Summary, pct_name
from conduit.errors import ConduitError

DEFAULT_MIN_GROWTH = 0.10
PLOT_HINT = "install the plotting extra: pip install 'conduit[plot]' (matplotlib)"


@dataclass(frozen=True)
class Saturation:
    """Where throughput stopped growing, and the ``max_num_seqs`` that follows.

    Attributes:
        min_growth: the fraction used (0.10: a later level must add more than 10 % output tokens/s over the
            best so far for the curve to count as still growing).
        concurrency: the knee level (a concurrency, or a request rate in open loop); None when the curve was
            still growing at its last level or could not be judged.
        growth: the knee level's growth over the best level before it (None for the first level).
        recommended_max_num_seqs: the knee concurrency (closed loop only); None otherwise.
        explanation: one or two sentences for people.
        excluded: the marked levels left out of the curve (``LevelStats.marks``).
    """

    min_growth: float
    concurrency: float | None
    growth: float | None
    recommended_max_num_seqs: int | None
    explanation: str
    excluded: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "min_growth": self.min_growth,
            "concurrency": _num(self.concurrency),
            "growth": self.growth,
            "recommended_max_num_seqs": self.recommended_max_num_seqs,
            "explanation": self.explanation,
            "excluded_levels": [_num(x) for x in self.excluded],
        }


def _num(x: float | None) -> float | int | str | None:
    """A level for JSON: an int when whole, ``"inf"`` for an unbounded rate."""
    if x is None:
        return None
    if math.isinf(x):
        return "inf"
    return int(x) if x == int(x) else x


def knee(points: Sequence[tuple[float, float]], min_growth: float = DEFAULT_MIN_GROWTH) -> int:
    """The index of the knee of a throughput curve: the first level k after which no later level adds more
    than ``min_growth`` over the best so far, i.e. max(tps[k+1:]) <= (1 + min_growth) * max(tps[:k+1]).

    ``points`` are (level, tokens/s), sorted by level. The last index when the curve still grew at the end.
    Example: 488, 509, 582, 1876 tok/s -> 3 (the last level: still growing), not 1.

    Raises:
        ValueError: no points.
    """
    if not points:
        raise ValueError("no points")
    tps = [t for _, t in points]
    best = 0.0
    for k in range(len(tps)):
        best = max(best, tps[k])
        if all(t <= (1.0 + min_growth) * best for t in tps[k + 1:]):
            return k
    return len(tps) - 1  # not reached: at k = last the condition holds


def _word(rate_mode: bool, x: float) -> str:
    return (f"request rate {_num(x)}" + ("" if math.isinf(x) else " req/s")) if rate_mode else f"concurrency {_num(x)}"


def find_saturation(points: Sequence[tuple[float, float]], min_growth: float = DEFAULT_MIN_GROWTH, *,
                    rate_mode: bool = False, excluded: Sequence[float] = ()) -> Saturation:
    """Find the saturation point of a sweep from the whole curve.

    The knee (``knee``) is the smallest level after which no later level adds more than ``min_growth`` output
    tokens/s over the best so far. Why recommend it as vLLM's ``max_num_seqs``: it is the smallest batch at
    which the server already delivers (within ``min_growth``) every later level's throughput, so a larger batch
    buys almost no tokens/s while every running sequence decodes more slowly (higher TPOT) and new requests
    wait longer for their first token. When the knee is the last level, the curve was still growing: no
    advice, extend the sweep. Levels without throughput (every request failed) are left out, and so are the
    ``excluded`` (marked) ones.

    Args:
        points: (level, output tokens/s) per level; sorted here. Levels are concurrencies, or request rates
            with ``rate_mode`` (then no ``max_num_seqs`` is recommended: a rate is not a batch size).
        min_growth: the growth fraction (>= 0).
        excluded: levels marked as untrustworthy, named in the explanation.

    Raises:
        ValueError: ``min_growth`` negative.
    """
    if min_growth < 0:
        raise ValueError(f"min_growth must be >= 0, got {min_growth}")
    ex = tuple(sorted(excluded))
    note = (f" (left out, marked: {', '.join(_word(rate_mode, x) for x in ex)})" if ex else "")
    pts = sorted(p for p in points if p[1] > 0 and p[0] not in ex)
    if len(pts) < 2:
        why = ("a saturation point needs at least two levels that delivered tokens; run a sweep "
               "(e.g. --concurrency 1,2,4,8,16,32,64)" if len(points) - len(ex) < 2 else
               "fewer than two levels delivered any tokens: no saturation point can be judged; fix the errors "
               "above first (e.g. a prompt longer than the model's max_model_len: lower --prompt-tokens)")
        return Saturation(min_growth, None, None, None, why + note + ".", ex)
    k = knee(pts, min_growth)
    x, t = pts[k]
    if k == len(pts) - 1:
        why = (f"throughput was still growing by more than {min_growth:.0%} at {_word(rate_mode, x)}: no "
               "saturation seen; extend the sweep (e.g. --concurrency ...,128,256) before choosing max_num_seqs")
        return Saturation(min_growth, None, None, None, why + note + ".", ex)
    best_before = max((tt for _, tt in pts[:k]), default=None)
    growth = (t - best_before) / best_before if best_before else None
    later = max(pts[k + 1:], key=lambda p: p[1])
    why = (f"{t:.1f} tok/s at {_word(rate_mode, x)}; no later level added more than {min_growth:.0%} over it "
           f"(best later: {later[1]:.1f} at {_word(rate_mode, later[0])})")
    if rate_mode:
        why += ": the server saturates around this rate (a rate is not a batch size: run a --concurrency sweep "
        why += "for max_num_seqs)"
        return Saturation(min_growth, x, growth, None, why + note + ".", ex)
    why += (f": {_num(x)} concurrent sequences already reach the plateau; more would add latency (TPOT, "
            "queueing before the first token), not tokens/s")
    return Saturation(min_growth, x, growth, int(x), why + note + ".", ex)


def saturation_of(levels: Sequence[LevelStats], min_growth: float = DEFAULT_MIN_GROWTH) -> Saturation:
    """``find_saturation`` over measured levels (output tokens/s of successful requests); marked levels are
    left out."""
    rate_mode = any(lv.request_rate is not None for lv in levels)
    return find_saturation([(lv.x, lv.output_tokens_per_s) for lv in levels], min_growth, rate_mode=rate_mode,
                           excluded=[lv.x for lv in levels if lv.marks])


@dataclass
class SweepResult:
    """A finished sweep: settings (key-free), one ``LevelStats`` per level in run order, the saturation, and
    the warnings given before the first request (prompt sizing)."""

    config: dict[str, Any]
    levels: list[LevelStats]
    saturation: Saturation
    warnings: list[str] = field(default_factory=list)

    @property
    def total_ok(self) -> int:
        """Successful requests over all levels."""
        return sum(lv.ok for lv in self.levels)

    @property
    def percentiles(self) -> tuple[float, ...]:
        """The percentiles the sweep reports (its config's, default 50/90/99)."""
        return tuple(self.config.get("percentiles") or DEFAULT_PERCENTILES)

    def to_dict(self, with_requests: bool = True) -> dict[str, Any]:
        """The JSON document ``write_json`` writes."""
        return {
            "conduit_bench": 2,
            "config": self.config,
            "percentile_method": PERCENTILE_METHOD,
            "units": {"latency": "ms", "throughput": "per second"},
            "levels": [lv.to_dict(with_requests, self.percentiles) for lv in self.levels],
            "saturation": self.saturation.to_dict(),
            "warnings": list(self.warnings),
        }


# --------------------------------------------------------------------------------------------------------
# For people: the table and the lines under it


def table_columns(sweep: SweepResult) -> tuple[str, ...]:
    """The table's headers: level, ok/req, TTFT/TPOT/ITL/e2e at the sweep's percentiles, throughputs,
    goodput (with SLOs), errors."""
    ps = "/".join(pct_name(q)[1:] for q in sweep.percentiles)
    rate_mode = any(lv.request_rate is not None for lv in sweep.levels)
    cols = ["rate" if rate_mode else "conc", "ok/req"] + [f"{m} ms\np{ps}" for m in ("TTFT", "TPOT", "ITL", "e2e")]
    cols += ["out tok/s", "req/s"]
    if any(lv.good is not None for lv in sweep.levels):
        cols.append("goodput/s")
    return (*cols, "errors")


TABLE_COLUMNS: tuple[str, ...] = ("conc", "ok/req", "TTFT ms\np50/90/99", "TPOT ms\np50/90/99",
                                  "ITL ms\np50/90/99", "e2e ms\np50/90/99", "out tok/s", "req/s", "errors")


def describe_errors(errors: Mapping[str, int]) -> str:
    """``"http_5xx=3, connect=1"`` or ``"-"``."""
    return ", ".join(f"{k}={v}" for k, v in errors.items()) or "-"


def _cells(s: Summary, percentiles: Sequence[float]) -> str:
    def fmt(v: float | None) -> str:
        return "-" if v is None else (f"{v * 1000:.0f}" if v >= 0.0995 else f"{v * 1000:.3g}")

    return "/".join(fmt(s.pct(q)) for q in percentiles)


def table_rows(sweep: SweepResult) -> list[tuple[str, ...]]:
    """One row of ``table_columns`` cells per level; the saturation level is marked `` *``, a marked level
    (no advice drawn from it) `` !``."""
    sat, ps = sweep.saturation.concurrency, sweep.percentiles
    goodput = any(lv.good is not None for lv in sweep.levels)
    rows = []
    for lv in sweep.levels:
        tag = " *" if sat is not None and lv.x == sat else (" !" if lv.marks else "")
        row = [f"{_num(lv.x)}{tag}", f"{lv.ok}/{lv.requests}",
               *(_cells(s, ps) for s in (lv.ttft, lv.tpot, lv.itl, lv.e2e)),
               f"{lv.output_tokens_per_s:.1f}", f"{lv.requests_per_s:.2f}"]
        if goodput:
            row.append("-" if lv.goodput_per_s is None else f"{lv.goodput_per_s:.2f}")
        rows.append((*row, describe_errors(lv.errors)))
    return rows


def report_lines(sweep: SweepResult) -> list[str]:
    """The lines under the table: the percentile method, one example per error kind and level, a hint when a
    prompt was longer than the model's context, the marked levels, an undercount warning, the
    ``max_num_seqs`` advice and its explanation."""
    lines = [f"percentiles: {PERCENTILE_METHOD}; * = saturation level, ! = marked (no advice drawn from it)"]
    too_long = False
    for lv in sweep.levels:
        for kind, detail in lv.error_examples.items():
            lines.append(f"  {lv.label}: {kind} e.g. {detail}")
            too_long = too_long or "maximum context length" in detail  # vLLM's words for it
        lines += [f"  {lv.label}: marked: {m}" for m in lv.marks]
    if too_long:
        lines.append("hint: the prompt plus max_tokens is longer than the model's max_model_len: lower "
                     "--prompt-tokens (the server's own count is the table's input tokens)")
    missing = sum(lv.usage_missing for lv in sweep.levels)
    if missing:
        lines.append(f"warning: {missing} requests came without the server's usage count: their output tokens "
                     "are counted from content chunks and may undercount (a chunk can carry several tokens); "
                     "keep --stream-usage on for the server's own count")
    sat = sweep.saturation
    if sat.recommended_max_num_seqs is not None:
        lines.append(f"saturation at concurrency {sat.recommended_max_num_seqs}: recommend max_num_seqs = "
                     f"{sat.recommended_max_num_seqs}")
    lines.append(sat.explanation)
    return lines


# --------------------------------------------------------------------------------------------------------
# Files

CSV_FIELDS: tuple[str, ...] = (
    "concurrency", "request_rate", "requests", "ok", "errors", "errors_by_kind", "wall_s", "output_tokens",
    "output_tokens_per_s", "requests_per_s", "goodput_per_s",
    "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "ttft_mean_ms",
    "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "tpot_mean_ms",
    "itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "itl_mean_ms",
    "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms", "e2e_mean_ms", "mean_input_tokens", "marks",
)


def csv_rows(sweep: SweepResult) -> list[dict[str, Any]]:
    """One flat dict per level with the ``CSV_FIELDS`` keys (latencies in ms; empty string for None)."""
    rows = []
    for lv in sweep.levels:
        row: dict[str, Any] = {
            "concurrency": lv.concurrency, "requests": lv.requests, "ok": lv.ok, "errors": lv.error_count,
            "errors_by_kind": ";".join(f"{k}={v}" for k, v in lv.errors.items()),
            "wall_s": lv.wall_s, "output_tokens": lv.output_tokens,
            "output_tokens_per_s": lv.output_tokens_per_s, "requests_per_s": lv.requests_per_s,
            "mean_input_tokens": lv.mean_input_tokens, "request_rate": _num(lv.request_rate),
            "goodput_per_s": lv.goodput_per_s, "marks": " | ".join(lv.marks),
        }
        for name, summ in (("ttft", lv.ttft), ("tpot", lv.tpot), ("itl", lv.itl), ("e2e", lv.e2e)):
            for stat, v in summ.as_ms().items():
                row[f"{name}_{stat}_ms"] = v
        rows.append({k: ("" if row[k] is None else row[k]) for k in CSV_FIELDS})
    return rows


def _cannot_write(path: Path, exc: OSError) -> ConduitError:
    return ConduitError(f"cannot write {path}: {exc.strerror or exc}", hint="choose a writable path")


def _write(path: Path, writer: Callable[[TextIO], object]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", newline="") as fh:
            writer(fh)
    except OSError as exc:
        raise _cannot_write(path, exc) from None


def write_json(path: Path, sweep: SweepResult) -> None:
    """Write ``sweep.to_dict()`` (with per-request records) as indented JSON. Raises ConduitError."""
    _write(path, lambda fh: fh.write(json.dumps(sweep.to_dict(), indent=2) + "\n"))


def write_csv(path: Path, sweep: SweepResult) -> None:
    """Write one row per level with ``CSV_FIELDS`` columns. Raises ConduitError."""

    def w(fh: TextIO) -> None:
        out = csv.DictWriter(fh, fieldnames=list(CSV_FIELDS))
        out.writeheader()
        out.writerows(csv_rows(sweep))

    _write(path, w)


def plotting_available() -> bool:
    """True when matplotlib can be imported (the optional ``plot`` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def require_plotting() -> None:
    """Raise ConduitError (hint: the ``plot`` extra) unless matplotlib can be imported."""
    if not plotting_available():
        raise ConduitError("--plot needs matplotlib, which is not installed", hint=PLOT_HINT)


def write_plot(path: Path, sweep: SweepResult) -> None:
    """Draw output tokens/s and TTFT p50/p99 against concurrency into a PNG, marking the saturation level.

    Raises:
        ConduitError: matplotlib is not installed (hint: the ``plot`` extra), or the file cannot be written.
    """
    require_plotting()
    import matplotlib  # lazy: an optional extra, and slow to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted((lv for lv in sweep.levels if not math.isinf(lv.x)), key=lambda lv: lv.x)
    xs = [lv.x for lv in levels]
    rate_mode = any(lv.request_rate is not None for lv in levels)
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(7, 6))
    try:
        ax1.plot(xs, [lv.output_tokens_per_s for lv in levels], marker="o")
        ax1.set_ylabel("output tokens/s")
        ax1.set_title(f"conduit bench: {sweep.config.get('model', '')}")
        for stat in ("p50", "p99"):
            ax2.plot(xs, [lv.ttft.as_ms()[stat] for lv in levels], marker="o", label=f"TTFT {stat}")
        ax2.set_ylabel("TTFT (ms)")
        ax2.set_xlabel("request rate (req/s)" if rate_mode else "concurrency")
        ax2.set_xscale("log", base=2)
        ax2.legend()
        sat = sweep.saturation.concurrency
        if sat is not None:
            for ax in (ax1, ax2):
                ax.axvline(sat, linestyle="--", color="grey")
        fig.tight_layout()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, format="png")
        except OSError as exc:
            raise _cannot_write(path, exc) from None
    finally:
        plt.close(fig)


def write_outputs(sweep: SweepResult, *, json_path: Path | None = None, csv_path: Path | None = None,
                  plot_path: Path | None = None, on_written: Callable[[Path], None] | None = None) -> None:
    """Write each file that has a path, in the order JSON, CSV, PNG; ``on_written(path)`` after each.

    Raises:
        ConduitError: from the writers (a file written before the failing one stays).
    """
    writers: list[tuple[Path | None, Callable[[Path, SweepResult], None]]] = [
        (json_path, write_json), (csv_path, write_csv), (plot_path, write_plot)]
    for path, writer in writers:
        if path is not None:
            writer(path, sweep)
            if on_written is not None:
                on_written(path)
