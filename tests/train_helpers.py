"""Shared by the training and capture tests (importable: pytest puts tests/ on sys.path)."""

from eyas.train.config import TrainConfig

# A short run on the toy tiny target that still learns: shared by every test that trains one.
# It is sized down by steps, TTT depth and batch, never by what the export and the engines see:
# the draft vocabulary is eyas's default (the toy's supervised tokens), so the served and
# end-to-end tests serve the drafter a user gets (issue 35: a default no test served shipped
# unservable; the whole vocabulary is asked for by size where a test needs it).
TOY_TRAIN = dict(
    steps=6,
    ttt=3,
    max_len=1024,
    batch_tokens=3000,
    lr=3e-3,
    warmup_steps=2,
    checkpoint_every=3,
)


def toy_train_config(target, out, **kw) -> TrainConfig:
    return TrainConfig(**{"target": target, "out": out, **TOY_TRAIN, **kw})
