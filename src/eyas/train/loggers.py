"""Training curves for a person to watch, beside `OUT/metrics.jsonl`: TensorBoard by default
when the `tensorboard` package is installed (`OUT/tensorboard/`), Weights & Biases or MLflow
when asked (`--log-to wandb`, `--log-to mlflow`; `--log-to none` for none).

    eyas train ... --log-to tensorboard --log-to wandb      # WANDB_API_KEY, WANDB_PROJECT
    tensorboard --logdir runs/x/drafter/tensorboard

Every logger receives the same scalars per optimizer step (`curves`): the loss, each TTT
step's loss and accuracy, the acceptance length the accuracies imply, the learning rate, the
gradient norm, draft-vocabulary coverage and throughput (trained tokens per second). W&B and
MLflow read their own settings (API key, project, tracking URI) from their environment
variables; eyas writes none of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from eyas.errors import EyasError

LOGGERS = ("tensorboard", "wandb", "mlflow")


class CurveLogger(Protocol):
    def log(self, step: int, scalars: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def curves(row: dict, seconds: float | None) -> dict[str, float]:
    """The scalars of one `metrics.jsonl` row; `seconds` is how long the step took."""
    out = {
        "train/loss": row["loss"],
        "train/lr": row["lr"],
        "train/grad_norm": row["grad_norm"],
        "train/acceptance_estimate": row["acceptance_estimate"],
        "train/draft_vocab_coverage": row["draft_vocab_coverage"],
    }
    for k, (loss, acc) in enumerate(zip(row["per_step_loss"], row["per_step_acc"]), 1):
        out[f"train/loss_step{k}"] = loss
        out[f"train/acc_step{k}"] = acc
    if seconds and seconds > 0:
        out["train/tokens_per_s"] = row["trained_positions"] / seconds
    return out


def _missing(name: str, package: str) -> EyasError:
    return EyasError(
        "missing_package", f"--log-to {name} needs the `{package}` package: pip install {package}"
    )


class TensorBoard:
    """Event files under `OUT/tensorboard`. A resumed run purges the steps after its
    checkpoint (`purge_step`), so the curve has each step once, as metrics.jsonl does."""

    def __init__(self, out: Path, first_step: int):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # torch's writer needs the tensorboard package
            raise _missing("tensorboard", "tensorboard") from exc
        self.writer = SummaryWriter(str(out / "tensorboard"), purge_step=first_step)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()  # a person watches it live; steps are seconds apart

    def close(self) -> None:
        self.writer.close()


class WandB:
    def __init__(self, out: Path, config: dict[str, Any]):
        try:
            import wandb
        except ImportError as exc:
            raise _missing("wandb", "wandb") from exc
        self.wandb = wandb
        self.run = wandb.init(dir=str(out), name=out.name, config=config)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


class MLflow:
    def __init__(self, out: Path, config: dict[str, Any]):
        try:
            import mlflow
        except ImportError as exc:
            raise _missing("mlflow", "mlflow") from exc
        self.mlflow = mlflow
        self.run = mlflow.start_run(run_name=out.name)
        mlflow.log_params({k: str(v)[:250] for k, v in config.items()})

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.mlflow.log_metrics(scalars, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


def tensorboard_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


def open_loggers(
    names: list[str] | None, out: Path, first_step: int, config: dict[str, Any]
) -> list[CurveLogger]:
    """The loggers `names` asks for; None: TensorBoard if it is installed, else none. A logger
    asked for by name whose package is missing is an error before training starts."""
    if names is None:
        names = ["tensorboard"] if tensorboard_installed() else []
    loggers: list[CurveLogger] = []
    for name in dict.fromkeys(names):
        if name == "tensorboard":
            loggers.append(TensorBoard(out, first_step))
        elif name == "wandb":
            loggers.append(WandB(out, config))
        elif name == "mlflow":
            loggers.append(MLflow(out, config))
        elif name != "none":
            raise EyasError("bad_flag", f"--log-to is one of {[*LOGGERS, 'none']}, not {name!r}")
    return loggers
