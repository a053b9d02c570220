"""`conduit plan --kv-tier`: the host KV tier sized between the device KV budget and the host's free memory less
a headroom, and the cases where it will not help (prefix caching off, prompts without a shared prefix, the CPU
build). The rule itself (``plan.hosttier``) and the command, in process, with no GPU and a stated host size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ledger import TINY, write_model  # noqa: E402

from conduit.daemon.plan.hosttier import (
    HEADROOM_MIN_BYTES,
    TIER_MULTIPLE,
    TierInputs,
    headroom,
    plan_host_tier,
)
from conduit.units import GiB


def test_bounds_are_the_device_budget_and_free_host_memory_less_headroom() -> None:
    t = plan_host_tier(TierInputs(10 * GiB, 128 * 1024, host_total_bytes=256 * GiB, host_available_bytes=200 * GiB))
    assert t.verdict == "sized" and t.headroom_bytes == int(256 * GiB * 0.10)
    assert t.min_bytes == 10 * GiB and t.max_bytes == 200 * GiB - t.headroom_bytes
    assert t.suggested_bytes == TIER_MULTIPLE * 10 * GiB and t.suggested_gib == 40.0
    assert t.device_tokens == 10 * GiB // (128 * 1024) and t.suggested_tokens == 4 * t.device_tokens


def test_suggestion_is_capped_by_the_room_and_never_under_the_minimum() -> None:
    t = plan_host_tier(TierInputs(10 * GiB, 1024, host_total_bytes=64 * GiB, host_available_bytes=30 * GiB))
    assert t.verdict == "sized" and t.max_bytes == 22 * GiB and t.min_bytes <= t.suggested_bytes <= t.max_bytes
    assert t.suggested_gib == 22.0
    tight = plan_host_tier(TierInputs(int(10.05 * GiB), 1024, 64 * GiB, int(18.1 * GiB)))
    assert tight.min_bytes <= tight.suggested_bytes <= tight.max_bytes  # 0.1 GiB rounding kept inside


def test_no_room_when_the_host_cannot_spare_the_device_budget() -> None:
    t = plan_host_tier(TierInputs(10 * GiB, 1024, host_total_bytes=32 * GiB, host_available_bytes=12 * GiB))
    assert t.verdict == "no_room" and t.suggested_gib is None
    assert "under the device KV budget" in t.reasons[0] and "8.00 GiB headroom" in t.reasons[0]


def test_data_parallel_engines_share_the_room() -> None:
    one = plan_host_tier(TierInputs(10 * GiB, 1024, 128 * GiB, 100 * GiB, headroom_bytes=20 * GiB))
    four = plan_host_tier(TierInputs(10 * GiB, 1024, 128 * GiB, 100 * GiB, data_parallel_size=4,
                                     headroom_bytes=20 * GiB))
    assert one.max_bytes == 80 * GiB and four.max_bytes == 20 * GiB


@pytest.mark.parametrize("inputs,needle", [
    ({"prefix_caching": False}, "prefix caching is off"),
    ({"bench_hit_rate": 0.0, "bench_query_tokens": 5000}, "share no prefix (prefix-cache hit rate 0% of 5,000"),
    ({"device": "cpu"}, "CPU build"),
])
def test_says_when_it_will_not_help(inputs: dict, needle: str) -> None:  # type: ignore[type-arg]
    t = plan_host_tier(TierInputs(10 * GiB, 1024, 256 * GiB, 200 * GiB, **inputs))
    assert t.verdict == "will_not_help" and t.suggested_bytes is None and needle in t.reasons[0]


def test_a_shared_prefix_or_default_prefix_caching_helps() -> None:
    t = plan_host_tier(TierInputs(10 * GiB, 1024, 256 * GiB, 200 * GiB, prefix_caching=None, bench_hit_rate=0.8))
    assert t.verdict == "sized"


def test_a_requested_size_is_checked_against_the_bounds() -> None:
    def note(req: int) -> str:
        return plan_host_tier(TierInputs(10 * GiB, 1024, 64 * GiB, 40 * GiB, requested_bytes=req)).notes[-1]

    assert "under the device KV budget" in note(4 * GiB)
    assert "more than the host can spare" in note(60 * GiB)
    assert "within the bounds" in note(16 * GiB)
    # a host with less room than the device KV budget: a size under the budget can still be over the room
    small_host = plan_host_tier(TierInputs(80 * GiB, 1024, 64 * GiB, 40 * GiB, requested_bytes=64 * GiB)).notes
    assert "more than the host can spare" in small_host[0] and "under the device KV budget" in small_host[1]
    lm = plan_host_tier(TierInputs(10 * GiB, 1024, 64 * GiB, 40 * GiB, backend="lmcache"))
    assert "LMCache server" in lm.notes[0]


def test_default_headroom_is_8gib_or_a_tenth() -> None:
    assert headroom(16 * GiB) == HEADROOM_MIN_BYTES and headroom(1000 * GiB) == 100 * GiB
    assert headroom(1000 * GiB, 1 * GiB) == 1 * GiB


# ------------------------------------------------------------------ the command


@pytest.fixture
def plan_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    from conduit.daemon.cli.main import main

    monkeypatch.setenv("CONDUIT_FAKE_GPUS", str(tmp_path / "no-such-gpu-set.json"))

    def run(*args: str) -> tuple[int, str, str]:
        rc = main(["plan", *args])
        out, err = capsys.readouterr()
        return rc, out, err

    return run


def test_plan_kv_tier_json_uses_the_ledger_budget(plan_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = write_model(tmp_path / "tiny", TINY)
    rc, out, err = plan_cli(str(model), "--gpu-memory", "16GiB", "--kv-tier", "--host-free", "64GiB",
                            "--host-headroom", "4GiB", "--kv-offloading-size", "100", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    tier, led = doc["kv_tier"], doc["ledger"]
    assert tier["min_bytes"] == led["kv_budget_bytes"] and tier["max_bytes"] == 60 * GiB
    assert tier["requested_bytes"] == 100 * GiB and "more than the host can spare" in tier["notes"][0]
    assert tier["verdict"] == "sized" and tier["min_bytes"] <= tier["suggested_bytes"] <= tier["max_bytes"]


def test_plan_without_kv_tier_options_has_no_tier(plan_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = write_model(tmp_path / "tiny", TINY)
    rc, out, err = plan_cli(str(model), "--gpu-memory", "16GiB", "--json")
    assert rc == 0 and "kv_tier" not in json.loads(out)


def test_plan_text_says_a_bench_without_shared_prefix_will_not_help(plan_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = write_model(tmp_path / "tiny", TINY)
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"prefix_cache_hit_rate": 0.01, "prefix_cache_query_tokens": 12000}))
    rc, out, err = plan_cli(str(model), "--gpu-memory", "16GiB", "--bench-json", str(bench), "--host-free", "64GiB")
    assert rc == 0, err
    assert "will not help" in out and "share no prefix" in out


def test_plan_from_the_profile_reads_prefix_caching_off(plan_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_model(tmp_path / "tiny", TINY)
    profile = tmp_path / "profile.toml"
    profile.write_text(f'version = 1\nchannel = "local"\nmodel = "tiny"\n\n[vllm]\nmodel = "{model}"\n'
                       'enable_prefix_caching = false\nkv_offloading_size = 2\n')
    monkeypatch.setenv("CONDUIT_PROFILE", str(profile))
    rc, out, err = plan_cli("--gpu-memory", "16GiB", "--dtype", "float32", "--json")
    assert rc == 0, err
    tier = json.loads(out)["kv_tier"]  # kv_offloading_size in [vllm] asks for the tier by itself
    assert tier["verdict"] == "will_not_help" and "prefix caching is off" in tier["reasons"][0]
    assert tier["requested_bytes"] == 2 * GiB


@pytest.mark.parametrize("args,needle", [
    (["--kv-offloading-size", "-1"], "--kv-offloading-size"),
    (["--kv-offloading-size", "lots"], "--kv-offloading-size"),
    (["--host-free", "64"], "--host-free"),
])
def test_bad_tier_options_exit_3(plan_cli, tmp_path: Path, args: list[str], needle: str) -> None:  # type: ignore[no-untyped-def]
    model = write_model(tmp_path / "tiny", TINY)
    rc, out, err = plan_cli(str(model), "--gpu-memory", "16GiB", *args)
    assert rc == 3 and needle in err


def test_bad_bench_json_exits_3(plan_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = write_model(tmp_path / "tiny", TINY)
    (tmp_path / "b.json").write_text('{"other": 1}')
    rc, out, err = plan_cli(str(model), "--gpu-memory", "16GiB", "--bench-json", str(tmp_path / "b.json"))
    assert rc == 3 and "prefix_cache_hit_rate" in err
