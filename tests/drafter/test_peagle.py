"""P-EAGLE through the method interface: parallel decoding equals the training forward at every
anchor, COD sampling keeps speculators' counts and complete chains, the loss reaches exactly
the sampled elements, and the vLLM layout round-trips in the keys vLLM reads (SGLang and MLA
refused, with what was checked)."""

import json
from types import SimpleNamespace

import pytest
import torch

from eyas.drafter.load import exported_config, load_drafter
from eyas.drafter.loss import Teacher
from eyas.drafter.peagle.model import PEagleConfig, PEagleDrafter
from eyas.drafter.peagle.train import cod_sample, parallel_loss, sample_depths
from eyas.drafter.registry import get_method, method_of
from eyas.errors import EyasError, RefusedError
from eyas.export.drafter import export_drafter
from eyas.export.validate import check_export
from eyas.train.checkpoint import save_drafter

V, H = 40, 32


def tiny(seed: int = 0, depths: int = 4, draft_vocab: int = V) -> PEagleDrafter:
    torch.manual_seed(seed)
    cfg = PEagleConfig(
        hidden_size=H,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=V,
        draft_vocab_size=draft_vocab,
        target_hidden_size=H,
        aux_layer_ids=[1, 2, 3],
        mask_token_id=V - 1,
        depths=depths,
        rope_scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8},
    )
    model = PEagleDrafter(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
        ids = torch.arange(draft_vocab) * (V // draft_vocab)  # every (V // Dv)-th token
        model.d2t.copy_(ids - torch.arange(draft_vocab))
        model.t2d.zero_()
        model.t2d[ids] = True
    return model


def options(**kw):
    base = dict(
        peagle=SimpleNamespace(down_sample_ratio=0.7, down_sample_ratio_min=0.2, max_anchors=None),
        chunk_len=1024,
        activation_checkpointing="off",
    )
    return SimpleNamespace(**{**base, **kw})


def test_parallel_drafts_equal_the_training_forward_at_every_anchor():
    """The proposer's k drafts after a verified context ending at anchor a are the training
    forward's depths 0..k-1 at anchor a (the context's depth-0 keys up to a, the chain before
    each depth), whether the context arrived in one extend or several."""
    model = tiny(depths=4)
    t = 16
    ids = torch.randint(0, V - 1, (1, t))
    aux = torch.randn(1, t, 3 * H)
    with torch.no_grad():
        states = model(ids, aux, 4)
    for a in (0, 3, 9, 15):
        proposer = method_of(model).proposer(model)
        cut = (a + 1) // 2
        for piece in (slice(0, cut), slice(cut, a + 1)):
            if piece.stop > piece.start:
                proposer.extend(ids[0, piece].tolist(), aux[:, piece])
        for k in (1, 4):
            want = torch.stack([model.logits(states[d][0, a]) for d in range(k)])
            assert torch.allclose(proposer.draft_logits(k), want, atol=1e-5), (a, k)
        drafts, _ = proposer.propose(4, 0.0, None)
        assert drafts == model.draft_to_target()[want.argmax(-1)].tolist()
        assert proposer.verified == a + 1  # the parallel positions never enter the context


def test_a_parallel_position_sees_only_its_anchor_s_context_and_chain():
    """Changing the target state after the anchor, or the token read there, moves no depth of
    that anchor; changing the state at the anchor moves every depth."""
    model = tiny()
    t, a = 12, 5
    ids, aux = torch.randint(0, V - 1, (1, t)), torch.randn(1, t, 3 * H)
    with torch.no_grad():
        base = model(ids, aux, 4)
        later, later_ids = aux.clone(), ids.clone()
        later[:, a + 1 :] += 1.0
        later_ids[:, a + 1 :] = (later_ids[:, a + 1 :] + 1) % (V - 1)
        after = model(later_ids, later, 4)
        at = aux.clone()
        at[:, a] += 1.0
        moved = model(ids, at, 4)
    for d in range(4):
        assert torch.allclose(base[d][0, a], after[d][0, a], atol=1e-6)
        assert not torch.allclose(base[d][0, a], moved[d][0, a], atol=1e-3)


def test_cod_sampling_keeps_speculators_counts_and_whole_chains():
    """speculators `generate_cod_sample_indices`: depth d keeps int((#seeds - d) * max(r^d,
    r_min)) elements drawn from the previous depth's kept positions plus one that are
    supervised; an element's chain is kept at every lower depth; every element is trained;
    seeded, so the same seed draws the same samples."""
    t = 60
    trained = torch.zeros(t, dtype=torch.bool)
    trained[10:50] = True
    per_depth = cod_sample(trained, 6, 0.7, 0.2, None, seed=3)
    seeds = 40
    prev = {(p, 0) for p in range(10, 50)}
    for d, anchors in enumerate(per_depth, start=1):
        assert len(anchors) == int(max(0, seeds - d) * max(0.7**d, 0.2))  # pools large enough
        assert anchors.tolist() == sorted(anchors.tolist())
        assert all(bool(trained[a + d]) for a in anchors.tolist())  # its own mask
        if d >= 2:  # its chain: the same anchor one depth up
            assert all((a, d - 1) in prev for a in anchors.tolist())
        prev = {(a, d) for a in anchors.tolist()}
    assert [len(a) for a in per_depth] == [27, 18, 12, 8, 7]
    again = cod_sample(trained, 6, 0.7, 0.2, None, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(per_depth, again))
    assert any(
        not torch.equal(x, y) for x, y in zip(per_depth, cod_sample(trained, 6, 0.7, 0.2, None, 4))
    )
    capped = cod_sample(trained, 3, 0.7, 0.2, 10, seed=3)
    assert len(capped[0]) == int(9 * 0.7)  # max_anchors seeds, as speculators draws them


def test_position_zero_never_seeds_a_chain():
    trained = torch.ones(8, dtype=torch.bool)
    for seed in range(20):
        for d, anchors in enumerate(cod_sample(trained, 4, 1.0, 1.0, None, seed), start=1):
            assert (anchors >= 0).all() and (anchors + d < 8).all()


def test_the_loss_reaches_exactly_the_sampled_elements():
    """Σ soft-CE over depth 0's trained positions and the sampled elements / their number:
    an element's teacher is the target at a+1+d; nothing else moves the loss."""
    model = tiny(depths=3)
    method = get_method("peagle")
    b, t = 2, 14
    ids = torch.randint(0, V - 1, (b, t))
    sup = torch.zeros(b, t, dtype=torch.long)
    sup[0, 5:12], sup[1, 3:14] = 1, 1
    aux, final, head = torch.randn(b, t, 3 * H), torch.randn(b, t, H), torch.randn(V, H)
    prep = method.prepare(model, ids, sup, train_cfg=options(), seeds=[1, 2])
    counts = prep.counts.tolist()
    assert counts[0] == float(sup[:, 2:].sum())
    loss, stats = method.loss(
        model, model, prep, aux=aux, teacher=Teacher(final, head), normalizer=counts,
        train_cfg=options(),
    )  # fmt: skip
    inputs = torch.cat([ids[:, 1:], ids[:, -1:]], 1)
    with torch.no_grad():
        states = model(inputs, aux, 3)
    teacher_p = torch.softmax(final @ head.t(), -1)
    total, n = 0.0, 0
    for d in range(3):
        if d == 0:
            elements = [(r, a) for r in range(b) for a in range(t - 2) if sup[r, a + 2]]
        else:
            rows, anchors = prep.extra["sampled"][d - 1]
            elements = list(zip(rows.tolist(), anchors.tolist()))
        assert stats[d].positions == len(elements) == counts[d]
        for r, a in elements:
            logp = torch.log_softmax(model.logits(states[d][r, a]).detach(), -1)
            total -= float((teacher_p[r, a + 1 + d][model.draft_to_target()] * logp).sum())
            n += 1
    assert float(loss.detach()) == pytest.approx(total / n, rel=1e-5)


def test_an_unsampled_depth_still_reaches_mask_hidden():
    """A batch whose rows are too short for any chain still backpropagates into `mask_hidden`
    (every rank's backward must reach every trained parameter under DDP), at zero loss."""
    model = tiny(depths=3).train()
    ids = torch.randint(0, V - 1, (1, 6))
    sup = torch.tensor([[0, 0, 0, 0, 1, 1]])
    sampled = sample_depths(sup, 3, 0.7, 0.2, None, [0])
    assert all(len(a) == 0 for _, a in sampled)
    states = model(torch.cat([ids[:, 1:], ids[:, -1:]], 1), torch.randn(1, 6, 3 * H), 3)
    teacher = Teacher(torch.randn(1, 6, H), torch.randn(V, H))
    loss, stats = parallel_loss(
        states, teacher, sup, sampled, model.lm_head, model.draft_to_target(), model.t2d, 2.0
    )
    loss.backward()
    assert model.mask_hidden.grad is not None and [s.positions for s in stats] == [2, 0, 0]


@pytest.mark.parametrize("draft_vocab", [V, 20])
def test_the_vllm_layout_round_trips_and_sglang_is_refused(tmp_path, draft_vocab):
    """vLLM's keys (`update_peagle`): speculators type `peagle`, `mask_token_id` (its
    `pard_token`), the fused ids at the top level, `norm_before_residual` written; the
    weights hold `mask_hidden` and, only for a reduced vocabulary, d2t/t2d
    (`Eagle3LlamaForCausalLM` has `draft_id_to_target_id` only then)."""
    model = tiny(2, depths=5, draft_vocab=draft_vocab)
    save_drafter(model, tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", "vllm", tmp_path / "vllm", speculative_tokens=3)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "peagle" and cfg["mask_token_id"] == V - 1
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert cfg["norm_before_residual"] is False and cfg["draft_vocab_size"] == draft_vocab
    # the served token count is the trained depths, not EAGLE-3's k
    assert cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 5
    from safetensors.torch import load_file

    weights = load_file(str(out / "model.safetensors"))
    assert weights["mask_hidden"].shape == (1, 1, 3 * H)
    assert ("d2t" in weights) == ("t2d" in weights) == (draft_vocab != V)
    summary = check_export(out, engine="vllm")
    assert summary["method"] == "peagle" and summary["aux_layers_hf"] == [1, 2, 3]
    back = load_drafter(out)
    assert method_of(back).name == "peagle" and back.config.depths == 5
    assert torch.equal(back.draft_to_target(), model.draft_to_target())
    ids, aux = torch.randint(0, V - 1, (1, 9)), torch.randn(1, 9, 3 * H)
    with torch.no_grad():
        want, got = model(ids, aux, 5), back(ids, aux, 5)
    assert all(torch.allclose(g, w, atol=0.1) for g, w in zip(got, want))  # bf16 weights
    with pytest.raises(RefusedError) as err:
        export_drafter(tmp_path / "d", "sglang", tmp_path / "sglang")
    assert err.value.reason == "export_unsupported" and "SGLang 0.5.23" in err.value.detail


def test_a_speculators_peagle_checkpoint_loads(tmp_path):
    """speculators' own layout: `layers.0.` names, `mask_hidden` [1, 1, n*Ht], and no
    `norm_before_residual` key (vLLM's `update_peagle` then reads False)."""
    model = tiny(3)
    save_drafter(model, tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", "vllm", tmp_path / "vllm")
    cfg = json.loads((out / "config.json").read_text())
    del cfg["norm_before_residual"], cfg["eyas"]
    (out / "config.json").write_text(json.dumps(cfg))
    from safetensors.torch import load_file, save_file

    w = load_file(str(out / "model.safetensors"))
    w = {k.replace("midlayer.", "layers.0."): v for k, v in w.items()}
    save_file(w, str(out / "model.safetensors"))
    back = load_drafter(out)
    assert back.config.norm_before_residual is False
    assert torch.equal(
        back.midlayer.self_attn.q_proj.weight, w["layers.0.self_attn.q_proj.weight"].float()
    )
    with pytest.raises(Exception, match="fc_norm"):
        exported_config({**cfg, "fc_norm": True})


def test_mla_is_refused_and_an_mla_target_gets_the_llama_layer(kimi_toy):
    """vLLM serves P-EAGLE from Llama and Qwen3 layers only: `update_peagle`'s architecture map,
    and `deepseek_eagle3.py` reads no `mask_hidden`."""
    from eyas.hf_models import target_model
    from eyas.train.config import TrainConfig

    method = get_method("peagle")
    target = target_model(kimi_toy)
    vocab = {"draft_vocab_size": 400, "mask_token_id": 7}

    def build(checked=True, **kw):
        make = TrainConfig if checked else TrainConfig.model_construct
        cfg = make(target=kimi_toy, out=kimi_toy, data=kimi_toy, method="peagle", **kw)
        aux = method.default_aux_layers(target.num_layers, cfg)
        return method.build_config(
            target=target, train_cfg=cfg, aux_layers=aux, vocab=vocab, max_positions=4096
        )

    assert build().attention == "mha"
    with pytest.raises(ValueError, match="not one of peagle's"):  # the config asks the method
        build(attention="mla")
    with pytest.raises(ValueError, match="P-EAGLE drafters have one decoder layer"):
        build(draft_layers=2)
    with pytest.raises(RefusedError) as err:  # and the method refuses a config built unchecked
        build(checked=False, attention="mla")
    assert err.value.reason == "unsupported_attention"
    assert "deepseek_eagle3.py" in err.value.detail and "update_peagle" in err.value.detail


def test_vllm_serves_it_as_eagle3_with_parallel_drafting_and_at_most_its_depths(tmp_path):
    """`build_vllm_speculative_config`: `peagle` -> `{"method": "eagle3", "parallel_drafting":
    true}`; a server given the export by `--speculative-config` needs it said there."""
    save_drafter(tiny(depths=4), tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", "vllm", tmp_path / "vllm")
    method = get_method("peagle")
    spec = method.speculative_configs()["vllm"](out, 3)
    assert spec == {
        "method": "eagle3",
        "parallel_drafting": True,
        "model": str(out),
        "num_speculative_tokens": 3,
    }
    with pytest.raises(EyasError) as err:
        method.speculative_configs()["vllm"](out, 5)
    assert err.value.reason == "bad_flag" and "--k 4" in err.value.detail


def test_a_frozen_head_keeps_the_target_rows_and_loads_from_the_target(tmp_path, toy_tiny):
    """`--eagle3.draft-head frozen` (EAGLE-3's option, speculators' choice): the head is the target's
    rows of the draft ids, not trained; a checkpoint without it is completed from the target."""
    from eyas.hf_models import target_model
    from eyas.train.config import TrainConfig

    method = get_method("peagle")
    target = target_model(toy_tiny)
    cfg = TrainConfig(
        target=toy_tiny,
        out=tmp_path,
        data=tmp_path,
        method="peagle",
        eagle3={"draft_head": "frozen"},
    )
    d2t = torch.arange(0, 1024, 4) - torch.arange(256)
    t2d = torch.zeros(1024, dtype=torch.bool)
    t2d[d2t + torch.arange(256)] = True
    vocab = {"draft_vocab_size": 256, "mask_token_id": 7, "d2t": d2t, "t2d": t2d}
    dcfg = method.build_config(
        target=target, train_cfg=cfg, aux_layers=[1, 2, 3], vocab=vocab, max_positions=256
    )
    model = method.build_model(dcfg)
    found = target.load_tensors("embed", "head")[0]
    method.init_from_target(model, embedding=found["embed"], head=found["head"], vocab=vocab)
    assert not model.lm_head.weight.requires_grad and model.mask_hidden.requires_grad
    assert torch.equal(model.lm_head.weight, found["head"].float()[::4])
    weights = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    done = method.complete_weights(weights, dcfg, tmp_path, toy_tiny)
    assert torch.equal(done["lm_head.weight"], found["head"].float()[::4])
