"""Where request prompts come from: synthetic text of a chosen length, distinct per request, or a file.

Distinct prompts matter: vLLM's prefix cache would make TTFT of repeated prompts unrealistically low.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from conduit.errors import ConduitError

# Common English words that BPE tokenizers (Llama, GPT, Qwen families) encode as one token each with their
# leading space, so "N words" is roughly "N tokens". The server's own count is reported as input tokens.
_WORDS: tuple[str, ...] = tuple(
    "the of and to in is was for on that with as by at from his her they this have are not but had "
    "which one you were all she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do "
    "first any my now such like our over man me even most made after also did many before must through "
    "back years where much your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life being under never day".split()
)
_SYNTH_HEADER_TOKENS = 6  # "Request 123: continue this list." is about six tokens


def synthetic_prompt(n_tokens: int, serial: int) -> str:
    """A prompt of roughly ``n_tokens`` tokens, distinct for each ``serial``.

    The text starts with the serial number and the word list is rotated by it, so no two requests of a sweep
    share a prefix block (vLLM's prefix cache would otherwise make TTFT of later requests unrealistically low).

    Raises:
        ValueError: ``n_tokens`` < 1.
    """
    if n_tokens < 1:
        raise ValueError(f"prompt length must be at least 1 token, got {n_tokens}")
    header = f"Request {serial}: continue this list."
    count = max(0, n_tokens - _SYNTH_HEADER_TOKENS)
    start = (serial * 7) % len(_WORDS)
    words = [_WORDS[(start + i) % len(_WORDS)] for i in range(count)]
    return header + (" " + " ".join(words) if words else "")


def _json_prompt(path: Path, lineno: int, line: str) -> str:
    """The prompt in one JSON line: a string, or an object's ``prompt``, ``text`` or ``content`` string.

    Raises:
        ConduitError: malformed JSON, or no prompt string in it (naming file and line).
    """
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConduitError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})",
                           hint="fix the line, or write plain prompts one per line") from None
    if isinstance(obj, dict):
        obj = next((obj[k] for k in ("prompt", "text", "content") if isinstance(obj.get(k), str)), None)
    if not isinstance(obj, str) or not obj:
        raise ConduitError(f"{path}:{lineno}: JSON line holds no prompt string",
                           hint='use "text" or {"prompt": "text"}')
    return obj


def load_prompts(path: Path) -> list[str]:
    """Read prompts from a file: one per line, or JSON Lines.

    A line starting with ``{`` or ``"`` is JSON: a string, or an object with a ``prompt``, ``text`` or
    ``content`` string. Any other non-blank line is a prompt as written. Blank lines are skipped.

    Raises:
        ConduitError: the file cannot be read, a JSON line is malformed (naming file and line), or no
            prompt was found.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConduitError(f"cannot read prompts file {path}: {exc}",
                           hint="give a UTF-8 text file with one prompt per line, or JSON Lines") from None
    prompts: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line:
            prompts.append(_json_prompt(path, lineno, line) if line[0] in "{\"" else line)
    if not prompts:
        raise ConduitError(f"prompts file {path} holds no prompt", hint="write one prompt per line")
    return prompts


@dataclass(frozen=True)
class PromptSource:
    """Where request prompts come from: synthetic text of ``synthetic_tokens`` tokens, or ``prompts`` cycled.

    ``get(serial)`` takes a sweep-wide request serial number (level offset + index).

    Raises:
        ConduitError: neither given, or ``synthetic_tokens`` < 1.
    """

    synthetic_tokens: int | None = 128
    prompts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.synthetic_tokens is None and not self.prompts:
            raise ConduitError("no prompts given", hint="use --prompt-tokens N or --prompts FILE")
        if self.synthetic_tokens is not None and self.synthetic_tokens < 1:
            raise ConduitError(f"--prompt-tokens must be at least 1, got {self.synthetic_tokens}")

    @classmethod
    def choose(cls, prompt_tokens: int | None, prompts_file: Path | None) -> PromptSource:
        """The prompts file when given (read now), else synthetic prompts of ``prompt_tokens`` (default 128).

        Raises:
            ConduitError: from ``load_prompts`` or the checks above.
        """
        if prompts_file is not None:
            return cls(None, tuple(load_prompts(prompts_file)))
        return cls(prompt_tokens if prompt_tokens is not None else 128)

    def get(self, serial: int) -> str:
        """The prompt for request ``serial``."""
        if self.prompts or self.synthetic_tokens is None:  # None only with prompts (__post_init__)
            return self.prompts[serial % len(self.prompts)]
        return synthetic_prompt(self.synthetic_tokens, serial)

    def describe(self) -> str:
        """A short description for outputs."""
        if self.prompts:
            return f"{len(self.prompts)} prompts from a file"
        return f"synthetic, about {self.synthetic_tokens} tokens"
