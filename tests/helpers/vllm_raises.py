"""The ``raise ...Error(...)`` sites of vLLM's configuration, argument and quantization checks, read from an
installed vLLM's source with ``ast`` (nothing imported, nothing run).

Files read, relative to the installed package ``vllm/``: ``config/*.py`` (the config dataclasses vLLM
validates at start-up), ``engine/arg_utils.py`` (``EngineArgs``: flags to config), and
``model_executor/layers/quantization/*.py`` (the top-level quantization configs and methods; the
sub-packages of individual schemes are left out). A site's ``template`` is its message with every
f-string hole written ``{}``; two sites with the same file and template are one.

As a script: ``python tests/helpers/vllm_raises.py SITE_PACKAGES/vllm`` prints one line per site and the count.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

GLOBS = ("config/*.py", "engine/arg_utils.py", "model_executor/layers/quantization/*.py")


@dataclass(frozen=True)
class RaiseSite:
    """One raise: ``file`` relative to ``vllm/``, ``line`` (1-based), ``exception`` class, ``template``."""

    file: str
    line: int
    exception: str
    template: str


def _text(node: ast.AST | None) -> str:
    """A message expression as text: literals kept, everything computed written ``{}``."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v) if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _text(node.left) + _text(node.right) if isinstance(node.op, ast.Add) else _text(node.left)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _text(node.func.value)
    return "{}"


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def sites_in(path: Path, rel: str) -> list[RaiseSite]:
    """The raise sites of one file (``raise XError(...)`` with a class name ending in ``Error``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        exc = _name(node.exc.func)
        if not exc.endswith("Error"):
            continue
        arg = node.exc.args[0] if node.exc.args else None
        out.append(RaiseSite(rel, node.lineno, exc, " ".join(_text(arg).split())))
    return out


def raise_sites(vllm_dir: Path) -> list[RaiseSite]:
    """Every raise site under ``GLOBS`` of the package directory ``vllm_dir``, one per (file, template), in
    file and line order."""
    seen: set[tuple[str, str]] = set()
    out = []
    for pattern in GLOBS:
        for path in sorted(vllm_dir.glob(pattern)):
            rel = path.relative_to(vllm_dir).as_posix()
            for s in sorted(sites_in(path, rel), key=lambda s: s.line):
                if (s.file, s.template) not in seen:
                    seen.add((s.file, s.template))
                    out.append(s)
    return out


def main(argv: list[str]) -> int:
    """Print every site and the count."""
    sites = raise_sites(Path(argv[1]))
    for s in sites:
        print(f"{s.file}:{s.line}: {s.exception}: {s.template[:160]}")
    print(f"{len(sites)} raise sites")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
