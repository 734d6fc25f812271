"""`eyas toy build`: a small Kimi-format target model, built on CPU (docs/architecture.md).

    eyas toy build --preset tiny            # about 30 s; the test suite's fixture
    eyas toy build --preset small           # a few minutes; the quickstart's target
    eyas toy build --preset kimi            # Kimi-K2.5's layout: DeepSeek-V3, MLA, MoE, YaRN

The result is a plain Hugging Face model directory (config, safetensors, tokenizer files, chat
template, generation config, `toy.json`) loadable without `trust_remote_code`; the `kimi`
preset's is laid out as Kimi-K2.5's checkpoint (`eyas.toy.kimi_k25`). Without
`--out` it is cached under `$EYAS_CACHE` (default: the user cache dir) keyed by preset, build
version and seed; concurrent builds take a file lock and publish by atomic rename.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch

from eyas.errors import EyasError
from eyas.formats import get_model_format
from eyas.records import Conversation
from eyas.render.renderer import Renderer, last_assistant_index
from eyas.sources import convert_rows
from eyas.tools.typescript import encode_tools_typescript
from eyas.toy import kimi_k25
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.naive import naive_glaive_messages
from eyas.toy.tokenizer import save_tokenizer, train_tokenizer
from eyas.toy.train import PRESETS, build_examples, train_model

BUILD_VERSION = 5
# A preset with its own build version: its cache key moves without rebuilding the others.
BUILD_VERSIONS = {"kimi": 1}
KIMI_LAYOUT = {"kimi"}  # presets built in Kimi-K2.5's checkpoint layout
KIMI = get_model_format("kimi-k2.5")  # the toy target's format
HELDOUT_PER_FAMILY = 40
QUALITY_MAX_NEW_TOKENS = 128
AUX_LAYERS = {"tiny": [1, 2, 3], "small": [1, 2, 4], "kimi": [1, 2, 3]}


def cache_root() -> Path:
    if os.environ.get("EYAS_CACHE"):
        return Path(os.environ["EYAS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "eyas"


def build_version(preset: str) -> int:
    return BUILD_VERSIONS.get(preset, BUILD_VERSION)


def default_dir(preset: str, seed: int = 0) -> Path:
    return cache_root() / f"toy-{preset}-v{build_version(preset)}-seed{seed}"


def toy_conversations(preset: str, seed: int) -> tuple[list[Conversation], list[Conversation]]:
    """(train, held-out) conversations of all eight families, converted from source format.

    Held-out rows come from another seed, and any that duplicate a training conversation
    exactly are dropped, so the quality figures are measured on unseen conversations.
    """
    rows = PRESETS[preset].rows_per_family
    train, heldout = [], []
    for fam in FAMILIES:
        mine = [
            c
            for c in convert_rows(family_rows(fam, rows, seed), fam.format, fam.name)
            if isinstance(c, Conversation)
        ]
        seen = {c.id for c in mine}
        heldout += [
            c
            for c in convert_rows(
                family_rows(fam, HELDOUT_PER_FAMILY, seed + 7919), fam.format, fam.name
            )
            if isinstance(c, Conversation) and c.id not in seen
        ]
        train += mine
    return train, heldout


def _corpus(conversations: list[Conversation]) -> list[str]:
    fixed = [
        "You are Kimi, an AI assistant created by Moonshot AI.",
        "## Return of ",
        "tool_declare",
        "system",
        "user",
        "assistant",
        "functions.",
    ]
    texts = list(fixed)
    for conv in conversations:
        if conv.tools:
            texts.append(encode_tools_typescript(conv.tools))
            texts.append(json.dumps(conv.tools, separators=(",", ":")))
        for m in conv.messages:
            texts += [m.get("content") or "", m.get("reasoning_content") or ""]
            texts += [KIMI.completion_text(m)] if m.get("tool_calls") else []
    return texts


def _llama_config(preset: str, tokenizer) -> dict:
    p = PRESETS[preset]
    vocab = tokenizer.get_vocab()
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(tokenizer),
        "hidden_size": p.hidden_size,
        "intermediate_size": p.intermediate_size,
        "num_hidden_layers": p.num_layers,
        "num_attention_heads": p.num_heads,
        "num_key_value_heads": p.num_kv_heads,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": vocab["[BOS]"],
        "eos_token_id": [vocab["<|im_end|>"], vocab["[EOS]"]],
        "pad_token_id": vocab["[PAD]"],
    }


def tool_prompt_turn(conv: Conversation) -> int:
    """Index of the first assistant turn that calls a tool (-1 if none)."""
    return next((i for i, m in enumerate(conv.messages) if m.get("tool_calls")), -1)


# What the quickstart depends on, measured on held-out prompts. A toy that misses a gate trains
# on (bounded); thresholds are structural, never tuned to one machine's weights.
QUALITY_GATES = {
    "tool_call_rate": 0.95,  # tool prompts answered with a well-formed call of a declared tool
    "no_tool_clean_rate": 0.98,  # prompts without tools (or without a call) answered with none
    "stop_rate": 0.98,  # outputs that end in the stop token within the budget
    "b1_naive_drop": 0.5,  # tool-call rate lost when B1's tools are pasted as JSON
}
MAX_EXTRA_ROUNDS = 6


def _generate(model, renderer: Renderer, prompts: list[list[int]]) -> list:
    from eyas.backends.local.hf_generate import generate_batch

    stop = renderer.stop_token_ids()
    pad = renderer.tokenizer.pad_token_id
    outs = []
    for k in range(0, len(prompts), 16):
        outs += generate_batch(model, prompts[k : k + 16], stop, QUALITY_MAX_NEW_TOKENS, pad)
    return outs


def quality_report(model, renderer: Renderer, heldout: list[Conversation]) -> dict:
    """Held-out greedy checks, parsed by the model format: well-formed native tool calls on
    tool prompts, no tool call where none is due, the stop token, and the naive-rendering drop."""
    fmt = renderer.model_format
    native, naive, no_tool, b1 = [], [], [], []
    for conv in heldout:
        messages, _ = renderer.prepare(conv)
        names = {t["function"]["name"] for t in conv.tools}
        turn = tool_prompt_turn(conv)
        if turn >= 0:
            ids = renderer.encode(renderer.render_text(messages[:turn], conv.tools))
            native.append((ids, names))
            if conv.dataset == "b1_glaive":
                b1.append((ids, names))
                naive_msgs = naive_glaive_messages(messages[:turn], conv.tools)
                naive.append((renderer.encode(renderer.render_text(naive_msgs, None)), names))
        turn = last_assistant_index(messages)
        if turn >= 0 and not messages[turn].get("tool_calls"):
            no_tool.append(renderer.encode(renderer.render_text(messages[:turn], conv.tools)))

    def well_formed(prompts_and_names) -> tuple[float, list]:
        outs = _generate(model, renderer, [p for p, _ in prompts_and_names])
        good = 0
        for out, (_, names) in zip(outs, prompts_and_names):
            parsed = fmt.parse_output(out.output_ids, renderer.tokenizer)
            good += (
                out.finish_reason == "stop"
                and bool(parsed.calls)
                and not parsed.malformed
                and all(c.name in names and c.valid_json for c in parsed.calls)
            )
        return good / max(1, len(outs)), outs

    tool_rate, tool_outs = well_formed(native)
    b1_rate, _ = well_formed(b1)
    naive_rate, _ = well_formed(naive)
    plain_outs = _generate(model, renderer, no_tool)
    clean = sum(
        not fmt.parse_output(o.output_ids, renderer.tokenizer).calls
        and "<|tool_calls_section_begin|>" not in renderer.tokenizer.decode(o.output_ids)
        for o in plain_outs
    )
    outs = tool_outs + plain_outs
    report = {
        "tool_call_rate": round(tool_rate, 4),
        "no_tool_clean_rate": round(clean / max(1, len(plain_outs)), 4),
        "stop_rate": round(sum(o.finish_reason == "stop" for o in outs) / max(1, len(outs)), 4),
        "b1_native_tool_call_rate": round(b1_rate, 4),
        "b1_naive_tool_call_rate": round(naive_rate, 4),
        "b1_naive_drop": round(b1_rate - naive_rate, 4),
        "num_tool_prompts": len(native),
        "num_no_tool_prompts": len(plain_outs),
        "num_b1_prompts": len(b1),
        "max_new_tokens": QUALITY_MAX_NEW_TOKENS,
    }
    return report


def failed_gates(quality: dict) -> list[str]:
    return [
        f"{name} {quality[name]:.3f} < {floor}"
        for name, floor in QUALITY_GATES.items()
        if quality[name] < floor
    ]


def _build_into(tmp: Path, preset: str, seed: int, log: Callable[[str], None]) -> dict:
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    t0 = time.time()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    train, heldout = toy_conversations(preset, seed)
    log(f"datasets: {len(train)} train / {len(heldout)} held-out conversations")
    tokenizer = train_tokenizer(_corpus(train), PRESETS[preset].vocab_size, "kimi")
    save_tokenizer(tokenizer, tmp)
    renderer = Renderer(tmp, tokenizer=tokenizer)
    examples = build_examples(renderer, train, random.Random(seed))
    log(f"tokenizer: {len(tokenizer)} tokens; {len(examples)} training turns")
    if preset in KIMI_LAYOUT:
        kimi_k25.write_config(tmp, PRESETS[preset], tokenizer)
        model = kimi_k25.new_text_model(tmp, seed)
        config = model.config
    else:
        config = LlamaConfig(**_llama_config(preset, tokenizer))
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    progress = lambda s, n, loss: log(f"train step {s}/{n} loss {loss:.3f}")  # noqa: E731
    rounds = [
        train_model(model, examples, PRESETS[preset], seed, tokenizer.pad_token_id, log=progress)
    ]
    quality = quality_report(model, renderer, heldout)
    failed = failed_gates(quality)
    while failed and len(rounds) <= MAX_EXTRA_ROUNDS:
        log(f"quality gates missed ({', '.join(failed)}): training one more round")
        rounds.append(
            train_model(
                model,
                examples,
                PRESETS[preset],
                seed + len(rounds),
                tokenizer.pad_token_id,
                log=progress,
                epochs=1.0,
                lr_scale=0.5,
            )
        )
        quality = quality_report(model, renderer, heldout)
        failed = failed_gates(quality)
    if failed:
        raise EyasError(
            "toy_quality",
            f"the toy {preset} target (seed {seed}) missed its quality gates after "
            f"{len(rounds)} training rounds: {', '.join(failed)}",
        )
    saved = model
    if preset in KIMI_LAYOUT:
        saved = kimi_k25.widen_latent(model, tmp, seed)
        kimi_k25.check_same_function(model, saved, examples[:8], tokenizer.pad_token_id)
        kimi_k25.save_checkpoint(saved, tmp)
    else:
        model.save_pretrained(tmp, safe_serialization=True)
    GenerationConfig(
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        do_sample=False,
    ).save_pretrained(tmp)
    info = {
        "preset": preset,
        "seed": seed,
        "build_version": build_version(preset),
        "profile": renderer.model_format.name,
        "num_parameters": sum(p.numel() for p in saved.parameters()),
        "aux_layers": AUX_LAYERS[preset],
        "training": {"rounds": rounds},
        "quality": quality,
        "quality_gates": QUALITY_GATES,
        "build_seconds": round(time.time() - t0, 1),
    }
    if preset in KIMI_LAYOUT:
        info["trained_kv_lora_rank"] = model.config.kv_lora_rank  # see kimi_k25.new_text_model
    (tmp / "toy.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def build_toy(
    preset: str = "tiny",
    out: str | Path | None = None,
    seed: int = 0,
    log: Callable[[str], None] = lambda s: None,
    force: bool = False,
) -> Path:
    """Build (or reuse) the toy target and return its directory."""
    if preset not in PRESETS:
        raise EyasError("bad_flag", f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    target = Path(out) if out else default_dir(preset, seed)
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.parent / f".{target.name}.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent build waits, then reuses the result
        if (target / "toy.json").exists() and not force:
            return target
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            _build_into(tmp, preset, seed, log)
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_toy_info(model_dir: str | Path) -> dict:
    return json.loads((Path(model_dir) / "toy.json").read_text())


__all__ = ["build_toy", "default_dir", "load_toy_info", "toy_conversations"]
