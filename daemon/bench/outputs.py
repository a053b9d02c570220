"""What a finished sweep tells people: the saturation point and the ``max_num_seqs`` advice, the table's
rows, the report lines under it, and the JSON, CSV and PNG files.

Plain data and files only: the CLI draws the table (rich) and prints the lines; matplotlib is the optional
``plot`` extra, imported only when a plot is drawn.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from conduit.daemon.bench.stats import PERCENTILE_METHOD, LevelStats, Summary
from conduit.errors import ConduitError

DEFAULT_MIN_GROWTH = 0.10
PLOT_HINT = "install the plotting extra: pip install 'conduit[plot]' (matplotlib)"


@dataclass(frozen=True)
class Saturation:
    """Where throughput stopped growing, and the ``max_num_seqs`` that follows.

    Attributes:
        min_growth: the fraction used (0.10 = a level must add at least 10% output tokens/s over the
            previous one to count as still growing).
        concurrency: the first level whose growth was below ``min_growth``; None when every step grew enough.
        growth: that level's growth versus the previous level (0.04 = +4%, -0.2 = throughput fell 20%).
        recommended_max_num_seqs: the saturation level; the previous level when throughput *fell* there
            (the previous level was the peak); None when no saturation was seen.
        explanation: one or two sentences for people.
    """

    min_growth: float
    concurrency: int | None
    growth: float | None
    recommended_max_num_seqs: int | None
    explanation: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "min_growth": self.min_growth,
            "concurrency": self.concurrency,
            "growth": self.growth,
            "recommended_max_num_seqs": self.recommended_max_num_seqs,
            "explanation": self.explanation,
        }


def _saturated(prev: tuple[int, float], cur: tuple[int, float], min_growth: float) -> Saturation | None:
    """The verdict on one step of the sweep: a ``Saturation`` when it grew less than ``min_growth``."""
    (c_prev, t_prev), (c, t) = prev, cur
    growth = (t - t_prev) / t_prev
    if growth >= min_growth:
        return None
    if t < t_prev:
        why = (f"throughput fell {-growth:.0%} from concurrency {c_prev} to {c}: the server was already "
               f"saturated at {c_prev}; max_num_seqs = {c_prev} keeps its peak without the overload.")
        return Saturation(min_growth, c, growth, c_prev, why)
    why = (f"throughput grew only {growth:.1%} from concurrency {c_prev} to {c} (less than "
           f"{min_growth:.0%}): {c} concurrent sequences already reach the plateau; more would add "
           f"latency (TPOT, queueing before the first token), not tokens/s.")
    return Saturation(min_growth, c, growth, c, why)


def find_saturation(points: Sequence[tuple[int, float]], min_growth: float = DEFAULT_MIN_GROWTH) -> Saturation:
    """Find the saturation point of a concurrency sweep.

    The saturation level is the first level (in increasing concurrency) whose output tokens/s grew by less
    than ``min_growth`` (a fraction) versus the previous level: growth = (tps[i] - tps[i-1]) / tps[i-1].
    A step whose previous level had no throughput (every request failed) is not judged.

    Why recommend that level as vLLM's ``max_num_seqs``: it is the smallest batch at which the server already
    delivers its plateau throughput (within ``min_growth`` of the best seen), so a larger batch buys almost no
    tokens/s while every running sequence decodes more slowly (higher TPOT) and new requests wait longer for
    their first token; a smaller one leaves measured throughput unused. When throughput *fell* at that level
    (overload, preemption, errors), the previous level was the peak and is recommended instead.

    Args:
        points: (concurrency, output tokens/s) per level; sorted by concurrency here.
        min_growth: the growth fraction below which a level counts as saturated (>= 0).

    Raises:
        ValueError: ``min_growth`` negative.
    """
    if min_growth < 0:
        raise ValueError(f"min_growth must be >= 0, got {min_growth}")
    pts = sorted(points)
    if len(pts) < 2:
        return Saturation(min_growth, None, None, None,
                          "a saturation point needs at least two concurrency levels; run a sweep "
                          "(e.g. --concurrency 1,2,4,8,16,32,64).")
    if sum(1 for _, t in pts if t > 0) < 2:
        return Saturation(min_growth, None, None, None,
                          "fewer than two levels delivered any tokens: no saturation point can be judged; fix "
                          "the errors above first (e.g. a prompt longer than the model's max_model_len: lower "
                          "--prompt-tokens).")
    for prev, cur in zip(pts, pts[1:], strict=False):
        if prev[1] > 0 and (sat := _saturated(prev, cur, min_growth)) is not None:
            return sat
    why = (f"throughput kept growing by at least {min_growth:.0%} per level up to concurrency {pts[-1][0]}: "
           "no saturation seen; extend the sweep (e.g. --concurrency ...,128,256) before choosing max_num_seqs.")
    return Saturation(min_growth, None, None, None, why)


def saturation_of(levels: Sequence[LevelStats], min_growth: float = DEFAULT_MIN_GROWTH) -> Saturation:
    """``find_saturation`` over measured levels (output tokens/s of successful requests)."""
    return find_saturation([(lv.concurrency, lv.output_tokens_per_s) for lv in levels], min_growth)


@dataclass
class SweepResult:
    """A finished sweep: settings (key-free), one ``LevelStats`` per level in run order, the saturation."""

    config: dict[str, Any]
    levels: list[LevelStats]
    saturation: Saturation

    @property
    def total_ok(self) -> int:
        """Successful requests over all levels."""
        return sum(lv.ok for lv in self.levels)

    def to_dict(self, with_requests: bool = True) -> dict[str, Any]:
        """The JSON document ``write_json`` writes."""
        return {
            "conduit_bench": 1,
            "config": self.config,
            "percentile_method": PERCENTILE_METHOD,
            "units": {"latency": "ms", "throughput": "per second"},
            "levels": [lv.to_dict(with_requests) for lv in self.levels],
            "saturation": self.saturation.to_dict(),
        }


# --------------------------------------------------------------------------------------------------------
# For people: the table and the lines under it

TABLE_COLUMNS: tuple[str, ...] = ("conc", "ok/req", "TTFT ms\np50/90/99", "TPOT ms\np50/90/99",
                                  "e2e ms\np50/90/99", "out tok/s", "req/s", "errors")


def describe_errors(errors: Mapping[str, int]) -> str:
    """``"http_5xx=3, connect=1"`` or ``"-"``."""
    return ", ".join(f"{k}={v}" for k, v in errors.items()) or "-"


def _three(s: Summary) -> str:
    vals = s.as_ms()
    return "/".join("-" if (v := vals[k]) is None else f"{v:.0f}" for k in ("p50", "p90", "p99"))


def table_rows(sweep: SweepResult) -> list[tuple[str, ...]]:
    """One row of ``TABLE_COLUMNS`` cells per level; the saturation level's concurrency is marked `` *``."""
    sat = sweep.saturation.concurrency
    return [(f"{lv.concurrency}{' *' if lv.concurrency == sat else ''}", f"{lv.ok}/{lv.requests}",
             _three(lv.ttft), _three(lv.tpot), _three(lv.e2e),
             f"{lv.output_tokens_per_s:.1f}", f"{lv.requests_per_s:.2f}", describe_errors(lv.errors))
            for lv in sweep.levels]


def report_lines(sweep: SweepResult) -> list[str]:
    """The lines under the table: the percentile method, one example per error kind and level, a hint when a
    prompt was longer than the model's context, the ``max_num_seqs`` advice and its explanation."""
    lines = [f"percentiles: {PERCENTILE_METHOD}; * = saturation level"]
    too_long = False
    for lv in sweep.levels:
        for kind, detail in lv.error_examples.items():
            lines.append(f"  concurrency {lv.concurrency}: {kind} e.g. {detail}")
            too_long = too_long or "maximum context length" in detail  # vLLM's words for it
    if too_long:
        # Synthetic prompts count words; a small or byte-level tokenizer makes several tokens of each.
        lines.append("hint: the prompt plus max_tokens is longer than the model's max_model_len: lower "
                     "--prompt-tokens (the server's own count is the table's input tokens)")
    sat = sweep.saturation
    if sat.recommended_max_num_seqs is not None:
        lines.append(f"saturation at concurrency {sat.concurrency}: recommend max_num_seqs = "
                     f"{sat.recommended_max_num_seqs}")
    lines.append(sat.explanation)
    return lines


# --------------------------------------------------------------------------------------------------------
# Files

CSV_FIELDS: tuple[str, ...] = (
    "concurrency", "requests", "ok", "errors", "errors_by_kind", "wall_s", "output_tokens",
    "output_tokens_per_s", "requests_per_s",
    "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "ttft_mean_ms",
    "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "tpot_mean_ms",
    "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms", "e2e_mean_ms", "mean_input_tokens",
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
            "mean_input_tokens": lv.mean_input_tokens,
        }
        for name, summ in (("ttft", lv.ttft), ("tpot", lv.tpot), ("e2e", lv.e2e)):
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

    levels = sorted(sweep.levels, key=lambda lv: lv.concurrency)
    xs = [lv.concurrency for lv in levels]
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(7, 6))
    try:
        ax1.plot(xs, [lv.output_tokens_per_s for lv in levels], marker="o")
        ax1.set_ylabel("output tokens/s")
        ax1.set_title(f"conduit bench: {sweep.config.get('model', '')}")
        for stat in ("p50", "p99"):
            ax2.plot(xs, [lv.ttft.as_ms()[stat] for lv in levels], marker="o", label=f"TTFT {stat}")
        ax2.set_ylabel("TTFT (ms)")
        ax2.set_xlabel("concurrency")
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
