"""Gemini CLI folder trust: is a folder trusted the way Gemini CLI decides it, and the entries conduit adds.

Facts (google-gemini/gemini-cli ``packages/core/src/utils/trust.ts`` ``checkPathTrust``,
``packages/cli/src/config/trustedFolders.ts``; observed with 0.61.0 in docs/formats/real-tools.md):
- Order: ``GEMINI_CLI_TRUST_WORKSPACE=true`` (also what ``--skip-trust`` sets) trusts every folder; then
  ``security.folderTrust.enabled = false`` in the merged settings trusts every folder (the default is
  ``true``; the system file ``/etc/gemini-cli/settings.json`` overrides the user's, which overrides
  ``/etc/gemini-cli/system-defaults.json``; a workspace's own settings are not read before it is trusted);
  then an IDE's signal (not visible here); then ``trustedFolders.json``.
- ``trustedFolders.json`` (``$GEMINI_CLI_TRUSTED_FOLDERS_PATH``, else ``~/.gemini/trustedFolders.json``): a JSON
  object (comments allowed) ``{"<abs path>": "TRUST_FOLDER" | "TRUST_PARENT" | "DO_NOT_TRUST"}``. A rule covers
  its path and everything below it (``TRUST_PARENT``: the rule path's parent folder), both compared as real
  paths. Of the rules covering a folder, the one with the longest rule path decides; no rule: untrusted. A
  file that does not parse, or holds another value, stops Gemini CLI at start-up.
- Untrusted: no ``~/.gemini/.env`` and no base URL or model from any ``.env``; headless runs exit 41 ("must
  specify the GEMINI_API_KEY environment variable") or 55 ("not running in a trusted directory").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conduit.adapters.base import Env
from conduit.adapters.formats.jsonc import parse_jsonc
from conduit.errors import ToolFileError
from conduit.fileio import PROFILE_MAX_BYTES, read_regular_file

LEVELS = ("TRUST_FOLDER", "TRUST_PARENT", "DO_NOT_TRUST")
SYSTEM_SETTINGS = Path("/etc/gemini-cli/settings.json")
SYSTEM_DEFAULTS = Path("/etc/gemini-cli/system-defaults.json")
ENV_VARS = ("GEMINI_CLI_TRUST_WORKSPACE", "GEMINI_CLI_TRUSTED_FOLDERS_PATH", "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
            "GEMINI_CLI_SYSTEM_DEFAULTS_PATH")


@dataclass(frozen=True)
class Verdict:
    """Whether Gemini CLI trusts one folder, and what decided it.

    Attributes:
        trusted: True when Gemini CLI reads its ``.env`` files there.
        source: what decided, in words (``GEMINI_CLI_TRUST_WORKSPACE=true``, ``the rule "/src": TRUST_FOLDER in
            /home/u/.gemini/trustedFolders.json``, ``no rule in ... covers it``).
        rule: the deciding rule's path, or None. level: its trust level, or None.
        error: why ``trustedFolders.json`` stops Gemini CLI (it does not parse...), or None.
    """

    trusted: bool
    source: str
    rule: str | None = None
    level: str | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The verdict as doctor's ``--json`` shows it."""
        return {"trusted": self.trusted, "source": self.source, "rule": self.rule, "level": self.level,
                "error": self.error}


def folders_path(env: Env, gemini_dir: Path) -> Path:
    """``$GEMINI_CLI_TRUSTED_FOLDERS_PATH``, else ``<gemini dir>/trustedFolders.json``."""
    return env.path_from("GEMINI_CLI_TRUSTED_FOLDERS_PATH", gemini_dir / "trustedFolders.json")


def expand(entry: str, env: Env) -> str:
    """A ``[tools.gemini] trust`` entry as an absolute, normalized path (``~`` is ``env.home``)."""
    text = entry.strip()
    if text == "~" or text.startswith("~/"):
        text = str(env.home) + text[1:]
    return os.path.normpath(text)


def read_text_bounded(path: Path) -> str:
    """A Gemini CLI file's text, read as ``conduit.fileio.read_regular_file`` reads (a FIFO or device named by
    ``GEMINI_CLI_*_PATH`` is refused, not waited on; at most 1 MiB).

    Raises:
        FileNotFoundError: no such file. ToolFileError: not a regular file, too big, unreadable.
        UnicodeDecodeError: not UTF-8.
    """
    return read_regular_file(path, max_bytes=PROFILE_MAX_BYTES, what="Gemini CLI file",
                             error=ToolFileError).decode("utf-8")


def read_rules(path: Path) -> tuple[dict[str, str], str | None]:
    """The rules in ``trustedFolders.json`` and None; ``({}, None)`` when missing; ``({}, why)`` when Gemini CLI
    would stop on it (not a JSON object, or a value other than the three levels)."""
    try:
        doc = parse_jsonc(read_text_bounded(path), path=path)
    except FileNotFoundError:
        return {}, None
    except (ToolFileError, OSError, UnicodeDecodeError) as exc:
        return {}, f"{path} does not parse: {exc}"
    bad = [k for k, v in doc.items() if v not in LEVELS]
    if bad:
        return {}, f"{path}: \"{bad[0]}\" has a trust level other than {', '.join(LEVELS)}"
    return {str(k): str(v) for k, v in doc.items()}, None


def _real(p: str) -> str:
    try:
        return os.path.realpath(p) if os.path.exists(p) else p
    except (OSError, ValueError):
        return p


def _within(location: str, root: str) -> bool:
    rel = os.path.relpath(location, root)
    return rel == "." or not (rel == ".." or rel.startswith(".." + os.sep) or os.path.isabs(rel))


def deciding_rule(folder: Path, rules: dict[str, str]) -> tuple[str, str] | None:
    """The rule that decides ``folder`` (the covering rule with the longest path), as ``(path, level)``."""
    location = _real(str(folder))
    best: tuple[str, str] | None = None
    for rule, level in rules.items():
        root = _real(os.path.dirname(rule) if level == "TRUST_PARENT" else rule)
        if _within(location, root) and (best is None or len(rule) > len(best[0])):
            best = (rule, level)
    return best


def _folder_trust_disabled(env: Env, gemini_dir: Path) -> str | None:
    """The settings file whose ``security.folderTrust.enabled = false`` decides, or None when trust is on."""
    system = Path(env.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH") or SYSTEM_SETTINGS)
    defaults = Path(env.get("GEMINI_CLI_SYSTEM_DEFAULTS_PATH") or SYSTEM_DEFAULTS)
    for path in (system, gemini_dir / "settings.json", defaults):  # highest first
        try:
            doc = parse_jsonc(read_text_bounded(path), path=path)
        except (ToolFileError, OSError, UnicodeDecodeError):
            continue
        sec = doc.get("security")
        trust = sec.get("folderTrust") if isinstance(sec, dict) else None
        value = trust.get("enabled") if isinstance(trust, dict) else None
        if isinstance(value, bool):
            return str(path) if value is False else None
    return None


def decide(folder: Path, env: Env, gemini_dir: Path) -> Verdict:
    """Whether Gemini CLI trusts ``folder`` (see the module docstring for the order). Never raises."""
    if (env.get("GEMINI_CLI_TRUST_WORKSPACE") or "").lower() == "true":
        return Verdict(True, "GEMINI_CLI_TRUST_WORKSPACE=true in the environment")
    disabled = _folder_trust_disabled(env, gemini_dir)
    if disabled is not None:
        return Verdict(True, f"security.folderTrust.enabled = false in {disabled}")
    path = folders_path(env, gemini_dir)
    rules, error = read_rules(path)
    if error is not None:
        return Verdict(False, error, error=error)
    hit = deciding_rule(folder, rules)
    if hit is None:
        return Verdict(False, f"no rule in {path} covers it")
    rule, level = hit
    return Verdict(level != "DO_NOT_TRUST", f"the rule \"{rule}\": {level} in {path}", rule, level)


def trust_edits(folders: Sequence[str]) -> Callable[[dict[str, Any]], list[tuple[tuple[str, ...], Any]]]:
    """The edits for ``trustedFolders.json``: each folder not in the file yet, as ``TRUST_FOLDER``. An entry the
    file already has (whatever its level) is the user's and is left as it is."""

    def edits(doc: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
        return [((f,), "TRUST_FOLDER") for f in dict.fromkeys(folders) if f not in doc]

    return edits


__all__ = ["ENV_VARS", "LEVELS", "Verdict", "decide", "deciding_rule", "expand", "folders_path", "read_rules",
           "trust_edits"]
