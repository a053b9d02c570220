"""How many GPUs a model needs: the smallest tensor (and pipeline) parallel size that fits, and when data
parallelism is the better use of the GPUs. Drives the ledger (``ledger.plan``) for each candidate through the
``PlanOnce`` it is given (no import of the ledger here: the ledger imports this module).

The order of the search: ``tensor_parallel_size`` 1, 2, 4, 8 ... up to the GPUs of one node
(``gpus_per_node``, default 8; tensor parallelism needs the fast links inside a node), then
``pipeline_parallel_size`` 2, 3, ... with TP at a whole node (pipeline stages talk once per step, so they can
span nodes). Sizes vLLM refuses for the model (``parallel.check``) are skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

from conduit.daemon.plan.errors import PlanArgumentError
from conduit.daemon.plan.model import ModelInfo
from conduit.daemon.plan.parallel import Parallel, check
from conduit.daemon.plan.settings import PlanSettings
from conduit.units import format_bytes

MAX_PP = 16  # the longest pipeline the search proposes


class LedgerLike(Protocol):
    """The ledger fields the search reads (``ledger.Ledger``); sizes per GPU of the limiting stage."""

    @property
    def verdict(self) -> object: ...
    @property
    def weights_bytes(self) -> int: ...
    @property
    def kv_bytes_per_token(self) -> int: ...
    @property
    def kv_tokens(self) -> int: ...
    @property
    def max_concurrency(self) -> float: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def max_num_seqs(self) -> int: ...


PlanOnce = Callable[[PlanSettings], LedgerLike]
#: ``(setting, value, reason)``: the ledger turns these into its ``Fix``.
FixTuple = tuple[str, str, str]


def _fits(led: LedgerLike) -> bool:
    return str(getattr(led.verdict, "value", led.verdict)) != "does_not_fit"


def candidates(model: ModelInfo, s: PlanSettings) -> list[tuple[int, int]]:
    """``(tp, pp)`` pairs in search order (module docstring), only those vLLM accepts for ``model``."""
    node = s.gpus_per_node
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= node] + ([node] if node & (node - 1) else [])
    pairs = [(t, 1) for t in tps] + [(node, p) for p in range(2, min(MAX_PP, model.num_layers) + 1)]
    out = []
    for tp, pp in pairs:
        try:
            check(model, Parallel(tp, pp, s.data_parallel_size, s.enable_expert_parallel))
        except PlanArgumentError:
            continue
        out.append((tp, pp))
    return out


def _figures(led: LedgerLike) -> str:
    """Per-GPU figures of a candidate, in one phrase."""
    return (f"{format_bytes(led.weights_bytes)} of weights and {led.kv_bytes_per_token:,} KV bytes per token "
            f"per GPU, {led.kv_tokens:,} KV tokens, {led.max_concurrency:.2f}x concurrency at "
            f"{led.max_model_len:,} tokens")


def _with(s: PlanSettings, tp: int, pp: int, dp: int = 1) -> PlanSettings:
    return dataclasses.replace(s, tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp)


def smallest_fit(model: ModelInfo, s: PlanSettings, once: PlanOnce,
                 above: int = 0) -> tuple[int, int, LedgerLike] | None:
    """The first ``(tp, pp, ledger)`` in search order with more than ``above`` GPUs per replica where one
    full-length sequence fits (verdict not ``does_not_fit``), or None."""
    for tp, pp in candidates(model, s):
        if tp * pp <= above:
            continue
        led = once(_with(s, tp, pp, s.data_parallel_size))
        if _fits(led):
            return tp, pp, led
    return None


def parallel_fix(model: ModelInfo, s: PlanSettings, once: PlanOnce, what: str) -> list[FixTuple]:
    """The tensor (and pipeline) parallel size to set when the current one does not hold ``what``."""
    found = smallest_fit(model, s, once, above=s.tensor_parallel_size * s.pipeline_parallel_size)
    if found is None:
        return []
    tp, pp, led = found
    where = f"{tp * pp} GPUs like this one" + (f" ({pp} stages of {tp}, across nodes)" if pp > 1 else "")
    fixes = [("tensor_parallel_size", str(tp), f"{where} hold {what}: {_figures(led)}")]
    if pp > 1:
        fixes.append(("pipeline_parallel_size", str(pp), f"tensor parallelism stops at one node "
                      f"({s.gpus_per_node} GPUs); the layers are split over {pp} stages"))
    return fixes


def dp_advice(model: ModelInfo, s: PlanSettings, once: PlanOnce, current_total: float) -> str | None:
    """"one replica fits on N GPUs: with K GPUs use data_parallel_size = K/N for throughput", or None.

    K is ``gpus_available`` (else the tp x pp x dp asked); N the smallest replica that fits (search order).
    Said when K holds at least two such replicas, the settings do not already use that split, and the
    replicas serve at least as much: ``K/N`` x its concurrency is at least ``current_total`` (the asked
    settings' concurrency x dp), each concurrency capped at ``max_num_seqs`` (the scheduler runs no more). A
    larger TP that buys KV room for many more sequences than DP would is left alone.
    """
    asked = s.tensor_parallel_size * s.pipeline_parallel_size * s.data_parallel_size
    k = s.gpus_available or asked
    found = smallest_fit(model, dataclasses.replace(s, data_parallel_size=1), once)
    if found is None:
        return None
    tp, pp, led = found
    n = tp * pp
    replicas = k // n
    if replicas < 2 or (s.tensor_parallel_size, s.pipeline_parallel_size, s.data_parallel_size) == (tp, pp, replicas):
        return None
    if replicas * min(led.max_concurrency, led.max_num_seqs) < current_total:
        return None
    sizes = f"tensor_parallel_size={tp}" + (f", pipeline_parallel_size={pp}" if pp > 1 else "")
    return (f"one replica fits on {n} GPU{'s' if n > 1 else ''} ({sizes}: {_figures(led)}): with {k} GPUs use "
            f"data_parallel_size = {replicas} for throughput ({replicas} replicas of {led.max_concurrency:.2f}x)")
