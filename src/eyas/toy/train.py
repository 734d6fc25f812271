"""Train the toy target: a small Llama learning the native Kimi rendering of B1..B8.

Each training example pairs an assistant turn with its true prompt (rendered by the K2.5-style
template with the generation prompt, exactly what eyas will send at generation time) and the
completion the model should emit: `reasoning</think>content[tool calls]<|im_end|>`.
Only completion tokens carry loss.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any

import torch

from eyas.train.data import group_by_budget


@dataclass(frozen=True)
class ModelPreset:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    rows_per_family: int
    epochs: float
    batch_tokens: int
    lr: float


# head_dim is 32 in all: vLLM's CPU attention kernels support only some head sizes (24 fails),
# and the drafter takes the target's heads. `kimi` is Kimi-K2.5-shaped (`eyas.toy.kimi_k25`: a
# DeepSeek-V3 with MLA and MoE in the K2.5 wrapper; its key/value heads are its heads).
PRESETS = {
    "tiny": ModelPreset(1024, 96, 256, 4, 3, 1, 120, 4.0, 1536, 3e-3),
    "small": ModelPreset(2048, 192, 512, 4, 6, 2, 400, 2.5, 2048, 2.5e-3),
    "kimi": ModelPreset(1024, 96, 256, 4, 3, 3, 120, 4.0, 1536, 3e-3),
}


def build_examples(
    renderer: Any, conversations: list, rng: random.Random
) -> list[tuple[list[int], int]]:
    """(ids, prompt_len) per assistant turn; thinking off for 30% of turns without reasoning."""
    examples = []
    for conv in conversations:
        messages, _ = renderer.prepare(conv)
        for i, msg in enumerate(messages):
            if msg["role"] != "assistant":
                continue
            off = not msg.get("reasoning_content") and rng.random() < 0.3
            prompt = renderer.render_text(
                messages[:i], conv.tools, add_generation_prompt=True, thinking=not off
            )
            completion = renderer.model_format.completion_text(msg, thinking=not off)
            prompt_ids = renderer.encode(prompt)
            examples.append((prompt_ids + renderer.encode(completion), len(prompt_ids)))
    return examples


def _batches(examples, batch_tokens: int, rng: random.Random):
    order = sorted(range(len(examples)), key=lambda i: len(examples[i][0]))
    batches = group_by_budget(order, [len(e[0]) for e in examples], batch_tokens)
    rng.shuffle(batches)
    return batches


def _collate(examples, idx, pad_id: int):
    width = max(len(examples[i][0]) for i in idx)
    ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
    labels = torch.full((len(idx), width), -100, dtype=torch.long)
    attn = torch.zeros((len(idx), width), dtype=torch.long)
    for row, i in enumerate(idx):
        seq, plen = examples[i]
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, plen : len(seq)] = torch.tensor(seq[plen:])
        attn[row, : len(seq)] = 1
    return ids, labels, attn


def train_model(
    model,
    examples,
    preset: ModelPreset,
    seed: int,
    pad_id: int,
    log=None,
    epochs: float | None = None,
    lr_scale: float = 1.0,
) -> dict:
    """AdamW with warmup and cosine decay over `epochs` passes (default: the preset's);
    returns figures. A later round continues training the same model."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    passes = preset.epochs if epochs is None else epochs
    plan = [_batches(examples, preset.batch_tokens, rng) for _ in range(math.ceil(passes))]
    steps_per_epoch = len(plan[0])
    total = max(1, int(steps_per_epoch * passes))
    opt = torch.optim.AdamW(
        model.parameters(), lr=preset.lr * lr_scale, betas=(0.9, 0.95), weight_decay=0.0
    )
    warmup = max(1, total // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    start, step, losses, tokens = time.time(), 0, [], 0
    for batches in plan:
        for idx in batches:
            if step >= total:
                break
            ids, labels, attn = _collate(examples, idx, pad_id)
            loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            tokens += int(attn.sum())
            step += 1
            if log and (step % 25 == 0 or step == total):
                log(step, total, sum(losses[-25:]) / len(losses[-25:]))
    model.eval()
    return {
        "steps": step,
        "final_loss": sum(losses[-20:]) / max(1, len(losses[-20:])),
        "train_tokens": tokens,
        "train_seconds": round(time.time() - start, 1),
    }
