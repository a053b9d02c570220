"""Load generator (`conduit bench`): statistics on synthetic timestamps (exact), the engine against a real
scripted streaming server on 127.0.0.1 for both protocols (exact token counts and formulas; measured times
only as lower bounds), errors by kind, saturation, writers and the CLI."""

from __future__ import annotations

import asyncio
import csv
import json
import random
import socket
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.sse_server import Script, ScriptedServer  # noqa: E402

from conduit import units
from conduit.daemon.bench import arrivals, outputs, prompts, runner, stats, wire
from conduit.errors import ConduitError
from conduit.redact import fingerprint

KEY = "sk-test-0123456789abcdef"


# ---------------------------------------------------------------- statistics (exact)


def test_percentile_linear_interpolation_known_values() -> None:
    assert units.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert units.percentile([4.0, 1.0, 3.0, 2.0], 0) == 1.0  # order of input does not matter
    assert units.percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    assert units.percentile([0.0, 10.0], 90) == 9.0
    assert units.percentile([0.0, 100.0, 200.0, 300.0, 400.0], 75) == 300.0
    assert units.percentile([7.0], 99) == 7.0
    assert units.percentile([], 50) is None
    with pytest.raises(ValueError):
        units.percentile([1.0], 101)


def test_percentile_matches_statistics_inclusive_method() -> None:
    """numpy 'linear' == Hyndman-Fan type 7 == statistics.quantiles(method='inclusive')."""
    rng = random.Random(7)
    for n in (2, 3, 10, 101):
        values = [rng.uniform(0, 5) for _ in range(n)]
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        for q in (1, 50, 90, 99):
            assert units.percentile(values, q) == pytest.approx(cuts[q - 1], rel=1e-12, abs=1e-12)


def test_ttft_and_tpot_formulas_on_timestamps() -> None:
    assert stats.ttft(10.0, 10.25) == 0.25
    assert stats.ttft(10.0, None) is None
    assert stats.tpot(2.0, 3.0, 5) == 0.25  # (3 - 2) / (5 - 1)
    assert stats.tpot(2.0, 2.0, 1) is None  # undefined for one token
    assert stats.tpot(None, None, 0) is None


def _rec(i: int, send: float, first: float | None, last: float | None, end: float, chunks: int,
         usage: int | None = None, error: stats.ErrorKind | None = None) -> stats.RequestResult:
    return stats.RequestResult(index=i, concurrency=2, t_send=send, t_first=first, t_last=last, t_end=end,
                            content_chunks=chunks, usage_output_tokens=usage, error=error,
                            detail="boom" if error else "")


def test_summarize_level_exact_on_synthetic_records() -> None:
    results = [
        _rec(0, 0.0, 0.5, 1.5, 1.5, chunks=5),              # ttft .5, tpot (1.5-.5)/4 = .25, e2e 1.5
        _rec(1, 0.0, 0.25, 2.25, 2.5, chunks=3, usage=9),  # usage wins: 9 tokens; tpot 2/8 = .25
        _rec(2, 1.5, 2.0, 2.0, 2.0, chunks=1),              # one token: no tpot
        _rec(3, 2.0, None, None, 4.0, chunks=0, error=stats.ErrorKind.HTTP_5XX),
        _rec(4, 2.5, 3.0, 3.0, 3.0, chunks=1, error=stats.ErrorKind.STREAM_BROKEN),
    ]
    lv = stats.summarize_level(2, results)
    assert lv.wall_s == 4.0  # max(t_end) - min(t_send)
    assert (lv.requests, lv.ok) == (5, 3)
    assert lv.errors == {"http_5xx": 1, "stream_broken": 1}
    assert lv.error_examples == {"http_5xx": "boom", "stream_broken": "boom"}
    assert lv.output_tokens == 5 + 9 + 1  # failed requests' tokens are not counted
    assert lv.output_tokens_per_s == 15 / 4.0
    assert lv.requests_per_s == 3 / 4.0
    assert lv.ttft.n == 3 and lv.ttft.p50 == units.percentile([0.5, 0.25, 0.5], 50) == 0.5
    assert lv.ttft.mean == pytest.approx((0.5 + 0.25 + 0.5) / 3)
    assert lv.tpot.n == 2 and lv.tpot.p50 == 0.25 and lv.tpot.p99 == 0.25
    assert lv.e2e.p90 == units.percentile([1.5, 2.25, 0.5], 90)  # vLLM's e2el: last chunk - send
    # an explicit wall time overrides the derived one
    assert stats.summarize_level(2, results, wall_s=5.0).output_tokens_per_s == 3.0


def test_summary_of_nothing_is_none() -> None:
    lv = stats.summarize_level(1, [_rec(0, 0.0, None, None, 1.0, 0, error=stats.ErrorKind.CONNECT)])
    assert lv.ttft == stats.Summary() and lv.ttft.n == 0
    assert (lv.ttft.p50, lv.ttft.mean, lv.ttft.std) == (None, None, None)
    assert lv.output_tokens_per_s == 0.0 and lv.ok == 0


def _feed(protocol: str, events: list[tuple[float, object]]) -> wire.StreamRecorder:
    rec = wire.StreamRecorder(stats.RequestResult(index=0, concurrency=1, t_send=1.0), protocol)  # type: ignore[arg-type]
    for now, ev in events:
        rec.event(ev if isinstance(ev, str) else json.dumps(ev), now)
    return rec


def test_openai_recorder_on_synthetic_timestamps() -> None:
    def delta(d: dict[str, object]) -> dict[str, object]:
        return {"choices": [{"index": 0, "delta": d}]}

    rec = _feed("openai", [
        (1.5, delta({"role": "assistant", "content": ""})),  # a chunk, as vLLM's bench counts it (TTFT)
        (2.0, delta({"content": "a"})),
        (2.5, delta({"content": None, "reasoning_content": "b"})),  # vLLM reasoning: a token
        (3.0, delta({"content": "c"})),
        (3.5, {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),  # a chunk too
        (3.75, {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}),  # not a chunk
        (4.0, "[DONE]"),
    ])
    r = rec.r
    assert rec.done and (r.t_first, r.t_last, r.chunks, r.content_chunks) == (1.5, 3.5, 5, 3)
    assert r.itl == [0.5, 0.5, 0.5, 0.5]
    assert (r.usage_output_tokens, r.output_tokens, r.input_tokens) == (5, 5, 7)
    assert r.ttft_s == 0.5 and r.tpot_s == 0.5  # (3.5 - 1.5) / (5 - 1)
    assert r.e2e_s == 2.5  # vLLM's latency: the last chunk, not [DONE]
    without_usage = _feed("openai", [(2.0, delta({"content": "a"})), (3.0, delta({"content": "b"}))])
    assert not without_usage.done and without_usage.r.output_tokens == 2 and without_usage.r.tpot_s == 1.0


def test_anthropic_recorder_on_synthetic_timestamps() -> None:
    def text(t: str) -> dict[str, object]:
        return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}

    rec = _feed("anthropic", [
        (1.25, {"type": "message_start", "message": {"usage": {"input_tokens": 9, "output_tokens": 1}}}),
        (1.5, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        (1.75, {"type": "ping"}),
        (2.0, text("a")),
        (2.25, text("")),  # empty: not a token
        (4.0, text("b")),
        (4.5, {"type": "message_delta", "usage": {"output_tokens": 3}}),
        (5.0, {"type": "message_stop"}),
    ])
    r = rec.r
    assert rec.done and (r.t_first, r.t_last, r.content_chunks) == (2.0, 4.0, 2)
    assert (r.output_tokens, r.input_tokens, r.tpot_s) == (3, 9, 1.0)  # (4 - 2) / (3 - 1)


@pytest.mark.parametrize("protocol,event,needle", [
    ("openai", "{not json", "malformed JSON"),
    ("openai", {"error": {"message": "overloaded"}}, "overloaded"),
    ("anthropic", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, "busy"),
])
def test_recorder_stream_errors(protocol: str, event: object, needle: str) -> None:
    with pytest.raises(wire.StreamError, match=needle):
        _feed(protocol, [(1.0, event)])


# ---------------------------------------------------------------- saturation


def test_saturation_is_the_knee_of_the_whole_curve() -> None:
    pts = [(1, 100.0), (2, 190.0), (4, 350.0), (8, 600.0), (16, 640.0), (32, 650.0), (64, 655.0)]
    sat = outputs.find_saturation(pts)
    assert sat.concurrency == 8  # 655 <= 1.1 * 600: no later level adds more than 10 % over the best so far
    assert sat.growth == pytest.approx(250 / 350)
    assert sat.recommended_max_num_seqs == 8
    assert "8" in sat.explanation and "655" in sat.explanation
    assert outputs.find_saturation(list(reversed(pts))).concurrency == 8  # sorted by concurrency


def test_saturation_a_slow_step_is_not_the_end_of_growth() -> None:
    """The issue's sweep: 488, 509, 582, 1876 tok/s. A first-slow-step rule said 2; the curve says: still
    growing at 8 (no advice), and one more flat level makes 8 the knee."""
    pts = [(1, 488.0), (2, 509.0), (4, 582.0), (8, 1876.0)]
    sat = outputs.find_saturation(pts)
    assert sat.concurrency is None and sat.recommended_max_num_seqs is None
    assert "still growing" in sat.explanation
    assert outputs.find_saturation(pts + [(16, 1900.0)]).recommended_max_num_seqs == 8
    assert outputs.knee(pts) == 3


def test_saturation_boundary_and_fraction() -> None:
    # +10 % exactly is not "more than 10 %": 120 <= 1.1 * 110
    assert outputs.find_saturation([(1, 100.0), (2, 110.0), (4, 120.0)]).concurrency == 2
    # creeping growth: each step under 10 %, but 1 -> 4 is 21 %: the knee is where the rest stays within 10 %
    assert outputs.find_saturation([(1, 100.0), (2, 105.0), (4, 110.0), (8, 115.0), (16, 121.0)]).concurrency == 4
    assert outputs.find_saturation([(1, 100.0), (2, 190.0), (4, 250.0)], min_growth=0.5).concurrency == 2
    assert outputs.find_saturation([(1, 100.0), (2, 190.0), (4, 250.0)], min_growth=0.2).concurrency is None


def test_saturation_when_throughput_falls_recommends_the_peak() -> None:
    sat = outputs.find_saturation([(1, 100.0), (2, 180.0), (4, 150.0)])
    assert sat.concurrency == 2 and sat.recommended_max_num_seqs == 2
    assert sat.growth == pytest.approx(0.8)


def test_no_saturation_and_degenerate_sweeps() -> None:
    sat = outputs.find_saturation([(1, 100.0), (2, 200.0), (4, 400.0)])
    assert sat.concurrency is None and sat.recommended_max_num_seqs is None
    assert "extend the sweep" in sat.explanation
    assert outputs.find_saturation([(1, 100.0)]).concurrency is None
    # a level where everything failed (0 tokens/s) is not a baseline for the next one
    assert outputs.find_saturation([(1, 0.0), (2, 100.0), (4, 300.0)]).concurrency is None
    with pytest.raises(ValueError):
        outputs.find_saturation([(1, 1.0)], min_growth=-0.1)


# ---------------------------------------------------------------- prompts


def test_synthetic_prompts_have_the_length_and_differ() -> None:
    a, b = prompts.synthetic_prompt(100, 0), prompts.synthetic_prompt(100, 1)
    assert a != b and a.split()[:2] != b.split()[:2]
    assert len(a.split()) == 100 - 6 + 5  # header is 5 words (about 6 tokens) + 94 list words
    assert prompts.synthetic_prompt(3, 0) == "Request 0: continue this list."
    with pytest.raises(ValueError):
        prompts.synthetic_prompt(0, 0)


def test_load_prompts_lines_and_jsonl(tmp_path: Path) -> None:
    f = tmp_path / "p.txt"
    f.write_text('plain one\n\n{"prompt": "from json"}\n"a json string"\n{"text": "t"}\n', encoding="utf-8")
    assert prompts.load_prompts(f) == ["plain one", "from json", "a json string", "t"]
    src = prompts.PromptSource(None, tuple(prompts.load_prompts(f)))
    assert [src.get(i) for i in (0, 4, 5)] == ["plain one", "plain one", "from json"]


@pytest.mark.parametrize("content,needle", [
    ('ok\n{"prompt": broken\n', "p.txt:2: not valid JSON"),
    ('{"other": 1}\n', "p.txt:1: JSON line holds no prompt"),
    ("\n\n", "holds no prompt"),
])
def test_load_prompts_errors_name_file_and_line(tmp_path: Path, content: str, needle: str) -> None:
    f = tmp_path / "p.txt"
    f.write_text(content, encoding="utf-8")
    with pytest.raises(ConduitError) as exc:
        prompts.load_prompts(f)
    assert needle in str(exc.value)
    with pytest.raises(ConduitError, match="cannot read prompts file"):
        prompts.load_prompts(tmp_path / "missing.txt")


def test_closed_loop_keeps_at_most_one_job_per_worker_and_orders_results() -> None:
    running, peak = 0, 0

    async def job(worker: str, i: int) -> tuple[str, int]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.001 * (i % 3))
        running -= 1
        return worker, i

    got = asyncio.run(arrivals.closed_loop(["a", "b", "c"], 10, job))
    assert [i for _, i in got] == list(range(10)) and peak == 3
    assert {w for w, _ in got} == {"a", "b", "c"}
    assert asyncio.run(arrivals.closed_loop(["a", "b", "c"], 1, job)) == [("a", 0)]  # fewer jobs than workers


# ---------------------------------------------------------------- engine against a real server


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as srv:
        yield srv


def _sweep(cfg: runner.BenchConfig) -> outputs.SweepResult:
    return asyncio.run(runner.run_sweep(cfg))


def _cfg(srv: ScriptedServer, protocol: str = "openai", **kw: object) -> runner.BenchConfig:
    base = srv.root + "/v1" if protocol == "openai" else srv.root
    ep = wire.Endpoint(base, protocol, key=kw.pop("key", KEY), auth=kw.pop("auth", None))  # type: ignore[arg-type]
    kw.setdefault("requests", 3)
    kw.setdefault("concurrency", (1,))
    kw.setdefault("prompts", prompts.PromptSource(16))
    return runner.BenchConfig(ep, "test-model", **kw)  # type: ignore[arg-type]


def _check_scripted_timing(lv: stats.LevelStats, script: Script) -> None:
    for r in lv.results:
        assert r.ok, r.detail
        assert r.content_chunks == script.tokens
        # TTFT: lower bound only (the first content chunk is sent after first_token_s; the role-only chunk
        # before it must not count as a token)
        assert r.ttft_s is not None and r.ttft_s >= script.first_token_s
        assert r.e2e_s >= script.first_token_s + (script.tokens - 1) * script.inter_token_s
        assert r.t_first is not None and r.t_last is not None
        assert r.tpot_s == (r.t_last - r.t_first) / (r.output_tokens - 1)  # exact, on recorded stamps
    assert lv.ttft.p50 == units.percentile([r.ttft_s for r in lv.results if r.ttft_s is not None], 50)
    assert lv.output_tokens == sum(r.output_tokens for r in lv.results)


def test_openai_stream_counts_and_timing(server: ScriptedServer) -> None:
    server.script = Script(first_token_s=0.2, inter_token_s=0.05, tokens=5)
    sweep = _sweep(_cfg(server, max_tokens=5))
    (lv,) = sweep.levels
    assert (lv.requests, lv.ok, lv.errors) == (3, 3, {})
    _check_scripted_timing(lv, server.script)
    assert all(r.usage_output_tokens == 5 and r.input_tokens == 11 for r in lv.results)
    assert lv.output_tokens == 15 and lv.mean_input_tokens == 11
    seen = server.seen[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}" and "x-api-key" not in seen.headers
    assert seen.body["stream"] is True and seen.body["max_tokens"] == 5 and seen.body["model"] == "test-model"
    assert seen.body["stream_options"] == {"include_usage": True}
    assert "ignore_eos" not in seen.body


def test_openai_usage_count_wins_over_chunks_and_fallback(server: ScriptedServer) -> None:
    server.script = Script(tokens=4, usage_tokens=9)
    (lv,) = _sweep(_cfg(server, requests=2, ignore_eos=True)).levels
    assert [(r.content_chunks, r.output_tokens) for r in lv.results] == [(4, 9), (4, 9)]
    assert server.seen[0].body["ignore_eos"] is True
    # without the usage chunk the generator counts content chunks
    (lv,) = _sweep(_cfg(server, requests=2, stream_usage=False)).levels
    assert [(r.usage_output_tokens, r.output_tokens) for r in lv.results] == [(None, 4), (None, 4)]
    assert "stream_options" not in server.seen[-1].body


def test_anthropic_stream_counts_timing_and_headers(server: ScriptedServer) -> None:
    server.script = Script(first_token_s=0.2, inter_token_s=0.05, tokens=5, usage_tokens=6)
    (lv,) = _sweep(_cfg(server, "anthropic")).levels
    assert lv.ok == 3
    _check_scripted_timing(lv, server.script)
    assert all(r.output_tokens == 6 and r.input_tokens == 11 for r in lv.results)
    seen = server.seen[0]
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == KEY and "authorization" not in seen.headers
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.body["messages"][0]["role"] == "user" and "stream_options" not in seen.body
    # bearer on request, and the chunk-count fallback without usage
    server.script = Script(tokens=3, usage=False)
    (lv,) = _sweep(_cfg(server, "anthropic", auth="bearer", requests=1)).levels
    assert lv.results[0].output_tokens == 3 and lv.results[0].usage_output_tokens is None
    assert server.seen[-1].headers["authorization"] == f"Bearer {KEY}"


def test_level_runs_its_concurrency_and_prompts_differ_across_levels(server: ScriptedServer) -> None:
    server.script = Script(tokens=2, hold_until=4, hold_timeout_s=10)
    sweep = _sweep(_cfg(server, requests=8, concurrency=(4, 2)))
    assert server.hold_timed_out == 0 and server.max_in_flight == 4  # 4 at once, never more
    assert [lv.ok for lv in sweep.levels] == [8, 8]
    sent = [s.body["messages"][0]["content"] for s in server.seen]
    assert len(sent) == 16 and len(set(sent)) == 16  # no prefix-cache reuse across the sweep


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_connections_are_kept_alive_one_per_worker(server: ScriptedServer, protocol: str) -> None:
    server.script = Script(tokens=3)
    sweep = _sweep(_cfg(server, protocol, requests=10, concurrency=(1, 3)))
    assert [lv.ok for lv in sweep.levels] == [10, 10]
    assert server.connections == 3  # worker 0 reuses its connection across requests and levels


def test_no_key_sends_no_auth_header(server: ScriptedServer) -> None:
    _sweep(_cfg(server, key=None, requests=1))
    assert "authorization" not in server.seen[0].headers and "x-api-key" not in server.seen[0].headers


@pytest.mark.parametrize("status,kind", [(500, "http_5xx"), (503, "http_5xx"), (401, "http_4xx"),
                                         (404, "http_4xx")])
def test_http_errors_by_status_class(server: ScriptedServer, status: int, kind: str) -> None:
    server.script = Script(fail_status=status, echo_auth=True)
    (lv,) = _sweep(_cfg(server, requests=2)).levels
    assert lv.errors == {kind: 2} and lv.ok == 0 and lv.output_tokens_per_s == 0.0
    assert all(r.http_status == status for r in lv.results)
    detail = lv.error_examples[kind]
    assert f"HTTP {status}" in detail and KEY not in detail and fingerprint(KEY) in detail


def test_connection_refused_is_connect() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = runner.BenchConfig(wire.Endpoint(f"http://127.0.0.1:{port}/v1"), "m", requests=2, concurrency=(1,))
    (lv,) = _sweep(cfg).levels
    assert lv.errors == {"connect": 2}


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_broken_stream_is_stream_broken(server: ScriptedServer, protocol: str) -> None:
    server.script = Script(tokens=5, break_after=2)
    (lv,) = _sweep(_cfg(server, protocol, requests=2)).levels
    assert lv.errors == {"stream_broken": 2}
    assert all(r.content_chunks == 2 and not r.ok for r in lv.results)
    assert lv.output_tokens == 0  # partial answers are not throughput


def test_read_timeout_is_timeout(server: ScriptedServer) -> None:
    server.script = Script(first_token_s=1.0, tokens=2)
    (lv,) = _sweep(_cfg(server, requests=1, timeout_s=0.2)).levels
    assert lv.errors == {"timeout": 1}


def test_wrong_path_is_a_404_not_a_crash(server: ScriptedServer) -> None:
    cfg = runner.BenchConfig(wire.Endpoint(server.root + "/v1", "anthropic"), "m", requests=1, concurrency=(1,))
    (lv,) = _sweep(cfg).levels  # would request /v1/v1/messages
    assert lv.errors == {"http_4xx": 1}


# ---------------------------------------------------------------- config, secrets and writers


def test_config_validation_and_key_never_shown() -> None:
    ep = wire.Endpoint("http://127.0.0.1:9/v1/", "openai", key=KEY)
    assert ep.url == "http://127.0.0.1:9/v1/chat/completions"
    assert KEY not in repr(ep) and fingerprint(KEY) in repr(ep)
    cfg = runner.BenchConfig(ep, "m")
    assert KEY not in json.dumps(cfg.describe()) and cfg.concurrency == (1, 2, 4, 8, 16, 32, 64)
    with pytest.raises(ConduitError, match="vLLM extension"):
        runner.BenchConfig(wire.Endpoint("http://h", "anthropic"), "m", ignore_eos=True)
    with pytest.raises(ConduitError, match="requests"):
        runner.BenchConfig(ep, "m", requests=0)
    with pytest.raises(ConduitError, match="not an http"):
        wire.Endpoint("127.0.0.1:8000/v1")
    assert arrivals.parse_levels("1, 2,4") == (1, 2, 4)
    with pytest.raises(ValueError):
        arrivals.parse_levels("1,0")


def test_json_and_csv_writers(server: ScriptedServer, tmp_path: Path) -> None:
    server.script = Script(tokens=3)
    sweep = _sweep(_cfg(server, requests=2, concurrency=(1, 2)))
    outputs.write_json(tmp_path / "out" / "b.json", sweep)
    outputs.write_csv(tmp_path / "b.csv", sweep)
    text = (tmp_path / "out" / "b.json").read_text()
    assert KEY not in text
    doc = json.loads(text)
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 2]
    assert doc["levels"][1]["output_tokens"] == 6 and len(doc["levels"][1]["per_request"]) == 2
    assert doc["levels"][0]["ttft_ms"]["p50"] == sweep.levels[0].ttft.p50 * 1000
    assert doc["percentile_method"].startswith("linear interpolation")
    assert "saturation" in doc and doc["config"]["key"] == fingerprint(KEY)
    rows = list(csv.DictReader((tmp_path / "b.csv").read_text().splitlines()))
    assert [int(r["concurrency"]) for r in rows] == [1, 2]
    assert list(rows[0]) == list(outputs.CSV_FIELDS)
    assert float(rows[1]["output_tokens_per_s"]) == pytest.approx(sweep.levels[1].output_tokens_per_s)
    with pytest.raises(ConduitError, match="cannot write"):
        outputs.write_csv(tmp_path / "b.csv" / "x.csv", sweep)


def _tiny_sweep() -> outputs.SweepResult:
    levels = [stats.summarize_level(c, [_rec(0, 0.0, 0.5, 1.0, 1.0, chunks=3)], wall_s=1.0 / c) for c in (1, 2, 4)]
    return outputs.SweepResult({"model": "m"}, levels, outputs.saturation_of(levels))


def test_plot_when_matplotlib_is_importable(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    outputs.write_plot(tmp_path / "p.png", _tiny_sweep())
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    assert not outputs.plotting_available()
    with pytest.raises(ConduitError) as exc:
        outputs.write_plot(tmp_path / "p.png", _tiny_sweep())
    assert "conduit[plot]" in str(exc.value) and not (tmp_path / "p.png").exists()


# ---------------------------------------------------------------- CLI


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):
    """``conduit bench ARGS`` through the CLI's entry point: (exit code, stdout, stderr)."""
    from conduit.daemon.cli.main import main

    def run(*args: str) -> tuple[int, str, str]:
        rc = main(["bench", *args])
        out, err = capsys.readouterr()
        return rc, out, err

    return run


def test_cli_sweep_writes_outputs(server: ScriptedServer, run_cli, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    server.script = Script(tokens=4)
    monkeypatch.setenv("BENCH_KEY", f"  Bearer {KEY}\n")
    rc, out, err = run_cli("--base-url", server.root + "/v1", "--model", "m", "--requests", "3",
                           "--concurrency", "1,2", "--prompt-tokens", "20", "--max-tokens", "4",
                           "--key-env", "BENCH_KEY", "--json", str(tmp_path / "r.json"),
                           "--csv", str(tmp_path / "r.csv"))
    assert rc == 0, err
    assert "conduit bench" in out and "linear interpolation" in out
    assert KEY not in out + err
    assert server.seen[0].headers["authorization"] == f"Bearer {KEY}"  # cleaned: prefix and space gone
    assert len(server.seen) == 6
    assert json.loads((tmp_path / "r.json").read_text())["config"]["requests_per_level"] == 3
    assert (tmp_path / "r.csv").read_text().count("\n") == 3


def test_cli_anthropic_with_key_file(server: ScriptedServer, run_cli, tmp_path: Path) -> None:
    (tmp_path / "k").write_text(KEY + "\n")
    rc, out, err = run_cli("--base-url", server.root, "--protocol", "anthropic", "--model", "m",
                           "--requests", "1", "--concurrency", "1", "--key-file", str(tmp_path / "k"))
    assert rc == 0, err
    assert server.seen[0].headers["x-api-key"] == KEY


def test_cli_hints_at_a_prompt_longer_than_the_context(server: ScriptedServer, run_cli) -> None:
    server.script = Script(fail_status=400, fail_message="This model's maximum context length is 256 tokens. "
                           "However, your prompt contains at least 257 input tokens")
    rc, out, err = run_cli("--base-url", server.root + "/v1", "--model", "m", "--requests", "2",
                           "--concurrency", "1,2")
    assert rc == 1 and "lower --prompt-tokens" in out
    assert "no saturation seen" not in out and "fewer than two levels delivered any tokens" in out


def test_cli_channel_from_profile(server: ScriptedServer, run_cli, temp_home: Path) -> None:
    """--channel takes the base URL (rendered per protocol), the key and the model from the profile."""
    from helpers.toolfiles import write_profile

    write_profile(temp_home, server.root + "/v1/", key_text=f"Bearer {KEY}\n", model="prof-model")
    rc, out, err = run_cli("--channel", "gw", "--requests", "1", "--concurrency", "1", "--max-tokens", "2")
    assert rc == 0, err
    assert server.seen[0].path == "/v1/chat/completions"
    assert server.seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert server.seen[0].body["model"] == "prof-model"
    rc, out, err = run_cli("--channel", "gw", "--protocol", "anthropic", "--requests", "1", "--concurrency", "1")
    assert rc == 0, err
    assert server.seen[-1].path == "/v1/messages"
    rc, out, err = run_cli("--channel", "nope")
    assert rc == 3 and "channel `nope` is not defined" in err and "channels defined: gw" in err  # an unknown channel is bad input: exit 3 in every command


def test_cli_all_requests_failing_exits_1(run_cli) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out, err = run_cli("--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", "--requests", "1",
                           "--concurrency", "1")
    assert rc == 1 and "connect" in out and "no request succeeded" in err


@pytest.mark.parametrize("args,code,needle", [
    (["--base-url", "http://h/v1", "--model", "m", "--concurrency", "1,x"], 3, "not a positive integer"),
    (["--base-url", "http://h/v1", "--model", "m", "--key-env", "A", "--key-file", "f"], 3, "one of"),
    (["--model", "m"], 3, "--base-url"),
    (["--base-url", "http://h/v1"], 3, "model"),
    (["--channel", "local"], 1, "conduit init"),
    (["--base-url", "http://h", "--protocol", "anthropic", "--model", "m", "--ignore-eos"], 1, "vLLM extension"),
    (["--base-url", "http://h/v1", "--model", "m", "--key-env", "NOPE_UNSET"], 1, "NOPE_UNSET is not set"),
])
def test_cli_bad_input_is_a_message_not_a_traceback(run_cli, args: list[str], code: int, needle: str) -> None:
    rc, out, err = run_cli(*args)
    assert rc == code
    assert needle in out + err and "Traceback" not in out + err


def test_cli_timeout_takes_a_duration(server: ScriptedServer, run_cli) -> None:
    server.script = Script(tokens=2)
    rc, out, err = run_cli("--base-url", server.root + "/v1", "--model", "m", "--requests", "1",
                           "--concurrency", "1", "--timeout", "2m")
    assert rc == 0, err
    rc, out, err = run_cli("--base-url", server.root + "/v1", "--model", "m", "--timeout", "soon")
    assert rc == 3 and "--timeout: 'soon' is not a duration" in err and server.seen[1:] == []


def test_cli_refuses_a_wrapped_key_without_printing_it(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_KEY", "sk-test-ab\ncd")
    rc, out, err = run_cli("--base-url", "http://h/v1", "--model", "m", "--key-env", "BENCH_KEY")
    assert rc == 1 and "line break (U+000A) at position 10" in err and "sk-test-ab" not in out + err
    monkeypatch.setenv("BENCH_KEY", "sk-test-abcd\u2211x")
    rc, out, err = run_cli("--base-url", "http://h/v1", "--model", "m", "--key-env", "BENCH_KEY")
    assert rc == 1 and "U+2211 at position 12" in err


def test_cli_plot_missing_matplotlib_fails_before_the_sweep(server: ScriptedServer, run_cli, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rc, out, err = run_cli("--base-url", server.root + "/v1", "--model", "m", "--plot", str(tmp_path / "p.png"))
    assert rc == 1 and "conduit[plot]" in err
    assert server.seen == []
