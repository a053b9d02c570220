"""JSON helpers for adapters: strict parsing, style-keeping dumps, merge targets, secret masking.

Real files under the temporary HOME; the property test drives the real ``Writer``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conduit.adapters.formats.jsonfile import dump_json, json_target, mask_json_keys, parse_json_object
from conduit.adapters.writer.apply import Writer
from conduit.adapters.writer.backups import BackupStore
from conduit.errors import ToolFileError
from conduit.redact import fingerprint

P = Path("/home/u/.claude/settings.json")


# ------------------------------------------------------------------------------------------ parse_json_object


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_missing_or_empty_is_empty_object(text: str | None) -> None:
    assert parse_json_object(text, path=P) == {}


def test_comment_names_file_line_column_and_says_tool_ignores_it() -> None:
    text = '{\n  "env": {},\n  // my note\n  "model": "x"\n}\n'
    with pytest.raises(ToolFileError) as info:
        parse_json_object(text, path=P)
    msg = str(info.value)
    assert str(P) in msg
    assert "line 3, column 3" in msg
    assert "comment" in msg
    assert "the tool itself would ignore this whole file; fix it by hand, conduit left it unchanged" in msg


def test_trailing_comma_is_named() -> None:
    text = '{\n  "a": 1,\n  "b": [1, 2,],\n}\n'
    with pytest.raises(ToolFileError) as info:
        parse_json_object(text, path=P)
    assert "trailing comma" in str(info.value)
    assert "line 3" in str(info.value)


@pytest.mark.parametrize(
    "text,kind", [("[1, 2]", "an array"), ('"s"', "a string"), ("null", "null"), ("3", "a number")]
)
def test_top_level_must_be_object(text: str, kind: str) -> None:
    with pytest.raises(ToolFileError) as info:
        parse_json_object(text, path=P)
    assert kind in str(info.value) and str(P) in str(info.value)


def test_nan_is_not_json() -> None:
    with pytest.raises(ToolFileError, match="NaN"):
        parse_json_object('{"a": NaN}', path=P)


def test_key_order_is_file_order() -> None:
    assert list(parse_json_object('{"z": 1, "a": 2, "m": 3}', path=P)) == ["z", "a", "m"]


# ------------------------------------------------------------------------------------------------- dump_json


@pytest.mark.parametrize("indent", ["  ", "    ", "\t"])
def test_dump_keeps_indentation(indent: str) -> None:
    like = "{\n" + indent + '"a": 1\n}\n'
    out = dump_json({"a": 1, "b": {"c": 2}}, like=like)
    assert (
        out
        == "{\n" + indent + '"a": 1,\n' + indent + '"b": {\n' + indent * 2 + '"c": 2\n' + indent + "}\n}\n"
    )


def test_dump_defaults_two_spaces_and_trailing_newline() -> None:
    assert dump_json({"a": 1}, like=None) == '{\n  "a": 1\n}\n'
    assert dump_json({"a": 1}, like="{}") == '{\n  "a": 1\n}'  # "{}" had no newline at the end


def test_dump_keeps_missing_trailing_newline_crlf_and_unicode() -> None:
    like = '{\r\n    "a": "é"\r\n}'
    out = dump_json({"a": "é", "b": "中"}, like=like)
    assert out == '{\r\n    "a": "é",\r\n    "b": "中"\r\n}'


def test_dump_keeps_one_line_style() -> None:
    assert dump_json({"a": 1, "b": [1, 2]}, like='{"a":0}\n') == '{"a":1,"b":[1,2]}\n'
    assert dump_json({"a": 1}, like='{"a": 0}') == '{"a": 1}'


def test_dump_escapes_lone_surrogates() -> None:
    doc = parse_json_object('{"a": "\\ud800x"}', path=P)
    out = dump_json(doc, like=None)
    out.encode("utf-8")  # would raise on a raw surrogate
    assert json.loads(out) == doc


# ------------------------------------------------------------------------------------------------ json_target


def _set_model(doc: dict[str, Any]) -> dict[str, Any]:
    doc["model"] = "m1"
    return doc


def test_unchanged_object_returns_original_text_byte_for_byte() -> None:
    text = '{  "model" :   "m1",\n\n "x":[1,2]   }'
    target = json_target(P, _set_model, secret_keys=())
    assert target.render(text) is text


def test_type_change_is_seen_as_change() -> None:
    target = json_target(P, lambda d: {**d, "a": True}, secret_keys=())
    assert json.loads(target.render('{"a": 1}')) == {"a": True}


def test_render_of_missing_file_creates_object() -> None:
    target = json_target(P, _set_model, secret_keys=(), mode=0o644, create=False, label="x")
    assert target.render(None) == '{\n  "model": "m1"\n}\n'
    assert (target.mode, target.create, target.label) == (0o644, False, "x")
    assert json_target(P, _set_model, secret_keys=()).label == "settings.json"


def test_render_refuses_unparseable_file() -> None:
    target = json_target(P, _set_model, secret_keys=())
    with pytest.raises(ToolFileError):
        target.render('{"a": 1,}')


def test_mask_replaces_secret_values_at_any_depth_and_keeps_layout() -> None:
    key = "sk-live-0123456789abcdef"
    text = json.dumps({"env": {"ANTHROPIC_AUTH_TOKEN": key, "URL": "u"}, "deep": [{"apiKey": key}]}, indent=2)
    target = json_target(P, _set_model, secret_keys=("ANTHROPIC_AUTH_TOKEN", "apiKey"))
    masked = target.mask(text)
    assert key not in masked
    assert masked.count(fingerprint(key)) == 2
    assert masked.count("\n") == text.count("\n")
    assert '"URL": "u"' in masked


def test_mask_works_on_unparseable_text_and_escaped_values() -> None:
    masked = mask_json_keys('{"apiKey": "ab\\"cdefghijklmnop", // c\n}', ["apiKey"])
    assert "cdefghijklmnop" not in masked
    assert fingerprint('ab\\"cdefghijklmnop') in masked  # the fingerprint of the value as the file spells it


# --------------------------------------------------------------------------------------------- property test

OWNED_ENV = ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN")
json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _transform(doc: dict[str, Any]) -> dict[str, Any]:
    doc["model"] = "claude-sonnet-4"
    env = doc.setdefault("env", {})
    env["ANTHROPIC_BASE_URL"] = "https://gw.example/api"
    env["ANTHROPIC_AUTH_TOKEN"] = "sk-test-0123456789abcdef"
    return doc


def _unowned(doc: dict[str, Any]) -> str:
    """The document without the owned keys, as order-sensitive text."""
    out = {k: v for k, v in doc.items() if k != "model"}
    if isinstance(out.get("env"), dict):
        out["env"] = {k: v for k, v in out["env"].items() if k not in OWNED_ENV}
    return json.dumps(out)


@st.composite
def tool_documents(draw: st.DrawFn) -> dict[str, Any]:
    top = draw(
        st.dictionaries(
            st.text(max_size=10).filter(lambda k: k not in ("env", "model")), json_values, max_size=6
        )
    )
    env = draw(
        st.dictionaries(st.text(max_size=10).filter(lambda k: k not in OWNED_ENV), json_values, max_size=4)
    )
    if draw(st.booleans()):
        env["ANTHROPIC_BASE_URL"] = draw(st.text(max_size=5))  # an old owned value, position kept
    items = list(top.items())
    items.insert(draw(st.integers(0, len(items))), ("env", env))
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), ("model", "old"))
    return dict(items)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=tool_documents(), indent=st.sampled_from([2, 4, "\t"]))
def test_property_merge_keeps_unowned_keys_and_order_and_second_apply_is_noop(
    doc: dict[str, Any], indent: int | str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "settings.json"
        text = json.dumps(doc, indent=indent, ensure_ascii=False) + "\n"
        text = re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)  # lone surrogates
        path.write_text(text, encoding="utf-8")
        writer = Writer(BackupStore(Path(tmp) / "backups"))
        target = json_target(path, _transform, secret_keys=("ANTHROPIC_AUTH_TOKEN",))
        first = writer.apply("claude_code", target)
        assert first.error is None, first.error
        after = json.loads(path.read_text(encoding="utf-8"))
        assert _unowned(after) == _unowned(doc)
        assert after["model"] == "claude-sonnet-4"
        assert after["env"]["ANTHROPIC_BASE_URL"] == "https://gw.example/api"
        before_stat = os.stat(path)
        second = writer.apply("claude_code", target)
        assert second.error is None and not second.changed and second.backup is None
        st2 = os.stat(path)
        assert (st2.st_ino, st2.st_mtime_ns) == (before_stat.st_ino, before_stat.st_mtime_ns)


def test_mask_falls_back_to_pairs_in_text_that_does_not_parse() -> None:
    masked = mask_json_keys('{"apiKey": "sk-abcdefghijklmnop", "x": [1,, oops', ["apiKey"])
    assert "sk-abcdefghijklmnop" not in masked and fingerprint("sk-abcdefghijklmnop") in masked
