"""`eyas eval`: acceptance length per dataset, offline or inside a serving engine.

    eyas eval --target MODEL_DIR --drafter runs/x/drafter --input runs/x/prepare --k 3 \\
        [--temperature 0] [--max-new-tokens 256] [--limit 50] [--json eval.json]
    eyas eval ... --topk 4 --num-draft-tokens 8          # tree drafts (offline)
    eyas eval ... --backend vllm --vllm-python PY         # inside vLLM (starts a server)
    eyas eval ... --backend sglang --url http://h:30000   # a served SGLang with the drafter

Offline (`local`) evaluation runs lossless speculative decoding with the target and the
drafter in this process; served backends read the engine's own acceptance counters. At
temperature 0 every output is compared with the target's greedy decoding; any mismatch makes
`lossless` false (exit 1). Settings are reported with every number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eyas import __version__
from eyas.config import EvalConfig
from eyas.evaluate.prompts import load_prompts

METRIC = (
    "acceptance_length = tokens per target verify step, bonus included (SGLang definition; "
    "prefill token excluded)"
)


def run_eval(cfg: EvalConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    prompts = load_prompts(cfg.input, cfg.limit)
    if not prompts:
        from eyas.errors import EyasError

        raise EyasError("no_input", f"no prompts in {cfg.input}")
    if cfg.backend == "local":
        from eyas.evaluate.offline import evaluate_offline

        result = evaluate_offline(cfg, prompts, log)
    elif cfg.backend == "vllm":
        from eyas.evaluate.served import evaluate_vllm

        result = evaluate_vllm(cfg, prompts, log)
    else:
        from eyas.evaluate.served import evaluate_sglang

        result = evaluate_sglang(cfg, prompts, log)
    result["settings"] = {
        "backend": cfg.backend,
        "k": cfg.k,
        "decoding": "chain" if cfg.topk == 1 else "tree",
        "topk": cfg.topk,
        "num_draft_tokens": cfg.num_draft_tokens or cfg.k,
        "temperature": cfg.temperature,
        "batch_size": result.pop("batch_size", 1),
        "max_new_tokens": cfg.max_new_tokens,
        "prompts": len(prompts),
        "metric": METRIC,
    }
    result.update(
        {"target": str(cfg.target), "drafter": str(cfg.drafter), "eyas_version": __version__}
    )
    return result
