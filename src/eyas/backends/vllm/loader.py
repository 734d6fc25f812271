"""vLLM's own loader run on an export, for `eyas export check`.

An export the engine's loader refuses fails the check, and so does one it loads wrongly: the
check builds the drafter with vLLM's own classes in a vLLM install's python
(`loader_probe.py`, the code a vLLM server runs: its config loading, the registry's draft
class, that class's `load_weights`, the model runners' readers of the fused layers) and
refuses the export when vLLM raises, when a parameter of vLLM's model is left unfilled (other
than the embedding and head vLLM shares from the target into a drafter that ships none), or
when vLLM would fuse other target layers than the drafter was trained on.

Which python: `--engine-python PY` (`--vllm-python`, its old name), else this interpreter when it imports vLLM (eyas installed
beside vLLM), else none: the check then applies eyas's restatement of those loaders
(`conventions.draft_vocab_problems`, the method's `expected_tensors`), pinned against the real
ones by tests/drafter/test_engine_matrix.py, and its summary says the loader did not run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from eyas.backends.vllm.conventions import (
    FLOAT32_MLA_ARGS,
    FLOAT32_MLA_DRAFTER,
    TARGET_TO_DRAFT_KEY,
    draft_vocab_problems,
    is_mla_drafter,
    text_only_args,
)
from eyas.errors import EyasError
from eyas.hf_models import TargetModel

PROBE = Path(__file__).with_name("loader_probe.py")
# parameters vLLM's proposer takes from the target when the export ships none
# (`llm_base_proposer.py` `_maybe_share_embeddings` / `_maybe_share_lm_head`)
SHARED_FROM_TARGET = {"embedding": "model.embed_tokens.weight", "lm_head": "lm_head.weight"}
DEFAULT_TOKENS = 3
# tensors every draft class eyas exports to accepts without needing them: `t2d` (each
# `load_weights` skips it), and the embedding and head (parameters of every class; shared from
# the target when absent)
OPTIONAL_TENSORS = frozenset({TARGET_TO_DRAFT_KEY, "embed_tokens.weight", "lm_head.weight"})


def restated_problems(
    shipped: set[str], expected: set[str], draft_vocab_size: int, vocab_size: int
) -> list[str]:
    """vLLM's draft-class loaders restated, for when none can run: `AutoWeightsLoader` raises
    for a tensor its class has no parameter for (after the class's own renames: `expected`,
    the method's rule, names the parameters), and for `d2t` beside a whole vocabulary
    (`draft_vocab_problems`). Pinned against the real loaders by test_engine_matrix.py."""
    problems = draft_vocab_problems(shipped, draft_vocab_size, vocab_size)
    unknown = sorted(shipped - expected - OPTIONAL_TENSORS - {"d2t"})
    if unknown:
        problems.append(
            f"vLLM's draft class has no parameter for {unknown}: its loader refuses the weights"
        )
    return problems


def find_python(given: Path | None) -> Path | None:
    """The python whose vLLM loads the export: the one given, else this one if it imports
    vLLM, else None."""
    if given is not None:
        given = Path(given)
        if not given.exists():
            raise EyasError("no_vllm", f"--engine-python {given} does not exist")
        if not given.is_file() or not os.access(given, os.X_OK):
            raise EyasError("no_vllm", f"--engine-python {given} is not an executable python")
        return given
    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable)
    return None


def speculative_tokens(cfg: dict) -> int:
    """The draft token count a server of this export runs: the speculators config's
    proposal, a DFlash block's `block_size - 1`, else eyas's default k."""
    proposals = (cfg.get("speculators_config") or {}).get("proposal_methods") or []
    if proposals and proposals[0].get("speculative_tokens"):
        return int(proposals[0]["speculative_tokens"])
    if cfg.get("block_size"):
        return int(cfg["block_size"]) - 1
    return DEFAULT_TOKENS


def loader_case(export: Path, cfg: dict, method: Any, target: TargetModel) -> dict:
    """The probe case: the server `eyas eval --backend vllm` starts for this export (the
    target, `--speculative-config` from the method, float32 on a CPU engine)."""
    import torch

    float32 = not torch.cuda.is_available()
    spec = method.speculative_configs()["vllm"](export, speculative_tokens(cfg))
    spec.pop("model")
    if float32 and is_mla_drafter(cfg):
        spec.update(FLOAT32_MLA_DRAFTER)
    mla_target = float32 and bool(target.text.get("kv_lora_rank"))
    return {
        "target": str(target.dir),
        "drafter": str(export),
        "speculative_config": spec,
        "language_model_only": bool(text_only_args(target.wrapper)),
        "attention_backend": FLOAT32_MLA_ARGS[1] if mla_target else None,
        "dtype": "float32" if float32 else "auto",
        "max_model_len": min(target.context_length, 8192),
    }


def run_cases(python: Path, cases: list[dict], timeout_s: float = 1800.0) -> tuple[str, list]:
    """(vLLM's version, what vLLM made of each case) from one probe process."""
    with tempfile.TemporaryDirectory(prefix="eyas-vllm-loader-") as tmp:
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"cases": cases}))
        env = {
            **os.environ,
            "VLLM_LOGGING_LEVEL": "WARNING",
            "HF_HUB_OFFLINE": "1",
            "EYAS_PROBE_PORT": str(_free_port()),
        }
        try:
            run = subprocess.run(
                [str(python), str(PROBE), str(spec)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                cwd=tmp,
                env=env,
            )
        except subprocess.TimeoutExpired as exc:
            raise EyasError(
                "engine_loader_failed", f"vLLM's loader did not finish in {timeout_s:.0f}s"
            ) from exc
    if run.returncode != 0 or "JSON" not in run.stdout:
        tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
        reason = "no_vllm" if "No module named 'vllm'" in run.stderr else "engine_loader_failed"
        raise EyasError(reason, f"{python} could not run vLLM's loader: {tail[0][:300]}")
    out = json.loads(run.stdout.rsplit("JSON", 1)[1])
    return out["vllm"], out["cases"]


def loader_problems(version: str, result: dict, trained: list[int] | None) -> list[str]:
    """Why the export fails vLLM's loader (`run_cases` result), [] when it serves it."""
    where = f"vLLM {version}"
    if not result["loaded"]:
        error = result["error"].splitlines()[0].split(". The available parameters")[0]
        return [f"{where} refuses the export: {error[:400]}"]
    problems = []
    shared = {
        SHARED_FROM_TARGET["embedding"]: result["shares_target_embedding"],
        SHARED_FROM_TARGET["lm_head"]: result["shares_target_lm_head"],
    }
    unfilled = [n for n in result["unfilled"] if not shared.get(n)]
    if unfilled:
        problems.append(
            f"{where}'s {result['architecture']} would serve {unfilled} at their initial "
            "values: no tensor of the export fills them"
        )
    if trained is not None and result["aux_layers"] != list(trained):
        problems.append(
            f"{where} fuses target layers {result['aux_layers']}, the drafter was trained on "
            f"{list(trained)}"
        )
    return problems


def _free_port() -> int:
    from eyas.backends.server import free_port

    return free_port()
