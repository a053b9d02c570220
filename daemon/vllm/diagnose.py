"""Why a vLLM start-up failed, and what to change: one reason line and one fix line from the log tail.

The causes recognised, in the wording of every vLLM release line 0.4 .. 0.32, live in ``causes`` (test corpus:
``tests/data/vllm_messages/corpus.json``). vLLM wraps an engine start-up failure in ``Engine core
initialization failed. See root cause above.``: the root cause is printed *earlier*, so every rule scans the
whole tail and the most specific rule wins (rules are ordered), not the last line.

``configcauses`` adds vLLM's configuration, argument and quantization checks, read from the root cause
(``rootcause``: the first specific error of the failing process, wrappers skipped, validation errors expanded).

The same wording is used when conduit refuses a GPU launch before starting (``preflight_memory``), so a
person sees one explanation whichever side noticed.
"""

from __future__ import annotations

import functools
import re
import signal
from collections.abc import Callable, Sequence

from conduit.daemon.vllm import causes, configcauses, distcauses, kvtier
from conduit.daemon.vllm.causes import Diagnosis, gpu_memory_diagnosis
from conduit.daemon.vllm.rootcause import root_cause

__all__ = ["Diagnosis", "diagnose", "gpu_memory_diagnosis"]

#: Memory and length rules first: their texts can quote an argument or a port in passing.
_RULES = (causes.gpu_free, causes.gpu_changed, causes.kv_max_len, causes.kv_none, causes.max_model_len,
          causes.cuda_oom, *distcauses.RULES,  # distcauses: across nodes ([vllm.cluster])
          *kvtier.RULES)  # the KV offloading tier refused


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

    Returns a Diagnosis; kind ``exited`` with the root cause (``rootcause.root_cause``: the failing process's
    first specific error, wrappers skipped) when nothing specific matched.
    """
    text = log_tail
    rc = root_cause(text)
    rules: list[Callable[[], Diagnosis | None]] = [
        *(functools.partial(rule, text) for rule in _RULES),
        *(functools.partial(rule, text, rc, model) for rule in configcauses.RULES),
        lambda: causes.ports(text, port), lambda: causes.model_missing(text, model),
        lambda: causes.weights_missing(text, model), lambda: causes.tokenizer_missing(text, model),
        lambda: causes.arguments(text), lambda: causes.tool_parser(text)]
    for rule in rules:
        try:
            d = rule()
        except (ArithmeticError, ValueError):  # a number the log printed oddly ("0.0 GiB", "."): next rule
            continue
        if d:
            return d
    last = rc.text[:240] if rc else _last_error_line(text.splitlines())
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
