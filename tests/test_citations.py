"""The facts the code relies on live in the repository, and every package says what it is for.

A comment or docstring that cites a source cites one a reader of the repository can open: a page of the
manual (``docs/design.md`` and its section title, ``docs/formats/<tool>.md``, ``docs/cases.md`` and a case id)
or a tool's own source file. Nothing points at notes outside the repository or at an issue tracker the reader
does not have. These tests read the tracked (and new, not ignored) files, as ``git ls-files`` lists them.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["adapters", "daemon", "conduit", "tests", "bench", "Makefile", "pyproject.toml", "systemd",
           "profiles"]
PACKAGES = ["adapters", "daemon", "conduit", "profiles", "systemd"]

# Built from pieces so that this file does not match its own patterns.
_MD = r"\.md"
OUTSIDE = re.compile("|".join([
    "DESIGN" + _MD, "STYLE" + _MD,                      # steering documents outside the repository
    "shared/" + "formats", "shared/" + "cases",          # their folders
    r"(?i:\biss" + r"ues? [0-9]+)",                      # an issue number: the reader has no tracker
    r"\bhab" + r"it [0-9]+",                             # a numbered habit of a style note
]))
# A page of the manual that code cites must exist (only ours: ``docs/config.md`` of openai/codex is not).
CITED_PAGE = re.compile(r"\bdocs/(?:design|cases|formats/[\w.-]+)\.md\b")


def _tracked(paths: list[str]) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--", *paths], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    files = [ROOT / name for name in out]
    return sorted(p for p in files if p.is_file() and not p.is_symlink())


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:  # a binary fixture cites nothing
        return []


@pytest.fixture(scope="module")
def scanned() -> list[Path]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no file list")
    return _tracked(SCANNED)


def test_no_citation_points_outside_the_repository(scanned: list[Path]) -> None:
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in scanned
            for n, line in enumerate(_lines(p), 1) if OUTSIDE.search(line)]
    why = "cite docs/design.md, docs/formats/*.md, docs/cases.md or the tool's own source instead:\n"
    assert hits == [], why + "\n".join(hits)


def test_every_cited_manual_page_exists(scanned: list[Path]) -> None:
    missing = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}" for p in scanned
               for n, line in enumerate(_lines(p), 1) for m in CITED_PAGE.finditer(line)
               if not (ROOT / m.group(0)).is_file()]
    assert missing == [], "\n".join(missing)


def test_every_package_says_what_it_is_for() -> None:
    """Each ``__init__.py`` of the product has a docstring: what the package is for and its entry points."""
    inits = sorted(p for d in PACKAGES for p in (ROOT / d).rglob("__init__.py")
                   if "__pycache__" not in p.parts)
    assert inits, "no packages found"
    bare = [str(p.relative_to(ROOT)) for p in inits
            if not (ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or "").strip()]
    assert bare == []
