"""The peer drafter both speculators benchmarks train: speculators 0.9.0 `Eagle3DraftModel`
(one llama layer, sdpa attention, eager KL loss), built as its own trainer builds it. Imported
by the peer scripts inside the speculators venv."""

from __future__ import annotations


def eagle3_peer(verifier: str, t2d, d2t, draft_vocab: int, ttt: int, layer_ids, decay: float):
    """(model, trainer kwargs for its forward)."""
    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.train.cli import create_transformer_layer_config

    layer_cfg = create_transformer_layer_config(
        verifier_name_or_path=verifier,
        num_layers=1,
        draft_arch="llama",
        hidden_act=None,
        sliding_window=0,
        full_attention_indices=[0],
    )
    model = Eagle3DraftModel.from_training_args(
        verifier_config=layer_cfg,
        t2d=t2d,
        d2t=d2t,
        draft_vocab_size=draft_vocab,
        norm_before_residual=True,
        ttt_steps=ttt,
        target_layer_ids=list(layer_ids),
        verifier_name_or_path=verifier,
        draft_attn_impl="sdpa",
    )
    train_kwargs, _ = Eagle3DraftModel.get_trainer_kwargs(
        loss_fn="kl_div", loss_implementation="eager", ttt_steps=ttt, ttt_step_loss_decay=decay
    )
    return model, train_kwargs
