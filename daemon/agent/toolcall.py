"""``conduit doctor --live --deep``: does a tool call come back from every channel and model the tools use?

Coding tools (Claude Code, Cline, Codex, ...) work only when the model answers with tool calls. The live
probes (``conduit.daemon.agent.prober``) spend no tokens and cannot tell; this check sends one tiny request per
(channel, model) and looks at the answer. It is opt-in because on a hosted gateway it costs a few tokens.

Which (channel, model) pairs: the profile's ``model`` and ``small_model`` on its ``channel``; every enabled
``[tools.X]`` table's own channel and models (or the profile's); the ``[fallback]`` model and small model on the
fallback channel. Duplicates are sent once; ``used_by`` lists who uses the pair. The small model is included
because Claude Code runs subagents (Explore) on it, with tools.

What is sent (``max_tokens`` 64, one user message ``PROMPT``, one tool ``get_weather``), over each protocol the
pair's users speak on that channel (Cline and Codex OpenAI, Claude Code Anthropic; OpenAI when the channel
speaks it for a user without a tool):
- OpenAI: ``POST <root>/<version>/chat/completions`` with ``tools: [{type: "function",
  function: {name, description, parameters}}]`` and ``tool_choice: "auto"``, as coding tools send it (a named
  ``tool_choice`` would be forced through vLLM's guided decoding even without a tool parser, so it would not
  prove what tools need);
- Anthropic Messages: ``POST <root>/v1/messages`` with ``tools: [{name, description, input_schema}]``
  and ``anthropic-version: 2023-06-01``.
The key goes in the channel's header style (``Authorization: Bearer`` or ``x-api-key``). Each request is bounded
by ``TIMEOUT_S`` (or the channel's smaller ``timeout``) as a whole, a drip included, and at most ``MAX_BODY_BYTES``
of the answer is read, after decoding (``conduit.daemon.config.gateway.aread_bounded``).

Verdicts (``ToolVerdict``), per (channel, model):
    tool_call     a tool call came back (OpenAI ``choices[0].message.tool_calls``; Anthropic a ``tool_use`` block)
    text_only     the model answered plain text: the model or the server does not do tool calls
    refused       HTTP 4xx; ``message`` is the server's own, keys masked
    server_error  HTTP 5xx
    bad_answer    2xx that is not a chat completion / message (or another status)
    timeout       no whole answer within the timeout
    unreachable   DNS, TLS, connection refused, or another transport failure
For the supervised vLLM (the implicit ``local`` channel of ``[vllm]``), a ``refused`` carrying vLLM's
"auto" tool choice message, or a ``text_only``, gets a ``fix`` naming ``--enable-auto-tool-choice
--tool-call-parser NAME`` with the family's parser and the ``[vllm]`` keys (``conduit.daemon.vllm.toolparser``).
Keys never appear in results: messages pass through the config layer's ``REDACTOR`` and this channel's key.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from conduit.daemon.agent.prober import ProbeTarget, classify_exception
from conduit.daemon.config.gateway import aread_bounded
from conduit.daemon.config.profile import LoadedProfile, load_profile
from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.plan.model import resolve_model_dir
from conduit.daemon.vllm.toolparser import ParserGuess, guess_parser, is_auto_tool_refusal, tool_call_fix
from conduit.errors import ConduitError
from conduit.fileio import read_regular_file
from conduit.redact import mask_key_flags, redact
from conduit.text import one_line

PROMPT = "Call get_weather for Paris."
TOOL_NAME = "get_weather"
TOOL_DESCRIPTION = "Get the current weather for a city."
TOOL_PARAMETERS = {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                   "required": ["city"]}
MAX_TOKENS = 64
TIMEOUT_S = 30.0
"""Whole-request bound, seconds; a channel's ``timeout`` wins when smaller."""
MAX_BODY_BYTES = 256 << 10
"""At most this much of an answer is read (a real one is under 2 KiB)."""
MESSAGE_CHARS = 300
CONFIG_MAX_BYTES = 1 << 20


class ToolVerdict(enum.StrEnum):
    """How one tool-call check ended (see the module docstring)."""

    TOOL_CALL = "tool_call"          # a tool call came back
    TEXT_ONLY = "text_only"          # plain text: no tool calling there
    REFUSED = "refused"              # HTTP 4xx, with the server's message
    SERVER_ERROR = "server_error"    # HTTP 5xx
    BAD_ANSWER = "bad_answer"        # not a chat completion / message
    TIMEOUT = "timeout"              # no whole answer in time
    UNREACHABLE = "unreachable"      # transport failure


@dataclass(frozen=True)
class ToolCheck:
    """One request to send.

    Attributes:
        target: the channel's protocol, root, key (never shown) and auth style, reused from the prober.
        model: the model id sent.
        used_by: who uses the pair (``model``, ``small_model``, ``tools.cline``, ``fallback``, ...).
        vllm: the ``[vllm]`` settings when the channel is the supervised vLLM's implicit channel, else None.
    """

    target: ProbeTarget
    model: str
    used_by: tuple[str, ...]
    vllm: VllmSettings | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """``.../chat/completions`` (OpenAI) or ``.../v1/messages`` (Anthropic)."""
        t = self.target
        return t.base + ("/chat/completions" if t.protocol == "openai" else "/v1/messages")

    def body(self) -> dict[str, Any]:
        """The JSON request body (see the module docstring)."""
        messages = [{"role": "user", "content": PROMPT}]
        if self.target.protocol == "openai":
            tool = {"type": "function",
                    "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": TOOL_PARAMETERS}}
            return {"model": self.model, "messages": messages, "tools": [tool], "tool_choice": "auto",
                    "max_tokens": MAX_TOKENS, "stream": False}
        tool = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_PARAMETERS}
        return {"model": self.model, "messages": messages, "tools": [tool], "max_tokens": MAX_TOKENS}


def model_uses(profile: LoadedProfile) -> dict[tuple[str, str], list[str]]:
    """``{(channel, model): [who uses it]}`` in profile order (see the module docstring); pairs whose channel the
    profile does not define are left out (``doctor`` reports those already)."""
    prof = profile.model
    uses: dict[tuple[str, str], list[str]] = {}

    def add(channel: str, model: str | None, who: str) -> None:
        if model and channel in prof.channels:
            uses.setdefault((channel, model), []).append(who)

    add(prof.channel, prof.model, "model")
    add(prof.channel, prof.small_model, "small_model")
    for tool, cfg in prof.tools.items():
        if cfg.enabled:
            channel = cfg.channel or prof.channel
            add(channel, cfg.model or prof.model, f"tools.{tool}")
            add(channel, cfg.small_model or prof.small_model, f"tools.{tool}.small_model")
    if prof.fallback is not None:
        add(prof.fallback.channel, prof.fallback.model, "fallback")
        add(prof.fallback.channel, prof.fallback.small_model, "fallback.small_model")
    return uses


def checks_for(profile: LoadedProfile) -> tuple[list[ToolCheck], dict[str, str]]:
    """The requests to send for ``profile``, and ``{channel: why}`` for channels that cannot be resolved (a key
    source that fails). Each pair is checked over every protocol its users speak there (``_protocols``): a
    channel that speaks both is asked over OpenAI for Cline and over Anthropic Messages for Claude Code.
    Never raises."""
    resolver = Resolver(profile)
    checks: list[ToolCheck] = []
    problems: dict[str, str] = {}
    for (channel, model), who in model_uses(profile).items():
        try:
            rc = resolver.channel(channel)
        except ConduitError as exc:
            problems[channel] = str(exc)
            continue
        timeout = min(TIMEOUT_S, rc.timeout_s or TIMEOUT_S)
        local = profile.vllm if channel in profile.implicit_channels else None
        local = local if local is not None and local.manage else None  # an observed engine's flags are not ours
        for protocol, users in _protocols(profile, who, set(rc.roots)).items():
            target = ProbeTarget(channel=channel, protocol=protocol, root=rc.roots[protocol], key=rc.key,
                                 auth=rc.auth, timeout_s=timeout)
            checks.append(ToolCheck(target, model, tuple(users), local))
    return checks, problems


Wire = Literal["openai", "anthropic"]


def _protocols(profile: LoadedProfile, who: list[str], speaks: set[str]) -> dict[Wire, list[str]]:
    """``{protocol: users}`` for one (channel, model) pair. A tool (``tools.X``) is asked over its adapter's
    protocol when the channel speaks it; the fallback's users over the protocols of the tools that fall back
    (enabled, ``fallback`` not false, on the primary channel); the profile's ``model``/``small_model`` ride on
    the pair's tools' protocols. Whatever is left gets OpenAI when the channel speaks it, else Anthropic. A
    protocol is listed once, users in their order."""
    from conduit.adapters.registry import ADAPTERS  # lazy: the registry loads an adapter per entry read

    default: Wire = "openai" if "openai" in speaks else "anthropic"
    prof = profile.model

    def wire_of(tool: str) -> Wire:
        wire = getattr(ADAPTERS.get(tool), "protocol", None)
        return wire if wire in speaks else default

    tool_wires = [wire_of(u.split(".")[1]) for u in who if u.startswith("tools.")]
    falling = [wire_of(t) for t, cfg in prof.tools.items()
               if cfg.enabled and cfg.fallback and (cfg.channel or prof.channel) == prof.channel]
    out: dict[Wire, list[str]] = {}
    for user in who:
        if user.startswith("tools."):
            wires = [wire_of(user.split(".")[1])]
        elif user.startswith("fallback"):
            wires = falling or [default]
        else:
            wires = tool_wires or [default]
        for wire in dict.fromkeys(wires):
            out.setdefault(wire, []).append(user)
    return out


async def run_check(client: httpx.AsyncClient, check: ToolCheck) -> dict[str, Any]:
    """Send one check and judge the answer. Never raises for network trouble.

    Returns:
        ``{"channel", "protocol", "model", "used_by", "url", "verdict", "status", "latency_ms", "message",
        "tool", "fix"}``; ``tool`` is the called tool's name for ``tool_call``, ``fix`` a sentence or None.
    """
    t = check.target
    timeout = t.timeout_s or TIMEOUT_S
    headers = {**t.headers(), "content-type": "application/json"}  # anthropic-version included for Anthropic
    out: dict[str, Any] = {"channel": t.channel, "protocol": t.protocol, "model": check.model,
                           "used_by": list(check.used_by), "url": check.url, "status": None, "tool": None, "fix": None}
    t0 = time.perf_counter()
    try:
        got = await aread_bounded(client, "POST", check.url, headers=headers, json_body=check.body(),
                                  max_bytes=MAX_BODY_BYTES, deadline_s=timeout)
    except (TimeoutError, httpx.TimeoutException):
        out.update(verdict=ToolVerdict.TIMEOUT, message=f"no whole answer within {timeout:g} s")
    except (httpx.HTTPError, OSError) as exc:
        out.update(verdict=ToolVerdict.UNREACHABLE, message=classify_exception(exc)[1])
    else:
        out["status"] = got.status
        verdict, message, tool = judge(t.protocol, got.status, bytes(got.body))
        out.update(verdict=verdict, message=message, tool=tool)
    out["latency_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    out["message"] = _clean(str(out["message"]), t.key)
    out["fix"] = _fix(check, out["verdict"], out["message"])
    out["verdict"] = str(out["verdict"])
    return out


def judge(protocol: str, status: int, raw: bytes) -> tuple[ToolVerdict, str, str | None]:
    """``(verdict, message, tool name)`` for one answer: ``status`` and up to ``MAX_BODY_BYTES`` of its body."""
    try:
        data: Any = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to parse (a hostile answer)
        data = None
    if 400 <= status < 500:
        return ToolVerdict.REFUSED, f"HTTP {status}: {_error_text(data, raw)}", None
    if status >= 500:
        return ToolVerdict.SERVER_ERROR, f"HTTP {status}: {_error_text(data, raw)}", None
    if not 200 <= status < 300 or not isinstance(data, dict):
        return ToolVerdict.BAD_ANSWER, f"HTTP {status}: not a JSON object: {_excerpt(raw)}", None
    if protocol == "openai":
        choices = data.get("choices")
        message = choices[0].get("message") if isinstance(choices, list) and choices and isinstance(
            choices[0], dict) else None
        if not isinstance(message, dict):
            return ToolVerdict.BAD_ANSWER, f"HTTP {status}: no choices[0].message in the answer", None
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            fn = calls[0].get("function") if isinstance(calls[0], dict) else None
            name = fn.get("name") if isinstance(fn, dict) else None
            return ToolVerdict.TOOL_CALL, f"called {name or '(unnamed)'}", str(name) if name else None
        return ToolVerdict.TEXT_ONLY, f"answered text, no tool call: {_excerpt(message.get('content'))}", None
    blocks = data.get("content")
    if not isinstance(blocks, list):
        return ToolVerdict.BAD_ANSWER, f"HTTP {status}: no content blocks in the answer", None
    for b in blocks:
        if isinstance(b, dict) and b.get("type") == "tool_use":
            name = b.get("name")
            return ToolVerdict.TOOL_CALL, f"called {name or '(unnamed)'}", str(name) if name else None
    text = " ".join(str(b.get("text")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    return ToolVerdict.TEXT_ONLY, f"answered text, no tool_use block: {_excerpt(text)}", None


def _error_text(data: Any, raw: bytes) -> str:
    """The server's own message: OpenAI/vLLM ``error.message``, Anthropic the same, FastAPI ``detail``."""
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return _excerpt(err["message"])
        for key in ("error", "message", "detail"):
            if isinstance(data.get(key), str):
                return _excerpt(data[key])
    return _excerpt(raw)


def _excerpt(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = " ".join(str(value if value is not None else "").split())
    return one_line(text, MESSAGE_CHARS + 3) or "(empty)"  # no terminal escapes from a server


def _clean(text: str, key: str | None) -> str:
    """Mask this channel's key, every key the process has read, and key-like flags."""
    return mask_key_flags(REDACTOR(redact(text, [key])))


def _fix(check: ToolCheck, verdict: ToolVerdict, message: str) -> str | None:
    if verdict is ToolVerdict.TOOL_CALL:
        return None
    if check.vllm is not None and (verdict is ToolVerdict.TEXT_ONLY
                                   or (verdict is ToolVerdict.REFUSED and is_auto_tool_refusal(message))):
        return tool_call_fix(check.vllm, family_of(check.vllm))
    if verdict is ToolVerdict.TEXT_ONLY:
        return ("coding tools need tool calls: choose a model that supports them on this channel "
                "(the profile's `model`, or the tool's own `[tools.X] model`)")
    return None


def family_of(settings: VllmSettings) -> ParserGuess | None:
    """The tool-call parser for the ``[vllm]`` model, from its name or path and its ``config.json``
    (``_name_or_path``, ``model_type``, ``architectures``) when the directory is local or in the Hugging Face
    cache. None when the family cannot be told."""
    names: list[str | None] = [settings.model]
    try:
        cfg = json.loads(read_regular_file(resolve_model_dir(settings.model) / "config.json",
                                           max_bytes=CONFIG_MAX_BYTES, what="model config"))
    except (ConduitError, OSError, ValueError, RecursionError):
        cfg = None
    if isinstance(cfg, dict):
        names += [str(cfg.get("_name_or_path") or ""), str(cfg.get("model_type") or "")]
        names += [str(a) for a in cfg.get("architectures") or () if isinstance(a, str)]
    return guess_parser(names)


async def run_checks(checks: list[ToolCheck]) -> list[dict[str, Any]]:
    """Send every check at once over one client (no proxy from the environment, no redirects)."""
    async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:
        return list(await asyncio.gather(*(run_check(client, c) for c in checks)))


def tool_call_report(profile_path: str | Path | None = None) -> dict[str, Any]:
    """Load the profile, send every check, and summarize. Never raises for a bad profile or network trouble.

    Returns:
        ``{"checks": [run_check's dicts], "problems": [str], "ok": bool}``: ``ok`` only when every check came
        back ``tool_call`` and every channel could be resolved.
    """
    try:
        profile = load_profile(profile_path)
    except ConduitError as exc:
        return {"checks": [], "problems": [f"tool calls: {exc}"], "ok": False}
    checks, unresolved = checks_for(profile)
    results = asyncio.run(run_checks(checks)) if checks else []
    problems = [f"tool calls on channel {name}: not checked: {why}" for name, why in unresolved.items()]
    for r in results:
        if r["verdict"] != ToolVerdict.TOOL_CALL:
            line = f"tool calls on channel {r['channel']}, model {r['model']}: {r['verdict']}: {r['message']}"
            problems.append(line + (f"; fix: {r['fix']}" if r["fix"] else ""))
    return {"checks": results, "problems": problems, "ok": not problems}
