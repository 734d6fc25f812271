"""metrics.jsonl after a kill: one curve, and a row cut short mid-write does not stop the
resume."""

import json

from eyas.train.metrics import truncate_metrics


def test_a_row_cut_by_a_kill_is_dropped_with_the_rows_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [json.dumps({"step": s, "loss": 1.0 / s}) for s in (1, 2, 3, 4)]
    path.write_text("\n".join(rows) + "\n" + '{"step": 5, "lo')  # killed while writing step 5
    assert truncate_metrics(path, 3) == 2
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2, 3]
    assert truncate_metrics(path, 3) == 0
