"""The elementwise traffic count (`eyas.testing.traffic`, `step_cost.count_traffic`,
`bench/bench_train_traffic.py`): its conventions on ops counted by hand, and what it says about
the fast path's step."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eyas.drafter import fast_path, fused_loss
from eyas.drafter.layers import rms_norm
from eyas.testing.traffic import ElementwiseTraffic, TaggedGradFns

ROOT = Path(__file__).resolve().parents[2]


def test_an_rms_norm_moves_the_bytes_counted_by_hand():
    """rms_norm of fp32 x [4, 8] (128 bytes) with an fp32 weight [8] (32 bytes): pow reads and
    writes x (256), mean reads it and writes [4, 1] (144), + eps and rsqrt read and write
    [4, 1] (32 each), x * r reads both and writes x (272), weight * x reads both and writes x
    (288); x.float() and .to(fp32) are no ops. 1,024 bytes, all charged to `rms_norm`."""
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.ones(8, requires_grad=True)
    with TaggedGradFns(), ElementwiseTraffic() as t:
        y = rms_norm(x, w, 1e-6)
    assert dict(t.by_region) == {"rms_norm": 1024}
    assert dict(t.by_op) == {"pow": 256, "mean": 144, "add": 32, "rsqrt": 32, "mul": 560}
    with TaggedGradFns(), ElementwiseTraffic() as t:
        y = rms_norm(x, w, 1e-6)
        y.sum().backward()
    # the backward of rms_norm's ops is charged to it; the test's own sum is outside eyas
    assert set(t.by_region) == {"rms_norm", "backward: rms_norm", "outside eyas"}
    assert t.by_region["backward: rms_norm"] > t.by_region["rms_norm"]
    assert t.in_functions({"rms_norm"}) == t.total - t.by_region["outside eyas"]


def test_views_are_free_gathers_read_their_rows_and_matmuls_are_apart():
    table = torch.randn(1000, 8)
    ids = torch.tensor([1, 5, 7])
    with ElementwiseTraffic() as t:
        torch.nn.functional.embedding(ids, table)  # 24 bytes of ids, 96 written
        table[2:4] * 1  # reads the slice (64), writes 64
        table.view(8000).unsqueeze(0).t()
        table[:10] @ table[:10].t()  # 320 + 320 read, 400 written
    assert dict(t.by_op) == {"embedding": 120, "mul": 128}
    assert t.kernel_bytes == 1040


@pytest.fixture(scope="module")
def wide_kimi(tmp_path_factory):
    from eyas.testing.wide import write_target

    return write_target(tmp_path_factory.mktemp("kimi"), "kimi")


def test_a_trained_heads_gradient_is_summed_over_several_chunks(wide_kimi, monkeypatch):
    """At Kimi width (fake tensors) each accumulation of the draft head's gradient reads and
    writes its whole fp32 [32k, 7168] buffer: once per loss chunk that was most of the loss's
    traffic, once per `WEIGHT_GRAD_CHUNKS` chunks it is that much less."""
    from eyas.testing.step_cost import count_traffic

    def count():
        return count_traffic(wide_kimi, 4096, draft_head="trained", ttt=3, fast_path="on")

    now = count()
    monkeypatch.setattr(fused_loss, "WEIGHT_GRAD_CHUNKS", 1)
    per_chunk = count()
    saved = per_chunk["by_region"]["_WeightedSoftCE.forward"] - now["by_region"].get(
        "_WeightedSoftCE.forward", 0
    )
    # 4,096 positions in chunks of 1,024 rows: 4 accumulations per step became 1, each reading
    # and writing the fp32 buffer (8 bytes per entry) and reading the bf16 product (2)
    entries = 7168 * 32000
    assert saved >= 3 * 3 * 10 * entries * 0.9
    assert now["bytes"] < per_chunk["bytes"]


def test_compiled_covers_most_of_the_fast_steps_traffic(wide_kimi):
    """Every function `--fast-path compiled` compiles moves bytes in the eager fast step, and
    together they are most of them (an MHA drafter: the interleaved rotation is MLA's)."""
    from eyas.testing.step_cost import count_traffic

    r = count_traffic(wide_kimi, 4096, attention="mha", draft_head="trained", ttt=3, fast_path="on")
    for name in ("rms_norm", "chunk_stats", "merge_diagonal", "silu_mul", "rotate_half"):
        assert r["by_region"].get(name, 0) > 0, name
        assert name in fast_path.COMPILED_FUNCTIONS
    assert 0.5 < r["compiled_bytes"] / r["bytes"] < 1


def test_the_benchmark_runs_at_tiny_width(tmp_path):
    out = tmp_path / "traffic.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench/bench_train_traffic.py"), "--tiny", "--json", str(out)],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    record = json.loads(out.read_text())
    assert record["tiny"] and {c["case"] for c in record["cases"]} == {
        "eyas llama frozen",
        "eyas kimi mha",
        "eyas kimi mla",
        "eyas kimi mha reference path",
    }
    for case in record["cases"]:
        assert case["mb_per_token"] > 0 and 0 < case["compiled_share"] <= 1
