"""A rich progress bar for generation: samples/s, output tokens/s, ETA, retries, failures."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from eyas.generate.engine import Stats


class GenerationProgress:
    """Throttled to ~10 updates/s so the bar never costs the client real CPU."""

    def __init__(
        self,
        total: int,
        console: Console | None = None,
        enabled: bool = True,
        label: str = "generate",
    ):
        self.enabled = enabled
        self._last = 0.0
        self._start = time.perf_counter()
        self.progress = Progress(
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[extra]}"),
            console=console or Console(stderr=True),
            disable=not enabled,
        )
        self.task = self.progress.add_task("generate", total=total, rate="", extra="")

    def __enter__(self) -> GenerationProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def update(self, stats: Stats, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        elapsed = max(1e-9, now - self._start)
        self.progress.update(
            self.task,
            completed=stats.done,
            rate=f"{stats.done / elapsed:,.1f} samples/s  {stats.output_tokens / elapsed:,.0f} tok/s",
            extra=f"retries {stats.retries}  failed {stats.failed}",
        )
