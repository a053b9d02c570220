"""``conduit bench --compare-vllm KEY=VALUE``: the supervised vLLM before and after a change to ``[vllm]``.

Examples::

    conduit bench --compare-vllm max_num_seqs=4 --concurrency 1,2,4,8 --requests 64
    conduit bench --compare-vllm tensor_parallel_size=2 --compare-vllm max_num_seqs=128 --keep --json tp.json

The steps, in order:

1. the agent must report the supervised vLLM ``ready`` (``GET /v1/vllm``; waited for up to ``--ready-timeout``),
   at the base URL of the profile's ``[vllm]`` (else the agent follows another profile);
2. the sweep against the ``local`` channel, as it is ("before");
3. the change is written into the profile's ``[vllm]`` table (``conduit.daemon.config.edit.set_vllm_keys``:
   tomlkit, comments kept, validated before writing), and the agent, which follows the profile, relaunches vLLM;
   the wait ends when ``/v1/vllm`` is ``ready`` with a new pid (``--ready-timeout``; ``failed`` ends it at once);
4. the same sweep (the same sized prompts, lengths, levels, request count and seed) again ("after");
5. both curves, the saturation of each and the efficiency are printed (``conduit.daemon.bench.compare``); with a
   change to ``tensor_parallel_size`` / ``pipeline_parallel_size`` / ``data_parallel_size`` the GPU counts are
   ``tp x pp x dp`` of each table, so the efficiency is the scaling efficiency;
6. without ``--keep`` the previous values are written back (also after a failure or Ctrl-C in steps 3-5) and
   the wait of step 3 is repeated.

A change that leaves vLLM's launch as it is (``VllmSettings.launch_fingerprint``: timeouts, intervals, the restart
policy) is refused before any request: the agent would not relaunch anything. ``KEY=`` removes the key (vLLM's
default). Values are read as TOML (``4``, ``0.85``, ``true``, ``"text"``); anything else is taken as a string.

Errors: usage mistakes exit 3 (``typer.BadParameter``); no agent exits 2 (``AgentUnreachable``); vLLM not ready
in time or ``failed`` exits 1 (``ConduitError`` naming the state, the reason and what to do).
"""

from __future__ import annotations

import asyncio
import time
import tomllib
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import tomlkit
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from conduit.daemon.agent.client import AgentClient
from conduit.daemon.bench import compare, target
from conduit.daemon.bench.compare import CompareResult, GpuCount, Side
from conduit.daemon.bench.runner import BenchConfig
from conduit.daemon.cli.app import state
from conduit.daemon.cli.console import make_console
from conduit.daemon.config.edit import set_vllm_keys
from conduit.daemon.config.profile import LOCAL_CHANNEL, LoadedProfile, load_profile, parse_profile
from conduit.daemon.config.vllm import SUPERVISION_ONLY, VllmSettings
from conduit.errors import ConduitError, ProfileError

PARALLEL_KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


def parse_change(text: str) -> tuple[str, Any]:
    """``"max_num_seqs=4"`` -> ``("max_num_seqs", 4)``; ``"KEY="`` -> ``(KEY, None)`` (remove the key).

    Raises:
        ValueError: no ``=``, a key ``[vllm]`` does not have, a nested key, or a supervision-only key.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError(f"{text!r} is not KEY=VALUE")
    if key not in VllmSettings.model_fields:
        raise ValueError(f"[vllm] has no key {key!r}")
    if key in SUPERVISION_ONLY or key == "model":
        raise ValueError(f"[vllm].{key} is not compared this way" + (
            "" if key == "model" else " (it changes how conduit watches vLLM, not how vLLM runs)"))
    raw = raw.strip()
    if not raw:
        return key, None
    try:
        return key, tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return key, raw


def _words(changes: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {'(removed)' if v is None else tomlkit.item(v).as_string()}" for k, v in changes.items())


def preview(text: str, path: Path, changes: dict[str, Any]) -> VllmSettings:
    """The ``[vllm]`` settings ``changes`` would give the profile ``text``, validated (nothing is written).

    Raises:
        ProfileError: no ``[vllm]`` table, or the changed table is invalid (naming ``[vllm].<key>``).
    """
    doc = tomlkit.parse(text)
    table = doc.get("vllm")
    if not isinstance(table, dict):
        raise ProfileError(f"{path}: the profile has no [vllm] table",
                           "--compare-vllm changes the local vLLM the agent supervises: add a [vllm] table")
    for key, value in changes.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    settings = parse_profile(tomlkit.dumps(doc), path).vllm
    assert settings is not None
    return settings


def gpu_count(v: VllmSettings, when: str) -> GpuCount:
    """``tensor_parallel_size x pipeline_parallel_size x data_parallel_size`` of ``v`` (each 1 when unset)."""
    tp, pp, dp = v.tensor_parallel_size or 1, v.pipeline_parallel_size or 1, v.data_parallel_size or 1
    return GpuCount(tp * pp * dp, f"[vllm] {when}: tensor {tp} x pipeline {pp} x data {dp}")


@dataclass
class AgentVllm:
    """The supervised vLLM as the agent reports it (``GET /v1/vllm``), and the bounded wait for ``ready``."""

    socket: Path | None = None
    poll_s: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    seen_pids: set[int] = field(default_factory=set)  # every vLLM pid the waits saw (a caller may clear it)

    def snapshot(self) -> dict[str, Any]:
        """``/v1/vllm``. Raises AgentUnreachable (exit 2) or AgentError."""
        with AgentClient(self.socket, timeout_s=10.0) as agent:
            return agent.get("/v1/vllm")

    def wait_ready(self, timeout_s: float, why: str, avoid: Collection[int | None] = (),
                   failed_ok: bool = False) -> dict[str, Any]:
        """Poll until vLLM is ``ready`` with a pid not in ``avoid`` (empty: any; else a relaunched process).

        Args:
            failed_ok: a ``failed`` state is waited out too (restoring after a change that failed: the agent
                starts vLLM again once it reads the restored table).
        Raises:
            ConduitError: ``failed`` (unless ``failed_ok``) or ``not_configured``, at once; not ready within
                ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            snap = self.snapshot()
            st, pid = snap.get("state"), snap.get("pid")
            if isinstance(pid, int):
                self.seen_pids.add(pid)
            relaunched = not avoid or (pid is not None and pid not in avoid)
            if st == "ready" and relaunched:
                return snap
            if st == "not_configured" or (st == "failed" and not failed_ok):
                failure = snap.get("last_failure") or {}
                reason = f": {failure.get('reason')}" if failure.get("reason") else ""
                raise ConduitError(f"{why}: the agent reports vLLM {st}{reason}",
                                   failure.get("fix") or "see `conduit status` and the vLLM log it names")
            if time.monotonic() >= deadline:
                raise ConduitError(
                    f"{why}: vLLM was not ready within {timeout_s:g} s (state {st}"
                    + ("" if relaunched else ", still the process from before the change") + ")",
                    "raise --ready-timeout, or check that the agent follows this profile (`conduit status`)")
            self.sleep(self.poll_s)


def _sweep(cfg: BenchConfig, label: str, gpus: GpuCount, util: UtilSampler, err: Console) -> tuple[Side, BenchConfig]:
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err) as progress:
        task = progress.add_task(label, total=cfg.requests * cfg.level_count)
        return asyncio.run(compare.run_side(
            cfg, label, gpus, gpu_util=util, on_result=lambda _r: progress.update(task, advance=1),
            on_warning=lambda w: progress.console.print(f"[yellow]warning:[/] {w}", highlight=False)))


def _restore(o: VllmCompare, agent: AgentVllm, path: Path, previous: dict[str, Any] | None,
             pids: tuple[int | None, int | None], err: Console, failing: bool) -> None:
    """Put ``previous`` back into ``[vllm]`` of ``path`` (unless ``--keep``) and wait for a vLLM other than the
    one before the change and the one the change made (``pids``: ``(before, relaunched or None)``; with None,
    every pid seen since the change). ``failing``: an error is on its way out, so a failure here is printed
    beside it rather than raised over it.

    Raises:
        ConduitError: the restore could not be written (names the file and the keys to set back by hand), or
            vLLM was not ready again in time; only when not ``failing``.
    """
    if previous is None:
        return
    if o.keep:
        err.print(f"kept {_words(o.changes)} in [vllm] of {path} (--keep)", markup=False)
        return
    try:
        set_vllm_keys(path, previous)
        err.print(f"restored [vllm] of {path}; waiting for vLLM to be ready again", markup=False)
        before, relaunched = pids
        changed = {relaunched} if relaunched is not None else agent.seen_pids - {before}
        agent.wait_ready(o.ready_timeout_s, "after restoring [vllm]", avoid=changed | {before} if changed else (),
                         failed_ok=True)
    except ConduitError as exc:
        if isinstance(exc, ProfileError):
            old = ", ".join(f"`[vllm].{k} = {'(absent)' if v is None else tomlkit.item(v).as_string().strip()}`"
                            for k, v in previous.items())
            exc = ConduitError(f"could not restore {old} in {path}: {exc.message}; set it back by hand",
                               exc.hint or "edit the file, then check `conduit status`")
        if not failing:
            raise exc from None
        err.print(f"error: {exc.message}", markup=False)


class UtilSampler(Protocol):
    """The agent's GPU utilisation sampler (``conduit.daemon.cli.bench._AgentGpus``)."""

    note: str | None

    def __call__(self) -> float | None: ...


ShowCompare = Callable[[CompareResult, str, Path | None, Console, Console], None]


@dataclass(frozen=True)
class VllmCompare:
    """What ``conduit bench`` hands this module (it checks the options; this module imports nothing of it).

    Attributes:
        changes: ``{key: value or None}`` from ``parse_change``.
        build: the sweep's settings against the ``local`` channel for a model id (``cli.bench.build_config``).
        show: prints the comparison and writes ``--json`` (``cli.bench.print_compare``).
        util: the agent's GPU utilisation sampler.
        model: ``--model`` (None: the ``[vllm]`` table's served name).
        gpus: ``--gpus A,B`` (None: from the two tables).
        keep: ``--keep``; ready_timeout_s: ``--ready-timeout`` in seconds; json_path: ``--json``.
    """

    changes: dict[str, Any]
    build: Callable[[str], BenchConfig]
    show: ShowCompare
    util: UtilSampler
    model: str | None = None
    gpus: tuple[int, int] | None = None
    keep: bool = False
    ready_timeout_s: float = 600.0
    json_path: Path | None = None


def before_and_after(changes: dict[str, Any]) -> tuple[LoadedProfile, VllmSettings, VllmSettings]:
    """The profile, its ``[vllm]`` table and that table with ``changes`` applied (not written), for a
    ``--compare-vllm`` run (this sweep's and ``bench --dataset agent``'s).

    Raises:
        ProfileError: the profile has no ``[vllm]`` table. typer.BadParameter (exit 3): a change the table
            refuses, or one that does not change how vLLM is launched (the agent would not restart it).
    """
    loaded = load_profile(state.profile)
    if loaded.vllm is None:
        raise ProfileError(f"{loaded.path}: the profile has no [vllm] table",
                           "--compare-vllm changes the local vLLM the agent supervises: add a [vllm] table")
    try:
        before, after = loaded.vllm, preview(loaded.text, loaded.path, changes)
    except ProfileError as exc:  # the value given is what is wrong: a usage mistake
        raise typer.BadParameter(exc.message, param_hint="--compare-vllm") from None
    if after.launch_fingerprint() == before.launch_fingerprint():
        raise typer.BadParameter(f"{_words(changes)} does not change how vLLM is launched: the agent would not "
                                 "restart it", param_hint="--compare-vllm")
    return loaded, before, after


def ready_before(agent: AgentVllm, timeout_s: float, path: Path, before: VllmSettings) -> dict[str, Any]:
    """Wait (``timeout_s`` seconds) for the agent's vLLM to be ready before the change; its snapshot.

    Raises:
        ConduitError: the agent supervises a vLLM at another base URL than ``[vllm]`` of ``path``, or vLLM was
            not ready in time (``AgentVllm.wait_ready``).
    """
    snap = agent.wait_ready(timeout_s, "before the change")
    if snap.get("base_url") != before.base_url:
        raise ConduitError(f"the agent supervises vLLM at {snap.get('base_url')}, but [vllm] of {path} "
                           f"is at {before.base_url}", "run the agent with this profile (CONDUIT_PROFILE)")
    return snap


def run_compare_vllm(o: VllmCompare) -> int:
    """The whole ``--compare-vllm`` command (see the module docstring).

    Returns: 0, or 1 when neither sweep had a successful request. Raises what the steps raise (see above).
    """
    changes = o.changes
    timeout_s, agent, util = o.ready_timeout_s, AgentVllm(), o.util
    loaded, before, after = before_and_after(changes)
    out, err = make_console(highlight=True), make_console(stderr=True, highlight=True)
    snap = ready_before(agent, timeout_s, loaded.path, before)
    a = o.build(o.model or before.name)
    gpus = ((GpuCount(o.gpus[0], "--gpus"), GpuCount(o.gpus[1], "--gpus")) if o.gpus
            else (gpu_count(before, "before"), gpu_count(after, "after")))
    err.print(f"before: {a.endpoint.url} ({a.model!r}), {a.requests} requests x {a.level_count} levels",
              markup=False)
    side_a, a = _sweep(a, "before", gpus[0], util, err)
    previous: dict[str, Any] | None = None
    relaunched: int | None = None  # the pid vLLM got from the change, once it is ready
    try:
        _, previous = set_vllm_keys(loaded.path, changes)
        err.print(f"set {_words(changes)} in [vllm] of {loaded.path}; waiting up to {timeout_s:g} s for the agent "
                  "to relaunch vLLM", markup=False)
        agent.seen_pids.clear()
        relaunched = agent.wait_ready(timeout_s, f"after setting {_words(changes)}", avoid={snap.get("pid")})["pid"]
        endpoint, _ = target.channel_endpoint(state.profile, LOCAL_CHANNEL, a.endpoint.protocol)
        b = replace(a, endpoint=endpoint, model=o.model or after.name)
        side_b, _ = _sweep(b, "after", gpus[1], util, err)
        result = CompareResult(side_a, side_b, gpu_util_note=util.note)
        o.show(result, f"conduit bench --compare-vllm {_words(changes)}", o.json_path, out, err)
    except BaseException:
        _restore(o, agent, loaded.path, previous, (snap.get("pid"), relaunched), err, failing=True)
        raise
    _restore(o, agent, loaded.path, previous, (snap.get("pid"), relaunched), err, failing=False)
    return 0 if side_a.sweep.total_ok + side_b.sweep.total_ok else 1
