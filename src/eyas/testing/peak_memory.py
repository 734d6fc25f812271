"""Peak live tensor bytes of a piece of code, traced op by op: what a device's allocator would
report as `max_memory_allocated` above what existed before, without the device.

Run under `FakeTensorMode` the code allocates nothing, so a training step at a real width
(Kimi-K2.5's, on a 2-core machine) can be traced: every op's outputs are recorded with the
bytes of their storages, a storage counts until its last tensor dies (a weak reference says
when), and the peak is the largest sum over the run. What the allocator adds (rounding to 512
bytes, library workspaces) and a kernel's private scratch memory are not seen; autocast's
cached bf16 weight copies, autograd's saved tensors and every transient are.
"""

from __future__ import annotations

from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class PeakBytes(TorchDispatchMode):
    """`with PeakBytes(existing) as p: ...` then `p.peak`: the most bytes live at once among the
    storages created inside (those of `existing`, the tensors that existed before, are not
    counted, nor are views of them); `p.marks` holds the live bytes at each `mark(name)`."""

    # higher-order ops (FlexAttention) run whole, as their compiled kernels do: their outputs
    # are recorded, their eager implementation's insides (the kernel's on-chip work) are not
    supports_higher_order_operators = True

    def __init__(self, existing=()) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        # storages that existed before (weights, inputs): their views are not new memory
        self.existing = {StorageWeakRef(t.untyped_storage()).cdata for t in existing}
        self.now = self.peak = 0
        self.marks: dict[str, int] = {}

    def _sweep(self) -> None:
        for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            self.now -= self.live.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._sweep()  # what died since the last op is free before this one allocates
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not hasattr(t, "untyped_storage"):
                continue
            storage = t.untyped_storage()
            ref = StorageWeakRef(storage)
            if ref.cdata in self.live or ref.cdata in self.existing:
                continue
            self.live[ref.cdata] = (ref, storage.nbytes())
            self.now += storage.nbytes()
        self.peak = max(self.peak, self.now)
        return out

    def mark(self, name: str) -> None:
        self._sweep()
        self.marks[name] = self.now
