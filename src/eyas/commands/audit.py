"""`eyas` audit, show and status: what the data and the runs hold."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from eyas.audit.config import AuditConfig, ShowConfig
from eyas.cli_schema import Arg, Flag, schema_flags
from eyas.commands.common import console, user_errors
from eyas.config import StatusConfig
from eyas.errors import EyasError


@user_errors
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


@user_errors
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


@user_errors
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
