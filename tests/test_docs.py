"""The manual stays true to the code: the reference pages are generated, and the front door stays short.

``docs/gen_reference.py`` writes ``docs/reference/*.md`` from the adapter registry, the profile's pydantic models,
the agent's OpenAPI document and the command tree (``make docs``). Each page is rendered here in memory and
compared with the committed one, so a change to a declaration, a field, a route or an option that is not
followed by ``make docs`` fails with the page's name. The strict build of the manual (``mkdocs build --strict``,
broken links and anchors included) is part of ``make lint``.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "docs" / "gen_reference.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("conduit_docs_gen_reference", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GEN = _generator()


@pytest.mark.parametrize("page", sorted(GEN.PAGES))
def test_reference_page_matches_the_code(page: str) -> None:
    path = ROOT / "docs" / "reference" / page
    assert path.is_file(), f"docs/reference/{page} is missing: run `{GEN.REGENERATE}`"
    committed = path.read_text(encoding="utf-8")
    fresh = GEN.render(page)
    if committed != fresh:
        old, new = committed.splitlines(), fresh.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        pytest.fail(f"docs/reference/{page} differs from the code (first at line {first + 1}): run "
                    f"`{GEN.REGENERATE}` (docs/gen_reference.py) and commit the page\n"
                    f"  committed: {old[first] if first < len(old) else '(end of file)'}\n"
                    f"  from code: {new[first] if first < len(new) else '(end of file)'}")


def test_every_reference_page_is_generated() -> None:
    """No hand-written page hides among the generated ones (it would never be checked)."""
    pages = sorted(p.name for p in (ROOT / "docs" / "reference").glob("*.md"))
    assert pages == sorted(GEN.PAGES)


def test_readme_is_a_front_door() -> None:
    """The README says what conduit is, how to install it, the two commands and a quick start, and links into
    docs/; the manual lives there."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    for needed in ("make demo", "make test", "pip install .", "pipx install .", "uv tool install .",
                   "conduit-sync", "docs/adding-a-tool.md"):
        assert needed in text, needed
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), f"README links to {link}, which does not exist"


# Built from pieces so that this file does not match its own patterns.
OUTSIDE = re.compile("|".join(["DESIGN" + r"\.md", "STYLE" + r"\.md", r"\.\./" + "shared", "shared/" + "formats",
                               r"(?i:\biss" + r"ues? [0-9]+)"]))


def test_the_manual_cites_only_the_repository() -> None:
    """The README and the manual point at pages a reader of the repository can open, never at notes outside it
    or at an issue tracker the reader does not have."""
    pages = [ROOT / "README.md", ROOT / "mkdocs.yml", *sorted((ROOT / "docs").rglob("*.md"))]
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in pages
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE.search(line)]
    assert hits == []


def test_layout_names_every_module() -> None:
    """docs/layout.md is the map: every product module is named there (a new module without a line fails)."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    layout = (root / "docs" / "layout.md").read_text(encoding="utf-8")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "adapters", "daemon", "conduit"],
                           cwd=root, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    missing = [f for f in files if f.endswith(".py") and not f.endswith("__init__.py")
               and not (root / f).is_symlink() and Path(f).name not in layout]
    assert missing == [], f"modules docs/layout.md does not name: {missing}"
