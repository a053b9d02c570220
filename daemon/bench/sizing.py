"""Prompt lengths in the server's own tokens, through its tokenizer endpoint, before the first request.

vLLM's OpenAI-compatible server answers ``POST <root>/tokenize`` with body ``{"model", "prompt",
"add_special_tokens"}`` -> ``{"count", "max_model_len", "tokens": [ids]}`` and ``POST <root>/detokenize``
``{"model", "tokens"}`` -> ``{"prompt": text}`` (``vllm/entrypoints/openai/api_server.py``; ``vllm bench
serve`` uses both in ``_align_prompts_to_server_tokenizer``). So "128 prompt tokens" means 128 on that server:

- synthetic prompts: a word list longer than needed is tokenized without special tokens and its first N
  token ids are detokenized into the prompt (vLLM's random dataset counts prompt tokens the same way, without
  the chat template the server adds around the message);
- ShareGPT conversations: the prompt and the reference completion are tokenized (with special tokens, as
  vLLM's ``tokenizer(prompt)``), the completion's length is the output length unless one is given, and pairs
  vLLM's ``is_valid_sequence`` refuses (prompt or output under 4 tokens, prompt over 1024, both over 2048)
  are skipped.

A server without the endpoints (a gateway, another engine) leaves the source as it is and a warning says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from conduit.daemon.bench.prompts import PromptSource, Sample, synthetic_prompt

PARALLEL = 32  # tokenizer requests in flight at once
MIN_LEN, MAX_PROMPT_LEN, MAX_TOTAL_LEN = 4, 1024, 2048  # vLLM's is_valid_sequence defaults
SERVER_TOKENIZER = "the server's tokenizer (/tokenize)"


class NoTokenizer(Exception):
    """The server has no usable ``/tokenize`` / ``/detokenize`` (the message says what it answered)."""


class Tokenizer:
    """The server's tokenizer endpoints at ``root`` for ``model``, over an aiohttp ``session``."""

    def __init__(self, session: aiohttp.ClientSession, root: str, model: str,
                 headers: Mapping[str, str] | None = None) -> None:
        self.session, self.root, self.model = session, root.rstrip("/"), model
        self.headers = {k: v for k, v in (headers or {}).items() if k.lower() != "accept"}
        self._sem = asyncio.Semaphore(PARALLEL)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            async with self._sem, self.session.post(self.root + path, json=body, headers=self.headers,
                                                    allow_redirects=False) as resp:
                if resp.status != 200:
                    raise NoTokenizer(f"{path} answered HTTP {resp.status}")
                got = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise NoTokenizer(f"{path}: {type(exc).__name__}") from None
        if not isinstance(got, dict):
            raise NoTokenizer(f"{path} answered no JSON object")
        return got

    async def tokens(self, text: str, special: bool = False) -> list[int]:
        """Token ids of ``text`` (``add_special_tokens`` = ``special``). Raises NoTokenizer."""
        got = await self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": special})
        ids = got.get("tokens")
        if not isinstance(ids, list):
            raise NoTokenizer("/tokenize answered without a token list")
        return ids

    async def text(self, ids: Sequence[int]) -> str:
        """The text of token ``ids``. Raises NoTokenizer."""
        got = await self._post("/detokenize", {"model": self.model, "tokens": list(ids)})
        if not isinstance(got.get("prompt"), str):
            raise NoTokenizer("/detokenize answered without a prompt")
        return str(got["prompt"])


async def sized_synthetic(tok: Tokenizer, n_tokens: int, serial: int) -> Sample:
    """A distinct prompt (``serial``) of exactly ``n_tokens`` server tokens (before the chat template).

    Raises:
        NoTokenizer: from the endpoints; ValueError: ``n_tokens`` < 1.
    """
    words = n_tokens + 8
    for _ in range(6):
        ids = await tok.tokens(synthetic_prompt(words, serial))
        if len(ids) >= n_tokens:
            return Sample(await tok.text(ids[:n_tokens]), n_tokens)
        words *= 2
    raise NoTokenizer(f"/tokenize counted fewer than {n_tokens} tokens in {words} words")


async def sized_conversation(tok: Tokenizer, prompt: str, completion: str, output_len: int | None) -> Sample | None:
    """The sample of one ShareGPT pair, or None when vLLM's ``is_valid_sequence`` would skip it.

    Raises:
        NoTokenizer: from the endpoints.
    """
    prompt_len = len(await tok.tokens(prompt, special=True))
    out_len = output_len if output_len is not None else len(await tok.tokens(completion, special=True))
    if prompt_len < MIN_LEN or (output_len is None and out_len < MIN_LEN):
        return None
    if prompt_len > MAX_PROMPT_LEN or prompt_len + out_len > MAX_TOTAL_LEN:
        return None
    return Sample(prompt, prompt_len, out_len)


async def _conversations(tok: Tokenizer, src: PromptSource, needed: int, output_len: int | None) -> list[Sample]:
    """Valid samples in dataset order, tokenizing in batches until ``needed`` are found or the data ends."""
    out: list[Sample] = []
    pairs = list(src.conversations)
    step = max(PARALLEL, needed)
    for start in range(0, len(pairs), step):
        batch = pairs[start:start + step]
        got = await asyncio.gather(*(sized_conversation(tok, p, c, output_len) for p, c in batch))
        out += [s for s in got if s is not None]
        if len(out) >= needed:
            return out[:needed]
    return out


async def size_prompts(tok: Tokenizer, src: PromptSource, needed: int,
                       output_len: int | None = None) -> tuple[PromptSource, list[str]]:
    """``src`` with its first ``needed`` samples sized by the server, and warnings for people.

    Args:
        tok: the server's tokenizer.
        src: the source as ``PromptSource.choose`` made it; a prompts file is returned as it is.
        needed: how many distinct requests the sweep sends (requests per level x levels).
        output_len: a fixed output length (``--max-tokens`` given), else None (ShareGPT: the completion's).

    Returns: (the sized source, warnings). Never raises for a server without the endpoints: the source is
    returned unsized with a warning.
    """
    if src.prompts:
        return src, []
    try:
        if src.conversations:
            samples = await _conversations(tok, src, needed, output_len)
            if not samples:
                return src, ["no conversation of the dataset passes vLLM's length filter (prompt and output "
                             f">= {MIN_LEN} tokens, prompt <= {MAX_PROMPT_LEN}, both <= {MAX_TOTAL_LEN})"]
            return replace(src, samples=tuple(samples), sizing=SERVER_TOKENIZER), []
        n = src.synthetic_tokens or 128
        samples = await asyncio.gather(*(sized_synthetic(tok, n, i) for i in range(needed)))
        return replace(src, samples=tuple(samples), sizing=SERVER_TOKENIZER), []
    except NoTokenizer as exc:
        return src, [unsized_warning(src, str(exc))]


def unsized_warning(src: PromptSource, why: str) -> str:
    """What people are told when the server could not size the prompts."""
    if src.conversations:
        return (f"the server has no tokenizer endpoint ({why}): dataset prompts are sent as they are and every "
                "request asks --max-tokens output tokens (its lengths in tokens are the server's usage counts)")
    return (f"the server has no tokenizer endpoint ({why}): synthetic prompts are sized by word count, so "
            f"--prompt-tokens {src.synthetic_tokens} is only roughly {src.synthetic_tokens} tokens (the server's "
            "own count is the input tokens in the results)")
