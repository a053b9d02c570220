"""An observed engine's ``[vllm] url`` changed in place (``Observer.apply_settings``): the change is logged, the new
engine's ``since`` is its own (not the old engine's), and an engine that stops answering is logged once. Real
loopback servers: two tests/helpers/fake_ollama.py stand-ins."""

from __future__ import annotations

import asyncio
import logging

import pytest
from helpers.fake_ollama import FakeOllama

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.observer import Observer
from conduit.daemon.vllm.supervisor import VllmState


def observed(url: str) -> VllmSettings:
    return VllmSettings.model_validate({"model": "qwen2.5:0.5b", "manage": False, "url": url,
                                        "health_interval_s": 0.1, "unhealthy_restart_s": 30})


def test_a_new_url_is_logged_and_ready_since_the_new_engine(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with FakeOllama(models={"qwen2.5:0.5b": 32768}) as one, FakeOllama(models={"qwen2.5:0.5b": 32768}) as two:

        async def main() -> None:
            obs = Observer(observed(one.url))
            task = asyncio.create_task(obs.run())
            try:
                await obs.wait_for(VllmState.READY, timeout_s=20)
                first_since = obs.since
                await asyncio.sleep(0.3)
                await obs.apply_settings(observed(two.url))
                assert obs.state is VllmState.STARTING and obs.snapshot()["base_url"] == two.url
                await obs.wait_for(VllmState.READY, timeout_s=20)
                assert obs.since > first_since + 0.2
                assert [h[0] for h in obs.history][-2:] == ["starting", "ready"]
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

        asyncio.run(main())
    assert any("observed engine changed" in r.getMessage() and two.url in r.getMessage() for r in caplog.records)


def test_an_engine_that_stops_answering_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    fake = FakeOllama(models={"qwen2.5:0.5b": 32768})

    async def main() -> None:
        with fake:
            obs = Observer(observed(fake.url))
            task = asyncio.create_task(obs.run())
            await obs.wait_for(VllmState.READY, timeout_s=20)
        try:
            await obs.wait_for(VllmState.UNHEALTHY, timeout_s=20)
            await asyncio.sleep(0.5)  # several more looks while it stays down
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    said = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(said) == 1, said
