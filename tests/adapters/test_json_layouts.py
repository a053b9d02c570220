"""The JSON writer keeps a file's own layout: a corpus of real-world layouts (tests/data/json_layouts/: 2 and 4
spaces, tabs, one-line arrays and objects, CRLF, no final newline, unicode and escapes, odd spacing, ``{}``) is
synced for Claude Code and Cline (generations B and C), and outside the members conduit changed every byte is
the same.

The check does not trust the writer's own span finder: ``_member_spans`` walks the text with
``json.JSONDecoder.raw_decode``; the changed members (leaf differences of the parsed documents) are cut out of
both texts, with the whitespace before them, and the rest must match byte for byte once the separators a cut
leaves (a doubled or trailing comma, the inside of an emptied ``{}``) are normalized.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.paths import DATA
from helpers.toolfiles import run_sync, write_profile

from conduit.adapters.formats.jsonfile import json_target

LAYOUTS = DATA / "json_layouts"
CORPUS = sorted(LAYOUTS.glob("*.json"))
_DEC = json.JSONDecoder()

# where each JSON file lives under HOME, and the tool that owns it
TARGETS = {
    "claude_code": ("claude_code", Path(".claude/settings.json")),
    "cline_b": ("cline", Path(".cline/data/globalState.json")),
    "cline_c": ("cline", Path(".cline/data/settings/providers.json")),
}


def _ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _member_spans(text: str, paths: set[tuple[str, ...]]) -> list[tuple[int, int]]:
    """(start, end) of each member at one of ``paths`` (key paths): from the whitespace before its key to the end
    of its value."""
    spans: list[tuple[int, int]] = []

    def walk(i: int, prefix: tuple[str, ...]) -> int:  # i at "{"; returns the index after its "}"
        i = _ws(text, i + 1)
        while text[i] != "}":
            key, j = _DEC.raw_decode(text, i)
            v = _ws(text, _ws(text, j) + 1)  # past ":"
            path = (*prefix, key)
            deeper = any(len(p) > len(path) and p[:len(path)] == path for p in paths)
            end = walk(v, path) if deeper and text[v] == "{" else _DEC.raw_decode(text, v)[1]
            if path in paths:
                spans.append((len(text[:i].rstrip(" \t\r\n")), end))
            i = _ws(text, end)
            if text[i] == ",":
                i = _ws(text, i + 1)
        return i + 1

    walk(_ws(text, 0), ())
    return spans


def _changed(old: dict, new: dict, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Key paths whose value differs (leaves; an object on both sides is compared member by member)."""
    for key in {**old, **new}:
        a, b = old.get(key, ...), new.get(key, ...)
        if isinstance(a, dict) and isinstance(b, dict):
            yield from _changed(a, b, (*prefix, key))
        elif json.dumps(a, sort_keys=True, default=str) != json.dumps(b, sort_keys=True, default=str):
            yield (*prefix, key)


def _unowned(text: str, paths: set[tuple[str, ...]]) -> str:
    """``text`` without the members at ``paths``, separators normalized (see the module docstring)."""
    for start, end in sorted(_member_spans(text, paths), reverse=True):
        text = text[:start] + text[end:]
    for _ in range(3):
        text = re.sub(r",(\s*),", r",\1", text)
        text = re.sub(r",(\s*[}\]])", r"\1", text)
        text = re.sub(r"\{,", "{", text)
        text = re.sub(r"\{\s*\}", "{}", text)
    return text


def assert_layout_kept(before: str, after: str) -> set[tuple[str, ...]]:
    """Every byte of ``before`` outside the members that changed is in ``after``; returns those members."""
    paths = set(_changed(json.loads(before), json.loads(after)))
    assert _unowned(after, paths) == _unowned(before, paths), f"layout changed outside {sorted(paths)}"
    return paths


def test_corpus_is_varied() -> None:
    texts = [p.read_bytes() for p in CORPUS]
    assert len(CORPUS) >= 10
    assert any(b"\r\n" in t for t in texts) and any(not t.endswith(b"\n") for t in texts)
    assert any(b"\n\t" in t for t in texts) and any(b'\n    "' in t for t in texts)
    assert any(t.strip() == b"{}" for t in texts) and any(b"\n" not in t.strip() for t in texts)


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("layout", CORPUS, ids=lambda p: p.stem)
def test_sync_keeps_layout_outside_owned_keys(temp_home: Path, target: str, layout: Path) -> None:
    tool, where = TARGETS[target]
    path = temp_home / where
    path.parent.mkdir(parents=True)
    shutil.copyfile(layout, path)
    before = layout.read_bytes().decode("utf-8")
    write_profile(temp_home, tools=(tool,))
    report = run_sync(temp_home)
    assert report.ok, [(t.tool, t.message) for t in report.tools]
    after = path.read_bytes().decode("utf-8")
    changed = assert_layout_kept(before, after)
    assert changed, "the sync changed nothing"
    assert after.endswith("\n") == before.endswith("\n") and ("\r\n" in after) == ("\r\n" in before)
    assert not run_sync(temp_home).changed  # and the next sync writes nothing


def test_hand_written_hooks_file_gets_a_small_diff(temp_home: Path) -> None:
    """A hand-written settings file with a one-line hooks entry: the diff is the env lines only."""
    path = temp_home / TARGETS["claude_code"][1]
    path.parent.mkdir(parents=True)
    before = (LAYOUTS / "claude_four_space_one_line_hooks.json").read_text()
    path.write_text(before)
    write_profile(temp_home, tools=("claude_code",), key_delivery="copy")  # the file's own token stays the copy
    run_sync(temp_home)
    after = path.read_text()
    gone = [ln for ln in before.splitlines() if ln not in after.splitlines()]
    assert gone == ['        "ANTHROPIC_MODEL": "claude-opus-4-1",', '        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"']
    assert '        "PreToolUse": [{"matcher": "Bash", "hooks": [' in after


def _edit(doc: dict) -> dict:
    """A transform that changes, removes and adds members at two depths, including a whole new object."""
    env = doc.setdefault("env", {})
    env.pop("ANTHROPIC_AUTH_TOKEN", None)
    env["ANTHROPIC_BASE_URL"] = "https://gw.example.com/api"
    doc["conduit"] = {"managed": True, "tools": ["a", "b"], "nested": {"k": "日本"}}
    doc.pop("model", None)
    return doc


@pytest.mark.parametrize("layout", CORPUS, ids=lambda p: p.stem)
def test_json_target_edits_in_place(layout: Path) -> None:
    before = layout.read_bytes().decode("utf-8")
    after = json_target(layout, _edit, secret_keys=()).render(before)
    assert json.loads(after) == _edit(json.loads(before))
    assert_layout_kept(before, after)
    assert list(json.loads(after)) == list(_edit(json.loads(before)))  # file order, new keys last


@pytest.mark.parametrize(("before", "after"), [
    ('{"a": 1}', '{"a": 1, "env": {"ANTHROPIC_BASE_URL": "https://gw.example.com/api"}, "conduit": '
                 '{"managed": true, "tools": ["a", "b"], "nested": {"k": "日本"}}}'),
    ('{"a":1,"model":"x"}', '{"a":1,"env":{"ANTHROPIC_BASE_URL":"https://gw.example.com/api"},"conduit":'
                            '{"managed":true,"tools":["a","b"],"nested":{"k":"日本"}}}'),
    ('{\n\t"env": {"X": "1", "ANTHROPIC_AUTH_TOKEN": "t"}\n}',
     '{\n\t"env": {"X": "1", "ANTHROPIC_BASE_URL": "https://gw.example.com/api"},\n\t"conduit": {\n\t\t"managed": '
     'true,\n\t\t"tools": [\n\t\t\t"a",\n\t\t\t"b"\n\t\t],\n\t\t"nested": {\n\t\t\t"k": "日本"\n\t\t}\n\t}\n}'),
    ('{\r\n  "model": "m",\r\n  "env": {\r\n    "ANTHROPIC_AUTH_TOKEN": "t"\r\n  }\r\n}',
     '{\r\n  "env": {\r\n    "ANTHROPIC_BASE_URL": "https://gw.example.com/api"\r\n  },\r\n  "conduit": {\r\n'
     '    "managed": true,\r\n    "tools": [\r\n      "a",\r\n      "b"\r\n    ],\r\n    "nested": {\r\n'
     '      "k": "日本"\r\n    }\r\n  }\r\n}'),
])
def test_new_members_follow_their_siblings_style(before: str, after: str) -> None:
    assert json_target(Path("s.json"), _edit, secret_keys=()).render(before) == after
