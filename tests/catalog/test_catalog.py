"""The model catalog: parsing each server's ``/models`` shape, the bounded fetch, the per-channel cache, and
which context figure a tool is given (the profile's wins)."""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

import pytest
from helpers.modelserver import OPENROUTER_BODY, PLAIN_BODY, VLLM_BODY, ModelServer
from helpers.toolfiles import write_profile

from conduit.adapters.base import Root, ToolSettings
from conduit.daemon.catalog import models as catalog
from conduit.daemon.catalog.context import refresh_stale, with_context
from conduit.daemon.catalog.models import Catalog, CatalogError, ModelInfo, parse_models
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.resolve import Resolver, resolve_channel

KEY = "sk-test-abc"


def test_parse_vllm_shape() -> None:
    assert parse_models(VLLM_BODY) == [ModelInfo("qwen-coder-7b", 4096, None)]


def test_parse_openrouter_shape() -> None:
    assert parse_models(OPENROUTER_BODY) == [ModelInfo("anthropic/claude-sonnet-4", 200000, 64000),
                                             ModelInfo("meta/llama-3", 8192, None)]


def test_parse_plain_and_junk() -> None:
    assert parse_models(PLAIN_BODY) == [ModelInfo("gpt-4o")]
    junk = {"data": [{"id": 3}, "x", {"id": " "}, {"id": "m", "max_model_len": True, "context_length": -1},
                     {"id": "n", "max_model_len": 2048.0}]}
    assert parse_models(junk) == [ModelInfo("m"), ModelInfo("n", 2048)]
    assert parse_models({"error": "nope"}) == [] and parse_models("text") == []
    assert parse_models([{"id": "bare"}]) == [ModelInfo("bare")]
    absurd = {"data": [{"id": "big", "context_length": 1e30, "top_provider": {"max_completion_tokens": 2**63}},
                       {"id": "ok", "max_model_len": 1 << 30}]}
    assert parse_models(absurd) == [ModelInfo("big"), ModelInfo("ok", 1 << 30)]  # no model has 1e30 tokens


@pytest.fixture
def vllm_server() -> ModelServer:
    srv = ModelServer(VLLM_BODY)
    yield srv
    srv.close()


def _profile(home: Path, url: str, extra: str = "", auth: str = "bearer", model: str = "qwen-coder-7b"):
    write_profile(home, url, tools=(), extra=extra, auth=auth, model=model, small_model=None)
    return load_profile(home / ".config" / "conduit" / "profile.toml")


def test_fetch_sends_the_key_in_the_channel_style_and_caches_without_it(temp_home: Path,
                                                                       vllm_server: ModelServer) -> None:
    profile = _profile(temp_home, vllm_server.url, auth="x-api-key")
    got = catalog.refresh(resolve_channel(profile, "gw"))
    assert vllm_server.calls() == [("GET", "/v1/models", KEY)]
    assert got.base_url == f"{vllm_server.url}/v1" and got.find("qwen-coder-7b") == ModelInfo("qwen-coder-7b", 4096)
    path = catalog.cache_path("gw")
    assert path.stat().st_mode & 0o777 == 0o600 and KEY not in path.read_text()
    doc = json.loads(path.read_text())
    assert doc["base_url"] == got.base_url and doc["fetched_at"] > 0
    assert catalog.read_cache("gw", got.base_url) == got
    assert catalog.read_cache("gw", "http://elsewhere/v1") is None  # the channel moved: the cache is not its


def test_fetch_bearer(temp_home: Path, vllm_server: ModelServer) -> None:
    catalog.fetch(resolve_channel(_profile(temp_home, vllm_server.url), "gw"))
    assert vllm_server.calls() == [("GET", "/v1/models", f"Bearer {KEY}")]


def test_fetch_errors_name_the_url_never_the_key(temp_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    srv = ModelServer({"error": "unauthorized"}, status=401)
    try:
        ch = resolve_channel(_profile(temp_home, srv.url), "gw")
        with pytest.raises(CatalogError, match=r"/v1/models: HTTP 401") as info:
            catalog.fetch(ch)
        assert KEY not in str(info.value)
        srv.status, srv.body = 200, b"not json"
        with pytest.raises(CatalogError, match="not JSON"):
            catalog.fetch(ch)
        srv.body = VLLM_BODY
        monkeypatch.setattr(catalog, "BODY_MAX_BYTES", 64)
        with pytest.raises(CatalogError, match="over 64 bytes"):
            catalog.fetch(ch)
    finally:
        srv.close()


def test_fetch_is_bounded_when_the_server_never_answers(temp_home: Path) -> None:
    with socket.socket() as listener:  # accepts connections (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(CatalogError, match="no answer within 0.5 s"):
            catalog.fetch(resolve_channel(_profile(temp_home, url), "gw"), timeout_s=0.5)


def test_fetch_is_bounded_as_a_whole_when_the_body_drips(temp_home: Path) -> None:
    import threading

    stop = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)

        def drip() -> None:  # headers at once, then one byte every 0.2 s of a 100 kB body (~5.5 hours)
            conn, _ = listener.accept()
            with conn:
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n")
                while not stop.wait(0.2):
                    try:
                        conn.sendall(b" ")
                    except OSError:
                        return

        server = threading.Thread(target=drip, daemon=True)
        server.start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        try:
            with pytest.raises(CatalogError, match="no answer within 1 s"):
                catalog.fetch(resolve_channel(_profile(temp_home, url), "gw"), timeout_s=1.0)
        finally:
            stop.set()
            server.join(10)


def test_fetch_is_bounded_when_name_resolution_hangs(temp_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    release = threading.Event()

    def stuck(*_args: object, **_kw: object) -> list[object]:  # getaddrinfo takes no timeout of its own
        release.wait(30)
        raise OSError("released")

    monkeypatch.setattr(socket, "getaddrinfo", stuck)
    try:
        with pytest.raises(CatalogError, match="no answer within 0.5 s"):
            catalog.fetch(resolve_channel(_profile(temp_home, "http://slow-dns.invalid"), "gw"), timeout_s=0.5)
    finally:
        release.set()


def test_damaged_or_huge_cache_is_no_cache(temp_home: Path) -> None:
    path = catalog.cache_path("gw")
    path.parent.mkdir(parents=True)
    for text in ("{not json", json.dumps({"channel": "gw"}), json.dumps([1, 2])):
        path.write_text(text)
        assert catalog.read_cache("gw") is None
    path.write_bytes(b" " * (catalog.CACHE_MAX_BYTES + 1))
    assert catalog.read_cache("gw") is None
    path.write_bytes(b"[" * 100_000)  # under the cap, too deep for the JSON parser
    assert catalog.read_cache("gw") is None
    assert catalog.remember("gw", "http://x/v1", b"[" * 100_000) is None
    assert catalog.cache_path("a/../b").name == "a_.._b.json"


def _settings(model: str = "qwen-coder-7b", tool: str = "opencode") -> ToolSettings:
    return ToolSettings(tool=tool, channel="gw", root=Root("x"), key=None, model=model)


def test_with_context_profile_wins_else_the_cache(temp_home: Path, vllm_server: ModelServer) -> None:
    extra = "[tools.opencode]\ncontext_window = 1000\n[tools.codex]\n"
    profile = _profile(temp_home, vllm_server.url, extra=extra)
    assert with_context(_settings(), profile) == dataclasses.replace(_settings(), context_window=1000,
                                                                     max_output_tokens=250)  # derived: 1000 // 4
    assert with_context(_settings(tool="codex"), profile).context_window is None  # nothing cached yet
    catalog.refresh(resolve_channel(profile, "gw"))
    assert with_context(_settings(), profile).context_window == 1000  # the profile's value wins
    got = with_context(_settings(tool="codex"), profile)
    assert (got.context_window, got.max_output_tokens) == (4096, 1024)  # vLLM gives no output limit: derived
    assert with_context(_settings("other-model", tool="codex"), profile).context_window is None


def test_with_context_output_from_the_profile_and_the_gateway(temp_home: Path) -> None:
    srv = ModelServer(OPENROUTER_BODY)
    try:
        profile = _profile(temp_home, srv.url, model="anthropic/claude-sonnet-4",
                           extra="[tools.cline]\nmax_output_tokens = 500\n[tools.aider]\n")
        catalog.refresh(resolve_channel(profile, "gw"))
        cline = with_context(_settings("anthropic/claude-sonnet-4", "cline"), profile)
        assert (cline.context_window, cline.max_output_tokens) == (200000, 500)
        aider = with_context(_settings("anthropic/claude-sonnet-4", "aider"), profile)
        assert (aider.context_window, aider.max_output_tokens) == (200000, 64000)
    finally:
        srv.close()


def test_derived_output_is_a_quarter_capped_and_the_profile_still_wins(temp_home: Path) -> None:
    from conduit.daemon.catalog.context import DERIVED_OUTPUT_CAP, derived_output

    assert (derived_output(4096), derived_output(3), derived_output(1_000_000)) == (1024, 1, DERIVED_OUTPUT_CAP)
    srv = ModelServer({"data": [{"id": "big", "max_model_len": 1_000_000}]})
    try:
        profile = _profile(temp_home, srv.url, model="big", extra="[tools.cline]\nmax_output_tokens = 900\n")
        catalog.refresh(resolve_channel(profile, "gw"))
        got = with_context(_settings("big", "cline"), profile)
        assert (got.context_window, got.max_output_tokens) == (1_000_000, 900)
        got = with_context(_settings("big", "opencode"), profile)
        assert (got.context_window, got.max_output_tokens) == (1_000_000, DERIVED_OUTPUT_CAP)
    finally:
        srv.close()


def test_refresh_stale_only_when_old_and_says_why_when_it_cannot(temp_home: Path, vllm_server: ModelServer) -> None:
    profile = _profile(temp_home, vllm_server.url, extra="[tools.codex]\n")
    resolver = Resolver(profile)
    assert refresh_stale(resolver, ["codex"], max_age_s=600) == []
    assert len(vllm_server.requests) == 1
    assert refresh_stale(resolver, ["codex"], max_age_s=600) == []
    assert len(vllm_server.requests) == 1  # fresh: not asked again
    assert refresh_stale(resolver, ["codex"], max_age_s=0) == [] and len(vllm_server.requests) == 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused
    profile = _profile(temp_home, dead, extra="[tools.codex]\n")
    lines = refresh_stale(Resolver(profile), ["codex"], max_age_s=0, timeout_s=1)
    assert len(lines) == 1 and "model list of `gw` not refreshed" in lines[0] and KEY not in lines[0]


def test_prober_answer_fills_the_cache(temp_home: Path) -> None:
    got = catalog.remember("gw", "http://h/v1", json.dumps(VLLM_BODY).encode())
    assert isinstance(got, Catalog) and catalog.read_cache("gw", "http://h/v1") == got
    assert catalog.remember("gw", "http://h/v1", b"<html>") is None


def test_an_unchanged_answer_does_not_rewrite_the_cache_until_it_ages(temp_home: Path) -> None:
    body = json.dumps(VLLM_BODY).encode()
    first = catalog.remember("gw", "http://h/v1", body)
    inode = catalog.cache_path("gw").stat().st_ino  # the write is atomic (a new file): a rewrite changes it
    assert catalog.remember("gw", "http://h/v1", body) == first
    assert catalog.cache_path("gw").stat().st_ino == inode
    aged = dataclasses.replace(first, fetched_at=first.fetched_at - catalog.REMEMBER_REFRESH_S - 1)
    catalog.write_cache(aged)
    inode = catalog.cache_path("gw").stat().st_ino
    again = catalog.remember("gw", "http://h/v1", body)
    assert again is not None and again.fetched_at > aged.fetched_at and catalog.cache_path("gw").stat().st_ino != inode
    changed = catalog.remember("gw", "http://h/v1", json.dumps({"data": [{"id": "other"}]}).encode())
    assert changed is not None and catalog.read_cache("gw", "http://h/v1") == changed


def test_the_prober_caches_off_its_event_loop(temp_home: Path, vllm_server: ModelServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import threading

    import httpx

    from conduit.daemon.agent import prober

    seen: list[int] = []
    monkeypatch.setattr(prober, "remember_models", lambda *a: seen.append(threading.get_ident()))

    async def probe() -> int:
        async with httpx.AsyncClient() as client:
            target = prober.ProbeTarget(channel="gw", protocol="openai", root=Root(vllm_server.url), key=KEY)
            await prober.probe_once(client, target)
        return threading.get_ident()

    loop_thread = asyncio.run(probe())
    assert len(seen) == 1 and seen[0] != loop_thread


def test_an_ok_probe_of_the_agent_refreshes_the_cache(temp_home: Path, vllm_server: ModelServer) -> None:
    import asyncio

    import httpx

    from conduit.daemon.agent.prober import ProbeTarget, Verdict, probe_once

    async def probe() -> Verdict:
        async with httpx.AsyncClient() as client:
            target = ProbeTarget(channel="gw", protocol="openai", root=Root(vllm_server.url), key=KEY)
            return (await probe_once(client, target)).verdict

    assert asyncio.run(probe()) is Verdict.OK
    got = catalog.read_cache("gw", f"{vllm_server.url}/v1")
    assert got is not None and got.find("qwen-coder-7b") == ModelInfo("qwen-coder-7b", 4096)


@pytest.mark.parametrize("stamp", [9_999_999_999.0, float("nan"), float("inf")])
def test_a_cache_stamped_by_a_wrong_clock_is_stale(temp_home: Path, stamp: float) -> None:
    got = Catalog("gw", "http://x/v1", stamp, (ModelInfo("m", 7777),))
    assert got.age_s() == float("inf")
    assert Catalog("gw", "http://x/v1", 1000.0, ()).age_s(now=1010.0) == 10.0
    assert Catalog("gw", "http://x/v1", 1100.0, ()).age_s(now=1000.0) == 0.0  # a little skew: fresh


def test_an_output_limit_that_leaves_no_room_for_the_prompt_is_not_written(temp_home: Path) -> None:
    """A gateway listing max_completion_tokens equal to the context gave Aider max_input_tokens = 1 and Continue a
    prompt budget of 0: such an output limit becomes the derived one; the profile's own stays below the context."""
    srv = ModelServer({"data": [{"id": "whole", "context_length": 131072,
                                 "top_provider": {"max_completion_tokens": 131072}},
                                {"id": "half", "context_length": 8192, "top_provider": {"max_completion_tokens": 4096}}]})
    try:
        profile = _profile(temp_home, srv.url, model="whole",
                           extra="[tools.cline]\nmax_output_tokens = 6000\n[tools.aider]\nmax_output_tokens = 9000\n")
        catalog.refresh(resolve_channel(profile, "gw"))
        got = with_context(_settings("whole", "opencode"), profile)
        assert (got.context_window, got.max_output_tokens) == (131072, 32768)
        assert with_context(_settings("half", "opencode"), profile).max_output_tokens == 4096  # half: room left
        profile = _profile(temp_home, srv.url, model="half",
                           extra="[tools.cline]\nmax_output_tokens = 6000\n[tools.aider]\nmax_output_tokens = 9000\n")
        assert with_context(_settings("half", "cline"), profile).max_output_tokens == 6000  # the person's choice
        assert with_context(_settings("half", "aider"), profile).max_output_tokens == 2048  # over the context
    finally:
        srv.close()
