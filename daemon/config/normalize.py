"""Normalize what a person typed: gateway base URLs into one canonical ``Root``, API keys into a clean key.

Both functions are pure (no I/O). Each returns the cleaned value plus *notices*: one sentence per change made
to what the person typed, in words, for the caller to show once (prefixed with the file and key path).
Errors are conduit's own (``ProfileError`` for URLs, ``KeyError_`` for keys) and never quote a key, nor the
credentials of a URL.

Base URLs (docs/design.md "Base URLs"; docs/formats/claude-code.md and cline.md, "URL building")::

    "  HTTPS://GW.example/api//v1/chat/completions/?utm_source=x "
      -> Root(url="https://gw.example/api", version="v1")
      Anthropic SDK clients get root.anthropic_base()  -> https://gw.example/api     (+ /v1/messages)
      OpenAI SDK clients get    root.openai_base()     -> https://gw.example/api/v1  (+ /chat/completions)

Keys (docs/design.md "Keys"): surrounding whitespace, CR/LF, BOM, zero-width characters, one pair of surrounding
quotes and a pasted ``Bearer `` prefix are removed; anything else outside printable ASCII (0x21..0x7E, what an
HTTP header value may carry as a token) is refused with its position and code point.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

from conduit.adapters.base import Root
from conduit.errors import KeyError_, ProfileError
from conduit.redact import fingerprint, redact

__all__ = [
    "ENDPOINTS",
    "INVISIBLE_CHARS",
    "CleanKey",
    "NormalizedURL",
    "clean_key",
    "decode_key_bytes",
    "describe_chars",
    "normalize_base_url",
]

#: Characters that render as nothing and are never part of a URL or a key: removed wherever they stand.
#: BOM, zero-width space/non-joiner/joiner, word joiner, soft hyphen, Mongolian vowel separator,
#: left-to-right/right-to-left marks, bidi embeddings/overrides (U+202A-U+202E) and isolates (U+2066-U+2069).
INVISIBLE_CHARS = frozenset(
    "\ufeff\u200b\u200c\u200d\u2060\u00ad\u180e\u200e\u200f"
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)

#: Endpoints people paste after a gateway root, as path segments; longest first so that
#: ``/messages/count_tokens`` wins over ``/messages`` and ``/chat/completions`` over ``/completions``.
ENDPOINTS: tuple[tuple[str, ...], ...] = (
    ("messages", "count_tokens"),
    ("chat", "completions"),
    ("completions",),
    ("messages",),
    ("models",),
    ("responses",),
    ("embeddings",),
)

_VERSION_RE = re.compile(r"v\d+(?:(?:alpha|beta)\d*)?", re.IGNORECASE)
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,15}")
_SECRET_PARAM_RE = re.compile(r"key|token|secret|auth|pass|sig|credential|session", re.IGNORECASE)
_BEARER_RE = re.compile(r"(?:authorization[ \t]*:[ \t]*)?bearer\s+", re.IGNORECASE)
_QUOTE_PAIRS = {('"', '"'), ("'", "'"), ("`", "`"), ("\u201c", "\u201d"), ("\u2018", "\u2019")}
_PLAIN_WS = frozenset(" \t\r\n")

_CHAR_WORDS = {
    "\n": "line break",
    "\r": "line break",
    "\t": "tab",
    " ": "space",
    "\u00a0": "no-break space",
    "\ufeff": "byte order mark",
}


def describe_chars(chars: Iterable[str]) -> str:
    """Name characters for a person, each once, in order: ``"a space (U+0020) and a zero width space (U+200B)"``."""
    seen: list[str] = []
    for ch in chars:
        if ch not in seen:
            seen.append(ch)
    words = []
    for ch in seen:
        name = _CHAR_WORDS.get(ch) or unicodedata.name(ch, "character").lower()
        words.append(f"{'an' if name[0] in 'aeiou' else 'a'} {name} (U+{ord(ch):04X})")
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _is_edge_junk(ch: str) -> bool:
    """Whitespace, controls and invisible format characters: trimmed from both ends of a URL or key."""
    return ch.isspace() or ch in INVISIBLE_CHARS or unicodedata.category(ch) in ("Cc", "Cf")


def _trim(text: str) -> tuple[str, str]:
    """Trim edge junk; returns (trimmed text, the characters removed)."""
    start, end = 0, len(text)
    while start < end and _is_edge_junk(text[start]):
        start += 1
    while end > start and _is_edge_junk(text[end - 1]):
        end -= 1
    return text[start:end], text[:start] + text[end:]


# --------------------------------------------------------------------------------------------- base URLs


@dataclass(frozen=True)
class NormalizedURL:
    """A normalized base URL.

    Attributes:
        root: the canonical gateway root (``Root.url`` has no trailing slash, query, fragment, pasted endpoint
            or version segment; ``Root.version`` holds the version segment, ``v1`` unless the URL said otherwise).
        notices: one sentence per change made to what the person typed, in the order applied; empty when the
            text was already canonical. They do not name the file: the caller prefixes its ``where``.
    """

    root: Root
    notices: tuple[str, ...] = ()


def _mask_query(query: str) -> str:
    """The query string as it may be shown: the values of secret-looking parameters (``api_key=``,
    ``token=``...) masked by ``conduit.redact.redact``, wherever they appear in it."""
    secrets = []
    for item in query.split("&"):
        name, eq, value = item.partition("=")
        if eq and value and _SECRET_PARAM_RE.search(name):
            secrets.append(value)
    return redact(query, secrets)


def _split_netloc(netloc: str, where: str) -> tuple[str, int | None]:
    """Split ``host[:port]`` (IPv6 in brackets); returns the lower-cased host and the port, or raises."""
    host, port_text = netloc, ""
    if netloc.startswith("["):
        close = netloc.find("]")
        if close < 0:
            raise ProfileError(f"{where}: the IPv6 host has no closing `]`", hint="write it as http://[::1]:8000")
        host, rest = netloc[: close + 1], netloc[close + 1 :]
        if rest and not rest.startswith(":"):
            raise ProfileError(f"{where}: unexpected text after the IPv6 host", hint="write it as http://[::1]:8000")
        port_text = rest[1:]
    elif ":" in netloc:
        host, _, port_text = netloc.rpartition(":")
    if not host or host == "[]":
        raise ProfileError(f"{where}: the URL has no host", hint="write it as https://HOST/PATH")
    port: int | None = None
    if port_text:
        if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ProfileError(
                f"{where}: the port `{port_text[:12]}` is not a number from 1 to 65535",
                hint="write it as https://HOST:PORT/PATH, or leave the port out",
            )
        port = int(port_text)
    return host.lower(), port


def normalize_base_url(raw: str, *, where: str) -> NormalizedURL:
    """Reduce a gateway base URL as typed to its canonical ``Root``, reporting every change once.

    Steps, in order: trim surrounding whitespace and invisible characters; remove invisible characters
    anywhere (``INVISIBLE_CHARS``); require ``http``/``https``; refuse credentials before the host;
    lower-case scheme and host (the port is kept); drop the query and the fragment; collapse runs of slashes;
    drop trailing slashes; strip pasted endpoints (``ENDPOINTS``, repeatedly, case-insensitively); take a
    trailing version segment (``v1``, ``v4``, ``v1beta``...; regex ``v\\d+((alpha|beta)\\d*)?``) into
    ``Root.version``.

    Args:
        raw: the text as the person wrote it.
        where: file and key path for messages, e.g. ``~/.config/conduit/profile.toml: channels.x.base_url``.

    Returns:
        ``NormalizedURL``; normalizing ``root.openai_base()`` again gives the same root and no notices.

    Raises:
        ProfileError: empty, no or a non-http(s) scheme, credentials in the URL (never echoed), a space or
            control character inside, no host, or a bad port. The message names ``where`` and has a hint.
    """
    notices: list[str] = []
    text = _clean_url_text(raw, where, notices)
    scheme, rest = _split_scheme(text, where)
    rest, hash_, fragment = rest.partition("#")
    rest, qmark, query = rest.partition("?")
    slash = rest.find("/")
    netloc, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    origin = _origin(scheme, netloc, where, notices)
    if qmark:
        notices.append(f"dropped the query string `?{_mask_query(query)}`: API base URLs take none")
    if hash_:
        notices.append(f"dropped the fragment `#{fragment}`: API base URLs take none")
    segments = _path_segments(path, notices)
    _strip_endpoints(segments, notices)
    version = _take_version(segments, origin, notices)
    root_url = origin + "".join(f"/{s}" for s in segments)
    return NormalizedURL(root=Root(url=root_url, version=version), notices=tuple(notices))


def _clean_url_text(raw: str, where: str, notices: list[str]) -> str:
    """Trim the ends, remove invisible characters inside; refuse an empty URL or one with a space or a
    control character inside."""
    text, trimmed = _trim(raw)
    if trimmed:
        notices.append(f"trimmed {describe_chars(trimmed)} from the ends")
    inside = [ch for ch in text if ch in INVISIBLE_CHARS]
    if inside:
        text = "".join(ch for ch in text if ch not in INVISIBLE_CHARS)
        notices.append(f"removed {describe_chars(inside)} from inside the URL")
    if not text:
        raise ProfileError(f"{where}: the base URL is empty", hint="give the gateway root, e.g. https://gw.example/api")
    for pos, ch in enumerate(text):
        if ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            raise ProfileError(
                f"{where}: the base URL has {describe_chars(ch)} at position {pos}",
                hint="a URL holds no spaces or control characters; remove it",
            )
    return text


def _split_scheme(text: str, where: str) -> tuple[str, str]:
    """``(scheme as typed, the rest after ://)``; refuses a missing scheme or one that is not http(s)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise ProfileError(
            f"{where}: the base URL has no http:// or https:// scheme",
            hint="start it with https:// (http:// only for a server on this machine or your network)",
        )
    if scheme.lower() not in ("http", "https"):
        shown = f"`{scheme}`" if _SCHEME_RE.fullmatch(scheme) else "before `://`"
        raise ProfileError(
            f"{where}: the scheme {shown} is not http or https",
            hint="API base URLs start with https:// (http:// only for a server on this machine or your network)",
        )
    return scheme, rest


def _origin(scheme: str, netloc: str, where: str, notices: list[str]) -> str:
    """``scheme://host[:port]`` lower-cased; refuses credentials before the host (never echoing them)."""
    if "@" in netloc:
        raise ProfileError(
            f"{where}: the base URL holds credentials (`user:password@` before the host); "
            "conduit does not keep credentials in a URL",
            hint="remove everything from `://` up to and including `@`, and give the key as the channel's "
            "`key = { file = ... }` (or env, command, secret)",
        )
    host, port = _split_netloc(netloc, where)
    new_scheme = scheme.lower()
    new_netloc = host if port is None else f"{host}:{port}"
    if new_scheme != scheme or new_netloc != netloc:
        if new_netloc.lower() == netloc.lower():
            notices.append(f"lower-cased `{scheme}://{netloc}` to `{new_scheme}://{new_netloc}`")
        else:
            notices.append(f"rewrote `{scheme}://{netloc}` as `{new_scheme}://{new_netloc}`")
    return f"{new_scheme}://{new_netloc}"


def _path_segments(path: str, notices: list[str]) -> list[str]:
    """The path's non-empty segments; notes collapsed ``//`` runs and a dropped trailing slash."""
    collapsed = re.sub(r"/{2,}", "/", path)
    if collapsed != path:
        notices.append("collapsed repeated slashes (`//`) in the path to one")
    if collapsed.endswith("/"):
        notices.append("dropped the trailing slash")
    return [s for s in collapsed.split("/") if s]


def _strip_endpoints(segments: list[str], notices: list[str]) -> None:
    """Remove pasted ``ENDPOINTS`` from the end of ``segments`` (in place), repeatedly, ignoring case."""
    stripped: list[str] = []
    changed = True
    while changed:
        changed = False
        lower = [s.lower() for s in segments]
        for endpoint in ENDPOINTS:
            n = len(endpoint)
            if len(segments) >= n and tuple(lower[-n:]) == endpoint:
                stripped.insert(0, "/" + "/".join(segments[-n:]))
                del segments[-n:]
                changed = True
                break
    if stripped:
        notices.append(f"stripped the pasted endpoint `{''.join(stripped)}`: each client adds its own endpoint")


def _take_version(segments: list[str], origin: str, notices: list[str]) -> str:
    """Pop a trailing version segment (and repeats of it) off ``segments``; returns it, ``v1`` by default."""
    if not segments or not _VERSION_RE.fullmatch(segments[-1]):
        return "v1"
    typed = segments.pop()
    version = typed.lower()
    repeats = 0
    while segments and segments[-1].lower() == version:
        segments.pop()
        repeats += 1
    root_url = origin + "".join(f"/{s}" for s in segments)
    said = f"`/{typed}`" + (f" (written {repeats + 1} times)" if repeats else "")
    if version == "v1":
        notices.append(
            f"took the version segment {said} off the root `{root_url}`: it is added per tool "
            f"(OpenAI-protocol clients get `{root_url}/v1`; Anthropic-protocol clients add `/v1/messages`)"
        )
    else:
        notices.append(
            f"kept the version segment {said} apart from the root `{root_url}`: "
            f"OpenAI-protocol clients get `{root_url}/{version}`"
        )
    return version


# --------------------------------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class CleanKey:
    """A key that passed ``clean_key``: printable ASCII (0x21..0x7E), at least one character.

    Attributes:
        key: the key itself. Never shown by ``repr``/``str``: they give ``fingerprint(key)``.
        notices: one sentence per change made beyond trimming ordinary whitespace and line ends (a BOM,
            invisible characters, quotes, a ``Bearer `` prefix) and warnings from the key's source
            (e.g. a key file readable by others). Never contain the key.
    """

    key: str = field(repr=False)
    notices: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"CleanKey({fingerprint(self.key)}, notices={self.notices!r})"

    __str__ = __repr__

    @property
    def fingerprint(self) -> str:
        """``fingerprint(key)``: ``sk-...c3f9``."""
        return fingerprint(self.key)


def _bad_char_message(source: str, ch: str, pos: int) -> str:
    word = _CHAR_WORDS.get(ch)
    what = f"{word} (U+{ord(ch):04X})" if word else f"character U+{ord(ch):04X}"
    return f"{source}: {what} at position {pos} is not allowed in an HTTP header"


def clean_key(raw: str, *, source: str) -> CleanKey:
    """Clean an API key as pasted or read, or refuse it without ever quoting it.

    Removed: invisible characters anywhere (``INVISIBLE_CHARS``: BOM, U+200B-U+200D, U+2060, ...); then
    surrounding whitespace and control characters (spaces, tabs, CR/LF, NBSP); then one pair of surrounding
    matching quotes (``"`` ``'`` `````, curly quotes); then a pasted ``Bearer `` or ``Authorization: Bearer ``
    prefix (any case; the tools add it themselves).

    Args:
        raw: the text as read from the source.
        source: what it came from, for messages: ``key file ~/.config/conduit/keys/x``, ``environment
            variable X``...

    Returns:
        ``CleanKey`` with the key and notices.

    Raises:
        KeyError_: the key is empty after cleaning ("... is empty"), or holds a character outside
            0x21..0x7E. The message names ``source``, the 0-based position in the cleaned key and the code
            point ("character U+2211 at position 12 is not allowed in an HTTP header"; "line break
            (U+000A) at position 10 ..."; "space (U+0020) ..."), and never any part of the key.
    """
    notices: list[str] = []
    text = _strip_wrapping(raw, notices)
    if not text:
        raise KeyError_(
            f"the key from {source} is empty",
            hint="put the key there (one line), or run `conduit key set NAME` and use { secret = \"NAME\" }",
        )
    _refuse_bad_chars(text, source)
    return CleanKey(key=text, notices=tuple(notices))


def _strip_wrapping(raw: str, notices: list[str]) -> str:
    """Remove what surrounds a pasted key (``clean_key``'s removals); notes the unusual ones, each once.

    The layers are peeled until none is left, in any order and nesting (``Bearer "sk-x"``, ``"Bearer sk-x"``,
    ``' "sk-x" '``), so cleaning a clean key changes nothing (``clean_key`` is idempotent).
    """
    invisible = [ch for ch in raw if ch in INVISIBLE_CHARS]
    text = "".join(ch for ch in raw if ch not in INVISIBLE_CHARS) if invisible else raw
    if invisible:
        notices.append(f"removed {describe_chars(invisible)} from the key")
    trimmed_all: list[str] = []
    peeled_bearer = False
    while True:
        before = text
        text, trimmed = _trim(text)
        trimmed_all += trimmed
        if len(text) >= 2 and (text[0], text[-1]) in _QUOTE_PAIRS:
            text = text[1:-1]
            _note(notices, "removed the quotes around the key")
        match = _BEARER_RE.match(text)
        if match:
            text, peeled_bearer = text[match.end() :], True
            _note(notices, "removed a pasted `Bearer ` prefix (the tools add it themselves)")
        if text == before:
            break
    unusual = [ch for ch in trimmed_all if ch not in _PLAIN_WS]
    if unusual:
        notices.insert(1 if invisible else 0, f"trimmed {describe_chars(unusual)} from the ends of the key")
    if not peeled_bearer and text.lower() in ("bearer", "authorization: bearer"):
        return ""  # the prefix alone, pasted without its key
    return text


def _note(notices: list[str], notice: str) -> None:
    if notice not in notices:
        notices.append(notice)


def _refuse_bad_chars(text: str, source: str) -> None:
    """Raise ``KeyError_`` for the first character outside 0x21..0x7E (position and code point, no key)."""
    bad = [(pos, ch) for pos, ch in enumerate(text) if not 0x21 <= ord(ch) <= 0x7E]
    if not bad:
        return
    pos, ch = bad[0]
    message = _bad_char_message(source, ch, pos)
    if len(bad) > 1:
        message += f" ({len(bad) - 1} more such character{'s' if len(bad) > 2 else ''} after it)"
    if ch in "\r\n":
        hint = "the key was probably wrapped when copied: join it into one line and set it again"
    else:
        hint = "API keys are printable ASCII; copy the key again from the provider's page"
    raise KeyError_(message, hint=hint)


def decode_key_bytes(data: bytes) -> str:
    """Bytes of a key file, a command's output or the secrets file as text: UTF-16 when they start with a
    UTF-16 BOM (Windows editors), else UTF-8 with undecodable bytes as U+FFFD (which ``clean_key`` then
    refuses by position)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")
