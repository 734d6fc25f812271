"""bench/bench_real_quality.py in its smoke mode (`--tiny`: a few real prompts, 2 steps, one
point), so the long benchmark cannot rot: every stage runs for real (the prompt split,
generate, audit and capture through vLLM, training, export, served eval against a baseline
server), and a second run resumes from the results file without training again. A results file
whose curves were trained on other data is refused; a curve whose checkpoints are gone (its
workdir on a machine since replaced) starts again with its points kept; an arm whose definition
changed since its points is not run."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.vllm]

ROOT = Path(__file__).resolve().parents[2]
# the 6,593-token arm (SmolLM2's whole 49,152 would cost ~30 s a step here)
ARM = "eagle3-vocab16k"
SCRIPT = ROOT / "bench" / "bench_real_quality.py"


def _run(work: Path, out: Path, rc: int = 0) -> str:
    cmd = [sys.executable, str(SCRIPT), "--tiny", "--workdir", str(work), "--arms", ARM]
    proc = subprocess.run(
        [*cmd, "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=3000
    )
    assert proc.returncode == rc, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_the_smoke_run_measures_a_point_and_resumes(tmp_path, smollm2, vllm_python):
    work, out = tmp_path / "work", tmp_path / "real_quality.json"
    _run(work, out)
    d = json.loads(out.read_text())
    split = d["data"]["split"]
    assert split["disjoint"]["shared"] == 0 and split["disjoint"]["heldout_user_texts"] > 0
    assert {t["category"] for t in split["train"].values()} == {"chat", "code", "tool_calls"}
    arm = d["arms"][ARM]
    assert arm["status"] == "step_cap" and arm["commits"]  # a main arm: its one point
    (point,) = arm["points"]
    assert point["steps"] == 2 and point["segment"]["from_step"] == 0
    assert point["train_seconds"] > 0 and point["cpu_seconds"] > 0
    assert len(point["load_average"]) == 3
    assert point["lossless"] is True  # against the baseline server, twice
    assert point["acceptance_length"] >= 1.0 and point["verify_steps"] > 0
    assert len(point["acceptance_rate_per_position"]) == 3
    assert set(point["categories"]) <= {"chat", "code", "tool_calls", "math"}
    assert "math" in point["categories"]  # MT-Bench's math questions, held out
    again = _run(work, out)  # everything done: nothing is trained or served again
    assert f"{ARM}: step_cap already" in again
    assert json.loads(out.read_text())["arms"][ARM]["points"] == arm["points"]
    data = json.loads(out.read_text())["data"]
    (build,) = data["builds"]  # one build; its fingerprint is the data's
    assert build["fingerprint"] == data["fingerprint"] and len(data["fingerprint"]) == 64
    assert build["matches_before"] is None and build["captured"] == data["captured"]

    # curves trained on other data: the run refuses to add to them, and changes nothing
    tampered = json.loads(out.read_text())
    tampered["data"]["fingerprint"] = "0" * 64
    out.write_text(json.dumps(tampered))
    assert "are not those the curves" in _run(work, out, rc=1)
    assert json.loads(out.read_text()) == tampered

    # the results file on a machine without the workdir's checkpoints (the curve was cut
    # mid-way there): the curve starts again from step 0, its old point kept
    tampered["data"]["fingerprint"] = data["fingerprint"]
    tampered["arms"][ARM]["status"] = "running"
    out.write_text(json.dumps(tampered))
    shutil.rmtree(work / "arms" / ARM / "train" / "checkpoints")
    said = _run(work, out)
    assert f"{ARM}: state_missing" in said
    arm = json.loads(out.read_text())["arms"][ARM]
    (lost,) = arm["lost_runs"]
    assert lost["reason"] == "state_missing" and lost["points"] == [point]
    (new,) = arm["points"]
    assert new["steps"] == 2 and new["segment"]["from_step"] == 0
    # its own steps only, not added to the old (points round to 0.1 s, segments to 0.01 s)
    assert new["train_seconds"] == round(new["segment"]["step_seconds"], 1)

    # the arm's definition changed since its points: not run, its points untouched
    moved = json.loads(out.read_text())
    moved["arms"][ARM]["train"] = {**moved["arms"][ARM]["train"], "ttt": 3}
    moved["arms"][ARM]["status"] = "running"
    out.write_text(json.dumps(moved))
    assert f"{ARM}: not run (definition_changed: train" in _run(work, out)
    arm = json.loads(out.read_text())["arms"][ARM]
    assert arm["status"] == "not_run" and arm["reason"].startswith("definition_changed")
    assert arm["points"] == moved["arms"][ARM]["points"]

    # a plateau called before this run's --min-plateau-steps is not one: the curve goes on
    # (here at the smoke run's step cap, so it ends there without training again)
    early = json.loads(out.read_text())
    defined = {k: v for k, v in arm["train"].items() if k != "ttt"}  # as before the change
    early["arms"][ARM].update(status="plateau", train=defined)
    early["arms"][ARM].pop("reason", None)
    out.write_text(json.dumps(early))
    _run(work, out)
    arm = json.loads(out.read_text())["arms"][ARM]
    assert arm["status"] == "step_cap" and arm["points"] == early["arms"][ARM]["points"]
