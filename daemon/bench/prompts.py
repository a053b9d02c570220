"""Where request prompts come from: synthetic text of a chosen length, distinct per request; a prompts file;
or a ShareGPT-format dataset (``--dataset jsonl:PATH``).

Distinct prompts matter: vLLM's prefix cache would make TTFT of repeated prompts unrealistically low.
Lengths in tokens are the server's when it has a tokenizer endpoint (``conduit.daemon.bench.sizing`` turns
a ``PromptSource`` into sized ``Sample``s before the first request); otherwise synthetic prompts are sized
by word count, which only approximates tokens.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _conversation_pair(entry: Any) -> tuple[str, str] | None:
    """(first turn's value, second turn's value) of a ShareGPT entry with at least two string turns, else None."""
    if not isinstance(entry, dict):
        return None
    turns = entry.get("conversations")
    if not isinstance(turns, list) or len(turns) < 2:
        return None
    values = [t.get("value") if isinstance(t, dict) else None for t in turns[:2]]
    if not all(isinstance(v, str) for v in values):
        return None
    return str(values[0]), str(values[1])


def _sharegpt_entries(path: Path, text: str) -> list[Any]:
    """The entries of a ShareGPT file: a JSON list, or JSON Lines (one entry per line).

    Raises:
        ConduitError: neither form parses (naming the file and the first bad line).
    """
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ConduitError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})",
                               hint="give a JSON list of conversations, or JSON Lines") from None
        return data if isinstance(data, list) else [data]
    entries = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConduitError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})",
                                   hint='one {"conversations": [...]} object per line') from None
    return entries


def load_sharegpt(path: Path, seed: int = 0) -> list[tuple[str, str]]:
    """Read a ShareGPT-format dataset: (prompt, reference completion) per conversation, shuffled by ``seed``.

    As vLLM's ``ShareGPTDataset`` (``vllm/benchmarks/datasets/sharegpt.py``) reads it: each entry is
    ``{"conversations": [{"from": "human", "value": PROMPT}, {"from": "gpt", "value": COMPLETION}, ...]}``;
    entries with fewer than two turns are dropped; the prompt is the first turn's value and the completion
    (whose length in tokens is the request's output length unless one is given) the second's; the list is
    shuffled with ``random.Random(seed)`` (vLLM: ``random.seed(seed); random.shuffle``, the same order for the
    same file and seed). The file is a JSON list (ShareGPT's own form) or JSON Lines.

    Raises:
        ConduitError: the file cannot be read or parsed, or holds no usable conversation.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConduitError(f"cannot read dataset {path}: {exc}", hint="give a UTF-8 JSON or JSON Lines file") from None
    pairs = [p for e in _sharegpt_entries(path, text) if (p := _conversation_pair(e)) is not None]
    if not pairs:
        raise ConduitError(f"dataset {path} holds no conversation with two turns",
                           hint='each entry: {"conversations": [{"from": "human", "value": "..."}, '
                                '{"from": "gpt", "value": "..."}]}')
    random.Random(seed).shuffle(pairs)
    return pairs


@dataclass(frozen=True)
class Sample:
    """One request's prompt, its length in the server's tokens (None: unknown) and its output length
    (``max_tokens``; None: the sweep's ``--max-tokens``)."""

    prompt: str
    prompt_len: int | None = None
    output_len: int | None = None


@dataclass(frozen=True)
class PromptSource:
    """Where request prompts come from: synthetic text of ``synthetic_tokens`` tokens, ``prompts`` cycled,
    a ShareGPT dataset (``conversations``), or ready ``samples`` (sized by ``conduit.daemon.bench.sizing``).

    ``get(serial)`` / ``sample(serial)`` take a sweep-wide request serial number (level offset + index);
    ``samples`` and ``prompts`` are cycled. ``sizing`` says how lengths were determined (for outputs).

    Raises:
        ConduitError: nothing given, or ``synthetic_tokens`` < 1.
    """

    synthetic_tokens: int | None = 128
    prompts: tuple[str, ...] = ()
    conversations: tuple[tuple[str, str], ...] = ()
    samples: tuple[Sample, ...] = ()
    sizing: str = "word count"

    def __post_init__(self) -> None:
        if self.synthetic_tokens is None and not (self.prompts or self.conversations or self.samples):
            raise ConduitError("no prompts given", hint="use --prompt-tokens N, --prompts FILE or --dataset")
        if self.synthetic_tokens is not None and self.synthetic_tokens < 1:
            raise ConduitError(f"--prompt-tokens must be at least 1, got {self.synthetic_tokens}")

    @classmethod
    def choose(cls, prompt_tokens: int | None, prompts_file: Path | None, dataset: str | None = None,
               seed: int = 0) -> PromptSource:
        """The dataset (``random`` or ``jsonl:PATH``), else the prompts file (read now), else synthetic
        prompts of ``prompt_tokens`` (default 128).

        Raises:
            ConduitError: an unknown dataset name, or from ``load_prompts`` / ``load_sharegpt``.
        """
        if dataset not in (None, "random"):
            kind, _, where = str(dataset).partition(":")
            if kind not in ("jsonl", "sharegpt") or not where:
                raise ConduitError(f"unknown dataset {dataset!r}", hint="use random or jsonl:PATH (ShareGPT format)")
            return cls(None, conversations=tuple(load_sharegpt(Path(where).expanduser(), seed)))
        if prompts_file is not None:
            return cls(None, tuple(load_prompts(prompts_file)))
        return cls(prompt_tokens if prompt_tokens is not None else 128)

    def sample(self, serial: int) -> Sample:
        """The prompt for request ``serial`` with what is known of its lengths."""
        if self.samples:
            return self.samples[serial % len(self.samples)]
        if self.conversations:
            return Sample(self.conversations[serial % len(self.conversations)][0])
        if self.prompts or self.synthetic_tokens is None:  # None only with prompts (__post_init__)
            return Sample(self.prompts[serial % len(self.prompts)])
        return Sample(synthetic_prompt(self.synthetic_tokens, serial))

    def get(self, serial: int) -> str:
        """The prompt text for request ``serial``."""
        return self.sample(serial).prompt

    def describe(self) -> str:
        """A short description for outputs."""
        if self.conversations or (self.samples and self.synthetic_tokens is None and not self.prompts):
            n = len(self.samples) or len(self.conversations)
            return f"{n} ShareGPT conversations" + (f", lengths by {self.sizing}" if self.samples else "")
        if self.prompts:
            return f"{len(self.prompts)} prompts from a file"
        if not self.samples:  # not sized (yet): sizing.size_prompts tries the server's tokenizer first
            return f"synthetic, {self.synthetic_tokens} tokens"
        return f"synthetic, {self.synthetic_tokens} tokens by {self.sizing}"
