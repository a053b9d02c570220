"""`conduit plan --device cpu|gpu`: the build is said outright, not only implied by --cpu-kv-space."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ledger import TINY, write_model  # noqa: E402


@pytest.fixture
def plan_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    """``conduit plan ARGS`` in process with no GPU at all: (exit code, stdout, stderr)."""
    from conduit.daemon.cli.main import main

    monkeypatch.setenv("CONDUIT_FAKE_GPUS", str(tmp_path / "no-such-gpu-set.json"))
    model = write_model(tmp_path / "tiny", TINY)

    def run(*args: str) -> tuple[int, str, str]:
        rc = main(["plan", str(model), "--dtype", "float32", "--max-model-len", "256", *args])
        out, err = capsys.readouterr()
        return rc, out, err

    return run


def test_device_cpu_plans_the_cpu_build(plan_cli) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = plan_cli("--device", "cpu", "--cpu-kv-space", "1GiB", "--json")
    assert rc == 0, err
    led = json.loads(out)["ledger"]
    assert led["device"] == "cpu" and led["block_size"] == 128 and led["kv_tokens"] == 1_048_576
    assert json.loads(out)["gpu"] is None  # no GPU was asked for


def test_device_cpu_without_kv_space_asks_for_it_not_for_a_gpu(plan_cli) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = plan_cli("--device", "cpu")
    assert rc == 3 and "--cpu-kv-space" in err and "GPU memory size unknown" not in err


@pytest.mark.parametrize("args,needle", [
    (["--device", "tpu"], "must be gpu or cpu"),
    (["--device", "gpu", "--cpu-kv-space", "1GiB"], "CPU build's KV budget"),
    (["--device", "cpu", "--gpu-memory", "80GiB"], "--cpu-kv-space"),
])
def test_device_conflicts_are_bad_arguments(plan_cli, args: list[str], needle: str) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = plan_cli(*args)
    assert rc == 3 and needle in err


def test_device_gpu_with_a_size_plans_the_gpu_build(plan_cli) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = plan_cli("--device", "gpu", "--gpu-memory", "16GiB", "--json")
    assert rc == 0, err
    led = json.loads(out)["ledger"]
    assert led["device"] == "gpu" and led["block_size"] == 16
