"""FLOPs counted without a GPU (`torch.utils.flop_counter.FlopCounterMode` on fake tensors,
`eyas.testing.step_cost.count_flops`): the budget's `gflop_per_token` is that count, for both
paths, MHA and MLA, activation checkpointing on and off, the draft head trained and frozen; and
at Kimi-K2.5's width eyas's step counts no more than speculators' at equal trainable parameters.
"""

import itertools
import json
import subprocess

import pytest
from safetensors.torch import save_file

from eyas.testing.step_cost import count_flops
from eyas.testing.wide import random_vocab, write_target

pytestmark = pytest.mark.filterwarnings("ignore:.*flex_attention.*")


@pytest.fixture(scope="module")
def tiny_targets(module_tmp):
    root = module_tmp("targets")
    return {kind: write_target(root / kind, kind, tiny=True) for kind in ("kimi", "llama")}


@pytest.mark.parametrize(
    "target,attention,fast,head,ac",
    [
        (t, a, f, h, ac)
        for (t, a), f, (h, ac) in itertools.product(
            [("llama", "mha"), ("kimi", "mla")],
            ["on", "off"],
            [("trained", "on"), ("frozen", "off")],
        )
    ],
)
def test_the_budget_counts_what_flop_counter_mode_counts(
    tiny_targets, target, attention, fast, head, ac
):
    counted = count_flops(
        tiny_targets[target], 300, attention=attention, fast_path=fast, draft_head=head, ttt=3,
        activation_checkpointing=ac, draft_vocab=1000,
    )  # fmt: skip
    assert counted["flops"] > 0 and counted["attention_flops"] > 0
    assert counted["budget_flops"] == counted["flops"]
    assert counted["budget_gflop_per_token"] == round(counted["flops"] / 300 / 1e9, 1)


@pytest.mark.slow
@pytest.mark.parametrize("attention,fast", [("mha", "on"), ("mla", "off")])
def test_the_budget_counts_the_kimi_width_step(tmp_path, attention, fast):
    counted = count_flops(
        write_target(tmp_path / "kimi", "kimi"), 1000, attention=attention, fast_path=fast,
        draft_head="trained", ttt=7, activation_checkpointing="on",
    )  # fmt: skip
    assert counted["budget_flops"] == counted["flops"]
    assert counted["trainable_parameters"] > 7e8  # the real width, not a toy


@pytest.mark.slow
def test_eyas_counts_no_more_than_speculators_at_equal_trainable_parameters(
    tmp_path, speculators_python
):
    """Both on the Llama-shaped verifier of Kimi width, 4,096 tokens, TTT 7: eyas on its fast
    path with its draft head frozen against speculators as it ships (head frozen), the same
    756M trainable parameters; speculators counted in its own venv
    (`eyas.testing.speculators_flops_peer`, its attention charged by the same formula)."""
    from eyas.testing import speculators_flops_peer

    verifier = write_target(tmp_path / "llama", "llama")
    maps = random_vocab(163840)
    save_file({"t2d": maps["t2d"], "d2t": maps["d2t"]}, str(tmp_path / "vocab.safetensors"))
    peer = subprocess.run(
        [str(speculators_python), speculators_flops_peer.__file__,
         "--verifier", str(verifier), "--vocab", str(tmp_path / "vocab.safetensors"),
         "--tokens", "4096"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    spec = json.loads(peer.stdout.strip().splitlines()[-1])
    eyas = count_flops(
        verifier, 4096, attention="mha", fast_path="on", draft_head="frozen", ttt=7,
        activation_checkpointing="off",
    )  # fmt: skip
    assert eyas["trainable_parameters"] == spec["trainable_parameters"]
    assert eyas["flops"] <= spec["flops"]


def test_the_kernel_formula_is_flop_counter_modes():
    """`step_flops.kernel_flops` restates torch's `sdpa_flop_count`/`sdpa_backward_flop_count`
    (written out: torch before 2.13 refuses GQA shapes there)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    from eyas.train.step_flops import kernel_flops

    for q, k, v in [
        ((1, 64, 4096, 128), (1, 8, 4096, 128), (1, 8, 4096, 128)),  # GQA
        ((2, 4, 100, 192), (2, 4, 100, 192), (2, 4, 100, 128)),  # MLA's narrower values
        ((1, 4, 101, 200), (1, 4, 101, 200), (1, 4, 101, 200)),  # the reference's sink
    ]:
        out = (*q[:3], v[3])
        assert kernel_flops(q, k, v) == (
            sdpa_flop_count(q, k, v),
            sdpa_backward_flop_count(out, q, k, v),
        )
