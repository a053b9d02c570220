"""``conduit doctor --live``: the one-command self-check of the deployment guides.

Probes every channel now (with the agent's 401/404/timeout diagnosis), reads GPU memory and processes, the
supervised vLLM's state with its last start-up failure and its prefix-cache hit rate. When an agent runs it is
asked (it owns the vLLM supervisor and the GPU history); otherwise the same probes and NVML reads run here, and
the vLLM part says that no agent supervises one.

Healthy means: every channel's every protocol answered ``ok``, and a configured vLLM is ``ready``; with
``--deep``, also that every checked channel and model answered a tool call.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from conduit.daemon.config.firstuse import announce, is_placeholder_url, placeholder_message
from conduit.errors import AgentUnreachable, ConduitError

LOW_PREFIX_HIT = 0.30  # the supervisor's warning threshold (daemon/vllm_metrics.py)


def live_report(profile_path: str | Path | None = None, *, socket_path: Path | None = None,
                probe_wait_s: float = 10.0, deep: bool = False) -> dict[str, Any]:
    """Probe and read everything once; with ``deep``, also send one tiny tool-call request per channel and
    model (``conduit.daemon.agent.toolcall``: it costs a few tokens on a hosted gateway).

    Returns:
        ``{"source": "agent" | "direct", "channels": {name: {"healthy", "verdict", "protocols": {...}}},
        "gpus": {"gpus": [...], "reason"}, "host": {...}, "vllm": {...}, "prefix_cache": {...} | None,
        "kv_tier": the metrics' ``kv_tier`` (``conduit.daemon.vllm.kvview``) | None,
        "tool_calls": {"checks", "problems", "ok"} (with ``deep`` only), "problems": [str], "ok": bool}``.
        Keys appear only as fingerprints.
    """
    try:
        report = _from_agent(socket_path, probe_wait_s)
    except AgentUnreachable:
        report = _direct(profile_path)
    report["prefix_cache"] = _prefix_cache(report.get("vllm") or {})
    report["kv_tier"] = ((report.get("vllm") or {}).get("metrics") or {}).get("kv_tier")
    report["problems"] = _problems(report)
    if deep:
        from conduit.daemon.agent.toolcall import tool_call_report

        report["tool_calls"] = tool_call_report(profile_path)
        report["problems"] += report["tool_calls"]["problems"]
    report["ok"] = not report["problems"]
    return report


def _from_agent(socket_path: Path | None, probe_wait_s: float) -> dict[str, Any]:
    from conduit.daemon.agent.client import AgentClient

    with AgentClient(socket_path, timeout_s=probe_wait_s + 5) as client:
        status = client.get("/v1/status")
        channels = dict(status.get("channels") or {})
        for name in list(channels):
            try:
                fresh = client.post(f"/v1/channels/{name}/probe", {"wait": probe_wait_s})
                channels[name] = {k: v for k, v in fresh.items() if k not in ("name", "pending")}
            except ConduitError:
                pass  # keep the agent's last periodic probe
    return {"source": "agent", "channels": channels, "channel_note": status.get("note"),
            "gpus": status.get("gpus") or {}, "host": status.get("host") or {}, "vllm": status.get("vllm") or {}}


def _direct(profile_path: str | Path | None) -> dict[str, Any]:
    from conduit.daemon.agent.gpu import default_probe, host_snapshot, report_json
    from conduit.daemon.agent.prober import Prober, targets_from_profile

    targets, problems, note = targets_from_profile(str(profile_path) if profile_path else None)
    for t in targets:  # the starter's placeholder gateway is never asked; a new host is said once
        if is_placeholder_url(t.root.url):
            problems[t.channel] = placeholder_message(t.channel, t.root.url)
        else:
            announce(t.channel, t.root.url, t.key)
    targets = [t for t in targets if t.channel not in problems]

    async def probe_all() -> dict[str, Any]:
        prober = Prober(targets, problems)
        try:
            await asyncio.gather(*(prober.probe_channel(name) for name in {t.channel for t in targets}))
            return prober.snapshot()
        finally:
            await prober.aclose()

    channels = asyncio.run(probe_all())
    gpus = report_json(default_probe().sample(()))
    return {"source": "direct", "channels": channels, "channel_note": note, "gpus": gpus,
            "host": dataclasses.asdict(host_snapshot()),
            "vllm": _vllm_without_agent(profile_path)}


def _vllm_without_agent(profile_path: str | Path | None) -> dict[str, Any]:
    from conduit.daemon.config.profile import load_profile

    try:
        configured = load_profile(profile_path).model.vllm is not None
    except ConduitError:
        configured = False
    if not configured:
        return {"state": "not_configured"}
    return {"state": "unknown", "note": "no conduit agent runs, so no vLLM is supervised; start `conduit agent` "
            "to supervise the profile's [vllm]"}


def _prefix_cache(vllm: dict[str, Any]) -> dict[str, Any] | None:
    metrics = vllm.get("metrics") or {}
    rate = metrics.get("prefix_cache_hit_rate")
    if rate is None:
        return None
    return {"hit_rate": rate, "low": rate < LOW_PREFIX_HIT,
            "hint": "requests probably do not share a byte-identical system prompt" if rate < LOW_PREFIX_HIT else None}


def _problems(report: dict[str, Any]) -> list[str]:
    out = []
    if report.get("channel_note"):
        out.append(f"channels: {report['channel_note']}")
    for name, ch in (report.get("channels") or {}).items():
        for proto, p in (ch.get("protocols") or {}).items():
            if p.get("verdict") != "ok":
                line = f"channel {name} ({proto}): {p.get('verdict')}: {p.get('message')}"
                if p.get("hint"):
                    line += f" ({p['hint']})"
                out.append(line)
    vllm = report.get("vllm") or {}
    state = vllm.get("state")
    if state not in (None, "ready", "not_configured", "unknown"):
        failure = vllm.get("last_failure") or {}
        line = f"vLLM is {state}"
        if failure.get("reason"):
            line += f": {failure['reason']}; fix: {failure.get('fix')}"
        out.append(line)
    return out
