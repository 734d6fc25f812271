"""The benchmark commands' user errors: one `error:` line with its reason, exit 2."""

from typer.testing import CliRunner

from eyas.cli import app

runner = CliRunner()


def test_unknown_benchmark_is_one_error_line(tmp_path):
    args = ["eval", "--target", str(tmp_path), "--drafter", str(tmp_path), "--bench", "mtbench"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "no benchmark 'mtbench'" in result.output and "[unknown_benchmark]" in result.output
    assert "Traceback" not in result.output


def test_eval_needs_input_or_bench(tmp_path):
    result = runner.invoke(app, ["eval", "--target", str(tmp_path), "--drafter", str(tmp_path)])
    assert result.exit_code == 2 and "--input PROMPTS or --bench NAMES" in result.output


def test_bench_list_names_every_bfcl_category(bench_cache):
    result = runner.invoke(app, ["bench", "list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "bfcl_multi_turn_miss_func" in result.output and "mt_bench" in result.output
