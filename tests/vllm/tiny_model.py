"""Build a tiny random-weight Llama that vLLM's CPU build can serve (docs/formats/vllm-and-nvml.md recipe).

Run inside the vLLM venv (it has ``transformers`` and ``tokenizers``)::

    <venv>/bin/python tests/vllm/tiny_model.py OUT_DIR

Shape: hidden 128, 2 layers, 2 attention heads, 1 KV head, head_dim 64 (the CPU attention kernel rejects 16),
byte-level BPE vocabulary of about 512 tokens, max_position_embeddings 512, float32 weights. With
``VLLM_CPU_KVCACHE_SPACE=1`` vLLM logs ``CPU KV cache size: 1,048,576 tokens`` for it
(1 GiB / (2 x 2 layers x 1 KV head x 64 x 4 bytes)).
"""

from __future__ import annotations

import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "conduit keeps every AI coding tool pointed at the same gateway.",
    "vLLM serves large language models with paged attention.",
    "Hello, how are you today? I am fine, thank you.",
    "system user assistant: answer briefly and politely.",
    "0123456789 !?.,;:'\"()[]{}<>/\\|-_=+*&^%$#@~`",
]

MAX_POSITIONS = 512


def build(out: Path) -> Path:
    """Write config, weights and tokenizer for the tiny model into ``out``; return ``out``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))
