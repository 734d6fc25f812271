"""eyas command line: one sub-command per stage; parsing and dispatch only.

    eyas convert --format auto --dataset b1 glaive.jsonl b1.jsonl
    eyas render --model ~/models/Kimi-K2.5 --trust-remote-code b1.jsonl b1.rendered.jsonl
    eyas prepare --config pipeline.toml && eyas generate --config pipeline.toml
    eyas audit runs/x/generate --model ~/models/Kimi-K2.5 --html report.html
    eyas capture --target DIR --data runs/x/generate --out runs/x/capture --backend vllm --url URL
    eyas train --target DIR --hidden-states runs/x/capture --out runs/x/drafter
    eyas export drafter --checkpoint runs/x/drafter --format sglang --out exports/sglang
    eyas eval --target DIR --drafter runs/x/drafter --input runs/x/prepare --backend vllm \
        --engine-python PY --engine-arg --tensor-parallel-size=2
    eyas quickstart

Every command's flags and arguments come from its config schema (its stage's `config`), so each is
also a config key (`--config FILE`, `--set key=value`). A user mistake (a missing path, a
malformed file or config, a bad flag) prints one `error:` line and exits 2; a refusal on
purpose (a template that ignores tools, a fingerprint mismatch, an invalid export) exits 1.
No traceback for either.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x carries its own copy of click
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older typer on the click package
    from click.exceptions import NoArgsIsHelpError, UsageError

from eyas.commands import audit, bench, data, evaluate, export, toy, train
from eyas.commands.common import fail


class _OneLineUsageErrors(TyperGroup):
    """A usage error (an unknown option or command, a bad choice or number) is a user mistake
    too: one `error:` line and exit 2 instead of typer's usage panel."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        return self._one_line(super().make_context, *args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        return self._one_line(super().invoke, ctx)

    @staticmethod
    def _one_line(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except NoArgsIsHelpError:
            raise
        except UsageError as exc:
            hint = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            message = exc.format_message().replace("Value error, ", "").rstrip(".")
            fail(f"{message}{hint} [bad_flag]")


app = typer.Typer(cls=_OneLineUsageErrors, add_completion=False, no_args_is_help=True, help=__doc__)
toy_app = typer.Typer(no_args_is_help=True, help="The toy world: a small Kimi-format target.")
export_app = typer.Typer(no_args_is_help=True, help="Export drafters and samples.")
app.add_typer(toy_app, name="toy")
app.add_typer(export_app, name="export")

# The commands live in eyas.commands, one module per group; this module assembles them, in
# the order `eyas --help` lists them.
app.command()(data.convert)
app.command()(data.render)
app.command()(data.prepare)
app.command()(data.generate)
app.command()(audit.audit)
app.command()(audit.show)
app.command()(audit.status)
app.command()(train.capture)
app.command()(train.train)
export_app.command("drafter")(export.export_drafter_cmd)
export_app.command("check")(export.export_check_cmd)
export_app.command("samples")(export.export_samples_cmd)
app.command("eval")(evaluate.eval_cmd)
app.command()(toy.quickstart)
toy_app.command("build")(toy.toy_build)
toy_app.command("datasets")(toy.toy_datasets)

bench_app = typer.Typer(
    no_args_is_help=True, help="Benchmark prompt sets (MT-Bench, HumanEval, BFCL v4)."
)
app.add_typer(bench_app, name="bench")
bench_app.command("fetch")(bench.bench_fetch)
bench_app.command("list")(bench.bench_list)


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())


if __name__ == "__main__":  # `python -m eyas.cli`
    main()
