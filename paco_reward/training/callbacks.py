"""Training callbacks: a JSONL of every logged metric and a loss-curve PNG.

Both land in ``args.output_dir`` (``metrics.jsonl``, ``loss_curve.png``). On resume the
JSONL is cut back to the checkpoint's step, so the file holds one continuous curve.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from transformers import TrainerCallback

from paco_reward.atomic_io import atomic_write_text, save_figure

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "loss_curve.png"


def read_metrics(output_dir: str | Path) -> list[dict]:
    """The rows of ``output_dir/metrics.jsonl`` (empty if there is none)."""
    path = Path(output_dir) / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def metrics_figure(rows: list[dict], warmup_steps: int = 0):
    """The figure :func:`plot_metrics` saves, or ``None`` with nothing to draw.

    Every series has markers (a run of one logged step is a visible point, not an empty
    line); the x-axis spans the logged steps, and the warm-up's end is marked only when it
    falls inside them (a warm-up longer than the run would stretch the axis past the data);
    the loss axis fits the train and held-out losses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    held_out = [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
    evals = [
        (r["step"], r["eval_decision_accuracy"]) for r in rows if "eval_decision_accuracy" in r
    ]
    if not train and not held_out and not evals:
        return None
    steps = [step for step, _ in train + held_out + evals]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train), ".-", label="train loss", color="tab:blue")
    if held_out:
        ax.plot(*zip(*held_out), "s--", label="held-out loss", color="tab:green")
    if warmup_steps and min(steps) <= warmup_steps <= max(steps):
        ax.axvline(warmup_steps, color="gray", linestyle="--", label="end of reasons-first warm-up")
    low, high = min(steps), max(steps)
    pad = max((high - low) * 0.03, 0.5)
    ax.set_xlim(low - pad, high + pad)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    if evals:
        acc = ax.twinx()
        acc.plot(*zip(*evals), "o-", label="held-out decision accuracy", color="tab:orange")
        acc.set_ylim(0, 1.02)  # an accuracy: its own axis, always 0..1
        acc.set_ylabel("accuracy")
        acc.legend(loc="lower right")
    if ax.get_lines():
        ax.legend(loc="upper right")
    title = "PaCo-Reward SFT"
    if warmup_steps > high:
        title += f" (reasons-first warm-up: {warmup_steps} steps, beyond this run)"
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_metrics(rows: list[dict], path: str | Path, warmup_steps: int = 0) -> Path | None:
    """Plot training and held-out loss (and held-out decision accuracy when logged) against
    the step as a PNG at ``path``; a dashed line marks the end of the reasons-first warm-up
    (:func:`metrics_figure`). Returns ``path``, or ``None`` with nothing to draw."""
    fig = metrics_figure(rows, warmup_steps)
    return None if fig is None else save_figure(fig, Path(path))


class MetricsFileCallback(TrainerCallback):
    """Appends every ``Trainer.log`` call to ``metrics.jsonl`` and redraws ``loss_curve.png``
    after each evaluation and at the end of training (main process only)."""

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        rows = read_metrics(args.output_dir)
        kept = [r for r in rows if r.get("step", 0) <= state.global_step]
        if len(kept) != len(rows):
            logger.info(
                "Resuming at step %d: dropping %d later metric rows.",
                state.global_step,
                len(rows) - len(kept),
            )
            text = "".join(json.dumps(r) + "\n" for r in kept)
            atomic_write_text(Path(args.output_dir) / METRICS_FILE, text)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
        row = {"step": state.global_step, "epoch": state.epoch, **logs}
        with open(Path(args.output_dir) / METRICS_FILE, "a") as handle:
            handle.write(json.dumps(row) + "\n")

    def on_evaluate(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            plot_metrics(
                read_metrics(args.output_dir),
                Path(args.output_dir) / PLOT_FILE,
                getattr(args, "reasoning_warmup_steps", 0),
            )

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            plot_metrics(
                read_metrics(args.output_dir),
                Path(args.output_dir) / PLOT_FILE,
                getattr(args, "reasoning_warmup_steps", 0),
            )
