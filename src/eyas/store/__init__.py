"""The store: reading and writing of every stage's records (docs/architecture.md, "Store").

- `shards`: the generate stage's atomic Parquet shards and resume index;
- `samples`: the one columnar sample reader (stage dirs, Parquet, interchange JSONL) and the
  rule for which samples train;
- `files`: convert/render JSONL with their sidecars, and the audit's quarantine list.
"""

from eyas.store.files import (
    quarantine_path,
    quarantined_ids,
    read_quarantine,
    read_rendered,
    rendered_files,
    sidecar,
    write_quarantine,
)
from eyas.store.samples import Ragged, SampleTable, load_table, read_samples, select_trainable
from eyas.store.shards import SCHEMA, ShardWriter, committed_ids, shard_paths

__all__ = [
    "SCHEMA",
    "Ragged",
    "SampleTable",
    "ShardWriter",
    "committed_ids",
    "load_table",
    "quarantine_path",
    "quarantined_ids",
    "read_quarantine",
    "read_rendered",
    "read_samples",
    "rendered_files",
    "select_trainable",
    "shard_paths",
    "sidecar",
    "write_quarantine",
]
