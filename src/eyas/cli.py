"""eyas command line: one sub-command per stage; parsing and dispatch only.

    eyas convert --format auto --dataset b1 glaive.jsonl b1.jsonl
    eyas render --model ~/models/Kimi-K2.5 --trust-remote-code b1.jsonl b1.rendered.jsonl
    eyas prepare --config pipeline.toml && eyas generate --config pipeline.toml
    eyas audit runs/x/generate --model ~/models/Kimi-K2.5 --html report.html
    eyas capture --target DIR --data runs/x/generate --out runs/x/capture --backend vllm --url URL
    eyas train --target DIR --hidden-states runs/x/capture --out runs/x/drafter
    eyas export drafter --checkpoint runs/x/drafter --format sglang --out exports/sglang
    eyas eval --target DIR --drafter exports/sglang --input runs/x/prepare --backend vllm ...
    eyas quickstart

A user mistake (a missing path, a malformed file or config, a bad flag) prints one `error:`
line and exits 2; a refusal on purpose (a template that ignores tools, a fingerprint mismatch,
an invalid export) exits 1. No traceback for either.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from eyas.cli_schema import Flag, schema_flags
from eyas.config import CaptureConfig, EvalConfig, PipelineConfig, TrainConfig
from eyas.errors import EyasError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
toy_app = typer.Typer(no_args_is_help=True, help="The toy world: a small Kimi-format target.")
export_app = typer.Typer(no_args_is_help=True, help="Export drafters and samples.")
app.add_typer(toy_app, name="toy")
app.add_typer(export_app, name="export")
console = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config (flags override it)")]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="dotted override key=value (repeatable)")
]


def _fail(message: str, code: int = 2) -> None:
    from rich.markup import escape

    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _validation_message(exc: Any) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return "invalid config: " + "; ".join(parts)


def _user_errors(fn):
    """Turn the errors a user must fix into one `error:` line and an exit code."""

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        from pydantic import ValidationError

        try:
            return fn(*args, **kwargs)
        except EyasError as exc:
            _fail(f"{exc.detail} [{exc.reason}]", exc.exit_code)
        except ValidationError as exc:
            _fail(_validation_message(exc))

    return command


def _renderer(model: Path, profile: str | None, thinking: bool | None, trust: bool):
    from eyas.render import Renderer

    return Renderer(model, profile, thinking, trust)


def _thinking(value: str | None) -> bool | None:
    if value is None:
        return None
    if value not in ("on", "off"):
        raise EyasError("bad_flag", f"--thinking takes on|off, not {value!r}")
    return value == "on"


# -- convert / render ----------------------------------------------------------------------------


@app.command()
@_user_errors
def convert(
    input: Annotated[Path, typer.Argument(help="JSONL, JSON array, Parquet or save_to_disk dir")],
    output: Annotated[Path, typer.Argument(help="canonical conversations (JSONL)")],
    format: Annotated[
        str, typer.Option(help="glaive|hermes|xlam|sharegpt|ultrachat|openai|auto")
    ] = "auto",
    dataset: Annotated[str, typer.Option(help="dataset name stored on every row")] = "",
) -> None:
    """Convert a source dataset to canonical conversations with structured tools."""
    from eyas.sources.run import convert_file, errors_path

    result = convert_file(input, output, format, dataset or input.stem)
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


@app.command()
@_user_errors
def render(
    input: Annotated[Path, typer.Argument(help="output of `eyas convert`")],
    output: Annotated[Path, typer.Argument(help="input lines plus prompt_ids and prompt_text")],
    model: Annotated[Path, typer.Option(help="local model or tokenizer directory")],
    thinking: Annotated[str | None, typer.Option(help="on|off (the format's switch)")] = None,
    profile: Annotated[str | None, typer.Option(help="model format (default: detected)")] = None,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code")] = False,
) -> None:
    """Render prompts with the model's own chat template (tools passed as structured tools=)."""
    from eyas.render.run import render_file

    renderer = _renderer(model, profile, _thinking(thinking), trust_remote_code)
    result = render_file(renderer, input, output)
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

_MODEL_FLAGS = (
    Flag("model.dir", "--model"),
    Flag("model.profile", "--profile"),
    Flag("model.thinking", "--thinking"),
    Flag("model.trust_remote_code", "--trust-remote-code"),
)


@app.command()
@_user_errors
@schema_flags(PipelineConfig, *_MODEL_FLAGS)
def prepare(config: ConfigOpt = None, set_: SetOpt = None, *, flags: dict) -> None:
    """Convert and render every dataset of a pipeline config."""
    from eyas.config import build_config
    from eyas.generate.prepare import prepare as run_prepare

    cfg = build_config(PipelineConfig, config, flags, set_)
    renderer = _renderer(
        cfg.model.dir, cfg.model.profile, cfg.model.thinking, cfg.model.trust_remote_code
    )
    summary = run_prepare(cfg, renderer)
    table = Table("dataset", "format", "converted", "rejected", "rendered", title="prepare")
    for name, s in summary.items():
        table.add_row(
            name,
            s["format"],
            str(s["converted"]),
            str(sum(s["convert_reasons"].values())),
            str(s["rendered"]),
        )
    console.print(table)
    console.print(f"-> {cfg.stage_dir('prepare')}")


@app.command()
@_user_errors
@schema_flags(
    PipelineConfig,
    *_MODEL_FLAGS,
    Flag("generate.input"),
    Flag("generate.out"),
    Flag("backend.kind", "--backend"),
    Flag("backend.urls", "--url"),
    Flag("backend.concurrency"),
    Flag("backend.batch_size"),
    Flag("backend.timeout_s", "--timeout"),
    Flag("backend.retry.max_attempts"),
    Flag("backend.retry.max_consecutive_failures"),
    Flag("generate.max_new_tokens"),
    Flag("sampling.temperature"),
    Flag("generate.multi_turn"),
    Flag("generate.shard"),
    Flag("generate.shard_size"),
)
def generate(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
    *,
    flags: dict,
) -> None:
    """Regenerate responses with exact token ids; resumable (rerun to resume)."""
    from eyas.config import build_config
    from eyas.generate.run import run_generate

    cfg = build_config(PipelineConfig, config, flags, set_)
    if config is None and cfg.generate.input is None:
        raise EyasError("bad_flag", "without --config, --model, --input and --out are required")
    if config is None and cfg.generate.out is None:
        raise EyasError("bad_flag", "without --config, --out is required")
    renderer = _renderer(
        cfg.model.dir, cfg.model.profile, cfg.model.thinking, cfg.model.trust_remote_code
    )
    manifest = run_generate(cfg, renderer, progress)
    run = manifest["this_run"]
    out = cfg.generate_out
    console.print(
        f"{run['samples_written']} samples written, {run['failed']} failed, {run['retries']} "
        f"retries, skipped {run['skipped']}; {manifest['counts']['samples']} samples in {out}"
    )
    if run["failure_reasons"]:
        console.print(f"failure reasons: {run['failure_reasons']} (see {out / 'errors.jsonl'})")
    if not manifest["complete"]:
        if manifest["stopped_reason"] != "interrupted":
            console.print(
                f"[red]stopped: {manifest['stopped_reason']}[/]; fix the servers and rerun "
                "the same command to resume"
            )
            raise typer.Exit(1)
        console.print("[yellow]interrupted: rerun the same command to resume[/]")
        raise typer.Exit(130)


# -- audit / show --------------------------------------------------------------------------------


@app.command()
@_user_errors
def audit(
    input: Annotated[Path, typer.Argument(help="stage dir, run dir, Parquet or sample JSONL")],
    model: Annotated[Path | None, typer.Option(help="model dir (tokenizer + template)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write findings as JSON")] = None,
    html_out: Annotated[
        Path | None, typer.Option("--html", help="write a self-contained HTML report")
    ] = None,
    quarantine: Annotated[
        Path | None,
        typer.Option(help="quarantine list (default: beside the data, where training looks)"),
    ] = None,
    max_quarantine: Annotated[
        float,
        typer.Option(help="fail when a dataset quarantines more than this share (95% lower bound)"),
    ] = 0.05,
    allow_incomplete: Annotated[
        bool, typer.Option("--allow-incomplete", help="exit 0 when checks were skipped")
    ] = False,
    max_len: Annotated[int | None, typer.Option(help="planned training/serving length")] = None,
    sample: Annotated[
        str, typer.Option(help="per-dataset sample for checks that decode, or 'all'")
    ] = "2000",
    profile: Annotated[str | None, typer.Option(help="override the detected profile")] = None,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code")] = False,
) -> None:
    """Audit samples: quarantine bad ones, exit 1 on systemic errors, 3 when incomplete."""
    import json

    from eyas.audit import AuditOptions, run_audit
    from eyas.audit.report import print_summary, write_html
    from eyas.store import quarantine_path, write_quarantine

    if sample != "all" and not sample.isdigit():
        raise EyasError("bad_flag", f"--sample takes a count or 'all', not {sample!r}")
    options = AuditOptions(
        max_len=max_len,
        decode_sample=None if sample == "all" else int(sample),
        max_quarantine=max_quarantine,
    )
    result = run_audit(input, model, options, profile, trust_remote_code)
    print_summary(result, console)
    qpath = write_quarantine(quarantine or quarantine_path(input), result.quarantine)
    console.print(f"quarantine: {len(result.quarantine)} samples -> {qpath}")
    report = {**result.to_dict(), "quarantine_file": str(qpath)}
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"json: {json_out}")
    if html_out:
        console.print(f"html: {write_html(result, html_out)}")
    raise typer.Exit(result.exit_code(allow_incomplete))


@app.command()
@_user_errors
def show(
    run: Annotated[Path, typer.Argument(help="stage dir, run dir, Parquet or sample JSONL")],
    id: Annotated[str, typer.Argument(help="sample id (a unique prefix is enough)")],
    model: Annotated[
        Path | None, typer.Option(help="model dir (default: from the manifest)")
    ] = None,
) -> None:
    """Print one sample with special tokens highlighted and token boundaries visible."""
    from eyas.audit.show import render_sample
    from eyas.render.renderer import load_tokenizer
    from eyas.store import load_table

    table = load_table(run)
    matches = [i for i, sid in enumerate(table.ids) if sid == id or sid.startswith(id)]
    if len(matches) != 1:
        raise EyasError("no_match", f"{len(matches)} samples match {id!r} in {run}")
    model_dir = model or (table.manifest.get("render") or {}).get("model_dir")
    if not model_dir:
        raise EyasError("no_tokenizer", "no tokenizer: pass --model DIR")
    Console().print(render_sample(table, matches[0], load_tokenizer(model_dir)))


# -- capture / train -----------------------------------------------------------------------------


@app.command()
@_user_errors
@schema_flags(
    CaptureConfig,
    "target",
    "data",
    "out",
    "backend",
    Flag("urls", "--url"),
    "vllm_python",
    "storage_dir",
    "aux_layers",
    "dtype",
    "shard_size",
    "concurrency",
    "max_len",
    "limit",
    "include_truncated",
    "quarantine",
    "include_quarantined",
    "force",
    "trust_remote_code",
)
def capture(config: ConfigOpt = None, set_: SetOpt = None, *, flags: dict) -> None:
    """Capture the target's hidden states for drafter training (resumable)."""
    from eyas.capture.run import run_capture
    from eyas.config import build_config

    cfg = build_config(CaptureConfig, config, flags, set_)
    manifest = run_capture(cfg, log=console.print)
    console.print(
        f"{manifest['counts']['samples']} samples captured in {cfg.out} "
        f"({manifest['counts']['tokens']} tokens, {manifest['bytes_per_token']} bytes/token)"
    )
    if manifest["counts"].get("failed"):
        console.print(f"failed: {manifest['failure_reasons']} (see {cfg.out / 'errors.jsonl'})")


@app.command()
@_user_errors
@schema_flags(
    TrainConfig,
    "target",
    "data",
    "hidden_states",
    "capture_ahead",
    "capture_backend",
    Flag("capture_urls", "--capture-url"),
    "out",
    "method",
    "draft_layers",
    "block_size",
    "head_dim",
    "steps",
    "ttt",
    "draft_vocab",
    "max_len",
    "length_policy",
    "lr",
    "batch_tokens",
    "chunk_len",
    "quarantine",
    "include_quarantined",
    "include_truncated",
    "fsdp",
    "trust_remote_code",
)
def train(config: ConfigOpt = None, set_: SetOpt = None, *, flags: dict) -> None:
    """Train a drafter (EAGLE-3, EAGLE-3.1 or DFlash; target online, or from captured
    states); rerun to resume."""
    from rich.progress import Progress

    from eyas.config import build_config
    from eyas.train.loop import Trainer

    cfg = build_config(TrainConfig, config, flags, set_)
    cfg.out.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, log=console.print)
    try:
        trainer.setup()  # data, target and drafter: a mistake surfaces before any progress bar
        with Progress(console=console) as bar:
            task = bar.add_task("train", total=cfg.steps, completed=trainer.step)

            def on_step(m: dict) -> None:
                acc = m["per_step_acc"][0]
                bar.update(
                    task,
                    completed=m["step"],
                    description=f"train loss {m['loss']:.3f} acc0 {acc:.2f}",
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


@export_app.command("drafter")
@_user_errors
def export_drafter_cmd(
    checkpoint: Annotated[
        Path, typer.Option(help="`eyas train --out` dir, its drafter/ dir, or a checkpoint")
    ],
    format: Annotated[str, typer.Option(help="sglang|vllm")],
    out: Annotated[Path, typer.Option()],
    step: Annotated[int | None, typer.Option(help="export checkpoint step N instead")] = None,
    target: Annotated[Path | None, typer.Option(help="target dir (default: from training)")] = None,
    speculative_tokens: Annotated[int, typer.Option(help="vllm: draft tokens per step")] = 3,
) -> None:
    """Export a drafter for SGLang or vLLM, then validate it."""
    from eyas.export.drafter import export_drafter
    from eyas.export.validate import check_export

    path = export_drafter(checkpoint, format, out, target, speculative_tokens, step)
    console.print(f"{format} export -> {path}; validated: {check_export(path, target)}")


@export_app.command("check")
@_user_errors
def export_check_cmd(
    path: Annotated[Path, typer.Argument()],
    target: Annotated[
        Path | None, typer.Option(help="target dir (default: from the export)")
    ] = None,
) -> None:
    """Validate an exported drafter (tensors, shapes, dtypes, embedding, aux ids, positions)."""
    from eyas.export.validate import check_export

    console.print(check_export(path, target))


@export_app.command("samples")
@_user_errors
def export_samples_cmd(
    input: Annotated[Path, typer.Argument(help="stage dir, Parquet or sample JSONL")],
    format: Annotated[str, typer.Option(help="specforge|speculators")],
    out: Annotated[Path, typer.Option(help="output JSONL")],
    include_truncated: Annotated[bool, typer.Option("--include-truncated")] = False,
    quarantine: Annotated[Path | None, typer.Option(help="audit quarantine list")] = None,
    include_quarantined: Annotated[bool, typer.Option("--include-quarantined")] = False,
) -> None:
    """Write the samples that would train for SpecForge or speculators (ids and masks intact)."""
    from eyas.export.samples import export_samples

    console.print(
        export_samples(input, format, out, include_truncated, quarantine, include_quarantined)
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
    Flag("urls", "--url"),
    "vllm_python",
    "k",
    "topk",
    "num_draft_tokens",
    "temperature",
    "max_new_tokens",
    "limit",
    "baseline",
    "lossless_check",
    Flag("json_out", "--json"),
    "trust_remote_code",
)
def eval_cmd(config: ConfigOpt = None, set_: SetOpt = None, *, flags: dict) -> None:
    """Acceptance length per dataset: offline (lossless speculative decoding) or served."""
    import json

    from eyas.config import build_config
    from eyas.evaluate.run import run_eval

    cfg = build_config(EvalConfig, config, flags, set_)
    result = run_eval(cfg, log=console.print)
    settings = result["settings"]
    shape = (
        f"chain K={cfg.k}"
        if settings["decoding"] == "chain"
        else f"tree depth {cfg.k}, topk {cfg.topk}, {settings['num_draft_tokens']} draft tokens"
    )
    table = Table(
        "dataset",
        "prompts",
        "acceptance_length",
        "mean_accepted_drafts",
        "per_position",
        title=f"eval ({cfg.backend}): {shape}, temperature {cfg.temperature}",
    )
    for name, d in result["datasets"].items():
        table.add_row(
            name,
            str(d["prompts"]),
            f"{d['acceptance_length']:.3f}",
            f"{d['mean_accepted_drafts']:.3f}",
            " ".join(f"{p:.2f}" for p in d["per_position"]),
        )
    table.add_row(
        "all",
        str(settings["prompts"]),
        f"{result['acceptance_length']:.3f}",
        f"{result['mean_accepted_drafts']:.3f}",
        " ".join(f"{p:.2f}" for p in result["per_position"]),
    )
    console.print(table)
    console.print("acceptance_length = tokens per target verify step, bonus included (SGLang)")
    if result.get("throughput"):
        console.print(f"throughput: {result['throughput']}")
    if cfg.json_out:
        cfg.json_out.parent.mkdir(parents=True, exist_ok=True)
        cfg.json_out.write_text(json.dumps(result, indent=2) + "\n")
    if result["lossless"] is False:
        console.print(f"[red]NOT LOSSLESS[/]: {result['lossless_mismatches'][:5]}")
        raise typer.Exit(1)


# -- quickstart / toy ----------------------------------------------------------------------------


@app.command()
@_user_errors
def quickstart(
    out: Annotated[Path, typer.Option(help="run directory")] = Path("runs/quickstart"),
    rows: Annotated[int, typer.Option(help="source rows per toy dataset")] = 60,
) -> None:
    """The toy world end to end on the embedded backend, plus the naive-rendering experiment."""
    from eyas.quickstart import run_quickstart

    result = run_quickstart(out, rows, console=console)
    if result["failures"]:
        for failure in result["failures"]:
            console.print(f"[bold red]quickstart check failed:[/] {failure}")
        raise typer.Exit(1)


@toy_app.command("build")
@_user_errors
def toy_build(
    preset: Annotated[
        str, typer.Option(help="tiny (tests, ~1 min) | small (quickstart)")
    ] = "small",
    out: Annotated[Path | None, typer.Option(help="output dir (default: the user cache)")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    force: Annotated[bool, typer.Option("--force", help="rebuild even if cached")] = False,
) -> None:
    """Build (or reuse) the toy Kimi-format target model and print its quality figures."""
    import json
    import time

    from eyas.toy.build import build_toy, load_toy_info

    start = time.time()
    path = build_toy(
        preset,
        out,
        seed,
        log=lambda s: console.print(f"[{time.time() - start:5.0f}s] {s}"),
        force=force,
    )
    info = load_toy_info(path)
    console.print(f"toy target: {path}")
    console.print(json.dumps(info["quality"], indent=2))
    print(path)


@toy_app.command("datasets")
@_user_errors
def toy_datasets(
    out: Annotated[Path, typer.Option(help="output directory")],
    rows: Annotated[int, typer.Option(help="rows per dataset")] = 200,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Write the eight toy source datasets (B1..B8), each in its original source format."""
    from eyas.toy.datasets import FAMILIES, write_datasets

    paths = write_datasets(out, rows, seed)
    table = Table("dataset", "source format", "kind", "file")
    for fam in FAMILIES:
        table.add_row(fam.name, fam.format, fam.kind, str(paths[fam.name]))
    console.print(table)


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())


if __name__ == "__main__":  # `python -m eyas.cli`
    main()
