"""The start-up failure causes vLLM prints, recognised in the wording of every release line 0.4 .. 0.32.

Each rule reads the whole log tail (vLLM prints the root cause *before* ``Engine core initialization failed.
See root cause above.``) and returns a ``Diagnosis`` whose reason carries the numbers the log gives and whose
fix is computed from them, or None. The texts matched, with the release line each wording comes from, are
the test corpus ``tests/data/vllm_messages/corpus.json``; the sources are vLLM's
``vllm/worker/worker.py`` (V0), ``vllm/v1/core/kv_cache_utils.py``, ``vllm/v1/worker/gpu_worker.py`` /
``utils.py``, ``vllm/config.py`` / ``vllm/config/model.py``, and what torch, transformers, huggingface_hub,
pyzmq, uvicorn and argparse print on vLLM's behalf.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import asdict, dataclass

from conduit.daemon.config.vllm import VllmSettings
from conduit.units import GiB


@dataclass(frozen=True)
class Diagnosis:
    """A failure explained.

    Attributes:
        kind: a stable machine name (``gpu_memory``, ``gpu_memory_changed``, ``kv_cache_none``,
            ``kv_cache_max_len``, ``max_model_len_too_long``, ``cuda_oom``, ``port_in_use``,
            ``internal_port_in_use``, ``model_not_found``, ``weights_not_found``, ``tokenizer_not_found``,
            ``unknown_argument``, ``invalid_argument``, ``tool_parser``, ``startup_timeout``, ``exited``, ...).
        reason: one line saying what went wrong, with the numbers vLLM gave.
        fix: one concrete change to make, naming the ``[vllm]`` key.
    """

    kind: str
    reason: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        """JSON-able form: ``{"kind", "reason", "fix"}``."""
        return asdict(self)


def gib(n_bytes: float) -> str:
    """``10.50 GiB``: always GiB with two decimals, the unit and precision of vLLM's own start-up refusal."""
    return f"{n_bytes / GiB:.2f} GiB"


def round_len(tokens: float) -> int:
    """The largest length a person would set that is <= ``tokens``: a power of two or 1.5 x one
    (..., 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536, 98304, 131072); 16 at least."""
    n = max(16, int(tokens))
    p = 1 << (n.bit_length() - 1)
    return p + p // 2 if p >= 2 and p + p // 2 <= n else p


def gpu_memory_diagnosis(free_bytes: int, total_bytes: int, utilization: float, device: str = "0",
                         requested_bytes: float | None = None) -> Diagnosis:
    """The "not enough free GPU memory for the requested utilization" explanation, with numbers.

    vLLM needs ``free >= utilization x total`` at start-up. The suggested utilization leaves a 2% margin
    under what is free now, rounded down to hundredths; under 0.05 the only fix is freeing the GPU.
    ``requested_bytes``: the amount vLLM printed (default utilization x total).
    """
    want = utilization * total_bytes if requested_bytes is None else requested_bytes
    fit = math.floor((free_bytes / total_bytes - 0.02) * 100) / 100 if total_bytes else 0.0
    where = f"GPU {device}" if device else "the GPU"
    reason = (f"{where}: {gib(free_bytes)} free of {gib(total_bytes)}, but gpu_memory_utilization {utilization:g} "
              f"asks for {gib(want)}")
    stop = "stop the other processes using that GPU (`nvidia-smi`; a VLLM::EngineCore left by an earlier run is common)"
    if fit < 0.05:
        return Diagnosis("gpu_memory", reason + " (almost nothing is free)", stop + ", then `conduit vllm start`")
    return Diagnosis("gpu_memory", reason, f"lower [vllm].gpu_memory_utilization to {fit:g} or less, or {stop}")


def gpu_free(text: str) -> Diagnosis | None:
    """``Free memory on device [cuda:N ](F/T GiB) on startup is less than desired GPU memory utilization (U, R
    GiB)`` (0.8-0.10 without the device, 0.11+ with it)."""
    m = re.search(r"Free memory on device ?(\S*) \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU "
                  r"memory utilization \(([\d.]+), ([\d.]+) GiB\)", text)
    if not m:
        if "is less than desired GPU memory utilization" in text:
            return Diagnosis("gpu_memory", "not enough free GPU memory for the requested gpu_memory_utilization",
                             "lower [vllm].gpu_memory_utilization, or stop the other processes using that GPU")
        return None
    dev = m.group(1).removeprefix("cuda:").strip("()")
    return gpu_memory_diagnosis(int(float(m.group(2)) * GiB), int(float(m.group(3)) * GiB), float(m.group(4)), dev,
                                float(m.group(5)) * GiB)


def gpu_changed(text: str) -> Diagnosis | None:
    """V0's ``Error in memory profiling.`` (0.4-0.6): another process changed the GPU's memory use while vLLM
    measured it (0.6 adds ``Initial free memory B, current free memory B`` in bytes)."""
    if "Error in memory profiling" not in text:
        return None
    m = re.search(r"Initial free memory (\d+), current free memory (\d+)", text)
    nums = f" (free memory went from {gib(int(m.group(1)))} to {gib(int(m.group(2)))})" if m else ""
    return Diagnosis(
        "gpu_memory_changed",
        f"the GPU's free memory changed while vLLM measured it{nums}: another process allocated or freed memory",
        "stop the other processes using that GPU during start-up (`nvidia-smi`), then `conduit vllm start`",
    )


def kv_max_len(text: str) -> Diagnosis | None:
    """The KV cache holds fewer tokens than ``max_model_len``. V0 (0.4-0.10) gives the token capacity; V1
    gives the GiB needed and available (``GB`` in 0.7-0.8) and, from 0.9, vLLM's own estimate."""
    v0 = re.search(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV "
                   r"cache \((\d+)\)", text)
    v1 = re.search(r"max seq len \((\d+)\), \(([\d.]+) Gi?B KV cache is needed, which is larger than the available "
                   r"KV cache memory \(([\d.]+) Gi?B\)", text)
    if v0:
        asked, fits = int(v0.group(1)), int(v0.group(2))
        reason = f"the KV cache holds {fits} tokens, fewer than max_model_len {asked}"
    elif v1:
        asked, need, have = int(v1.group(1)), float(v1.group(2)), float(v1.group(3))
        est = re.search(r"estimated maximum model length is (\d+)", text)
        # vLLM 0.32 prints GiB with two decimals: a tiny model's need can read "0.0"
        fits = int(est.group(1)) if est else (int(asked * have / need) if need > 0 else asked // 2)
        how = "vLLM's estimate" if est else "scaled from the sizes"
        reason = (f"max_model_len {asked} needs {need:.2f} GiB of KV cache, {have:.2f} GiB is available "
                  f"(room for about {fits} tokens, {how})")
    else:
        return None
    fix = f"set [vllm].max_model_len = {round_len(fits)}, or raise [vllm].gpu_memory_utilization"
    return Diagnosis("kv_cache_max_len", "KV cache too small: " + reason, fix)


def kv_none(text: str) -> Diagnosis | None:
    """``No available memory for the cache blocks`` (every release line): the weights took it all."""
    if "No available memory for the cache blocks" not in text:
        return None
    w = re.search(r"(?:Model loading took|model weights took) ([\d.]+) ?GiB", text)
    took = f" (the weights took {w.group(1)} GiB)" if w else ""
    return Diagnosis(
        "kv_cache_none",
        f"no memory left for KV cache blocks after loading the weights{took}",
        "raise [vllm].gpu_memory_utilization (on CPU: VLLM_CPU_KVCACHE_SPACE in [vllm].extra_env), "
        "or use a smaller or quantized model ([vllm].quantization)",
    )


def max_model_len(text: str) -> Diagnosis | None:
    """``User-specified max_model_len (A) is greater than the derived max_model_len (KEY=L ...)``: 0.4 names the
    key ``None``; 0.11+ prints the limit as a float (``512.0``) and the key may be ``sliding_window``."""
    m = re.search(r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len "
                  r"\((\w+)=([\d.]+)", text)
    if not m:
        return None
    asked, key, limit = m.group(1), m.group(2), int(float(m.group(3)))
    where = "derived from config.json" if key == "None" else f"{key} in config.json"
    return Diagnosis(
        "max_model_len_too_long",
        f"max_model_len {asked} is above the model's limit of {limit} tokens ({where})",
        f"set [vllm].max_model_len = {limit} or less (a longer context needs a model trained for it, or "
        "rope_scaling in its config.json)",
    )


def cuda_oom(text: str) -> Diagnosis | None:
    """``CUDA out of memory`` in the torch <= 2.1 wording (``(GPU 0; T total capacity; ...; F free``), the
    torch >= 2.2 one (``GPU 0 has a total capacity of T of which F is free``), or a CUDA runtime or driver
    error (``CUDA error: out of memory``; ``CUDA driver error: out of memory`` from torch's CUDA caching
    allocator, ``c10/cuda/CUDACachingAllocator.cpp``)."""
    if not re.search(r"CUDA out of memory|OutOfMemoryError|CUDA (?:driver )?error: out of memory", text):
        return None
    size = r"([\d.]+ [GMK]iB)"
    tried = re.search(r"Tried to allocate " + size, text)
    new = re.search(r"GPU (\d+) has a total capacity of " + size + r" of which " + size + " is free", text)
    old = re.search(r"\(GPU (\d+); " + size + r" total capacity; [^;]*; " + size + " free", text)
    bits = []
    if tried:
        bits.append(f"tried to allocate {tried.group(1)}")
    if new:
        bits.append(f"GPU {new.group(1)}: {new.group(3)} free of {new.group(2)}")
    elif old:
        bits.append(f"GPU {old.group(1)}: {old.group(3)} free of {old.group(2)}")
    return Diagnosis(
        "cuda_oom",
        "CUDA out of memory" + (f" ({'; '.join(bits)})" if bits else ""),
        "lower [vllm].max_num_seqs first (e.g. halve it), then [vllm].max_model_len or gpu_memory_utilization; "
        "enforce_eager = true saves the CUDA graph memory",
    )


_INTERNAL = (  # (pattern, what uses the port); group 1 is the port when the text has one
    (r"failed to bind to \S*?:(\d+) \(errno: 98", "the torch.distributed store (TCPStore)"),
    (r"failed to listen on any local network address\.(?: port: (\d+),)?", "the torch.distributed store (TCPStore)"),
    (r"ZMQError: Address already in use \(addr='\w+://[^']*?:(\d+)'\)", "the ZMQ sockets of its engine core"),
    (r"ZMQError: Address already in use()", "the ZMQ sockets of its engine core"),
    (r"NCCL WARN.*[Aa]ddress already in use()", "NCCL"),
    (r"in get_open_port()", "its internal sockets (VLLM_PORT and the ports after it)"),
)


def ports(text: str, port: int | None) -> Diagnosis | None:
    """``Address already in use``: on the API port (``[vllm].port``: uvicorn's ``error while attempting to bind
    on address`` in 0.4-0.5, vLLM's own ``create_server_socket`` from 0.6) or on a port vLLM picked for itself
    (torch.distributed TCPStore, ZMQ, NCCL, ``get_open_port``), which ``[vllm].port`` cannot fix."""
    if not re.search(r"[Aa]ddress already in use|EADDRINUSE", text):
        return None
    api = re.search(r"error while attempting to bind on address \('[^']*', (\d+)\)", text)
    for pat, what in _INTERNAL:
        m = re.search(pat, text)
        if m and not api:
            p = int(m.group(1)) if m.group(1) else None
            if p is not None and p == port:
                break
            return _internal_port(p, what, port)
    used = int(api.group(1)) if api else port
    where = f"port {used}" if used else "the port"
    return Diagnosis("port_in_use", f"{where} ([vllm].port) is already in use by another process",
                     f"stop the process listening on {where} (`ss -ltnp 'sport = :{used}'`) or set [vllm].port "
                     "to a free port")


def _internal_port(p: int | None, what: str, port: int | None) -> Diagnosis:
    """A port vLLM chose for ``what`` is taken: name it, and what to do instead of changing ``[vllm].port``."""
    which = f"port {p}" if p else "an internal port"
    api = f" ({port})" if port else ""
    find = f"`ss -ltnp 'sport = :{p}'`" if p else "`ss -ltnp`"
    return Diagnosis(
        "internal_port_in_use",
        f"{which}, which vLLM chose for {what}, is already in use; this is not [vllm].port{api}",
        f"find the holder with {find} (often a VLLM::EngineCore or Worker left by an earlier run) and stop it; "
        "if it recurs, give vLLM a free range for its own ports with VLLM_PORT = \"<free port>\" in "
        "[vllm].extra_env",
    )


_LOCAL = re.compile(r"^(?:/|\./|\.\./|~)")


def model_missing(text: str, model: str | None) -> Diagnosis | None:
    """The model is neither an existing local directory nor a reachable (or cached) hub repository."""
    pats = (
        r"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '([^']+)'",
        r"(\S+) is not a local folder and is not a valid model identifier",
        r"Invalid repository ID or local directory specified: '([^']+)'",
        r"it looks like (\S+) is not the path to a directory containing a file named config\.json",
        r"(\S+) does not appear to have a file named config\.json",
        r"(?:LocalEntryNotFoundError|Cannot find the requested files in the local cache|RepositoryNotFoundError)()",
    )
    for p in pats:
        m = re.search(p, text)
        if m:
            return _missing(m.group(1) or model or "the model", "couldn't connect to" in text
                            or "local cache" in text or "LocalEntryNotFoundError" in text, text)
    return None


def _missing(name: str, offline: bool, text: str) -> Diagnosis:
    if _LOCAL.match(name):
        no_cfg = "does not appear to have a file named config.json" in text
        what = "has no config.json" if no_cfg else "no such directory"
        return Diagnosis("model_not_found", f"model {name} not found: {what}",
                         "fix [vllm].model: an existing directory with config.json, tokenizer and weights")
    if offline:
        return Diagnosis("model_not_found", f"model {name} is not downloaded, and the hub cannot be reached",
                         f"`huggingface-cli download {name}` where there is network (same HF_HOME), or point "
                         "[vllm].model at a local directory")
    return Diagnosis("model_not_found", f"model {name} not found: no such local directory or hub repository",
                     "fix [vllm].model (check the spelling on huggingface.co); a gated or private repository "
                     "needs HF_TOKEN in [vllm].extra_env")


def weights_missing(text: str, model: str | None) -> Diagnosis | None:
    """``Cannot find any model weights with `DIR``` (every release line): config.json but no weight files."""
    m = re.search(r"Cannot find any model weights with `([^`]+)`", text)
    if not m:
        return None
    return Diagnosis("weights_not_found", f"model {m.group(1)} has no weight files (*.safetensors or *.bin)",
                     "download the weights (*.safetensors) into that directory (`huggingface-cli download REPO --local-dir DIR`) "
                     "or point [vllm].model at the complete directory")


def tokenizer_missing(text: str, model: str | None) -> Diagnosis | None:
    """No usable tokenizer: transformers' ``Can't load tokenizer for 'X'`` or, for a fast tokenizer without
    ``tokenizer.json`` (a config-only directory on 0.32), ``Couldn't instantiate the backend tokenizer``."""
    m = re.search(r"Can't load tokenizer for '([^']+)'", text)
    if not m and "Couldn't instantiate the backend tokenizer" not in text:
        return None
    name = m.group(1) if m else (model or "the model")
    return Diagnosis("tokenizer_not_found", f"no tokenizer in {name} (no tokenizer.json or tokenizer files)",
                     "copy the tokenizer files (tokenizer.json, tokenizer_config.json) into that directory, or "
                     "name a tokenizer directory with `--tokenizer DIR` in [vllm].extra_args")


def arguments(text: str) -> Diagnosis | None:
    """argparse refusals (exit status 2): unknown, ambiguous, and invalid values."""
    m = re.search(r"error: unrecognized arguments: ([^\n]+)", text)
    if m:
        args = m.group(1).strip()
        fix = f"remove {args} from [vllm].extra_args (this vLLM version does not know it)"
        if "--swap-space" in args:
            fix = "remove swap_space / --swap-space: vLLM removed it in 0.18"
        return Diagnosis("unknown_argument", f"vLLM does not accept: {args}", fix)
    m = re.search(r"error: ambiguous option: (\S+) could match ([^\n]+)", text)
    if m:
        return Diagnosis("unknown_argument", f"vLLM does not accept the abbreviation {m.group(1)}",
                         f"write the whole flag in [vllm].extra_args, one of: {m.group(2).strip()}")
    m = re.search(r"error: argument ([-\w]+)(?:/[-\w]+)?: ([^\n]+)", text)
    if not m:
        return None
    flag, why = m.group(1), m.group(2).strip()
    key = flag.lstrip("-").replace("-", "_")
    where = f"[vllm].{key}" if key in VllmSettings.model_fields else f"{flag} in [vllm].extra_args"
    choices = re.search(r"\(choose from ([^)]*)\)", why)
    fix = f"fix {where}" + (f": one of {choices.group(1)}" if choices else "")
    return Diagnosis("invalid_argument", f"vLLM refused {flag}: {why.split(' (choose')[0]}", fix)


def tool_parser(text: str) -> Diagnosis | None:
    """vLLM refuses its tool-call or reasoning parser at start-up (0.6 .. 0.32): ``KeyError: invalid tool call
    parser: NAME (chose from { a,b,... })`` (``validate_api_server_args``, ``vllm/entrypoints/launchers/
    launcher.py`` in 0.32, ``api_server.py`` before), ``invalid reasoning parser: NAME`` (same place), and
    ``--enable-auto-tool-choice requires --tool-call-parser`` (``validate_parsed_serve_args``, ``cli_args.py``)."""
    if "--enable-auto-tool-choice requires --tool-call-parser" in text:
        return Diagnosis("tool_parser", "vLLM refused --enable-auto-tool-choice without --tool-call-parser",
                         "set [vllm].tool_call_parser too (`conduit doctor --deep` names the parser for the "
                         "model's family, e.g. \"hermes\" for Qwen), or enable_auto_tool_choice = false")
    m = re.search(r"invalid (tool call|reasoning) parser: (\S+) \(chose from \{ ?([^}]*?) ?\}\)", text)
    if not m:
        return None
    what, name, known = m.group(1), m.group(2), [k.strip() for k in m.group(3).split(",") if k.strip()]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f" (closest: {', '.join(close)})" if close else ""
    where = "[vllm].tool_call_parser" if what == "tool call" else "--reasoning-parser in [vllm].extra_args"
    return Diagnosis("tool_parser", f"this vLLM has no {what} parser named {name!r}{hint}",
                     f"set {where} to one of: {', '.join(known)}")
