"""The [vllm] table: validation, translation to vLLM flags per version (C15), secrets, change detection."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conduit.daemon.config.vllm import API_SERVER_MODULE, load
from conduit.daemon.vllm.settings import detect_install, parse_version, to_argv
from conduit.errors import ConduitError, ProfileError

KEY = "sk-live-abcdefghijklmnopqrstuvwxyz0123"


def test_minimal_table_gives_model_host_port_only() -> None:
    s = load({"model": "/models/m"})
    argv, warnings = to_argv(s, (0, 32, 0))
    assert argv == ["--model", "/models/m", "--host", "127.0.0.1", "--port", "8000"]
    assert warnings == []
    assert s.name == "/models/m"
    assert s.base_url == "http://127.0.0.1:8000"


def test_every_setting_becomes_its_flag() -> None:
    s = load({
        "model": "/m", "served_model_name": "qwen", "host": "0.0.0.0", "port": 8011, "dtype": "bfloat16",
        "quantization": "awq", "max_model_len": 8192, "gpu_memory_utilization": 0.85, "kv_cache_dtype": "fp8",
        "block_size": 16, "max_num_seqs": 64, "max_num_batched_tokens": 4096, "enable_prefix_caching": False,
        "enforce_eager": True, "tensor_parallel_size": 2, "pipeline_parallel_size": 1, "data_parallel_size": 1,
        "speculative": {"model": "/draft", "num_speculative_tokens": 4}, "extra_args": ["--seed", "7"],
    })
    argv, warnings = to_argv(s, (0, 32, 0))
    pairs = dict(zip(argv[::2], argv[1::2], strict=False))
    assert pairs["--served-model-name"] == "qwen"
    assert pairs["--port"] == "8011"
    for flag, value in [("--dtype", "bfloat16"), ("--quantization", "awq"), ("--max-model-len", "8192"),
                        ("--gpu-memory-utilization", "0.85"), ("--kv-cache-dtype", "fp8"), ("--block-size", "16"),
                        ("--max-num-seqs", "64"), ("--max-num-batched-tokens", "4096"),
                        ("--tensor-parallel-size", "2")]:
        i = argv.index(flag)
        assert argv[i + 1] == value, flag
    assert "--no-enable-prefix-caching" in argv and "--enforce-eager" in argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"model": "/draft", "num_speculative_tokens": 4}
    assert argv[-2:] == ["--seed", "7"]
    assert warnings == []
    assert s.base_url == "http://127.0.0.1:8011"  # a wildcard bind is reached through loopback


def test_old_versions_get_the_old_speculative_flags() -> None:
    s = load({"model": "/m", "speculative": {"model": "/draft", "num_speculative_tokens": 3}})
    argv, _ = to_argv(s, (0, 7, 3))
    assert argv[argv.index("--speculative-model") + 1] == "/draft"
    assert argv[argv.index("--num-speculative-tokens") + 1] == "3"


@pytest.mark.parametrize("version", [(0, 18, 0), (0, 32, 0), None])
def test_c15_swap_space_dropped_with_a_warning_since_0_18(version: tuple[int, int, int] | None) -> None:
    s = load({"model": "/m", "swap_space": 4})
    argv, warnings = to_argv(s, version)
    assert "--swap-space" not in argv
    assert len(warnings) == 1 and "swap_space" in warnings[0] and "0.18" in warnings[0]


def test_swap_space_still_passed_to_older_vllm() -> None:
    argv, warnings = to_argv(load({"model": "/m", "swap_space": 4}), (0, 17, 1))
    assert argv[argv.index("--swap-space") + 1] == "4"
    assert warnings == []


def test_swap_space_in_extra_args_dropped_too() -> None:
    s = load({"model": "/m", "extra_args": ["--swap-space", "8", "--seed", "1", "--swap-space=2"]})
    argv, warnings = to_argv(s, (0, 32, 0))
    assert argv[-2:] == ["--seed", "1"] and not any("swap" in a for a in argv)
    assert warnings and "--swap-space" in warnings[0]


@pytest.mark.parametrize(
    "table, path",
    [
        ({"model": "/m", "max_model_length": 4096}, "[vllm].max_model_length: unknown key"),
        ({"model": "/m", "port": 70000}, "[vllm].port"),
        ({"model": "/m", "gpu_memory_utilization": 1.5}, "[vllm].gpu_memory_utilization"),
        ({"served_model_name": "x"}, "[vllm].model"),
        ({"model": "/m", "restart": {"mode": "always!"}}, "[vllm].restart.mode"),
        ({"model": "/m", "python": "/p", "command": ["x"]}, "either `python` or `command`"),
    ],
)
def test_bad_tables_name_the_key(table: dict[str, object], path: str) -> None:
    with pytest.raises(ProfileError) as exc:
        load(table, where="/home/me/.config/conduit/profile.toml")
    assert path in str(exc.value)
    assert "profile.toml" in str(exc.value)
    assert exc.value.hint


def test_api_key_never_in_argv_repr_or_fingerprint() -> None:
    s = load({"model": "/m", "api_key": KEY})
    argv, _ = to_argv(s, (0, 32, 0))
    assert KEY not in " ".join(argv)
    assert KEY not in repr(s) and KEY not in str(s)
    assert KEY not in s.launch_fingerprint()
    assert s.launch_env({})["VLLM_API_KEY"] == KEY  # vLLM reads it from there (vllm.envs)
    other = load({"model": "/m", "api_key": KEY + "x"})
    assert other.launch_fingerprint() != s.launch_fingerprint()


def test_fingerprint_changes_only_with_launch_settings() -> None:
    base = load({"model": "/m", "max_num_seqs": 8})
    watch_only = load({"model": "/m", "max_num_seqs": 8, "startup_timeout_s": 5, "health_interval_s": 9,
                       "restart": {"max_restarts": 1}, "log_backups": 9})
    launch = load({"model": "/m", "max_num_seqs": 16})
    env = load({"model": "/m", "max_num_seqs": 8, "extra_env": {"VLLM_CPU_KVCACHE_SPACE": "2"}})
    assert watch_only.launch_fingerprint() == base.launch_fingerprint()
    assert launch.launch_fingerprint() != base.launch_fingerprint()
    assert env.launch_fingerprint() != base.launch_fingerprint()


def test_launch_prefix_and_env() -> None:
    s = load({"model": "/m", "python": "/venv/bin/python", "extra_env": {"A": "1"}})
    assert s.launch_prefix() == ["/venv/bin/python", "-m", API_SERVER_MODULE]
    assert s.launch_env({"PATH": "/bin"})["A"] == "1"
    c = load({"model": "/m", "command": ["/usr/bin/env", "vllm-launch"]})
    assert c.launch_prefix() == ["/usr/bin/env", "vllm-launch"]


@pytest.mark.parametrize("text, v", [("0.32.0", (0, 32, 0)), ("0.11.1rc2.dev3+gabc", (0, 11, 1)), ("1.2", (1, 2, 0))])
def test_parse_version(text: str, v: tuple[int, int, int]) -> None:
    assert parse_version(text) == v


def _fake_dist(root: Path, name: str, version: str) -> None:
    d = root / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_detect_install_reads_installed_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    _fake_dist(site, "vllm", "0.17.1")
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert detect_install(sys.executable) == ("vllm", (0, 17, 1))
    _fake_dist(site, "vllm-cpu", "0.32.0")  # the CPU distribution wins when both are there
    assert detect_install(sys.executable) == ("vllm-cpu", (0, 32, 0))


def test_detect_install_without_vllm_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConduitError) as exc:
        detect_install(sys.executable)
    assert "no vLLM installed" in str(exc.value) and exc.value.hint
    with pytest.raises(ConduitError):
        detect_install(str(tmp_path / "nope" / "python"))
