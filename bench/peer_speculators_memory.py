"""Peer half of bench_train_memory: speculators 0.9.0 `Eagle3DraftModel` (sdpa attention,
eager KL loss, TTT 3) trained 2 steps on one random T-token sequence with the toy target's
dims, on CPU. Runs in the speculators venv; prints `RESULT {json}` with peak RSS and the
second step's time. `--limit-gb` caps the address space so a length that does not fit fails
instead of swapping.

    SPEC_VENV/bin/python bench/peer_speculators_memory.py --verifier TOY_DIR --tokens 4096
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verifier", required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--limit-gb", type=float, default=16)
    args = ap.parse_args()
    limit = int(args.limit_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    from peer_speculators_model import eagle3_peer

    torch.manual_seed(0)
    cfg = json.loads((Path(args.verifier) / "config.json").read_text())
    hidden, vocab, layers = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    draft_vocab = 256
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[:draft_vocab] = True
    d2t = torch.zeros(draft_vocab, dtype=torch.long)
    model, train_kwargs = eagle3_peer(
        args.verifier, t2d, d2t, draft_vocab, 3, [1, layers // 2, layers - 1], 0.8
    )
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95))
    t = args.tokens
    batch = {
        "hidden_states": torch.randn(1, t, 3 * hidden),
        "input_ids": torch.randint(300, vocab - 300, (1, t)),
        "document_ids": torch.zeros(1, t, dtype=torch.long),
        "loss_mask": torch.ones(1, t, dtype=torch.bool),
        "position_ids": torch.arange(t).unsqueeze(0),
        "verifier_last_hidden_states": torch.randn(1, t, hidden),
    }
    model.train()
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        _, loss, _ = model(**batch, **train_kwargs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({"peak_rss_mb": peak, "step_s": round(times[-1], 2)}))


if __name__ == "__main__":
    main()
