"""The batch plan: which sequences train at each micro-batch position, made once per epoch.

A global micro-batch is a length bucket of at most `batch_tokens` padded tokens. The plan
depends only on the sequence lengths, the budget, the seed and the epoch, never on the world
size, so one process and N ranks train the same global batches (the gradient of a global batch
is the same however its sequences are split across ranks) and a resumed run recomputes the
batches from its position. Each rank takes a share balanced by tokens (longest first, to the
rank with the fewest tokens so far). A rank left without a sequence (a global batch with
fewer sequences than ranks) trains a few-token prefix at weight 0, so the collective backward
still matches without recomputing a whole sequence.
"""

from __future__ import annotations

import threading

import numpy as np

FILLER_TOKENS = 16  # the prefix an idle rank runs at weight 0


class BatchPlan:
    def __init__(self, lengths: np.ndarray, batch_tokens: int, seed: int):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.batch_tokens = batch_tokens
        self.seed = seed
        # epoch -> (sequence indices batch after batch, batch b's start in them); neighbouring
        # epochs kept, since a streamed capture's producer thread plans ahead of the trainer
        self._epochs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()
        self.epoch_len = len(self._make(0)[1]) - 1  # batch count is the same every epoch

    def _make(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Sort by length (ties in seeded random order), cut into padded-budget buckets, then
        shuffle the buckets."""
        rng = np.random.default_rng([self.seed, epoch])
        order = np.lexsort((rng.random(len(self.lengths)), self.lengths))
        cuts, width, count = [0], 0, 0
        for k, n in enumerate(self.lengths[order].tolist()):
            if count and max(width, n) * (count + 1) > self.batch_tokens:
                cuts.append(k)
                width, count = 0, 0
            width, count = max(width, n), count + 1
        cuts.append(len(order))
        starts = np.asarray(cuts, dtype=np.int64)
        perm = rng.permutation(len(starts) - 1)
        sizes = np.diff(starts)[perm]
        shuffled = np.concatenate([order[starts[b] : starts[b + 1]] for b in perm])
        return shuffled, np.concatenate([[0], np.cumsum(sizes)])

    def batch(self, position: int) -> np.ndarray:
        """The global batch at `position` (sequence indices)."""
        epoch, b = divmod(position, self.epoch_len)
        with self._lock:
            if epoch not in self._epochs:  # once per epoch, not per micro-batch
                self._epochs[epoch] = self._make(epoch)
                for old in [e for e in self._epochs if abs(e - epoch) > 1]:
                    del self._epochs[old]
            order, starts = self._epochs[epoch]
        return order[starts[b] : starts[b + 1]]

    def share(self, position: int, rank: int, world: int) -> np.ndarray:
        """This rank's sequences of global batch `position`, balanced by tokens."""
        batch = self.batch(position)
        if world == 1:
            return batch
        load = np.zeros(world, dtype=np.int64)
        owner = np.empty(len(batch), dtype=np.int64)
        for k in np.argsort(-self.lengths[batch], kind="stable"):
            r = int(np.argmin(load))
            owner[k] = r
            load[r] += self.lengths[batch[k]]
        return batch[owner == rank]

    def filler(self, position: int) -> int:
        """The sequence an idle rank runs (its first FILLER_TOKENS tokens, at weight 0)."""
        batch = self.batch(position)
        return int(batch[np.argmin(self.lengths[batch])])
