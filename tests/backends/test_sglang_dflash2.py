"""SGLang serves eyas's DFlash2 export as trained: its own code (the 0.5.23 wheel's
`srt/models/dflash.py` and `srt/speculative/dflash_utils.py`, run on CPU by `sglang_source`)
parses the exported config, and its `DFlashGroupedConv` and `CandidateSelector`, holding the
exported tensors under their exported names, compute what eyas trained and drafts with: the
convolutions, the edge scores and the walk (greedy, and the draft distribution at T > 0).
0.5.12.post1 has neither the class nor the keys, which is why the export needs
`--engine-version` (`DFLASH2_SINCE`)."""

import json

import pytest
import torch
from safetensors.torch import load_file
from sglang_source import load, source_dir

from eyas.backends.sglang import conventions as sglang
from eyas.drafter.dflash2.decode import block_edges, walk
from eyas.export.drafter import export_drafter
from eyas.train.checkpoint import save_drafter

DFLASH = "sglang/srt/models/dflash.py"
UTILS = "sglang/srt/speculative/dflash_utils.py"


@pytest.fixture(scope="module")
def exported(module_tmp):
    from drafter.test_dflash2 import tiny

    tmp = module_tmp("dflash2-sglang")
    model = tiny(7, block=4)
    with torch.no_grad():  # away from the identity, so the convolutions matter
        for layer in model.layers:
            for conv in (layer.attention_conv, layer.mlp_conv):
                conv.base_kernel.normal_(0, 0.5)
                conv.kernel_projection.weight.normal_(0, 0.3)
    save_drafter(model, tmp / "d", {})
    folder = export_drafter(tmp / "d", "sglang", tmp / "e", engine_version="0.5.23")
    config = json.loads((folder / "config.json").read_text())
    weights = {k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()}
    model.load_state_dict(weights, strict=False)  # eyas on the exported (bf16) weights
    return model, config, weights


def _dflash_module():
    # the two module-level names its classes need to be defined on CPU
    return load(
        "0.5.23", DFLASH, get_compiler_backend=lambda: "eager", DraftParallelSpec=lambda **k: 0
    )


def test_only_the_newer_sglang_has_dflash2(exported):
    _, config, _ = exported
    assert config["architectures"] == [sglang.DFLASH2_ARCHITECTURE]
    new = (source_dir() / "0.5.23" / DFLASH).read_text()
    old = (source_dir() / "0.5.12.post1" / DFLASH).read_text()
    assert "class DFlash2DraftModel(DFlashDraftModel)" in new and "DFlash2DraftModel" not in old
    assert "conv_kernel_size" not in (source_dir() / "0.5.12.post1" / UTILS).read_text()


def test_sglang_parses_the_exported_dflash2_config(exported):
    model, config, _ = exported
    parsed = load("0.5.23", UTILS).parse_dflash_draft_config(draft_hf_config=config)
    c = model.config
    assert (parsed.conv_kernel_size, parsed.conv_group_size) == (
        c.conv_kernel_size,
        c.conv_group_size,
    )
    assert (parsed.selector_rank, parsed.selector_top_k) == (c.selector_rank, c.selector_top_k)
    assert parsed.block_size == c.block_size and parsed.mask_token_id == c.mask_token_id
    assert [i + 1 for i in parsed.target_layer_ids] == c.aux_layer_ids
    assert parsed.output_multiplier == 1.0 and parsed.final_logit_softcapping is None


def test_sglang_dflash2_convolutions_compute_eyas(exported):
    model, _, weights = exported
    mod = _dflash_module()
    c = model.config
    for i, layer in enumerate(model.layers):
        for name in ("attention_conv", "mlp_conv"):
            theirs = mod.DFlashGroupedConv(c.hidden_size, c.block_size, 2, c.conv_group_size)
            prefix = f"layers.{i}.{name}."
            state = {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
            theirs.load_state_dict(state)  # strict: the exported names are SGLang's
            x = torch.randn(3 * c.block_size, c.hidden_size)  # three blocks, SGLang's rows
            with torch.no_grad():
                got, kernel = theirs.prepare(x)
                want, ours = getattr(layer, name).prepare(x[None])
                assert torch.allclose(got, want[0], atol=1e-5)
                y = torch.randn_like(x)
                done = getattr(layer, name).finish(y[None], ours)[0]
                assert torch.allclose(theirs.finish(y, kernel), done, atol=1e-5)


def test_sglang_dflash2_selector_scores_and_walks_as_eyas(exported):
    model, _, weights = exported
    mod = _dflash_module()
    c = model.config
    theirs = mod.CandidateSelector(
        hidden_size=c.hidden_size,
        vocab_size=c.vocab_size,
        state_rank=c.selector_rank,
        top_k=c.selector_top_k,
    )
    prefix = "candidate_selector."
    theirs.load_state_dict(
        {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
    )
    states = torch.randn(c.block_size - 1, c.hidden_size)
    anchor = 11
    with torch.no_grad():
        candidates, edges = block_edges(model, states, anchor)
        # `DFlash2DraftModel.compute_candidates` without tensor parallelism: the target
        # head's logits (`_project_candidate_logits`), top K (`_radix_topk`, torch.topk here)
        logits = mod._project_candidate_logits(
            states, model.lm_head, num_org=c.vocab_size, use_quant_head=False
        )
        unary, ids = mod._radix_topk(logits, c.selector_top_k)
        assert torch.equal(ids, candidates)
        lattice = theirs.build_lattice(
            candidate_ids=ids[None],
            unary_logits=unary[None],
            hidden_states=states[None],
            anchor_token_ids=torch.tensor([anchor]),
        )[0]
        assert torch.allclose(lattice, edges, atol=1e-5)
        greedy, _ = theirs.sample_path(
            candidate_ids=ids[None],
            scores=lattice[None],
            uniforms=torch.rand(1, len(states)),
            temperatures=torch.ones(1),
            greedy_mask=torch.tensor([True]),
        )
        assert greedy[0].tolist() == walk(candidates, edges, 0.0, None, c.vocab_size)[0]
        # at T = 2 SGLang draws by inverse CDF; along its path, eyas's draft distribution is
        # SGLang's q (softmax of the row the path is in, over the K candidates)
        tokens, q_rows = theirs.sample_path(
            candidate_ids=ids[None],
            scores=lattice[None],
            uniforms=torch.rand(1, len(states), generator=torch.Generator().manual_seed(3)),
            temperatures=torch.full((1,), 2.0),
            greedy_mask=torch.tensor([False]),
        )
    path = [int((ids[j] == t).nonzero()[0]) for j, t in enumerate(tokens[0].tolist())]
    previous = 0
    for j, index in enumerate(path):
        assert torch.allclose(q_rows[0, j], torch.softmax(edges[j, previous] / 2.0, -1), atol=1e-5)
        previous = index
