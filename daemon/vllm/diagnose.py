"""Why a vLLM start-up failed, and what to change: one reason line and one fix line from the log tail.

The texts matched are vLLM 0.32's own (``vllm/v1/worker/utils.py``, ``vllm/v1/core/kv_cache_utils.py``,
``vllm/config/model.py``, argparse, uvicorn, huggingface_hub) and were checked on real runs of the CPU build
(shared/formats/vllm-and-nvml.md). vLLM wraps an engine start-up failure in ``Engine core initialization
failed. See root cause above.``: the root cause is printed *earlier*, so every rule scans the whole tail and
the most specific rule wins (rules are ordered), not the last line.

The same wording is used when conduit refuses a GPU launch before starting (``preflight_memory``), so a
person sees one explanation whichever side noticed.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from conduit.units import GiB


@dataclass(frozen=True)
class Diagnosis:
    """A failure explained.

    Attributes:
        kind: a stable machine name (``gpu_memory``, ``kv_cache_none``, ``kv_cache_max_len``,
            ``max_model_len_too_long``, ``cuda_oom``, ``port_in_use``, ``model_not_found``, ``unknown_argument``,
            ``startup_timeout``, ``exited``).
        reason: one line saying what went wrong, with the numbers vLLM gave.
        fix: one concrete change to make, naming the ``[vllm]`` key.
    """

    kind: str
    reason: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        """JSON-able form: ``{"kind", "reason", "fix"}``."""
        return asdict(self)


def _gib(n_bytes: float) -> str:
    """``10.50 GiB``: always GiB with two decimals, the unit and precision of vLLM's own start-up refusal
    (``conduit.units.format_bytes`` would switch to MiB below 1 GiB, and the wording must match)."""
    return f"{n_bytes / GiB:.2f} GiB"


def gpu_memory_diagnosis(free_bytes: int, total_bytes: int, utilization: float, device: str = "0") -> Diagnosis:
    """The "not enough free GPU memory for the requested utilization" explanation, with numbers.

    vLLM needs ``free >= utilization x total`` at start-up (``vllm/v1/worker/utils.py``). The suggested
    utilization leaves a 2% margin under what is free now, floored at 0.05.
    """
    want = utilization * total_bytes
    fit = max(0.05, round(free_bytes / total_bytes - 0.02, 2)) if total_bytes else 0.05
    return Diagnosis(
        "gpu_memory",
        f"GPU {device}: {_gib(free_bytes)} free of {_gib(total_bytes)}, but "
        f"gpu_memory_utilization {utilization:g} asks for {_gib(want)}",
        f"lower [vllm].gpu_memory_utilization to {fit:g} or less, or stop the other processes using that GPU",
    )


Rule = Callable[[str], Diagnosis | None]


def _gpu_free(text: str) -> Diagnosis | None:
    m = re.search(
        r"Free memory on device (\S+) \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory "
        r"utilization \(([\d.]+), ([\d.]+) GiB\)",
        text,
    )
    if not m:
        if "is less than desired GPU memory utilization" in text:
            return Diagnosis(
                "gpu_memory",
                "not enough free GPU memory for the requested gpu_memory_utilization",
                "lower [vllm].gpu_memory_utilization, or stop the other processes using that GPU",
            )
        return None
    dev, free, total, util = m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4))
    return gpu_memory_diagnosis(int(free * GiB), int(total * GiB), util, dev.strip("()"))


def _kv_max_len(text: str) -> Diagnosis | None:
    m = re.search(
        r"max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed, which is larger than the available KV cache "
        r"memory \(([\d.]+) GiB\)",
        text,
    )
    if not m:
        return None
    est = re.search(r"estimated maximum model length is (\d+)", text)
    reason = (
        f"KV cache too small for max_model_len {m.group(1)}: {m.group(2)} GiB needed, {m.group(3)} GiB available"
    )
    if est:
        return Diagnosis(
            "kv_cache_max_len",
            reason + f"; vLLM estimates the largest max_model_len that fits is {est.group(1)}",
            f"set [vllm].max_model_len = {est.group(1)} (or raise gpu_memory_utilization)",
        )
    return Diagnosis(
        "kv_cache_max_len", reason, "lower [vllm].max_model_len or raise [vllm].gpu_memory_utilization"
    )


def _kv_none(text: str) -> Diagnosis | None:
    if "No available memory for the cache blocks" not in text:
        return None
    return Diagnosis(
        "kv_cache_none",
        "no memory left for KV cache blocks after loading the weights",
        "raise [vllm].gpu_memory_utilization (on CPU: VLLM_CPU_KVCACHE_SPACE in [vllm].extra_env), "
        "or use a smaller or quantized model ([vllm].quantization)",
    )


def _max_model_len(text: str) -> Diagnosis | None:
    m = re.search(r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len \(([^)]*)\)", text)
    if not m:
        return None
    limit = re.search(r"max_position_embeddings=(\d+)", m.group(2))
    lim = limit.group(1) if limit else None
    return Diagnosis(
        "max_model_len_too_long",
        f"max_model_len {m.group(1)} is above the model's limit"
        + (f" ({lim} positions in config.json)" if lim else f" ({m.group(2)})"),
        f"set [vllm].max_model_len = {lim} or less" if lim else "lower [vllm].max_model_len to the model's limit",
    )


def _cuda_oom(text: str) -> Diagnosis | None:
    m = re.search(r"CUDA out of memory\.?[^\n]*", text) or re.search(r"torch\.(?:cuda\.)?OutOfMemoryError[^\n]*", text)
    if not m:
        return None
    tried = re.search(r"Tried to allocate ([\d.]+ [GM]iB)", text)
    return Diagnosis(
        "cuda_oom",
        "CUDA out of memory" + (f" (tried to allocate {tried.group(1)})" if tried else ""),
        "lower [vllm].max_num_seqs first, then [vllm].max_model_len (or gpu_memory_utilization)",
    )


def _port(text: str, port: int | None) -> Diagnosis | None:
    if "Address already in use" not in text and "address already in use" not in text:
        return None
    where = f"port {port}" if port else "the port"
    return Diagnosis(
        "port_in_use",
        f"{where} is already in use by another process",
        f"stop the process listening on {where} (`ss -ltnp`) or set [vllm].port to a free port",
    )


def _model_missing(text: str, model: str | None) -> Diagnosis | None:
    pats = (
        r"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '([^']+)'",
        r"(\S+) is not a local folder and is not a valid model identifier",
        r"Invalid repository ID or local directory specified: '([^']+)'",
        r"LocalEntryNotFoundError",
        r"Cannot find the requested files in the local cache",
        r"RepositoryNotFoundError",
    )
    for p in pats:
        m = re.search(p, text)
        if m:
            name = (m.group(1) if m.groups() else None) or model or "the model"
            return Diagnosis(
                "model_not_found",
                f"model {name!s} not found: no such local directory, and no cached hub copy",
                "fix [vllm].model: an existing directory with config.json, or a hub name already downloaded "
                "(HF_HUB_OFFLINE is set when there is no network)",
            )
    return None


def _unknown_arg(text: str) -> Diagnosis | None:
    m = re.search(r"error: unrecognized arguments: ([^\n]+)", text)
    if not m:
        m2 = re.search(r"error: argument ([^\n]+)", text)
        if not m2:
            return None
        return Diagnosis(
            "unknown_argument",
            f"vLLM refused an argument: {m2.group(1).strip()}",
            "fix the value in the [vllm] table or [vllm].extra_args",
        )
    args = m.group(1).strip()
    fix = f"remove {args} from [vllm].extra_args (this vLLM version does not know it)"
    if "--swap-space" in args:
        fix = "remove swap_space / --swap-space: vLLM removed it in 0.18"
    return Diagnosis("unknown_argument", f"vLLM does not accept: {args}", fix)


def diagnose(
    log_tail: str,
    *,
    exit_code: int | None = None,
    port: int | None = None,
    model: str | None = None,
) -> Diagnosis:
    """Explain a failed start from the end of vLLM's log (a few hundred lines is plenty).

    Args:
        log_tail: the log text (stdout and stderr together).
        exit_code: the process's exit status (2 = argparse), or None while still running.
        port: the configured port, named in the port-in-use reason.
        model: the configured model, named when the log does not say.

    Returns a Diagnosis; kind ``exited`` with the last error-looking line when nothing specific matched.
    """
    text = log_tail
    for rule in (_gpu_free, _kv_max_len, _kv_none, _max_model_len, _cuda_oom):
        d = rule(text)
        if d:
            return d
    for d2 in (_port(text, port), _model_missing(text, model), _unknown_arg(text)):
        if d2:
            return d2
    last = _last_error_line(text.splitlines())
    code = f" with status {exit_code}" if exit_code is not None else ""
    if exit_code == 2 and not last:
        last = "argument error"
    return Diagnosis(
        "exited",
        f"vLLM exited{code}" + (f": {last}" if last else ""),
        "read the log (`conduit vllm logs`) for the first error; fix the [vllm] setting it names",
    )


def timeout_diagnosis(timeout_s: float, log_tail: str) -> Diagnosis:
    """The start-up timeout explanation: what vLLM was doing last, and which knob to turn."""
    lines = [ln for ln in log_tail.splitlines() if ln.strip()]
    last = _strip_prefix(lines[-1])[:160] if lines else "(no output)"
    return Diagnosis(
        "startup_timeout",
        f"vLLM was not ready after {timeout_s:g} s; last log line: {last}",
        "raise [vllm].startup_timeout_s (large models and first-time compilation take minutes), "
        "or set enforce_eager = true to skip graph capture",
    )


_ENGINE_DEAD = re.compile(r"EngineDeadError|EngineCore encountered a fatal error|Engine core .*died")


def exit_text(code: int | None) -> str:
    """``exited with status 0``, ``was killed by SIGKILL``, ``exited (status unknown: adopted)``."""
    if code is None:
        return "exited (status unknown: adopted, not our child)"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def crash_diagnosis(d: Diagnosis, log_tail: str, exit_code: int | None, state: str) -> Diagnosis:
    """An exit of a server that had started (``state``: ``ready``, ``unhealthy``): ``d`` when the log named a
    cause, else kind ``crashed`` with how it ended and whether the engine died first."""
    if d.kind != "exited":
        return d
    engine = " after its engine died" if _ENGINE_DEAD.search(log_tail) else ""
    return Diagnosis(
        "crashed",
        f"vLLM {exit_text(exit_code)} while {state}{engine}",
        "it is restarted automatically; if it keeps dying, read `conduit vllm logs` for the first error",
    )


def unhealthy_diagnosis(seconds: float, detail: str) -> Diagnosis:
    """A server that answered /health with errors for ``seconds`` (``detail``: the last answer) was killed."""
    return Diagnosis(
        "unhealthy",
        f"vLLM stayed unhealthy for {seconds:.0f} s ({detail})",
        "it was killed and is restarted; read `conduit vllm logs` for why the engine stopped",
    )


def stop_incomplete_diagnosis(left: Sequence[str]) -> Diagnosis:
    """Processes of the group outlived SIGKILL (``left``: ``"pid name"`` strings)."""
    return Diagnosis(
        "stop_incomplete",
        f"processes of the vLLM group survived SIGKILL: {', '.join(left)}",
        "they are probably stuck in the kernel (D state, e.g. a GPU driver call); check `ps` and nvidia-smi",
    )


_PREFIX = re.compile(r"^\([A-Za-z]+ pid=\d+\)\s+(?:[A-Z]+ \d\d-\d\d [\d:]+ \[[^\]]*\]\s*)?")


def _strip_prefix(line: str) -> str:
    return _PREFIX.sub("", line).strip()


def _last_error_line(lines: Sequence[str]) -> str:
    for ln in reversed(lines):
        s = _strip_prefix(ln)
        if re.search(r"(Error|Exception|error:)", s) and not s.startswith("File "):
            return s[:200]
    return ""


_KV_LINE = re.compile(r"(?:CPU|GPU|XPU|TPU)? ?KV cache size: ([\d,]+) tokens")


def find_kv_cache_line(log_text: str) -> tuple[int, str, int] | None:
    """Find vLLM's KV cache size line in a log; return ``(line_number, line, tokens)`` (1-based line number).

    vLLM 0.32 logs it from ``kv_cache_utils.py`` as e.g. ``(EngineCore pid=6996) INFO 11-30 09:02:52
    [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 256 tokens per
    request: 4096.00x`` (``GPU KV cache size`` on a GPU). The last such line wins (one per launch).
    """
    found = None
    for i, line in enumerate(log_text.splitlines(), 1):
        m = _KV_LINE.search(line)
        if m:
            found = (i, line, int(m.group(1).replace(",", "")))
    return found
