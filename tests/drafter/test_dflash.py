"""DFlash through the method interface: block decoding equals the training forward at every
anchor, anchors and slot targets are aligned as speculators trains them, the weights are the
paper's and D-PACE's, and the layouts round-trip in the keys vLLM and SGLang read."""

import json
import math

import pytest
import torch

from eyas.drafter.dflash.export import exported_aux_layers, zlab_default_target_layers
from eyas.drafter.dflash.model import DFlashConfig, DFlashDrafter
from eyas.drafter.dflash.train import block_loss, select_anchors, slot_targets, slot_weights
from eyas.drafter.load import exported_config, load_drafter
from eyas.drafter.loss import Teacher
from eyas.drafter.registry import get_method, method_of
from eyas.export.drafter import export_drafter
from eyas.export.validate import ExportError, check_export
from eyas.train.checkpoint import save_drafter

V, H = 40, 32


def tiny(seed: int = 0, block: int = 4, layers: int = 2) -> DFlashDrafter:
    torch.manual_seed(seed)
    cfg = DFlashConfig(
        hidden_size=H,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=V,
        target_hidden_size=H,
        aux_layer_ids=[1, 3],
        block_size=block,
        mask_token_id=V - 1,
        rope_scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8},
    )
    model = DFlashDrafter(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def test_block_decode_equals_the_training_forward_at_every_anchor():
    """The proposer's block after a verified context of length a is the training forward's
    block at anchor a (context strictly before the anchor, the whole block visible), whether
    the context arrived in one extend or several, and whatever other anchors share the batch."""
    model = tiny()
    t = 20
    ids = torch.randint(0, V - 1, (1, t))
    aux = torch.randn(1, t, 2 * H)
    anchors = torch.tensor([[2, 5, 6, 11, 17]])
    with torch.no_grad():
        train = model.lm_head(model(ids, aux, anchors, group=2))  # [1, A, bs, V]
    for col, a in enumerate(anchors[0].tolist()):
        proposer = method_of(model).proposer(model)
        # position j pairs the target state h_j with x_{j+1}: the last token is x_a, the anchor
        cut = a // 2
        for piece in (slice(0, cut), slice(cut, a)):
            if piece.stop > piece.start:
                proposer.extend(ids[0, piece.start + 1 : piece.stop + 1].tolist(), aux[:, piece])
        assert proposer.anchor == int(ids[0, a])
        block = proposer.block_logits(3)
        assert torch.allclose(block, train[0, col, 1:], atol=1e-5), a
        drafts, _ = proposer.propose(3, 0.0, None)
        assert drafts == train[0, col, 1:].argmax(-1).tolist()


def test_anchors_are_supervised_seeded_and_leave_a_target():
    sup = torch.zeros(2, 12, dtype=torch.long)
    sup[0, 4:10] = 1  # row 0: outputs at 4..9 of a 10-token sequence
    sup[1, 7:12] = 1
    a1, v1 = select_anchors(sup, [10, 12], 3, [5, 9])
    a2, v2 = select_anchors(sup, [10, 12], 3, [5, 9])
    assert torch.equal(a1, a2) and torch.equal(v1, v2)  # same seeds, same anchors
    for r, n in enumerate([10, 12]):
        got = a1[r][v1[r]].tolist()
        assert got == sorted(got) and len(got) == 3
        assert all(sup[r, a] == 1 and 1 <= a <= n - 2 for a in got)
    every, valid = select_anchors(sup, [10, 12], 100, [5, 9])
    assert every[0][valid[0]].tolist() == [4, 5, 6, 7, 8]  # 9 has no position after it
    draws = {tuple(select_anchors(sup, [10, 12], 3, [s, 9])[0][0].tolist()) for s in range(8)}
    assert len(draws) > 1  # the seed decides the draw


def test_slot_targets_shift_by_one_and_stop_at_the_end():
    """Slot i of the block at a predicts x_{a+i}: teacher at a+i-1, mask supervised[a+i]."""
    sup = torch.zeros(1, 10, dtype=torch.long)
    sup[0, 6:9] = 1
    anchors, valid = torch.tensor([[6, 8]]), torch.tensor([[True, True]])
    pos, mask = slot_targets(sup, anchors, valid, 4)
    assert pos[0, 0].tolist() == [6, 7, 8] and mask[0, 0].tolist() == [True, True, False]
    assert pos[0, 1].tolist() == [8, 9, 9] and mask[0, 1].tolist() == [False, False, False]


def test_slot_weights_decay_and_dpace_by_hand():
    ce = torch.tensor([[[0.0, math.log(2), math.log(4)]]])  # confidences 1, 1/2, 1/4
    mask = torch.tensor([[[True, True, True]]])
    decay = slot_weights(ce, mask, weighting="decay", gamma=2.0, alpha=0.5)
    assert torch.allclose(decay, torch.tensor([[[1.0, math.exp(-0.5), math.exp(-1.0)]]]))
    # s = 0.5 q + 0.5 = 1, 0.75, 0.625; P = 1, 0.75, 0.46875; w_i = sum_{j>=i} P_j
    dpace = slot_weights(ce, mask, weighting="dpace", gamma=2.0, alpha=0.5)
    assert torch.allclose(dpace, torch.tensor([[[2.21875, 1.21875, 0.46875]]]))
    holes = torch.tensor([[[True, False, True]]])
    masked = slot_weights(ce, holes, weighting="dpace", gamma=1.0, alpha=0.5)
    assert masked[0, 0, 1] == 0 and torch.allclose(masked[0, 0, 2], torch.tensor(0.625))


def test_the_loss_reaches_exactly_the_trained_slots():
    model = tiny(1)
    model.train()
    t = 12
    ids = torch.randint(0, V - 1, (1, t))
    aux = torch.randn(1, t, 2 * H)
    sup = torch.zeros(1, t, dtype=torch.long)
    sup[0, 5:8] = 1
    anchors, valid = torch.tensor([[5, 6]]), torch.tensor([[True, True]])
    states = model(ids, aux, anchors)
    states.retain_grad()
    teacher = Teacher(torch.randn(1, t, H), model.lm_head.weight.detach())
    loss, stats = block_loss(states, teacher, sup, anchors, valid, 3.0)
    loss.backward()
    # block 5: slots 1, 2 (x_6, x_7) trained; block 6: slot 1 (x_7)
    touched = states.grad[0].abs().sum(-1) > 0
    assert touched.tolist() == [[False, True, True, False], [False, True, False, False]]
    assert [s.positions for s in stats] == [2, 1, 0]


def test_a_batch_with_nothing_to_train_still_backpropagates():
    """A rank whose share is a weight-0 padding sequence (DDP) trains nothing but must still
    run a backward through the layers."""
    model = tiny(5)
    model.train()
    sup = torch.zeros(1, 8, dtype=torch.long)
    anchors, valid = select_anchors(sup, [8], 4, [0])
    assert anchors.shape == (1, 1) and not valid.any()
    states = model(torch.randint(0, V - 1, (1, 8)), torch.randn(1, 8, 2 * H), anchors)
    teacher = Teacher(torch.randn(1, 8, H), model.lm_head.weight.detach())
    loss, stats = block_loss(states, teacher, sup, anchors, valid, 0.0)
    loss.backward()
    assert float(loss.detach()) == 0.0 and all(s.positions == 0 for s in stats)
    assert model.fc.weight.grad is not None and not model.fc.weight.grad.any()


def test_default_fused_layers_follow_z_lab_and_sglang():
    """`build_target_layer_ids` (z-lab `dflash/model.py`, SGLang `dflash_utils.py`), in HF terms
    (+1), of max(draft layers, 3) layers (a one-layer drafter reads three, not z-lab's single
    middle one); a too-shallow target gets distinct evenly spread layers instead."""
    assert zlab_default_target_layers(36, 5) == [1, 9, 17, 25, 33]
    dflash = get_method("dflash")

    class Cfg:
        draft_layers = 5

    assert dflash.default_aux_layers(36, Cfg) == [2, 10, 18, 26, 34]
    Cfg.draft_layers = 2
    assert dflash.default_aux_layers(4, Cfg) == [1, 2, 3]
    assert dflash.default_aux_layers(3, Cfg) == [1, 2]
    Cfg.draft_layers = 1
    assert dflash.default_aux_layers(61, Cfg) == [2, 31, 59]
    assert dflash.default_aux_layers(2, Cfg) == [1]
    Cfg.draft_layers = None  # the default: two draft layers, three fused
    assert dflash.draft_layers(Cfg) == 2 and dflash.default_aux_layers(61, Cfg) == [2, 31, 59]


def test_layouts_round_trip_and_engines_read_the_trained_layers(tmp_path):
    model = tiny(2)
    save_drafter(model, tmp_path / "d", {})
    sg = export_drafter(tmp_path / "d", "sglang", tmp_path / "sglang", speculative_tokens=3)
    vl = export_drafter(tmp_path / "d", "vllm", tmp_path / "vllm", speculative_tokens=3)
    sg_cfg = json.loads((sg / "config.json").read_text())
    vl_cfg = json.loads((vl / "config.json").read_text())
    # SGLang `set_dflash_layers_to_capture` adds one; vLLM's speculators key is the HF index
    assert sg_cfg["architectures"] == ["DFlashDraftModel"]
    assert [i + 1 for i in sg_cfg["dflash_config"]["target_layer_ids"]] == [1, 3]
    assert sg_cfg["dflash_config"]["mask_token_id"] == V - 1 and sg_cfg["block_size"] == 4
    assert vl_cfg["speculators_model_type"] == "dflash"
    assert vl_cfg["aux_hidden_state_layer_ids"] == [1, 3] and vl_cfg["mask_token_id"] == V - 1
    assert "sliding_window_non_causal" not in vl_cfg  # absent: non-causal in vLLM
    for folder in (sg, vl):
        summary = check_export(folder)
        assert summary["aux_layers_hf"] == [1, 3] and summary["method"] == "dflash"
    ids, aux = torch.randint(0, V - 1, (1, 9)), torch.randn(1, 9, 2 * H)
    anchors = torch.tensor([[3, 6]])
    for folder in (sg, vl):
        # the export ships no embedding or head (the target's): the loader needs the target;
        # here it is the drafter itself, passed as one
        with pytest.raises(Exception, match="embed"):
            load_drafter(folder)
    with torch.no_grad():
        want = model(ids, aux, anchors)
    tensors = {k: v for k, v in model.state_dict().items()}
    import safetensors.torch as st

    fake_target = tmp_path / "target"
    fake_target.mkdir()
    st.save_file(
        {
            "model.embed_tokens.weight": tensors["embed_tokens.weight"],
            "lm_head.weight": tensors["lm_head.weight"],
        },
        str(fake_target / "model.safetensors"),
    )
    (fake_target / "config.json").write_text(
        json.dumps({"num_hidden_layers": 4, "hidden_size": H, "vocab_size": V})
    )
    for folder in (sg, vl):
        back = load_drafter(folder, target_dir=fake_target)
        assert back.config.aux_layer_ids == [1, 3] and back.config.block_size == 4
        with torch.no_grad():
            got = back(ids, aux, anchors)
        assert torch.allclose(got, want, atol=0.1)  # bf16 weights


def test_third_party_z_lab_config_reads_its_default_layers():
    """A z-lab config with `target_layer_ids: null` (TorchSpec `qwen3_8b_dflash.json`) fuses
    `build_target_layer_ids(num_target_layers, num_hidden_layers)`, layer outputs."""
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": 4096,
        "num_hidden_layers": 5,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 12288,
        "rope_theta": 1000000,
        "vocab_size": 151936,
        "block_size": 16,
        "num_target_layers": 36,
        "dflash_config": {"mask_token_id": 151643, "target_layer_ids": None},
        "layer_types": ["full_attention"] * 5,
        "head_dim": 128,
    }
    assert exported_aux_layers(config) == [2, 10, 18, 26, 34]
    cfg = exported_config(config)
    assert (cfg.block_size, cfg.mask_token_id, cfg.num_hidden_layers) == (16, 151643, 5)
    with pytest.raises(Exception, match="sliding"):
        exported_config({**config, "layer_types": ["sliding_attention"] * 5})


def test_the_validator_catches_a_dflash_export_one_layer_off(tmp_path):
    model = tiny(4)
    save_drafter(model, tmp_path / "d", {})
    sg = export_drafter(tmp_path / "d", "sglang", tmp_path / "sglang")
    cfg = json.loads((sg / "config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = [1, 3]  # HF ids written unshifted
    (sg / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ExportError) as err:
        check_export(sg)
    assert any("trained on" in p for p in err.value.problems)


def test_the_mask_token_never_has_a_zero_embedding_row(toy_tiny):
    """The toy's pad token (0) has a zero embedding row, as many checkpoints' pad rows are: as
    the mask it would make every slot's query and key zero and all slots of a block equal. The
    default skips it; a configured zero-row id is refused with a reason."""
    from types import SimpleNamespace

    from eyas.errors import EyasError
    from eyas.hf_models import target_model

    target = target_model(toy_tiny)
    assert target.token_ids()["pad_token_id"] == 0
    embed = target.load_tensors("embed")[0]["embed"].float()
    assert float(embed[0].norm()) == 0.0  # the premise
    method = get_method("dflash")
    seqs = [SimpleNamespace(ids=list(range(1, 40)))]
    chosen = method.pick_mask_token(target, None, seqs)
    assert chosen != 0 and float(embed[chosen].norm()) > 0 and chosen not in range(1, 40)
    # a packed index (training's: one token array) is read in one pass, with the same answer;
    # the highest id the data leaves free is taken
    import numpy as np

    packed = SimpleNamespace(tokens=np.arange(1, 40, dtype=np.int32))
    assert method.pick_mask_token(target, None, packed) == chosen
    top = target.vocab_size - 1
    packed = SimpleNamespace(tokens=np.array([1, top, 5], dtype=np.int32))
    assert method.pick_mask_token(target, None, packed) == top - 1
    with pytest.raises(EyasError) as err:
        method.pick_mask_token(target, 0, seqs)
    assert err.value.reason == "mask_token_zero_embedding"
    # with a zero mask row, a one-layer drafter's mask slots all compute the same state (deeper
    # ones differ only by what RoPE makes of the first layer's identical outputs)
    model = tiny(3, layers=1)
    with torch.no_grad():
        model.embed_tokens.weight[V - 1] = 0
        ids, aux = torch.randint(0, V - 1, (1, 12)), torch.randn(1, 12, 2 * H)
        states = model(ids, aux, torch.tensor([[6]]))
    assert torch.allclose(states[0, 0, 1], states[0, 0, 2], atol=1e-5)
    assert torch.allclose(states[0, 0, 1], states[0, 0, 3], atol=1e-5)
