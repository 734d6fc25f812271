"""Byte-level BPE tokenizers trained locally, with a model family's control tokens.

Each control token is a single special token, with the family's own names (docs/formats.md).
The result is a standard `PreTrainedTokenizerFast` directory: loadable with `AutoTokenizer` and
no `trust_remote_code`.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from eyas.formats.kimi import KimiK2
from eyas.formats.qwen3 import Qwen3

# The formats' control tokens, in the formats' order (token ids follow it), plus what the real
# tokenizers also register.
KIMI_SPECIAL_TOKENS = (
    "[PAD]",
    "[BOS]",
    "[EOS]",
    "[UNK]",
    *KimiK2.markers,
    "<|media_begin|>",
    "<|media_content|>",
    "<|media_pad|>",
    "<|media_end|>",
)
QWEN3_SPECIAL_TOKENS = ("<|endoftext|>", *Qwen3.markers)
FAMILIES = {
    "kimi": {
        "special": KIMI_SPECIAL_TOKENS,
        "template": "kimi_k25.jinja",
        "tokens": {
            "bos_token": "[BOS]",
            "eos_token": "[EOS]",
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
        },
    },
    "qwen3": {
        "special": QWEN3_SPECIAL_TOKENS,
        "template": "qwen3.jinja",
        "tokens": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    },
}


def template_text(name: str) -> str:
    """A chat template shipped with the toy world (`kimi_k25`, `qwen3`, `ignores_tools`)."""
    return resources.files("eyas.toy.templates").joinpath(f"{name}.jinja").read_text()


def train_tokenizer(
    corpus: Iterable[str], vocab_size: int = 4096, family: str = "kimi", template: str | None = None
):
    """Train a byte-level BPE on `corpus` and wrap it with the family's tokens and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    spec = FAMILIES[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(spec["special"]),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    chat_template = (
        template if template is not None else template_text(spec["template"].removesuffix(".jinja"))
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, chat_template=chat_template, **spec["tokens"]
    )


def save_tokenizer(tokenizer, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out))
    return out
