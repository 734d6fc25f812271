"""FLOPs of one speculators 0.9.0 `Eagle3DraftModel` training step (forward + backward), counted
by `FlopCounterMode` on meta tensors: the peer half of `bench/bench_train_flops.py`.

Runs in the speculators venv (tools/speculators_env.sh) and never imports eyas; it loads
`attention_flops.py` (beside this file, torch only) by path, so its attention kernel is
charged by the same formula as eyas's.

The draft model is built as its trainer builds it (`create_transformer_layer_config`,
`Eagle3SpeculatorConfig`, norm_before_residual, the vocabulary maps given), on the meta device
(`load_verifier_weights` is skipped: it reads weights, which FLOPs do not depend on), with its
eager KL loss. Its attention runs through `draft_attn_impl="sdpa"`, whose call is the same
one `simple_flex_attention` makes (q of T positions against the KV cache of every step so far,
(k+1)·T keys at step k), charged at those shapes by FlexAttention's formula: the kernel is not
run. `--train-head` trains its draft head (eyas's default; speculators freezes it).

    SPEC_VENV/bin/python speculators_flops_peer.py --verifier DIR --tokens 4096 [--train-head]

Prints one JSON line: total FLOPs, by op, trainable parameters.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import torch


def _attention_flops():
    path = Path(__file__).with_name("attention_flops.py")
    spec = importlib.util.spec_from_file_location("attention_flops", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(verifier: str, ttt: int, t2d, d2t, draft_vocab: int, layers: list[int]):
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from speculators.train.cli import create_transformer_layer_config

    layer_cfg = create_transformer_layer_config(
        verifier_name_or_path=verifier,
        num_layers=1,
        draft_arch="llama",
        hidden_act=None,
        sliding_window=0,
        full_attention_indices=[0],
    )
    layer_cfg._attn_implementation = "sdpa"
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer_cfg,
        draft_vocab_size=draft_vocab,
        norm_before_residual=True,
        eagle_aux_hidden_state_layer_ids=layers,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=ttt)],
            default_proposal_method="greedy",
            verifier=VerifierConfig.from_pretrained(verifier),
        ),
    )
    with torch.device("meta"):
        model = Eagle3DraftModel(config=config)
    model.load_vocab_mappings(t2d, d2t)
    return model, Eagle3DraftModel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verifier", required=True)
    ap.add_argument("--vocab", required=True, help="safetensors with t2d and d2t (eyas's)")
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--ttt", type=int, default=7)
    ap.add_argument("--decay", type=float, default=0.8)
    ap.add_argument("--train-head", action="store_true")
    args = ap.parse_args()
    from safetensors.torch import load_file
    from torch.utils.flop_counter import FlopCounterMode

    flops = _attention_flops()
    cfg = json.loads((Path(args.verifier) / "config.json").read_text())
    maps = load_file(args.vocab)
    n = cfg["num_hidden_layers"]
    model, cls = build(
        args.verifier, args.ttt, maps["t2d"], maps["d2t"], int(maps["t2d"].sum()),
        [2, n // 2, n - 3],
    )  # fmt: skip
    if args.train_head:
        model.lm_head.weight.requires_grad_(True)
    model.train()
    kwargs, _ = cls.get_trainer_kwargs(
        loss_fn="kl_div", loss_implementation="eager", ttt_steps=args.ttt,
        ttt_step_loss_decay=args.decay,
    )  # fmt: skip
    t, h = args.tokens, cfg["hidden_size"]
    meta = torch.device("meta")
    batch = {
        "hidden_states": torch.empty(1, t, 3 * h, device=meta, dtype=torch.bfloat16),
        "input_ids": torch.zeros(1, t, dtype=torch.long, device=meta),
        "document_ids": torch.zeros(1, t, dtype=torch.long, device=meta),
        "loss_mask": torch.ones(1, t, dtype=torch.bool, device=meta),
        "position_ids": torch.arange(t, device=meta).unsqueeze(0),
        "verifier_last_hidden_states": torch.empty(1, t, h, device=meta, dtype=torch.bfloat16),
    }
    counter = FlopCounterMode(display=False)
    attend = flops.counted_attention(counter)

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        return attend(q, k, v)[0]

    from speculators.models.eagle3 import metrics

    def accuracy(pred_ids, *args, **kw):
        # its accuracy figures select the masked positions (a shape meta tensors cannot know);
        # they are counts, no FLOPs
        zero = torch.zeros((), device=pred_ids.device)
        return zero, zero, zero, zero

    saved = torch.nn.functional.scaled_dot_product_attention, metrics.compute_accuracy_single_step
    torch.nn.functional.scaled_dot_product_attention = sdpa
    metrics.compute_accuracy_single_step = accuracy
    try:
        with counter, torch.autocast("cpu", dtype=torch.bfloat16):
            _, loss, _ = model(**batch, **kwargs)
            loss.backward()
    finally:
        torch.nn.functional.scaled_dot_product_attention = saved[0]
        metrics.compute_accuracy_single_step = saved[1]
    by_op = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    print(
        json.dumps(
            {
                "flops": counter.get_total_flops(),
                "by_op": by_op,
                "attention_flops": by_op.get(flops.KEY, 0),
                "trainable_parameters": sum(
                    p.numel() for p in model.parameters() if p.requires_grad
                ),
                "tokens": t,
            }
        )
    )


if __name__ == "__main__":
    main()
