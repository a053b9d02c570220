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
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conduit.daemon.config import paths
from conduit.daemon.config.fallback import FallbackSettings
from conduit.daemon.config.profile import LoadedProfile
from conduit.errors import ConduitError
from conduit.fileio import atomic_write, make_private_dirs, read_regular_file

VERSION: Literal[1] = 1
MAX_BYTES = 64 * 1024
"""The routing file is a few hundred bytes; more is refused (kept decision, ``problem`` says why)."""

Active = Literal["primary", "fallback"]


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
    since: float
    why: str = Field(default="", max_length=2000)
    profile: str
    primary: str
    fallback: FallbackRoute
    after_s: float = Field(gt=0)

    def applies_to(self, profile: LoadedProfile) -> bool:
        """True when this decision is in force for ``profile``: the same profile file, the same primary, and a
        ``[fallback]`` table there."""
        return (profile.model.fallback is not None and self.primary == profile.model.channel
                and os.path.realpath(self.profile) == os.path.realpath(profile.path))

    def route_for(self, profile: LoadedProfile) -> FallbackSettings | None:
        """The profile's ``[fallback]`` when this decision says ``fallback`` and applies to ``profile``; else None
        (tools use the primary)."""
        if self.active != "fallback" or not self.applies_to(profile):
            return None
        return profile.model.fallback

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


__all__ = ["MAX_BYTES", "VERSION", "FallbackRoute", "RoutingDecision", "RoutingReader", "decision", "kept_path",
           "profile_key", "read_routing", "reading_problem", "routing_path", "write_routing"]
