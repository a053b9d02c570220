"""[vllm.cluster] without Ray: the profile table and its errors, the `ray start` and vLLM command lines, the node
listing parser, the "group as one" gate on synthetic readings, the distributed failure diagnoses, the head's
preflight, and the supervision of a stand-in `ray start --block` (a real subprocess tree)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest

from conduit.daemon.agent.cluster import preflight, serves_api
from conduit.daemon.config.cluster import ClusterSettings
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm import distcauses
from conduit.daemon.vllm.cluster import Node, cluster_env, cluster_flags, parse_nodes, ray_start_argv
from conduit.daemon.vllm.diagnose import diagnose
from conduit.daemon.vllm.gate import Gate, judge
from conduit.daemon.vllm.raynode import RayProcess
from conduit.daemon.vllm.settings import to_argv
from conduit.errors import ConduitError


def vs(**cluster: Any) -> VllmSettings:
    return VllmSettings.model_validate({"model": "/m", "python": "/venv/bin/python", "cluster": cluster})


def write(tmp_path: Path, cluster: str) -> Path:
    p = tmp_path / "profile.toml"
    p.write_text(f'version = 1\nchannel = "local"\nmodel = "m"\n[vllm]\nmodel = "/m"\n[vllm.cluster]\n{cluster}')
    return p


@pytest.mark.parametrize(("table", "words"), [
    ('role = "wrker"\nhead_address = "h:1"', ["profile.toml:7", "vllm.cluster.role", "'head' or 'worker'"]),
    ('role = "worker"\nhead_address = "h"', ["vllm.cluster.head_address", "not host:port", "10.0.0.1:6379"]),
    ('role = "worker"', ["vllm.cluster.head_address` is required"]),
    ('role = "worker"\nhead_address = "h:1"\nnodez = 2', ["unknown key `vllm.cluster.nodez`", "nodes"]),
    ('backend = "mp"\nrole = "worker"\nhead_address = "h:1"\nnodes = 2', ["node_rank = 1..1"]),
    ('role = "head"\nhead_address = "h:1"\nnodes = 0', ["vllm.cluster.nodes", "greater than or equal to 1"]),
])
def test_profile_errors_name_file_key_and_fix(tmp_path: Path, table: str, words: list[str]) -> None:
    with pytest.raises(ConduitError) as e:
        load_profile(str(write(tmp_path, table)))
    text = f"{e.value.message} {e.value.hint}"
    for w in words:
        assert w in text, text


def test_profile_table_loads(tmp_path: Path) -> None:
    loaded = load_profile(str(write(tmp_path, 'role = "head"\nhead_address = "10.0.0.1:6379"\nnodes = 2')))
    c = loaded.vllm.cluster if loaded.vllm else None
    assert isinstance(c, ClusterSettings) and (c.host, c.port, c.nodes, c.backend) == ("10.0.0.1", 6379, 2, "ray")


def test_ray_start_argv_head_and_worker() -> None:
    head = vs(role="head", head_address="10.0.0.1:6379", nodes=2, num_cpus=1, ray_args=["--temp-dir=/t"])
    argv = ray_start_argv(head, {"conduit-vllm": "0.32.0"})
    assert argv[:4] == ["/venv/bin/python", "-m", "ray.scripts.scripts", "start"]
    assert "--head" in argv and "--port=6379" in argv and "--node-ip-address=10.0.0.1" in argv
    assert "--num-cpus=1" in argv and argv[-2:] == ["--temp-dir=/t", "--block"]
    assert json.loads(next(a for a in argv if a.startswith("--labels="))[9:]) == {"conduit-vllm": "0.32.0"}
    worker = vs(role="worker", head_address="10.0.0.1:6379", ray_command=["/usr/bin/ray"])
    argv = ray_start_argv(worker)
    assert argv[:2] == ["/usr/bin/ray", "start"] and "--address=10.0.0.1:6379" in argv and "--head" not in argv
    with pytest.raises(ValueError):
        ray_start_argv(vs(backend="mp", role="head", head_address="h:1"))


def test_vllm_flags_ray_and_mp() -> None:
    head = vs(role="head", head_address="10.0.0.1:6379", nodes=2)
    argv, _ = to_argv(head, (0, 32, 0))
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert cluster_env(head) == {"RAY_ADDRESS": "10.0.0.1:6379"}
    assert cluster_flags(vs(role="worker", head_address="h:1")) == [] and not serves_api(vs(role="worker",
                                                                                           head_address="h:1"))
    mp0 = vs(backend="mp", role="head", head_address="10.0.0.1:29501", nodes=2)
    assert cluster_flags(mp0) == ["--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1",
                                  "--master-port", "29501"]
    mp1 = vs(backend="mp", role="worker", head_address="10.0.0.1:29501", nodes=2, node_rank=1)
    assert cluster_flags(mp1)[-1] == "--headless" and cluster_flags(mp1)[3] == "1" and serves_api(mp1)
    assert cluster_env(mp1) == {} and cluster_flags(VllmSettings(model="/m")) == []


LISTING = {"ray": "2.60.0", "nodes": [
    {"node_id": "aa" * 28, "address": "10.0.0.1", "head": True, "state": "ALIVE",
     "resources": {"CPU": 16.0, "GPU": 8.0, "memory": 1e11}, "labels": {"conduit-vllm": "0.32.0", "conduit-ray": "2.60.0"},
     "death": ""},
    {"node_id": "bb" * 28, "address": "10.0.0.2", "head": False, "state": "ALIVE",
     "resources": {"CPU": 16.0, "GPU": 8.0}, "labels": {"conduit-vllm": "0.32.0", "conduit-ray": "2.60.0"},
     "death": ""},
    {"node_id": "cc" * 28, "address": "10.0.0.3", "head": False, "state": "DEAD", "resources": {"CPU": 1.0},
     "labels": {}, "death": "health check failed"},
]}


def nodes(listing: dict[str, Any] = LISTING) -> list[Node]:
    return parse_nodes("some ray warning\n" + json.dumps(listing))[1]


def test_parse_nodes() -> None:
    ray, ns = parse_nodes(json.dumps(LISTING))
    assert ray == "2.60.0" and [n.alive for n in ns] == [True, True, False]
    assert (ns[0].gpus, ns[0].cpus, ns[1].memory_bytes, ns[2].death) == (8.0, 16.0, 0.0, "health check failed")
    assert ns[2].to_dict()["state"] == "dead"
    for bad in ("", "not json", '{"nodes": 3}'):
        with pytest.raises(ValueError, match="unexpected node listing"):
            parse_nodes(bad)


def test_judge() -> None:
    c = ClusterSettings(role="head", head_address="10.0.0.1:6379", nodes=2, gpus_per_node=8)
    assert judge(c, nodes()).whole and "16 GPUs" in judge(c, nodes()).reason
    v = judge(c.model_copy(update={"nodes": 3}), nodes())
    assert (v.whole, v.kind) == (False, "nodes_missing") and "2 of 3" in v.reason and "health check failed" in v.reason
    v = judge(c.model_copy(update={"gpus_per_node": 9}), nodes())
    assert v.kind == "gpus_missing" and "10.0.0.1 8" in v.reason
    odd = json.loads(json.dumps(LISTING))
    odd["nodes"][1]["labels"]["conduit-ray"] = "2.59.0"
    v = judge(c, nodes(odd))
    assert v.kind == "version_mismatch" and "2.59.0 on 10.0.0.2" in v.reason and "ray==2.60.0" in v.fix
    v = judge(c, None, "cannot read the Ray cluster at 10.0.0.1:6379: timed out")
    assert v.kind == "unreachable" and "timed out" in v.reason


def test_gate_treats_the_group_as_one() -> None:
    c = ClusterSettings(role="head", head_address="h:1", nodes=2)
    whole, short = judge(c, nodes()), judge(c, nodes()[:1])
    g = Gate(join_timeout_s=100, now=0)
    assert g.step(short, 10) is None and g.state == "forming"
    assert g.step(short, 100) is None and g.state == "incomplete"
    assert g.step(whole, 101) == "launch" and g.state == "whole" and g.launches == 1
    assert g.step(whole, 102) is None
    assert g.step(short, 103) == "stop" and g.state == "degraded"
    assert g.step(short, 500) is None and g.state == "degraded"  # no "incomplete" after a loss: it waits
    assert g.step(whole, 501) == "launch" and g.launches == 2 and g.since == 501


@pytest.mark.parametrize(("text", "kind", "words"), [
    ("ValueError: Cannot provide a placement group requiring 4 GPUs (placement_group_specs=[...]) within 1800 "
     "seconds.\nTensor parallel size may exceed", "ray_placement", ["4 GPUs", "1800 s", "tensor_parallel_size"]),
    ("(autoscaler) Warning: The following resource request cannot be scheduled right now: {'GPU': 8.0}",
     "ray_unschedulable", ["{'GPU': 8.0}", "pipeline_parallel_size"]),
    ("No available node types can fulfill resource requests {'GPU': 16.0}*1", "ray_unschedulable", ["16.0"]),
    ("RuntimeError: Version mismatch: The cluster was started with:\n    Ray: 2.60.0\n    Python: 3.11.9\n"
     "This process on node 10.0.0.2 was started with:\n    Ray: 2.59.0\n    Python: 3.11.9\n",
     "ray_version_mismatch", ["2.59.0", "ray==2.60.0"]),
    ("ValueError: current platform cpu does not support ray.", "ray_platform", ["cpu", "backend = \"mp\""]),
    ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, "
     "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600004 milliseconds before timing out.",
     "nccl_timeout", ["600 s", "NCCL_SOCKET_IFNAME"]),
    ("RuntimeError: [gloo/transport/tcp/pair.cc:534] Timed out waiting 1800000ms for recv operation to complete",
     "gloo_timeout", ["1800 s", "GLOO_SOCKET_IFNAME"]),
    ("torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect "
     "to (10.0.0.1, 29501).", "rendezvous_timeout", ["10.0.0.1:29501", "head_address"]),
])
def test_distributed_diagnoses(text: str, kind: str, words: list[str]) -> None:
    d = diagnose("INFO starting\n" + text + "\nEngine core initialization failed.", exit_code=1)
    assert d.kind == kind, d
    for w in words:
        assert w in d.reason + " " + d.fix, d
    assert all(rule("INFO all fine") is None for rule in distcauses.RULES)


def test_preflight_names_a_missing_model(tmp_path: Path) -> None:
    s = VllmSettings.model_validate({"model": str(tmp_path / "nope"), "cluster": {"role": "head",
                                                                                  "head_address": "h:1"}})
    v = preflight(s, None)
    assert v is not None and v.kind == "model_missing" and "every node" in v.fix


FAKE_RAY = textwrap.dedent("""
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"])
    print("fake raylet", child.pid, flush=True)
    time.sleep(600)
""")


def test_ray_process_restarts_and_stops_everything(tmp_path: Path) -> None:
    script = tmp_path / "fake_ray.py"
    script.write_text(FAKE_RAY)

    async def main() -> None:
        rp = RayProcess([sys.executable, str(script)], dict(os.environ), tmp_path / "ray.log", restart_backoff_s=0.2,
                        stop_grace_s=5)
        rp.start()
        first = await until(lambda: rp.state == "running" and rp.tree and len(rp.tree.pids()) >= 2 and rp.pid)
        tree1 = set(rp.tree.pids()) if rp.tree else set()
        os.kill(first, signal.SIGKILL)  # the leader dies: what it started (a setsid child) goes too
        await until(lambda: rp.restarts >= 1 and rp.state == "running" and rp.pid not in (None, first))
        assert rp.last_exit is not None and rp.last_exit["code"] == -signal.SIGKILL and rp.last_exit["left"] == []
        assert not [p for p in tree1 if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        await until(lambda: rp.tree is not None and len(rp.tree.pids()) >= 2)
        tree2 = set(rp.tree.pids()) if rp.tree else set()
        assert await rp.stop() == [] and rp.state == "stopped"
        assert not [p for p in tree2 if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        assert "fake raylet" in (tmp_path / "ray.log").read_text() and rp.snapshot()["restarts"] == 1

    asyncio.run(main())


async def until(pred: Any, timeout: float = 60.0) -> Any:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        v = pred()
        if v:
            return v
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_status_shows_every_node() -> None:
    import io

    from rich.console import Console

    from conduit.daemon.cli.clusterview import print_cluster

    c = ClusterSettings(role="head", head_address="10.0.0.1:6379", nodes=3)
    v = judge(c, nodes())
    snap = {"backend": "ray", "role": "head", "head_address": c.head_address, "nodes_expected": 3,
            "state": "degraded", "reason": v.reason, "fix": v.fix, "nodes": [n.to_dict() for n in nodes()],
            "ray": {"state": "running", "restarts": 1}}
    out = io.StringIO()
    print_cluster(Console(file=out, width=200, no_color=True), snap)
    text = out.getvalue()
    assert "cluster (ray, head of 10.0.0.1:6379): degraded, 2 of 3 nodes alive" in text and "restarts 1" in text
    assert "10.0.0.3 (cccccccc)" in text and "health check failed" in text and text.count("2.60.0") == 2
    print_cluster(Console(file=out), None)  # no [vllm.cluster]: nothing


LLAMA2_70B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "max_position_embeddings": 4096,
    "vocab_size": 32000, "torch_dtype": "float16",
}


def test_preflight_uses_the_ledger_per_gpu(tmp_path: Path) -> None:
    d = tmp_path / "llama-2-70b"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA2_70B))
    cluster = {"role": "head", "head_address": "h:1", "nodes": 2}
    at1 = VllmSettings.model_validate({"model": str(d), "cluster": cluster})
    v = preflight(at1, 80 * 1024**3)
    assert v is not None and v.kind == "gpu_memory_short" and "tensor_parallel_size = 2" in v.fix, v
    at2 = VllmSettings.model_validate({"model": str(d), "cluster": cluster, "tensor_parallel_size": 2})
    assert preflight(at2, 80 * 1024**3) is None and preflight(at1, None) is None  # no GPU reading: no check


def test_an_agent_without_ray_says_so(tmp_path: Path) -> None:
    from conduit.daemon.agent.cluster import follow_cluster

    s = VllmSettings.model_validate({"model": "/m", "python": sys.executable,
                                     "cluster": {"role": "worker", "head_address": "127.0.0.1:9"}})

    async def main() -> None:
        keeper = await follow_cluster(None, s, None, tmp_path)
        assert keeper is not None and keeper.supervisor is None
        await until(lambda: keeper.problem is not None)
        snap = keeper.snapshot()
        assert (snap["kind"], snap["state"], snap["ray"]) == ("ray_missing", "member", None)
        assert "pip install ray" in snap["fix"] and sys.executable in snap["reason"]
        assert await follow_cluster(keeper, VllmSettings(model="/m"), None, tmp_path) is None

    asyncio.run(main())
