"""Base-URL normalization (docs/design.md "Base URLs"; docs/cases.md C01-C05, C13) and key cleaning as a pure
function.

The field cases are asserted on the values the adapters render (``Root.anthropic_base()`` for Claude Code,
``Root.openai_base()`` for Cline), and the real ``anthropic``/``openai`` SDKs are pointed at a loopback server to
show which path each client really requests. The general kinds (any version segment, any pasted endpoint, any
run of slashes, invisible characters, random unicode) are covered with hypothesis.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from helpers.gateways import Gateway
from hypothesis import given, settings
from hypothesis import strategies as st

from conduit.adapters.base import Root
from conduit.daemon.config.normalize import (
    ENDPOINTS,
    INVISIBLE_CHARS,
    clean_key,
    normalize_base_url,
)
from conduit.errors import KeyError_, ProfileError

WHERE = "~/.config/conduit/profile.toml: channels.gw.base_url"
GW = "gw.example.com"


def norm(raw: str):  # noqa: ANN201 - short helper
    return normalize_base_url(raw, where=WHERE)


# ------------------------------------------------------------------------------------------ field cases


def test_c01_api_v1_gives_claude_code_the_root_without_v1() -> None:
    result = norm(f"https://{GW}/api/v1")
    assert result.root == Root(url=f"https://{GW}/api", version="v1")
    assert result.root.anthropic_base() == f"https://{GW}/api"  # ANTHROPIC_BASE_URL
    assert len(result.notices) == 1 and "`/v1`" in result.notices[0]


def test_c02_api_gives_cline_the_root_with_v1() -> None:
    result = norm(f"https://{GW}/api")
    assert result.root.openai_base() == f"https://{GW}/api/v1"  # openAiBaseUrl
    assert result.notices == ()


def test_c03_pasted_full_endpoint_is_stripped_with_a_notice() -> None:
    result = norm(f"https://{GW}/v1/chat/completions")
    assert result.root.url == f"https://{GW}"
    assert result.root.openai_base() == f"https://{GW}/v1"  # Cline
    assert result.root.anthropic_base() == f"https://{GW}"  # Claude Code
    assert any("stripped the pasted endpoint `/chat/completions`" in n for n in result.notices)


@pytest.mark.parametrize("raw", [f"https://{GW}/api/v1/", f"https://{GW}/api//", f"https://{GW}//api///v1//"])
def test_c04_no_double_slash_after_the_scheme(raw: str) -> None:
    root = norm(raw).root
    assert root.url == f"https://{GW}/api"
    for written in (root.url, root.anthropic_base(), root.openai_base()):
        assert "//" not in written.split("://", 1)[1]


def test_c05_trailing_space_is_trimmed() -> None:
    result = norm(f"https://{GW}/api ")
    assert result.root.url == f"https://{GW}/api"
    assert result.notices == ("trimmed a space (U+0020) from the ends",)


def test_c13_query_string_dropped_with_a_notice_naming_it() -> None:
    result = norm(f"https://{GW}/api?utm_source=blog&utm_medium=x")
    assert result.root.url == f"https://{GW}/api"
    assert result.notices == (
        "dropped the query string `?utm_source=blog&utm_medium=x`: API base URLs take none",
    )


# -------------------------------------------------------------------- the real SDKs against loopback


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gateway]:
    """The recording gateway answering each protocol in its shape, whatever prefix the client put before it."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    gw = Gateway(protocols=True)
    try:
        yield gw
    finally:
        gw.close()


@pytest.mark.parametrize("typed", ["/api/v1", "/api", "/api/v1/chat/completions", "/api//v1/", "/api/v1/messages"])
def test_real_sdks_request_the_right_paths(gateway: Gateway, typed: str) -> None:
    """C01-C04 end to end: the Anthropic SDK (Claude Code's URL rules) and the OpenAI SDK (Cline's)."""
    import anthropic
    import openai

    root = norm(f"http://127.0.0.1:{gateway.port}{typed}").root
    anthropic.Anthropic(base_url=root.anthropic_base(), api_key="sk-test-abc", max_retries=0).messages.create(
        model="m", max_tokens=1, messages=[{"role": "user", "content": "hi"}]
    )
    openai.OpenAI(base_url=root.openai_base(), api_key="sk-test-abc", max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert [r.path for r in gateway.recorded()] == ["/api/v1/messages", "/api/v1/chat/completions"]


# ------------------------------------------------------------------------------------- other rules


def test_scheme_and_host_lower_cased_port_kept() -> None:
    result = norm("HTTPS://GW.Example.COM:8443/API/v1")
    assert result.root == Root(url="https://gw.example.com:8443/API", version="v1")
    assert result.notices[0] == "lower-cased `HTTPS://GW.Example.COM:8443` to `https://gw.example.com:8443`"


def test_version_other_than_v1_is_kept_apart() -> None:
    result = norm("https://open.bigmodel.cn/api/paas/v4/")
    assert result.root == Root(url="https://open.bigmodel.cn/api/paas", version="v4")
    assert result.root.openai_base() == "https://open.bigmodel.cn/api/paas/v4"
    assert any("kept the version segment `/v4`" in n for n in result.notices)


def test_each_change_is_reported_once_in_order() -> None:
    result = norm("\ufeff HTTPS://GW.example//api//v1/Chat/Completions/?x=1#top ")
    assert result.root == Root(url="https://gw.example/api", version="v1")
    assert len(result.notices) == 8
    assert result.notices[0] == "trimmed a byte order mark (U+FEFF) and a space (U+0020) from the ends"
    assert result.notices[3] == "dropped the fragment `#top`: API base URLs take none"
    assert "`/Chat/Completions`" in result.notices[6]


def test_invisible_character_inside_the_url_is_removed() -> None:
    result = norm(f"https://{GW}/a\u200bpi")
    assert result.root.url == f"https://{GW}/api"
    assert result.notices == ("removed a zero width space (U+200B) from inside the URL",)


def test_secret_looking_query_values_are_masked_in_the_notice() -> None:
    result = norm(f"https://{GW}/api?api_key=sk-test-0123456789abcdef&ref=x")
    assert result.notices == ("dropped the query string `?api_key=sk-...cdef&ref=x`: API base URLs take none",)
    assert "0123456789" not in result.notices[0]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("ftp://gw/api", "the scheme `ftp` is not http or https"),
        ("gw.example.com/api", "has no http:// or https:// scheme"),
        ("", "the base URL is empty"),
        ("  \u200b ", "the base URL is empty"),
        ("https:///api", "the URL has no host"),
        ("https://gw:99999/api", "the port `99999` is not a number from 1 to 65535"),
        ("https://gw/api v1", "the base URL has a space (U+0020) at position 14"),
        ("https://gw/a\tb", "the base URL has a tab (U+0009) at position 12"),
    ],
)
def test_bad_urls_are_refused_with_where_and_a_hint(raw: str, expected: str) -> None:
    with pytest.raises(ProfileError) as info:
        norm(raw)
    assert info.value.message.startswith(WHERE + ": ")
    assert expected in info.value.message
    assert info.value.hint


def test_credentials_in_the_url_are_refused_and_never_echoed() -> None:
    with pytest.raises(ProfileError) as info:
        norm("https://alice:hunter2-s3cret@gw.example.com/api")
    text = str(info.value)
    assert "holds credentials" in text
    assert "hunter2" not in text and "alice" not in text


@given(
    user=st.text(alphabet=st.characters(blacklist_characters="/?#@", blacklist_categories=("Cs",)), min_size=1),
    password=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=8, max_size=30),
)
def test_credentials_never_echoed_for_any_userinfo(user: str, password: str) -> None:
    try:
        norm(f"https://{user}:{password}@gw.example.com/api")
    except ProfileError as exc:
        assert password not in str(exc)
    else:
        raise AssertionError("credentials were accepted")


# ------------------------------------------------------------------------------------ general kinds

_SEGMENT = st.from_regex(r"[a-z0-9_-]{1,8}", fullmatch=True).filter(
    lambda s: not re.fullmatch(r"v\d+((alpha|beta)\d*)?", s) and (s,) not in ENDPOINTS and s not in ("chat", "messages")
)
_VERSION = st.from_regex(r"v[1-9][0-9]{0,2}((alpha|beta)[0-9]{0,2})?", fullmatch=True)


def _random_case(draw: st.DrawFn, text: str) -> str:
    return "".join(ch.upper() if draw(st.booleans()) else ch for ch in text)


@settings(max_examples=200)
@given(prefix=st.lists(_SEGMENT, max_size=3), version=_VERSION, slash=st.booleans())
def test_any_version_segment_is_kept_apart(prefix: list[str], version: str, slash: bool) -> None:
    path = "".join(f"/{s}" for s in prefix)
    result = norm(f"https://{GW}{path}/{version}" + ("/" if slash else ""))
    assert result.root == Root(url=f"https://{GW}{path}", version=version)
    assert result.root.openai_base() == f"https://{GW}{path}/{version}"


@st.composite
def _pasted(draw: st.DrawFn) -> tuple[str, str, str]:
    prefix = "".join(f"/{s}" for s in draw(st.lists(_SEGMENT, max_size=3)))
    version = draw(st.one_of(st.just(""), _VERSION))
    endpoints = draw(st.lists(st.sampled_from(ENDPOINTS), min_size=1, max_size=2))
    tail = "".join("/" + _random_case(draw, "/".join(e)) for e in endpoints)
    return prefix, version, tail


@settings(max_examples=200)
@given(_pasted())
def test_any_pasted_endpoint_is_stripped(case: tuple[str, str, str]) -> None:
    prefix, version, tail = case
    raw = f"https://{GW}{prefix}" + (f"/{version}" if version else "") + tail
    result = norm(raw)
    assert result.root == Root(url=f"https://{GW}{prefix}", version=version or "v1")
    assert sum("stripped the pasted endpoint" in n for n in result.notices) == 1


@settings(max_examples=200)
@given(
    segments=st.lists(_SEGMENT, min_size=0, max_size=4),
    runs=st.lists(st.integers(min_value=1, max_value=5), min_size=6, max_size=6),
    version=st.one_of(st.just(""), _VERSION),
)
def test_any_run_of_slashes_collapses(segments: list[str], runs: list[int], version: str) -> None:
    parts = [*segments, version] if version else segments
    raw = f"https://{GW}" + "".join("/" * runs[i] + s for i, s in enumerate(parts)) + "/" * runs[-1]
    root = norm(raw).root
    assert root.url == f"https://{GW}" + "".join(f"/{s}" for s in segments)
    for written in (root.url, root.anthropic_base(), root.openai_base()):
        assert "//" not in written.split("://", 1)[1]
        assert not written.endswith("/")


@settings(max_examples=200)
@given(prefix=st.lists(_SEGMENT, max_size=3), version=_VERSION, junk=_pasted())
def test_normalizing_a_rendered_url_again_changes_nothing(prefix: list[str], version: str, junk: tuple) -> None:
    first = norm(f"HTTPS://GW.EXAMPLE.COM{''.join('/' + s for s in prefix)}/{version}{junk[2]}/?q=1").root
    assert norm(first.openai_base()).root == first
    plain = norm(first.url)
    assert plain.root.url == first.url
    assert plain.notices == ()  # a canonical root is left exactly as typed


# ------------------------------------------------------------------------------- clean_key (pure)

_KEY = st.from_regex(r"[!-~]{1,60}", fullmatch=True).filter(
    lambda k: not (len(k) >= 2 and k[0] == k[-1] and k[0] in "\"'`")
)


@settings(max_examples=300)
@given(key=_KEY, inserts=st.lists(st.tuples(st.integers(min_value=0), st.sampled_from(sorted(INVISIBLE_CHARS)))))
def test_any_invisible_character_anywhere_in_a_valid_key_is_removed(key: str, inserts: list) -> None:
    text = key
    for pos, ch in inserts:
        i = pos % (len(text) + 1)
        text = text[:i] + ch + text[i:]
    clean = clean_key(text, source="test")
    assert clean.key == key
    assert bool(clean.notices) == bool(inserts)


@settings(max_examples=300)
@given(
    secret=st.from_regex(r"[A-Za-z0-9]{16,40}", fullmatch=True),
    junk=st.text(min_size=1, max_size=8),
    at=st.integers(min_value=0),
)
def test_random_unicode_never_leaks_into_errors_or_notices(secret: str, junk: str, at: int) -> None:
    i = at % (len(secret) + 1)
    raw = secret[:i] + junk + secret[i:]
    windows = {secret[j : j + 8] for j in range(len(secret) - 7)}
    try:
        clean = clean_key(raw, source="key file ~/k")
    except KeyError_ as exc:
        text = str(exc)
        assert text.isascii()
        assert not any(w in text for w in windows)
    else:
        assert all(not any(w in n for w in windows) for n in clean.notices)
        assert secret[:8] not in repr(clean)


def test_clean_key_repr_shows_only_a_fingerprint() -> None:
    clean = clean_key("sk-test-0123456789abcdef", source="test")
    assert repr(clean) == str(clean) == "CleanKey(sk-...cdef, notices=())"


@pytest.mark.parametrize(
    ("raw", "key", "notices"),
    [
        ("sk-test-abc\r\n", "sk-test-abc", ()),
        ("\ufeffsk-test-abc", "sk-test-abc", ("removed a byte order mark (U+FEFF) from the key",)),
        ('"sk-test-abc"\n', "sk-test-abc", ("removed the quotes around the key",)),
        ("\u201csk-test-abc\u201d", "sk-test-abc", ("removed the quotes around the key",)),
        ("Authorization: Bearer sk-test-abc", "sk-test-abc", ("removed a pasted `Bearer ` prefix (the tools add it themselves)",)),
        ("\u00a0sk-test-abc", "sk-test-abc", ("trimmed a no-break space (U+00A0) from the ends of the key",)),
    ],
)
def test_clean_key_cleanups(raw: str, key: str, notices: tuple[str, ...]) -> None:
    clean = clean_key(raw, source="test")
    assert clean.key == key
    assert clean.notices == notices


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("sk-test ab", "test: space (U+0020) at position 7 is not allowed in an HTTP header"),
        ("sk-test\tab", "test: tab (U+0009) at position 7 is not allowed in an HTTP header"),
        ("sk-\x01ab", "test: character U+0001 at position 3 is not allowed in an HTTP header"),
        ("sk-é-ü", "test: character U+00E9 at position 3 is not allowed in an HTTP header (1 more such character after it)"),
        (" \n\u200b", "the key from test is empty"),
        ("Bearer ", "the key from test is empty"),
        ('""', "the key from test is empty"),
    ],
)
def test_clean_key_refusals(raw: str, expected: str) -> None:
    with pytest.raises(KeyError_) as info:
        clean_key(raw, source="test")
    assert info.value.message == expected
    assert info.value.hint
