"""What a GRPO run writes for people to read: ``metrics.jsonl`` (one row per epoch), the
accelerate trackers named in ``report_to`` (TensorBoard by default, under
``output_dir/paco-grpo``), the reward curve PNG and sample grids.

Only the main process writes; every write is atomic or an append of whole lines, and a
resumed run first drops the rows of the epochs it will redo.
"""

from __future__ import annotations

import io
import json
import logging
import math
from pathlib import Path

import torch

from paco_reward.atomic_io import atomic_write_bytes, atomic_write_text, save_figure

logger = logging.getLogger(__name__)

__all__ = ["RunLog", "plot_reward_curve", "save_image_grid"]

TRACKER_PROJECT = "paco-grpo"


class RunLog:
    """Epoch metrics to ``metrics.jsonl``, the trackers and the reward curve.

    Args:
        accelerator: the run's ``Accelerator`` (created with ``log_with=report_to`` and
            ``project_dir=output_dir``).
        output_dir: the run's folder.
        config: a flat ``{name: value}`` of the run's config, stored by the trackers.
    """

    def __init__(self, accelerator, output_dir: Path, config: dict) -> None:
        self.accelerator = accelerator
        self.output_dir = output_dir
        self.history: list[dict] = []
        if accelerator.log_with:
            accelerator.init_trackers(TRACKER_PROJECT, config=_scalars(_flatten(config)))

    def rewind(self, start_epoch: int) -> None:
        """Keep the rows of epochs before ``start_epoch`` (a resumed run redoes the rest)."""
        path = self.output_dir / "metrics.jsonl"
        if not path.is_file():
            return
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        self.history = [r for r in rows if r["epoch"] < start_epoch]
        if self.accelerator.is_main_process:
            atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in self.history))

    def log_step(self, values: dict, step: int) -> None:
        """Per-optimizer-step scalars (the learning rate) to the trackers."""
        if self.accelerator.log_with:
            self.accelerator.log(values, step=step)

    def log_epoch(self, metrics: dict, step: int) -> None:
        """One epoch's metrics: history, ``metrics.jsonl``, trackers (at optimizer step
        ``step``), reward curve."""
        self.history.append(metrics)
        if self.accelerator.log_with:
            self.accelerator.log(_scalars(metrics), step=step)
        if not self.accelerator.is_main_process:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        with open(self.output_dir / "metrics.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(metrics) + "\n")
        plot_reward_curve(self.history, self.output_dir / "reward_curve.png")
        logger.info(
            "epoch %d: %s",
            metrics["epoch"],
            ", ".join(
                f"{k}={v:.4f}"
                for k, v in metrics.items()
                if k.startswith("reward/") and k.endswith("/mean")
            ),
        )

    def close(self) -> None:
        if self.accelerator.log_with:
            self.accelerator.end_training()


def _flatten(values: dict, prefix: str = "") -> dict:
    """Nested mappings as dotted keys; lists and other mappings as JSON text."""
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and key in ("train", "test"):
            out.update(_flatten(value, f"{prefix}{key}."))
        elif isinstance(value, (list, dict)):
            out[prefix + key] = json.dumps(value)
        else:
            out[prefix + key] = value
    return out


def _scalars(values: dict) -> dict:
    """The finite numbers and strings of a flat mapping (what every tracker accepts)."""
    out = {}
    for key, value in values.items():
        if isinstance(value, bool):
            out[key] = int(value)
        elif isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = value
        elif isinstance(value, str):
            out[key] = value
    return out


def save_image_grid(images, path: Path) -> None:
    """Images (float CHW in [0, 1], sizes may differ) as one padded grid PNG, atomically."""
    from torchvision.utils import make_grid, save_image

    images = [im.float().cpu() for im in images]
    height = max(im.shape[1] for im in images)  # sizes differ with per-item resolutions
    width = max(im.shape[2] for im in images)  # and with edits that keep aspect ratios
    images = [
        torch.nn.functional.pad(im, (0, width - im.shape[2], 0, height - im.shape[1]))
        for im in images
    ]
    buffer = io.BytesIO()
    save_image(make_grid(torch.stack(images), nrow=4, padding=2), buffer, format="png")
    atomic_write_bytes(path, buffer.getvalue())


def plot_reward_curve(history: list[dict], path: str | Path) -> None:
    """Mean reward per epoch (train, and eval where present) as a PNG, written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    keys = sorted(
        {
            k
            for row in history
            for k in row
            if k.endswith("/mean") and "reward/" in k and "aggregated" not in k
        }
    )
    for key in keys:
        points = [(row["epoch"], row[key]) for row in history if key in row]
        if points:
            xs, ys = zip(*points)
            ax.plot(
                xs,
                ys,
                marker="o" if key.startswith("eval/") else ".",
                label=key.removesuffix("/mean"),
            )
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean reward")
    ax.set_title("PaCo-GRPO reward curve")
    ax.grid(alpha=0.3)
    if keys:
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
