"""Evaluation prompts from a generate stage: a whole regenerated conversation (`loss_mask`)
gives one prompt per regenerated turn, on the regenerated history before it."""

import pyarrow as pa
import pyarrow.parquet as pq

from eyas.evaluate.prompts import load_prompts
from eyas.records import Sample
from eyas.store.shards import SCHEMA, _to_columns


def test_every_regenerated_turn_is_a_prompt(tmp_path):
    # prompt [1, 2]; turn 1 = [10, 11]; user turn [3, 4] (not trained); turn 2 = [12, 13]
    multi = Sample(
        id="conv",
        dataset="chat",
        prompt_ids=[1, 2],
        output_ids=[10, 11, 3, 4, 12, 13],
        finish_reason="stop",
        loss_mask=[1, 1, 0, 0, 1, 1],
    )
    single = Sample(id="one", dataset="chat", prompt_ids=[5], output_ids=[6], finish_reason="stop")
    pq.write_table(pa.table(_to_columns([multi, single]), schema=SCHEMA), tmp_path / "s.parquet")
    prompts = load_prompts(tmp_path / "s.parquet")
    assert [(p["id"], p["prompt_ids"]) for p in prompts] == [
        ("conv", [1, 2]),
        ("conv@4", [1, 2, 10, 11, 3, 4]),
        ("one", [5]),
    ]
    # the limit counts conversations, not turns
    assert [p["id"] for p in load_prompts(tmp_path / "s.parquet", limit=1)] == ["conv", "conv@4"]
