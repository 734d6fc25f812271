"""A sharded drafter checkpoint (`eyas.train.checkpoint`: one DCP shard per rank) read whole in
one process, through DCP's own reader: what `load_drafter` and `eyas export` consolidate. It
lives beside the loader, below training, so that loading a drafter never imports the trainer.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch


@contextlib.contextmanager
def one_process_ok() -> Iterator[None]:
    """DCP warns whenever it runs without a process group; one process is a supported case."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is .*single process")
        yield


def read_sharded_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The whole (unsharded) drafter weights of a sharded checkpoint `folder` (its `dcp/`).
    The frozen target tensors are not in it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(str(folder / "dcp"))
    meta = reader.read_metadata()
    model = {
        key.removeprefix("model."): torch.empty(md.size, dtype=md.properties.dtype)
        for key, md in meta.state_dict_metadata.items()
        if key.startswith("model.") and isinstance(md, TensorStorageMetadata)
    }
    with one_process_ok():
        dcp.load({"model": model}, storage_reader=reader, no_dist=True)
    return model


__all__ = ["one_process_ok", "read_sharded_weights"]
