"""The drafter's TTT attention and the loss-mask alignment, on hand-checkable cases."""

import math

import pytest
import torch
from torch import nn

from eyas.drafter.eagle3.model import Eagle3Config, Eagle3Drafter, ttt_attention
from eyas.drafter.eagle3.train import step_mask, ttt_loss
from eyas.drafter.loss import Teacher
from eyas.drafter.vocab import build_vocab_mapping, token_counts


def tiny_drafter(seed=0, vocab=40, dv=40):
    torch.manual_seed(seed)
    cfg = Eagle3Config(
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        draft_vocab_size=dv,
        target_hidden_size=32,
        aux_layer_ids=[1, 2, 3],
    )
    model = Eagle3Drafter(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def naive_ttt(model, ids, aux, k_steps):
    """Step by step, one query at a time, with the attention set written out explicitly:
    step k at index j sees step-0 keys at positions <= j and steps 1..k keys at index j."""
    attn = model.midlayer.self_attn
    layer = model.midlayer
    b, t = ids.shape
    fused = model.fc(aux)
    keys = {}  # (step, j) -> (k, v) for one position: [h, d]
    hidden_prev = fused
    outs = []
    for k in range(k_steps):
        logits_k = torch.zeros(b, t, model.config.draft_vocab_size)
        hidden_k = torch.zeros_like(fused)
        queries = {}  # j -> q of this step: [1, h, 1, d]
        for j in range(t):  # all of this step's keys first: position j attends to j' < j
            tok = ids[:, min(j + k, t - 1)]
            emb = model.embed_tokens(tok)[:, None]
            x = torch.cat(
                [layer.input_layernorm(emb), layer.hidden_norm(hidden_prev[:, j : j + 1])], -1
            )
            queries[j], kk, vv = attn.project(x, torch.tensor([j + k]))
            keys[(k, j)] = (kk[0, :, 0], vv[0, :, 0])
        for j in range(t):
            q = queries[j]
            visible = [keys[(0, i)] for i in range(j + 1)] + [keys[(s, j)] for s in range(1, k + 1)]
            kmat = torch.stack([kv[0] for kv in visible], 1)  # [h, n, d]
            vmat = torch.stack([kv[1] for kv in visible], 1)
            scores = (q[0, :, 0:1] * kmat).sum(-1) / math.sqrt(attn.d)  # [h, n]
            o = (torch.softmax(scores, -1)[..., None] * vmat).sum(1)  # [h, d]
            h = hidden_prev[:, j : j + 1] + attn.o_proj(o.reshape(1, 1, -1))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
            hidden_k[:, j] = h[:, 0]
            logits_k[:, j] = model.lm_head(model.norm(h))[:, 0]
        outs.append(logits_k)
        hidden_prev = hidden_k
    return outs


def test_unrolled_ttt_equals_naive_recomputation():
    model = tiny_drafter()
    ids = torch.randint(0, 40, (1, 7))
    aux = torch.randn(1, 7, 96)
    with torch.no_grad():
        fast = [model.logits(h) for h in model(ids, aux, 4)]
        slow = naive_ttt(model, ids, aux, 4)
    for k in range(4):
        assert torch.allclose(fast[k], slow[k], atol=1e-5), k


def test_only_the_first_assistant_token_is_trained_when_only_it_is_supervised():
    # Sequence of 10 tokens: prompt = 0..5 (P = 6); only x_6 (the first output token) is
    # supervised. Step k predicts x_{j+2+k} at index j, so exactly index 6-2-k is trained.
    supervised = torch.zeros(1, 10, dtype=torch.long)
    supervised[0, 6] = 1
    for k in range(3):
        assert step_mask(supervised, k)[0].nonzero().flatten().tolist() == [4 - k]
    torch.manual_seed(0)
    v = 12
    draft = [torch.randn(1, 10, v, requires_grad=True) for _ in range(3)]
    target = torch.randn(1, 10, v)
    ids = torch.arange(v)
    # identity heads: the "hidden states" are the logits themselves
    teacher = Teacher(target, torch.eye(v))
    loss, stats = ttt_loss(
        draft, teacher, supervised, nn.Identity(), ids, torch.ones(v, dtype=torch.bool), [1.0] * 3
    )
    loss.backward()
    for k in range(3):
        rows = draft[k].grad[0].abs().sum(-1).nonzero().flatten().tolist()
        assert rows == [4 - k]  # the gradient reaches exactly that prediction
        # ... whose teacher is the target distribution at position j+1+k = 5 (predicting x_6)
        p = torch.softmax(target[0, 5], -1)
        expected = -(p * torch.log_softmax(draft[k][0, 4 - k].detach(), -1)).sum()
        assert math.isclose(stats[k].loss_sum, float(expected), rel_tol=1e-5)
    assert [s.positions for s in stats] == [1, 1, 1]


def test_targets_outside_the_draft_vocab_are_excluded():
    supervised = torch.ones(1, 6, dtype=torch.long)
    target = torch.zeros(1, 6, 8)
    target[0, :, 7] = 10.0  # the target always wants token 7
    t2d = torch.ones(8, dtype=torch.bool)
    t2d[7] = False
    draft = [torch.randn(1, 6, 7, requires_grad=True)]
    teacher = Teacher(target, torch.eye(8))
    loss, stats = ttt_loss(draft, teacher, supervised, nn.Identity(), torch.arange(7), t2d, [4.0])
    assert stats[0].positions == 4 and stats[0].in_vocab == 0 and float(loss.detach()) == 0.0


def test_vocab_mapping_from_supervised_tokens_only():
    seqs = [([1, 2, 3, 3, 9], [0, 0, 1, 1, 1]), ([1, 1, 1, 4], [0, 0, 0, 1])]
    vocab = build_vocab_mapping(token_counts(seqs, 12), 8)
    # prompt-only token 1 and 2 are not in the draft vocab; only 3, 4, 9 exist: no padding
    assert vocab["draft_vocab_size"] == 3 and vocab["distinct_supervised_tokens"] == 3
    ids = torch.arange(3) + vocab["d2t"]
    assert ids.tolist() == [3, 4, 9] and vocab["t2d"].nonzero().flatten().tolist() == [3, 4, 9]


def _optimizer_step(model):
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    hidden = model(torch.randint(0, 50, (2, 6)), torch.randn(2, 6, 96), 2)
    sum(model.logits(x).sum() for x in hidden).backward()
    opt.step()
    sched.step()
    return opt, sched


def test_checkpoints_key_optimizer_state_by_name_and_read_positional_ones(tmp_path):
    from eyas.train.checkpoint import load_checkpoint, save_whole_checkpoint

    model = tiny_drafter(0, 50, 20)
    opt, sched = _optimizer_step(model)
    path = save_whole_checkpoint(tmp_path, 1, model, opt, sched, {"step": 1})
    blob = torch.load(path / "optimizer.pt", weights_only=True)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert blob["optimizer"]["param_groups"][0]["params"] == names
    assert set(blob["optimizer"]["state"]) <= set(names)
    for layout in ("by_name", "positional"):  # positional: checkpoints of earlier versions
        if layout == "positional":
            blob["optimizer"] = opt.state_dict()
            torch.save(blob, path / "optimizer.pt")
        fresh = tiny_drafter(1, 50, 20)
        opt2, sched2 = _optimizer_step(fresh)
        load_checkpoint(path, fresh, opt2, sched2)
        want, got = opt.state_dict(), opt2.state_dict()
        assert want["param_groups"] == got["param_groups"]
        for i, state in want["state"].items():
            for key, value in state.items():
                assert torch.equal(got["state"][i][key], value), (layout, i, key)


def eager_ttt_attention(q, k0, v0, diagonal, scale):
    """The attention as eyas computed it before chunking: a [T, T + S] score matrix."""
    t = q.shape[2]
    scores0 = torch.matmul(q, k0.transpose(-1, -2)) * scale
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    scores0 = scores0.masked_fill(~causal, float("-inf"))
    diag = [(q * ks).sum(-1, keepdim=True) * scale for ks, _ in diagonal]
    weights = torch.softmax(torch.cat([scores0, *diag], -1).float(), -1).to(q.dtype)
    out = torch.matmul(weights[..., :t], v0)
    for s, (_, vs) in enumerate(diagonal):
        out = out + weights[..., t + s : t + s + 1] * vs
    return out


@pytest.mark.parametrize("k_steps", [1, 3, 7])
def test_fused_ttt_attention_equals_eager_forward_and_gradients(k_steps):
    torch.manual_seed(k_steps)
    b, h, t, d = 3, 4, 29, 32

    def leaf():
        return torch.randn(b, h, t, d, requires_grad=True)

    q, k0, v0 = leaf(), leaf(), leaf()
    diagonal = [(leaf(), leaf()) for _ in range(k_steps - 1)]
    inputs = [q, k0, v0, *[x for pair in diagonal for x in pair]]
    scale = 1 / math.sqrt(d)
    want = eager_ttt_attention(q, k0, v0, diagonal, scale)
    got = ttt_attention(q, k0, v0, diagonal, scale)
    assert torch.allclose(got, want, atol=1e-5)
    probe = torch.randn_like(want)
    grads_want = torch.autograd.grad((want * probe).sum(), inputs)
    grads_got = torch.autograd.grad((got * probe).sum(), inputs)
    for gw, gg in zip(grads_want, grads_got):
        assert torch.allclose(gg, gw, atol=1e-5)


def test_padded_batch_rows_equal_their_unpadded_runs():
    """Right padding never reaches a real position: each row of a padded batch equals the
    same sequence run alone (the fused path keeps no mask)."""
    model = tiny_drafter(3)
    lengths = [11, 6]
    ids = torch.randint(0, 40, (2, 11))
    aux = torch.randn(2, 11, 96)
    with torch.no_grad():
        batch = model(ids, aux, 3)
        for r, n in enumerate(lengths):
            alone = model(ids[r : r + 1, :n], aux[r : r + 1, :n], 3)
            for k in range(3):
                # step k reads ids shifted by k: the last k positions see padding
                m = n - k
                assert torch.allclose(batch[k][r, :m], alone[k][0, :m], atol=1e-5), (r, k)


def test_chunked_loss_equals_one_chunk():
    torch.manual_seed(2)
    model = tiny_drafter(2, vocab=40, dv=25)
    ids = torch.randint(0, 40, (2, 40))
    aux = torch.randn(2, 40, 96)
    supervised = (torch.rand(2, 40) > 0.3).long()
    teacher = Teacher(torch.randn(2, 40, 32), torch.randn(40, 32))
    draft_ids = torch.randperm(40)[:25].sort().values
    t2d = torch.zeros(40, dtype=torch.bool)
    t2d[draft_ids] = True
    results = []
    for chunk in (16, 1024):
        model.zero_grad()
        hidden = model(ids, aux, 3)
        loss, stats = ttt_loss(
            hidden, teacher, supervised, model.lm_head, draft_ids, t2d, [30.0] * 3, chunk=chunk
        )
        loss.backward()
        results.append((loss.item(), [s.correct for s in stats], model.fc.weight.grad.clone()))
    (l1, c1, g1), (l2, c2, g2) = results
    assert math.isclose(l1, l2, rel_tol=1e-6) and c1 == c2
    assert torch.allclose(g1, g2, atol=1e-6)


def test_ttt_loss_equals_a_full_vocabulary_reference():
    """The loss computes the full-vocabulary argmax once and the draft rows of the head per
    step; the figures are those of the direct definition over the full-vocabulary logits."""
    torch.manual_seed(5)
    b, t, v, ht, k_steps = 2, 12, 30, 8, 3
    draft_ids = torch.tensor([0, 2, 3, 7, 11, 12, 19, 25, 29])
    t2d = torch.zeros(v, dtype=torch.bool)
    t2d[draft_ids] = True
    head = torch.randn(v, ht)
    head[4] += 3.0  # make some target argmaxes fall outside the draft vocabulary
    final = torch.randn(b, t, ht)
    supervised = (torch.rand(b, t) > 0.2).long()
    draft = [torch.randn(b, t, len(draft_ids), requires_grad=True) for _ in range(k_steps)]
    loss, stats = ttt_loss(
        draft, Teacher(final, head), supervised, nn.Identity(), draft_ids, t2d, [10.0] * k_steps
    )
    want, seen = 0.0, 0
    for k in range(k_steps):
        loss_k = 0.0
        for r in range(b):
            for j in range(t - 2 - k):  # index j: teacher at j+1+k, mask of x_{j+2+k}
                if not supervised[r, j + 2 + k]:
                    continue
                full = final[r, j + 1 + k] @ head.t()
                if not t2d[full.argmax()]:
                    continue
                p = torch.softmax(full[draft_ids], -1)
                loss_k += float(-(p * torch.log_softmax(draft[k][r, j].detach(), -1)).sum())
                seen += 1
        assert math.isclose(stats[k].loss_sum, loss_k, rel_tol=1e-5, abs_tol=1e-6), k
        want += 0.8**k * loss_k / 10.0
    assert seen and math.isclose(float(loss), want, rel_tol=1e-5)
    assert sum(s.in_vocab for s in stats) == seen < sum(s.positions for s in stats)
