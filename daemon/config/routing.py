"""The routing file: the agent's decision whether tools use the primary channel or the ``[fallback]`` one.

The contract between the agent (the only writer) and the sync daemon and ``conduit sync`` (readers).

Where: ``state_dir()/routing.json`` (``~/.local/state/conduit/routing.json``; ``routing_path``), mode 0600,
written whole by ``conduit.fileio.atomic_write`` (temp file, fsync, rename), and only when the decision changes.

Shape (``RoutingDecision``, version 1)::

    {"version": 1,
     "active": "fallback",                 # "primary" | "fallback"
     "since": 1764600000.25,               # Unix time the decision was made, seconds
     "why": "vLLM failed for 20 s: ...",   # words for people; never a key
     "profile": "/home/u/.config/conduit/profile.toml",   # the profile it was judged for (realpath)
     "primary": "local",                   # the primary channel it judged
     "fallback": {"channel": "taotoken", "model": "claude-sonnet-4-20250514", "small_model": null},
     "after_s": 20.0}

Meaning for a reader (``RoutingDecision.applies_to``): the decision is in force only for the profile it names
and while that profile's ``channel`` is still its ``primary`` and the profile has a ``[fallback]`` table; a file
left by another profile, or a primary changed since (``conduit use --channel``, an edit), is ignored: tools then
use the primary. While ``active`` is ``fallback``, the route is the profile's *current* ``[fallback]`` table (the
``fallback`` object in the file says what the agent saw; an edit of the table applies at the next sync without
waiting for the agent).

A stale decision is not applied: ``fallback`` older than ``STALE_AFTER_S`` while no agent is alive (``agent_alive``:
nothing answers a connect on the agent's socket, ``paths.agent_socket_path()``) is a decision nobody stands behind
any more (an agent stopped for days leaves every tool on the paid fallback); tools then use the primary, and
``RoutingDecision.standing`` says so in words (date, age, whether an agent runs). A running agent keeps its
decision in force however old it is (it writes the file only when the decision changes).

Reading (``RoutingReader.read``) is bounded (``MAX_BYTES``) and tolerant: a missing file means no decision
(primary); a file that is empty, unparseable, too large or of another shape *now* is not a decision for the
primary: the reader keeps the last good decision it read from that path (a torn read never flips every tool),
or, in a process that has read none yet (a one-shot ``conduit sync``, a restarted daemon), the copy the agent
writes beside the file at each decision (``kept_path``: ``routing.kept.json``), and says why in
``RoutingReader.problem``. ``read_routing`` uses one reader per process.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from conduit.daemon.config import paths
from conduit.daemon.config.fallback import FallbackSettings
from conduit.daemon.config.profile import LoadedProfile
from conduit.errors import ConduitError
from conduit.fileio import atomic_write, make_private_dirs, read_regular_file
from conduit.text import one_line

VERSION: Literal[1] = 1
MAX_BYTES = 64 * 1024
"""The routing file is a few hundred bytes; more is refused (kept decision, ``problem`` says why)."""

MAX_SINCE = 4102444800.0
"""The latest ``since`` believed: 2100-01-01 in Unix seconds (a larger one, ``1e20``, is not a decision)."""
MAX_AFTER_S = 366 * 86400.0
"""The largest ``after_s`` believed: a year, in seconds."""

STALE_AFTER_S = 600.0
"""A ``fallback`` decision older than this (seconds; 10 minutes, far above the agent's probe interval and the time
an agent takes to restart) with no agent alive is not applied: tools use the primary."""

RECHECK_S = 30.0
"""While a ``fallback`` decision is in the file, the sync daemon looks again this often (seconds) whether an agent
still stands behind it (or stands behind it again), once it is older than ``STALE_AFTER_S``."""

Active = Literal["primary", "fallback"]

_ALIVE: dict[str, tuple[float, bool]] = {}  # socket path -> (monotonic time of the look, answer)


def agent_alive(path: Path | None = None) -> bool:
    """True when an agent answers a connect on its socket (``path``, default ``paths.agent_socket_path()``);
    nothing is sent. The answer is kept for 1 s (a sync asks once per tool). Never raises."""
    where = str(path or paths.agent_socket_path())
    now = time.monotonic()
    seen = _ALIVE.get(where)
    if seen is not None and now - seen[0] < 1.0:
        return seen[1]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(where)
        alive = True
    except OSError:
        alive = False
    finally:
        s.close()
    _ALIVE[where] = (now, alive)
    return alive


def _age(seconds: float) -> str:
    """``3 d 4 h``, ``2 h 5 min``, ``7 min``, ``12 s``."""
    s = max(0, int(seconds))
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "min", 60)):
        if s >= size:
            return f"{s // size} {unit}" + (f" {s % size // subsize} {sub}" if s % size // subsize else "")
    return f"{s // 60} min" if s >= 60 else f"{s} s"


def routing_path() -> Path:
    """``state_dir()/routing.json``: where the agent writes its decision."""
    return paths.state_dir() / "routing.json"


def profile_key(profile_path: str | os.PathLike[str] | None) -> str:
    """The profile path a decision is tied to: ``paths.profile_path`` of the override with every symlink resolved
    (``os.path.realpath``), so an agent and a daemon that reach the file by different paths agree."""
    return os.path.realpath(paths.profile_path(profile_path))


class FallbackRoute(BaseModel):
    """The fallback route the agent saw when it decided (informational: readers use the profile's table)."""

    model_config = ConfigDict(extra="ignore")

    channel: str
    model: str
    small_model: str | None = None

    @field_validator("channel", "model", "small_model")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        """Outside text (a file another process may have written): control characters shown escaped."""
        return None if value is None else one_line(value, 500)


class RoutingDecision(BaseModel):
    """One decision of the agent (see the module docstring for the file's shape).

    Attributes:
        version: the contract's version (1).
        active: ``primary`` or ``fallback``.
        since: Unix time the decision was made, seconds.
        why: a sentence for people (never a key).
        profile: the real path of the profile judged (``profile_key``: symlinks resolved).
        primary: the primary channel judged.
        fallback: the fallback route then.
        after_s: the hysteresis then, seconds.
    """

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    version: Literal[1] = VERSION
    active: Active
    since: float = Field(ge=0, le=MAX_SINCE)
    why: str = Field(default="", max_length=2000)
    profile: str
    primary: str
    fallback: FallbackRoute
    after_s: float = Field(gt=0, le=MAX_AFTER_S)

    @field_validator("why", "primary")
    @classmethod
    def _one_line(cls, value: str) -> str:
        """Outside text (the file may be anyone's edit): control characters and newlines shown escaped, so a
        ``why`` never forges a log line or reaches a terminal raw (``conduit.text.one_line``)."""
        return one_line(value)

    def applies_to(self, profile: LoadedProfile) -> bool:
        """True when this decision is in force for ``profile``: the same profile file, the same primary, and a
        ``[fallback]`` table there."""
        return (profile.model.fallback is not None and self.primary == profile.model.channel
                and os.path.realpath(self.profile) == os.path.realpath(profile.path))

    def route_for(self, profile: LoadedProfile) -> FallbackSettings | None:
        """The profile's ``[fallback]`` when this decision says ``fallback``, applies to ``profile`` and is not
        ``stale``; else None (tools use the primary)."""
        if self.active != "fallback" or not self.applies_to(profile) or self.stale():
            return None
        return profile.model.fallback

    def age_s(self, now: float | None = None) -> float:
        """Seconds since the decision was made (``now``: Unix time, default the clock); 0 for one from the future."""
        return max(0.0, (time.time() if now is None else now) - self.since)

    def stale(self, now: float | None = None) -> bool:
        """A ``fallback`` decision older than ``STALE_AFTER_S`` with no agent alive (``agent_alive``): not applied."""
        return self.active == "fallback" and self.age_s(now) > STALE_AFTER_S and not agent_alive()

    def standing(self, now: float | None = None) -> str:
        """The decision in words for ``sync`` and ``doctor``: ``fallback since 2025-06-01 14:03:07 (2 d 3 h ago;
        the agent is running)``; a stale one adds that it is not applied."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        alive = agent_alive()
        text = f"{self.active} since {when} ({_age(self.age_s(now))} ago; " + \
            ("the agent is running)" if alive else "no agent is running)")
        if self.stale(now):
            text += (f": older than {_age(STALE_AFTER_S)} with no agent behind it, so it is not applied and tools "
                     "use the primary; start the agent (`conduit agent`) to judge the primary again")
        return text

    def brief(self) -> dict[str, object]:
        """``{"active", "since", "why"}``: the part ``conduit status`` and ``/v1/status`` show."""
        return {"active": self.active, "since": self.since, "why": self.why}


def decision(active: Active, why: str, profile_path: str, primary: str, fallback: FallbackSettings,
             since: float | None = None) -> RoutingDecision:
    """A new decision for ``primary`` of the profile at ``profile_path`` (``profile_key``), made now unless ``since``."""
    return RoutingDecision(active=active, since=time.time() if since is None else since, why=why,
                           profile=profile_path, primary=primary, after_s=fallback.after_s,
                           fallback=FallbackRoute(channel=fallback.channel, model=fallback.model,
                                                  small_model=fallback.small_model))


def write_routing(d: RoutingDecision, path: Path | None = None) -> Path:
    """Write ``d`` atomically (mode 0600) to ``path`` (default ``routing_path()``), and the same bytes to its
    ``kept_path`` first (what a process that starts while the file is damaged uses); returns the path.

    Raises:
        ConduitError: the state directory cannot be written (names the file and what to check).
    """
    path = path or routing_path()
    data = (d.model_dump_json(indent=2) + "\n").encode("utf-8")
    try:
        make_private_dirs(path.parent)
        atomic_write(kept_path(path), data, 0o600)  # first: a reader that finds the file damaged reads this
        atomic_write(path, data, 0o600)
    except OSError as exc:
        raise ConduitError(f"{path}: cannot write the routing decision: {exc.strerror or exc}",
                           hint=f"check that {path.parent} is writable by this user") from exc
    return path


def kept_path(path: Path) -> Path:
    """The copy of the last decision the agent wrote, beside ``path``: ``routing.json`` -> ``routing.kept.json``."""
    return path.with_name(path.stem + ".kept" + path.suffix)


def _parse(path: Path) -> RoutingDecision:
    """The decision in ``path``. Raises FileNotFoundError, ConduitError (not a regular file, over ``MAX_BYTES``,
    unreadable), or ValueError naming what is wrong with its content (no JSON, nested too deeply, not a
    decision)."""
    raw = read_regular_file(path, max_bytes=MAX_BYTES, what="routing file")
    try:
        return RoutingDecision.model_validate(json.loads(raw.decode("utf-8")))
    except RecursionError:
        raise ValueError(f"{path}: not a routing decision (nested too deeply)") from None
    except (ValueError, ValidationError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc).splitlines()[0]
        raise ValueError(f"{path}: not a routing decision ({first or 'empty file'})") from None


class RoutingReader:
    """Reads the routing file, keeping the last good decision across reads that fail (see the module docstring).

    Attributes:
        problem: why the last read did not give a fresh decision (unparseable, too large), or None.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.problem: str | None = None
        self._good: dict[str, RoutingDecision] = {}

    def read(self) -> RoutingDecision | None:
        """The decision in the file; None when there is none (no file); when it cannot be read now, the last
        good one this reader saw, else the agent's kept copy (``kept_path``), else None. Never raises."""
        path = self.path or routing_path()
        where = str(path)
        try:
            got = _parse(path)
        except FileNotFoundError:
            self.problem = None
            self._good.pop(where, None)
            return None
        except ConduitError as exc:
            return self._keep(path, exc.message)
        except ValueError as exc:
            return self._keep(path, str(exc))
        self.problem = None
        self._good[where] = got
        return got

    def _keep(self, path: Path, problem: str) -> RoutingDecision | None:
        self.problem = problem + "; the last good decision stays in force"
        good = self._good.get(str(path))
        if good is None:
            try:
                good = self._good[str(path)] = _parse(kept_path(path))
            except (OSError, ConduitError, ValueError):
                self.problem = problem + "; no earlier decision is known, so tools use the primary"
        return good


_READER = RoutingReader()


def read_routing(path: Path | None = None) -> RoutingDecision | None:
    """The current decision through this process's one ``RoutingReader`` (``path``: default ``routing_path()``)."""
    if path is None:
        return _READER.read()
    reader = RoutingReader(path)
    reader._good = _READER._good  # one memory of good decisions per process, keyed by path
    got = reader.read()
    _READER.problem = reader.problem
    return got


def reading_problem() -> str | None:
    """Why the last ``read_routing`` kept an older decision, or None."""
    return _READER.problem


__all__ = ["MAX_BYTES", "RECHECK_S", "STALE_AFTER_S", "VERSION", "agent_alive", "FallbackRoute", "RoutingDecision", "RoutingReader", "decision", "kept_path",
           "profile_key", "read_routing", "reading_problem", "routing_path", "write_routing"]
