"""The house stays easy to see: size limits, one NVML reader, and a type checker that sees across modules.

These read the source tree (and run mypy once); they fail when a change breaks the layout rules of the
manual's Layout page (docs/layout.md), so the rules do not erode one commit at a time.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = [ROOT / "daemon", ROOT / "adapters", ROOT / "conduit"]
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def _sources() -> list[Path]:
    return sorted(p for d in PRODUCT for p in d.rglob("*.py"))


def _functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None]


def test_no_module_over_500_lines() -> None:
    big = {str(p.relative_to(ROOT)): n for p in _sources()
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert big == {}


def test_no_function_over_60_lines() -> None:
    long = {f"{p.relative_to(ROOT)}:{name}": n for p in _sources() for name, n in _functions(p)
            if n > MAX_FUNCTION_LINES}
    assert long == {}


def test_one_nvml_reader() -> None:
    """Only the agent's GPU module talks to NVML; plan and the vLLM preflight are handed its readings."""
    readers = sorted(str(p.relative_to(ROOT)) for p in _sources()
                     if "import pynvml" in p.read_text(encoding="utf-8"))
    assert readers == ["daemon/agent/gpu.py"]


@pytest.mark.skipif(shutil.which("mypy", path=os.path.dirname(sys.executable)) is None, reason="mypy not installed")
def test_mypy_sees_a_wrong_cross_module_call(tmp_path: Path) -> None:
    """A `-> str` function assigned to an `int` in another module is an error mypy reports, run from the
    repository root as `make lint` runs it (folder = import path: no link tree)."""
    tree = ROOT
    probe = tmp_path / "probe_wrong_call.py"
    probe.write_text("from conduit.units import format_bytes\n\nn: int = format_bytes(1)\n", encoding="utf-8")
    mypy = [str(Path(sys.executable).parent / "mypy"), "--config-file", str(ROOT / "pyproject.toml"),
            "--cache-dir", str(tmp_path / "cache"), "--follow-imports=silent"]
    bad = subprocess.run([*mypy, str(probe)], cwd=tree, capture_output=True, text=True, timeout=280)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert 'Incompatible types in assignment (expression has type "str", variable has type "int")' in bad.stdout
    good_probe = tmp_path / "probe_right_call.py"  # another file: mypy's cache keys on mtime and size
    good_probe.write_text("from conduit.units import format_bytes\n\ns: str = format_bytes(1)\n", encoding="utf-8")
    good = subprocess.run([*mypy, str(good_probe)], cwd=tree, capture_output=True, text=True, timeout=280)
    assert good.returncode == 0, good.stdout + good.stderr


def test_the_wheel_holds_every_module(tmp_path: Path) -> None:
    """A non-editable install (``pip install .``, the README's) gets every module of the tree: the wheel is built
    for real (setuptools, no network) and its file list compared with the sources. An editable install hides a
    package the discovery misses."""
    src = tmp_path / "src"  # a copy of the tracked files: setuptools' build/ of the checkout may hold old files
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, check=True).stdout.splitlines()
    for name in tracked:
        if (ROOT / name).is_symlink():  # conduit/daemon -> ../daemon ...: links travel as links
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).symlink_to(os.readlink(ROOT / name))
        elif (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    [wheel] = (tmp_path / "dist").glob("conduit_sync-*.whl")
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    roots = {"daemon": "conduit/daemon", "adapters": "conduit/adapters", "conduit": "conduit"}
    missing = sorted(f"{roots[p.relative_to(ROOT).parts[0]]}/{p.relative_to(ROOT / p.relative_to(ROOT).parts[0])}"
                     for p in _sources() if "__pycache__" not in p.parts)
    missing = [m for m in missing if m not in names]
    assert missing == [], f"left out of the wheel (pyproject [tool.setuptools.packages.find]): {missing}"


def test_folder_is_import_path() -> None:
    """Every ``conduit.*`` import resolves from the repository root by folder: the design card's top-level
    folders are reached through committed links, and nothing builds a link tree (Makefile, pyproject)."""
    for name in ("daemon", "adapters", "profiles", "systemd"):
        link = ROOT / "conduit" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), f"conduit/{name} -> ../{name}"
    for text in ((ROOT / "Makefile").read_text(encoding="utf-8"), (ROOT / "pyproject.toml").read_text(encoding="utf-8")):
        assert "build/typecheck" not in text and "package-dir" not in text
    r = subprocess.run([sys.executable, "-c", "import conduit.daemon.sync.engine as m; print(m.__file__)"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and r.stdout.strip() == str(ROOT / "conduit" / "daemon" / "sync" / "engine.py"), r.stderr


def test_test_file_names_are_unique() -> None:
    """pytest imports test files by basename (rootdir-relative ``prepend`` mode, no ``__init__.py``): two
    folders holding the same name stop the whole collection."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
