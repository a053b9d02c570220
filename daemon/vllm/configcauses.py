"""Start-up failures from vLLM's own configuration, argument and quantization checks, each with the ``[vllm]``
setting to change and, where the log and the model give the numbers, the value that works.

Rules take the log text and its ``RootCause`` (``rootcause.root_cause``); the specific rules compute a fix
(valid tensor-parallel sizes from the model's ``config.json``, ``dtype = "float16"`` below compute capability
8.0, the checkpoint's ``quantization``, ``enforce_eager``, ``HF_TOKEN``); ``vllm_message`` names the key for the
other messages of the table ``MESSAGES``. ``tests/vllm/test_vllm_coverage.py`` checks every ``raise`` of the
pinned vLLM's checks is in ``MESSAGES`` or a listed exemption. Wording sources (vLLM 0.32 unless said):
``vllm/config/model.py`` (``verify_with_parallel_config``, ``_verify_quantization``), ``vllm/config/vllm.py``
(``_get_quantization_config``), ``vllm/platforms/cuda.py`` (``check_if_supports_dtype``),
``vllm/model_executor/layers/quantization/auto_awq.py``, transformers 5.19
``models/auto/configuration_auto.py`` (unknown ``model_type``), ``vllm/model_executor/models/registry.py``
(unknown architecture), huggingface_hub ``utils/_http.py`` (401 / gated), and ld's ``cannot find -lcuda``
printed when Triton or Inductor compiles a kernel.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from conduit.daemon.config.vllmrules import MIN_CAPABILITY, TpShape, capability_text, read_shape
from conduit.daemon.vllm.causes import Diagnosis
from conduit.daemon.vllm.rootcause import RootCause


@dataclass(frozen=True)
class Message:
    """One message vLLM raises: a literal ``fragment`` of it (no f-string holes), the diagnosis ``kind``,
    the ``[vllm]`` key it concerns (``extra_args`` for flags conduit has no key for) and a ``hint``."""

    fragment: str
    kind: str
    key: str
    hint: str = ""


#: The messages with a cause. Kinds other than ``vllm_config`` have their own rule below.
MESSAGES: tuple[Message, ...] = (
    Message("must be divisible by tensor parallel size", "tensor_parallel", "tensor_parallel_size"),
    Message("is not aligned with the quantized weight shape", "tensor_parallel", "tensor_parallel_size"),
    Message("Consider reducing tensor_parallel_size", "tensor_parallel", "tensor_parallel_size"),
    Message("does not match the quantization method specified in the `quantization` argument",
            "quantization_mismatch", "quantization"),
    Message("Unknown quantization method:", "quantization_mismatch", "quantization"),
    Message("Invalid quantization method:", "quantization_mismatch", "quantization"),
    Message("is not supported for the current GPU. Minimum capability:", "quantization_capability",
            "quantization"),
    Message("Bfloat16 is only supported on GPUs with compute capability of at least 8.0", "bfloat16", "dtype"),
    Message("does not support float16. Reason:", "vllm_config", "dtype", 'set dtype = "bfloat16" (or "auto")'),
    Message("Unknown dtype:", "vllm_config", "dtype", 'one of "auto", "float16", "bfloat16", "float32"'),
    Message("is deprecated and will be removed in future versions of vLLM", "vllm_config", "quantization",
            "use another quantization method, or --allow-deprecated-quantization in [vllm].extra_args"),
    Message("max_model_len must be a positive integer", "vllm_config", "max_model_len"),
    Message("is smaller than max_model_len", "vllm_config", "max_num_batched_tokens",
            "raise it to max_model_len or more, or lower [vllm].max_model_len"),
    Message("must be greater than or equal to max_num_seqs", "vllm_config", "max_num_batched_tokens",
            "raise it to max_num_seqs or more, or lower [vllm].max_num_seqs"),
    Message("cannot be greater than max_num_seqs", "vllm_config", "max_num_seqs"),
    Message("cannot be greater than the max_model_len", "vllm_config", "max_model_len"),
    Message("Pipeline parallelism is not supported for this model", "vllm_config", "pipeline_parallel_size",
            "set pipeline_parallel_size = 1 (use tensor parallelism for this model)"),
    Message("is larger than the number of available GPUs", "vllm_config", "tensor_parallel_size",
            "tensor_parallel_size x pipeline_parallel_size must not exceed the GPUs of this node "
            "(spread across nodes with [vllm.cluster])"),
    Message("must be <= data_parallel_size", "vllm_config", "data_parallel_size"),
    Message("data_parallel_external_lb can only be set when data_parallel_size > 1", "vllm_config",
            "data_parallel_size"),
    Message("Offline data parallel mode is not supported/useful for dense models", "vllm_config",
            "data_parallel_size"),
    Message("Unrecognized distributed executor backend", "vllm_config", "cluster",
            "[vllm.cluster].backend: \"ray\" or \"mp\""),
    Message("must be divisible by dcp_size", "vllm_config", "tensor_parallel_size"),
    Message("Unknown KV cache layout", "vllm_config", "extra_env", "VLLM_KV_CACHE_LAYOUT: one of the layouts listed"),
    Message("Unknown KV cache group kind", "vllm_config", "extra_args"),
    Message("does not support `--runner", "vllm_config", "extra_args",
            "--runner: this model's runner (generate or pooling)"),
    Message("tokenizer must be a string", "vllm_config", "extra_args", "--tokenizer: a path or a Hub name"),
    Message("--enable-prompt-embeds is not supported with encoder-decoder models", "vllm_config", "extra_args"),
    Message("Sleep mode is not supported on current platform", "vllm_config", "extra_args",
            "remove --enable-sleep-mode"),
    Message("cumem allocator is not supported on current platform", "vllm_config", "extra_args",
            "remove --enable-sleep-mode"),
    Message("The model is not multimodal", "vllm_config", "extra_args", "remove the multimodal flags"),
    Message("Number of experts in the model must be greater than 0 when expert parallelism is enabled",
            "vllm_config", "extra_args", "remove --enable-expert-parallel: this model has no experts"),
    Message("Cannot find any of", "quantization_mismatch", "quantization"),
    Message("no longer supports online quantization", "vllm_config", "quantization",
            'set quantization = "fp8_per_tensor"'),
    Message("cannot be converted to", "invalid_argument", "extra_args"),
    Message("are mutually exclusive", "vllm_config", "extra_args", "give only one of the two"),
    Message("--device-ids", "vllm_config", "extra_env", "CUDA_VISIBLE_DEVICES or --device-ids: each GPU once"),
    Message("Invalid data-parallel launch options", "vllm_config", "data_parallel_size"),
)

_MSG_BY_KIND: dict[str, list[Message]] = {}
for _m in MESSAGES:
    _MSG_BY_KIND.setdefault(_m.kind, []).append(_m)


def _has(kind: str, text: str) -> bool:
    return any(m.fragment in text for m in _MSG_BY_KIND.get(kind, ()))


def _subject(rc: RootCause | None, text: str, kind: str) -> str:
    """The message line a rule reports: the root cause when it is of this kind, else the matching line."""
    if rc is not None and _has(kind, rc.message):
        return rc.message
    for line in text.splitlines():
        if _has(kind, line):
            return line.split("Error: ", 1)[-1].strip()
    return ""


def tensor_parallel(text: str, rc: RootCause | None, model: str | None) -> Diagnosis | None:
    """A tensor-parallel size the model's shape refuses: the fix lists every size passing every divisibility
    rule of the model (``config.json``: heads, KV heads, intermediate size, quantization group size)."""
    if not _has("tensor_parallel", text):
        return None
    msg = _subject(rc, text, "tensor_parallel")
    m = re.search(r"attention heads \((\d+)\) must be divisible by tensor parallel size \((\d+)\)", text)
    shape = read_shape(model)
    fix = "set [vllm].tensor_parallel_size to a size that divides the model's attention heads, KV heads and " \
          "intermediate size"
    if shape is not None:
        sizes = ", ".join(str(t) for t in shape.valid_sizes(max(shape.heads, 8)))
        fix = f"set [vllm].tensor_parallel_size to one of {sizes} (the sizes that pass every divisibility rule " \
              "of this model)"
    elif m:  # no local config.json: the heads the message gives are all that is known
        heads = int(m.group(1))
        sizes = ", ".join(str(t) for t in TpShape(heads, heads).valid_sizes(max(heads, 8)))
        fix = f"set [vllm].tensor_parallel_size to one of {sizes} (the sizes dividing the {heads} attention " \
              "heads; the model's KV heads and intermediate size may rule out more)"
    return Diagnosis("tensor_parallel", f"vLLM refused the tensor-parallel size: {msg[:240]}", fix)


def quantization_mismatch(text: str, rc: RootCause | None, model: str | None) -> Diagnosis | None:
    """``[vllm].quantization`` names another method than the checkpoint's, or one vLLM does not know."""
    if not _has("quantization_mismatch", text):
        return None
    m = re.search(r"model config \((\w[\w-]*)\) does not match the quantization method specified in the "
                  r"`quantization` argument \(([\w-]+)\)", text)
    msg = _subject(rc, text, "quantization_mismatch")
    if m:
        fix = (f'set [vllm].quantization = "{m.group(1)}" (the checkpoint\'s method) or remove it; the '
               f"checkpoint cannot be loaded as {m.group(2)}")
    elif "Cannot find any of" in msg:
        fix = "remove [vllm].quantization: this checkpoint has no quantization config of that method"
    else:
        fix = ("set [vllm].quantization to the checkpoint's quant_method (config.json quantization_config), or "
               "remove it; vLLM's message lists the methods it knows")
    return Diagnosis("quantization_mismatch", f"vLLM refused the quantization: {msg[:240]}", fix)


def quantization_capability(text: str, rc: RootCause | None, model: str | None) -> Diagnosis | None:
    """The quantization method needs a newer GPU: names the minimum and the methods this GPU can run."""
    m = re.search(r"The quantization method ([\w-]+) is not supported for the current GPU\. Minimum capability: "
                  r"(\d+)\. Current capability: (\d+)", text)
    if not m:
        return None
    method, need, have = m.group(1), int(m.group(2)), int(m.group(3))
    fits = sorted({k for k, v in MIN_CAPABILITY.items() if v <= have and not k.startswith("auto_")})
    return Diagnosis(
        "quantization_capability",
        f"quantization {method} needs compute capability {capability_text(need)} or newer; this GPU has "
        f"{capability_text(have)}",
        f"use a checkpoint quantized with a method this GPU runs ({', '.join(fits)}) in [vllm].model and "
        "[vllm].quantization, or a GPU of compute capability " + capability_text(need) + " or newer")


def bfloat16(text: str, rc: RootCause | None, model: str | None) -> Diagnosis | None:
    """bfloat16 on a GPU below compute capability 8.0: ``dtype = "float16"``."""
    m = re.search(r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0\. Your (.+?) GPU "
                  r"(?:has compute capability ([\d.]+)|does not have a compute capability)", text)
    if not m:
        return None
    cap = f" (compute capability {m.group(2).rstrip('.')})" if m.group(2) else ""
    return Diagnosis("bfloat16", f"bfloat16 needs compute capability 8.0; the {m.group(1)} GPU{cap} has no "
                                 "bfloat16", 'set [vllm].dtype = "float16"')


_VERSION = re.compile(r"(?:vLLM API server )?version (\d+\.\d+\.\d+[\w.+]*)")


def unknown_model_type(text: str, rc: RootCause | None, model: str | None) -> Diagnosis | None:
    """A ``model_type`` transformers does not know, or an architecture vLLM does not: the installed vLLM (named
    with its version from the log's banner) is too old for this model."""
    m = re.search(r"has model type `([^`]+)` but Transformers does not recognize this architecture", text)
    a = re.search(r"Model architectures (\[[^\]]*\]) are not supported for now", text)
    if not m and not a:
        return None
    what = f"model type {m.group(1)!r}" if m else f"architecture {a.group(1) if a else ''}"
    v = _VERSION.search(text)
    installed = f"vLLM {v.group(1)}" if v else "the installed vLLM"
    return Diagnosis("unknown_model_type", f"{installed} does not know the {what} of this model",
                     f"{installed} is too old for this model: install a newer vLLM (with its transformers) "
                     "into [vllm].python, or serve a model this version supports")


def gated_repo(text: str, rc: RootCause | None, model: str | None) -> Diagnosis | None:
    """A gated or private Hub repository asked for without a token (HTTP 401 / "Cannot access gated repo")."""
    if not re.search(r"Cannot access gated repo|GatedRepoError|401 Client Error|is restricted\. You must have "
                     r"access to it and be authenticated|Invalid username or password", text):
        return None
    u = re.search(r"for url:? (https://huggingface\.co/\S*?)(?:/resolve|/api|\.|\s|$)", text)
    name = model or (u.group(1) if u else "the model")
    return Diagnosis("hub_auth", f"the Hub refused {name} without a token (401: a gated or private repository)",
                     'set HF_TOKEN = "<token with access>" in [vllm].extra_env (and accept the model\'s terms '
                     "on huggingface.co if it is gated); the Hub answers the same for a name that does not exist, "
                     "so check the spelling of [vllm].model too")


def cannot_link_cuda(text: str, rc: RootCause | None, model: str | None) -> Diagnosis | None:
    """Compiling a kernel failed to link (``cannot find -lcuda``): torch.compile / Triton need libcuda.so."""
    if "cannot find -lcuda" not in text:
        return None
    return Diagnosis("compile_link", "compiling a kernel failed: the linker cannot find libcuda.so "
                                     "(cannot find -lcuda)",
                     "set [vllm].enforce_eager = true (no compiled graphs), or make libcuda.so findable "
                     "(TRITON_LIBCUDA_PATH in [vllm].extra_env, or the driver's libcuda.so symlink)")


def vllm_message(text: str, rc: RootCause | None, model: str | None) -> Diagnosis | None:
    """Any other message of ``MESSAGES``, found in the root cause: the reason quotes it, the fix names the key."""
    if rc is None:
        return None
    for m in MESSAGES:
        if m.kind in ("vllm_config", "invalid_argument") and m.fragment in rc.message:
            where = f"[vllm].{m.key}" if m.key not in ("extra_args", "extra_env", "cluster") else \
                {"extra_args": "the flag in [vllm].extra_args", "extra_env": "[vllm].extra_env",
                 "cluster": "[vllm.cluster]"}[m.key]
            hint = f": {m.hint}" if m.hint else ""
            return Diagnosis(m.kind, f"vLLM refused the settings: {rc.message[:240]}", f"change {where}{hint}")
    return None


Rule = Callable[[str, RootCause | None, str | None], Diagnosis | None]
#: In order: the specific rules, then the table.
RULES: tuple[Rule, ...] = (tensor_parallel, quantization_capability, quantization_mismatch, bfloat16,
                           unknown_model_type, gated_repo, cannot_link_cuda, vllm_message)

__all__ = ["MESSAGES", "RULES", "Message"]
