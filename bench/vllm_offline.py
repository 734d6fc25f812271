"""vLLM's own offline engine (`LLM.generate`) on token-id prompts: the engine's limit on this
machine, for the benchmarks to compare against. Runs inside the vLLM venv:

    VLLM_PYTHON bench/vllm_offline.py SPEC.json   # prints `EYAS_RESULT {json}`

SPEC: {"model", "prompts": [[ids]], "max_tokens", "stop_token_ids", "dtype", "max_model_len",
"enable_prefix_caching", "repeats"}. Times `generate` only (the median of `repeats` runs) (after a one-prompt warm-up), not the load.
"""

import json
import sys
import time

from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    llm = LLM(
        model=spec["model"],
        dtype=spec.get("dtype", "auto"),
        enforce_eager=True,
        max_model_len=spec.get("max_model_len", 4096),
        enable_prefix_caching=spec.get("enable_prefix_caching", True),
    )
    params = SamplingParams(
        temperature=0.0,
        max_tokens=spec["max_tokens"],
        stop_token_ids=spec.get("stop_token_ids") or None,
        detokenize=False,
    )
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in spec["prompts"]]
    llm.generate(prompts[:1], params, use_tqdm=False)
    runs = []
    for _ in range(spec.get("repeats", 1)):
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        runs.append(time.perf_counter() - t0)
    seconds = sorted(runs)[len(runs) // 2]  # the median
    print(
        "EYAS_RESULT "
        + json.dumps(
            {
                "seconds": seconds,
                "runs": runs,
                "prompts": len(outs),
                "prompt_tokens": sum(len(o.prompt_token_ids) for o in outs),
                "output_tokens": sum(len(o.outputs[0].token_ids) for o in outs),
            }
        )
    )


if __name__ == "__main__":
    main()
