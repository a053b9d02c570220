"""What a tool's one-shot run against the canary means: ``ok``, or what won instead of conduit and the fix.

Inputs are the canary's recorded requests (``conduit.daemon.verify.gateway.Recorded``), the names the tool asked
DNS for, its exit code, and the user's environment and working directory, read statically for the sources that
outrank conduit's files (each adapter's ``competing`` declaration, ``sources``). Verdicts:

=================== ==========================================================================================
``ok``              a model request reached the canary under the expected path, with the profile's key and model
``wrong_model``     a model request came with another model (the source that set it, when found)
``wrong_key``       ... with another key (the exported variable or project file holding it, when found)
``wrong_path``      ... under another path (a pasted endpoint or version segment somewhere above conduit)
``went_elsewhere``  no request reached the canary; the tool looked up a host (the variable naming it, if any)
``untrusted_folder`` the tool refused the folder (its ``untrusted_exits``: Gemini CLI 41, 55)
``no_request``      the tool exited without any model request (its exit code and last stderr line)
``timeout``         the run passed ``--timeout`` without a model request
=================== ==========================================================================================

A key is compared here and never shown: reports carry ``fingerprint(key)`` only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from conduit.adapters.declarations import Competing
from conduit.adapters.registry import ADAPTERS, missing_declarations
from conduit.daemon.verify.gateway import Recorded
from conduit.daemon.verify.tools import ONE_SHOTS
from conduit.redact import fingerprint, redact

MODEL_ROUTES = ("/messages", "/chat/completions", "/responses", "/completions", ":generateContent",
                ":streamGenerateContent")
"""Route endings of a model request (``/messages/count_tokens`` and ``GET /models`` are not one)."""


BACKGROUND_HOSTS = frozenset({
    "api.anthropic.com", "statsig.anthropic.com", "github.com", "api.github.com", "chatgpt.com", "ab.chatgpt.com",
    "play.googleapis.com", "models.opencode.ai", "registry.npmjs.org", "api.continue.dev", "data.cline.bot",
    "otel.cline.bot", "pypi.org", "raw.githubusercontent.com"})
"""Hosts the tools look up besides the gateway (telemetry, update checks, model lists; none a model request:
docs/formats/real-tools.md); a run that asked only these did not go elsewhere."""


Sources = Competing
"""The old name of ``conduit.adapters.declarations.Competing``."""


def sources(tool: str) -> Competing:
    """``tool``'s competing sources as its adapter declares them; ``Competing()`` (none) for a tool that is not
    registered or lacks the declaration (``registry.missing_declarations``)."""
    adapter = ADAPTERS.get(tool)
    if adapter is None or "competing" in missing_declarations(adapter):
        return Competing()
    return adapter.competing


@dataclass(frozen=True)
class Expected:
    """What the profile says the tool must send: ``prefix`` (the path its requests start with, e.g.
    ``/api/v1/``), ``key`` (a secret: compared, never shown) and ``model``."""

    prefix: str
    key: str | None
    model: str


@dataclass(frozen=True)
class Verdict:
    """The verdict for one tool and the request it rests on (None when no model request came)."""

    verdict: str
    detail: str
    request: Recorded | None


def is_model_request(rec: Recorded) -> bool:
    """True for a POST whose route ends like a model call (see ``MODEL_ROUTES``)."""
    return rec.method == "POST" and rec.route.endswith(MODEL_ROUTES)


def judge(tool: str, want: Expected, requests: Sequence[Recorded], *, exit_code: int | None, timed_out: bool,
          dns_names: Sequence[str], stderr_tail: str, environ: Mapping[str, str], cwd: Path) -> Verdict:
    """The verdict for one run; see the module docstring. ``environ``/``cwd`` are the user's."""
    src = sources(tool)
    calls = [r for r in requests if is_model_request(r)]
    good = [r for r in calls if r.route.startswith(want.prefix)]
    for rec in good:
        if rec.auth_value == want.key and rec.model == want.model:
            return Verdict("ok", f"{rec.method} {rec.route} with the profile's key and model", rec)
    if good:
        rec = good[0]
        if rec.auth_value != want.key:
            got = fingerprint(rec.auth_value)
            won = _key_source(src, rec.auth_value, environ, cwd)
            return Verdict("wrong_key", f"sent key {got}, not the profile's {fingerprint(want.key)}; {won}", rec)
        won = _value_source(src.model, src.files, rec.model or "", environ, cwd)
        return Verdict("wrong_model", f"sent model {rec.model!r}, not the profile's {want.model!r}; {won}", rec)
    if calls:
        rec = calls[0]
        return Verdict("wrong_path", f"sent {rec.method} {rec.route}, outside the profile's {want.prefix}; "
                       + _value_source(src.base, src.files, rec.route, environ, cwd), rec)
    spec = ONE_SHOTS.get(tool)
    if spec is not None and exit_code is not None and exit_code in spec.untrusted_exits:
        return Verdict("untrusted_folder", f"folder not trusted (exit {exit_code}): {ADAPTERS[tool].display_name} "
                       f"reads none of its settings in {cwd}; add it to [tools.{tool}] trust or run "
                       f"`{spec.binaries[0]}` once and trust it", None)
    elsewhere = _went_elsewhere(src, dns_names, environ)
    if elsewhere:
        return Verdict("went_elsewhere", elsewhere, None)
    if timed_out:
        return Verdict("timeout", "no model request before the timeout; try a longer --timeout", None)
    last = next((line.strip() for line in reversed(stderr_tail.splitlines()) if line.strip()), "")
    shown = redact(last, [want.key])[:300]
    return Verdict("no_request", f"exited {exit_code} without a model request" + (f": {shown}" if shown else ""), None)


def static_sources(tool: str, environ: Mapping[str, str], cwd: Path) -> list[str]:
    """The sources that may outrank conduit for ``tool``, read without running it: each competing variable that is
    exported (named, its value never shown) and each project file present in ``cwd``."""
    src = sources(tool)
    names = _exported([*src.model, *src.key, *src.base], environ)
    return [f"exported {n}" for n in names] + [str(cwd / rel) for rel in src.files if (cwd / rel).is_file()]


def unsafe_without_isolation(tool: str, environ: Mapping[str, str], cwd: Path) -> list[str]:
    """What could send the tool to a real gateway when the network is not cut: an exported base URL or key
    variable, or a project file in ``cwd`` (either may point the run away from the canary); [] when none."""
    src = sources(tool)
    return ([f"exported {n}" for n in _exported([*src.key, *src.base], environ)]
            + [str(cwd / rel) for rel in src.files if (cwd / rel).is_file()])


def _exported(names: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    return [n for n in dict.fromkeys(names) if environ.get(n, "").strip()]


def _value_source(names: Sequence[str], files: Sequence[str], value: str, environ: Mapping[str, str],
                  cwd: Path) -> str:
    """Which exported variable or project file holds ``value`` (a model id or a path), and the fix."""
    bare = value.split("/")[-1] if value else value
    for name in _exported(names, environ):
        if value and (value in environ[name] or (bare and bare in environ[name])):
            return f"the exported variable {name}={environ[name]!r} wins: unset it (or set it to the profile's value)"
    for rel in files:
        path = cwd / rel
        if value and value in _read_small(path):
            return f"the project file {path} sets it and ranks above conduit's file: change or remove it there"
    set_ = _exported(names, environ)
    if set_:
        return "exported and possibly winning: " + ", ".join(set_)
    present = [str(cwd / rel) for rel in files if (cwd / rel).is_file()]
    return ("project files that rank above conduit's: " + ", ".join(present)) if present else \
        "no outranking source found; run `conduit doctor`"


def _key_source(src: Competing, key: str | None, environ: Mapping[str, str], cwd: Path) -> str:
    """Which exported variable or project file holds the key the tool sent (named, never shown)."""
    if not key:
        return "the tool sent no key: check the tool's own login or auth settings"
    for name in _exported(src.key, environ):
        if key in environ[name]:
            return f"the exported variable {name} holds that key and wins: unset it, or `conduit key set` the new one"
    for rel in src.files:
        if key in _read_small(cwd / rel):
            return f"the project file {cwd / rel} holds that key and ranks above conduit's file: remove it there"
    return "no outranking source found; run `conduit doctor`"


def _went_elsewhere(src: Competing, dns_names: Sequence[str], environ: Mapping[str, str]) -> str:
    """A sentence when the tool looked up a host an exported base-URL variable names, or a host that is not one
    of the vendors' known telemetry and update hosts; else ""."""
    for name in _exported(src.base, environ):
        host = urlsplit(environ[name].strip()).hostname or ""
        if host and host in dns_names:
            return (f"no request reached the canary: the tool went to {host}, named by the exported {name}; "
                    "unset it so conduit's file decides")
    others = [n for n in dns_names if n.rstrip(".").lower() not in BACKGROUND_HOSTS]
    if not others:
        return ""
    exported = _exported(src.base, environ)
    hint = f" (exported: {', '.join(exported)})" if exported else ""
    return "no request reached the canary; the tool looked up " + ", ".join(others[:6]) + hint


def _read_small(path: Path, limit: int = 1 << 20) -> str:
    """The text of a project file (at most ``limit`` bytes), or "" when it is missing or unreadable."""
    try:
        with path.open("rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


__all__ = ["MODEL_ROUTES", "Expected", "Sources", "sources", "Verdict", "is_model_request", "judge", "static_sources"]
