"""What run-local shows while a job runs: a live bar (step/maxSteps, loss, samples/s, ETA) on a terminal,
one line per logged step otherwise, from rank 0's /progress."""

from __future__ import annotations

from typing import Any

from ..api.job import ScaleTrainJob


class ProgressView:
    """A live bar (step/maxSteps, loss, samples/s, ETA) on a terminal; a line per logged step otherwise."""

    def __init__(self, job: ScaleTrainJob):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.console = Console(stderr=True, highlight=False)
        self.live = self.console.is_terminal
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}  {task.fields[speed]} samples/s  ETA {task.fields[eta]}"),
            console=self.console,
            disable=not self.live,
        )
        max_steps = job.spec.training.max_steps if job.spec.training is not None else None  # None: unknown
        self.task = self.bar.add_task(job.name, total=max_steps, loss="-", speed="-", eta="-")
        self.last_step = -1

    def __enter__(self) -> ProgressView:
        self.bar.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.bar.stop()

    def update(self, progress: dict[str, Any]) -> None:
        step = progress.get("step", 0)
        fields = {
            "loss": f"{progress['loss']:.4f}" if "loss" in progress else "-",
            "speed": f"{progress['samplesPerSecond']:.0f}" if "samplesPerSecond" in progress else "-",
            "eta": duration(progress["etaSeconds"]) if "etaSeconds" in progress else "-",
        }
        self.bar.update(self.task, completed=step, **fields)
        if not self.live and step != self.last_step and "loss" in progress:
            total = progress.get("maxSteps", "?")
            self.console.print(
                f"step {step}/{total}  loss {fields['loss']}  {fields['speed']} samples/s  ETA {fields['eta']}"
            )
        self.last_step = step

    def say(self, message: str) -> None:
        self.console.print(message, soft_wrap=True)


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )
