"""The memory traffic of a piece of code's elementwise work, counted op by op without a device:
the bytes each op outside the matmuls and the attention kernel reads and writes, charged to the
eyas function that issued it, in forward and in backward.

On a GPU an eager elementwise op is a kernel that reads its inputs from memory and writes its
outputs back; what it costs is those bytes over the memory's bandwidth. Run under
`FakeTensorMode`, a training step at Kimi-K2.5's width can be counted on a CPU
(`eyas.testing.step_cost.count_traffic`), and the count says which functions would gain most
from fusion (`--fast-path compiled`, `eyas.drafter.fast_path`).

Conventions:
- an op's traffic is the bytes of its tensor inputs as viewed (a slice reads the slice) plus
  those of its outputs; a gather (`embedding`, `index_select`) reads the rows it returns, not
  the whole table; views, metadata and allocations without a fill are free;
- matmuls and attention kernels are counted apart (`kernel_bytes`): their cost is their FLOPs
  (`eyas.train.step_flops`);
- an op belongs to the innermost function on the Python stack from `eyas` (outside
  `eyas.testing`); an op of backward belongs to the function whose forward op created its
  autograd node (tagged as forward runs, by `TaggedGradFns`); backward nodes created below
  Python (autocast's casts of a linear's input and weight, the sum of a tensor's gradients)
  are charged to `autograd`;
- what a kernel reads twice (caches, recomputation inside a kernel) is not seen, nor is a
  fused kernel's saving: this counts the eager program.
"""

from __future__ import annotations

import sys
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# ops that move no data: views, metadata, allocations left unfilled
# fmt: off
FREE = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "transpose", "t", "permute", "expand",
    "unsqueeze", "squeeze", "slice", "select", "as_strided", "alias", "detach", "split",
    "split_with_sizes", "unbind", "unflatten", "lift_fresh", "empty", "empty_like",
    "empty_strided", "new_empty", "new_empty_strided", "device", "sym_size", "sym_stride",
    "sym_numel", "sym_storage_offset", "dim", "is_contiguous", "stride", "size", "numel",
    "_local_scalar_dense",
})
# fmt: on
# matmuls and attention kernels: counted apart, costed by their FLOPs
# fmt: off
KERNELS = frozenset({
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
    "flex_attention", "flex_attention_backward",
})
# fmt: on
# gathers read the rows they return: their first tensor (the table) is not read whole
GATHERS = frozenset({"embedding", "index_select", "index", "gather"})
AUTOGRAD = "autograd"  # backward nodes created below Python
SITE = "eyas_site"  # the autograd node metadata key


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _op_name(func) -> str:
    return getattr(func, "__name__", str(func)).split(".")[0]


def _region() -> str:
    """The innermost eyas function on the stack (outside eyas.testing), by qualified name
    without its local parts (a comprehension belongs to its function)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if "/eyas/" in name and "/eyas/testing/" not in name:
            return frame.f_code.co_qualname.split(".<locals>")[0]
        frame = frame.f_back
    return "outside eyas"


class TaggedGradFns(TorchFunctionMode):
    """Tags each autograd node created in forward with the region of the code that made it
    (the node's `metadata`), for `ElementwiseTraffic` to charge its backward to."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        region = None
        for t in tree_leaves(out):
            fn = getattr(t, "grad_fn", None) if isinstance(t, torch.Tensor) else None
            if fn is not None and SITE not in fn.metadata:
                region = region or _region()
                fn.metadata[SITE] = region
        return out


class ElementwiseTraffic(TorchDispatchMode):
    """`with TaggedGradFns(), ElementwiseTraffic() as t: ...` then `t.by_region`,
    `t.by_op`, `t.total` (bytes of elementwise traffic) and `t.kernel_bytes` (the operands of
    matmuls and attention kernels, for scale). Regions of backward are prefixed `backward:`."""

    # FlexAttention's higher-order op runs whole, as its compiled kernel does
    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.by_region: Counter[str] = Counter()
        self.by_op: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.total = 0
        self.kernel_bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = _op_name(func)
        if name in FREE:
            return out
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if name in GATHERS:  # the table is read where the output says
            tensors = tensors[1:]
        moved = sum(map(_nbytes, tensors)) + sum(map(_nbytes, outs))
        if name in KERNELS or "flex_attention" in name:
            self.kernel_bytes += moved
            return out
        node = torch._C._current_autograd_node()
        region = _region() if node is None else "backward: " + node.metadata.get(SITE, AUTOGRAD)
        self.by_region[region] += moved
        self.by_op[name] += moved
        self.calls[name] += 1
        self.total += moved
        return out

    def in_functions(self, names: set[str]) -> int:
        """Bytes charged to these functions, forward and backward."""
        return sum(b for r, b in self.by_region.items() if r.removeprefix("backward: ") in names)
