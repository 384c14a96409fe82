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
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from paco_reward.atomic_io import atomic_write_bytes, atomic_write_text, save_figure
from paco_reward.errors import InputError

logger = logging.getLogger(__name__)

__all__ = ["RunLog", "plot_reward_curve", "sample_caption", "save_image_grid"]

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
        """Keep the rows of the first ``start_epoch`` epochs (rows count epochs from 1, as
        checkpoints do; a resumed run redoes the rest)."""
        path = self.output_dir / "metrics.jsonl"
        if not path.is_file():
            return
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        self.history = [r for r in rows if r["epoch"] <= start_epoch]
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


# a sample panel is shown at least this many pixels on its longer side (tiny models draw 32 px)
MIN_PANEL_SIDE = 256
PROMPT_LINES = 3  # a long prompt is cut after this many wrapped lines
FONT_SIZE = 14


def sample_caption(
    prompt: str, rewards: Mapping[str, float], advantage: float | None = None
) -> str:
    """The caption of one sample panel: its prompt, then one ``name value`` line per reward
    (``failed`` for NaN) and its advantage when given.

    Example:
        >>> print(sample_caption("a red fox", {"clip_t": 0.25, "ocr": float("nan")}, 1.5))
        a red fox
        clip_t 0.2500
        ocr failed
        advantage +1.500
    """
    lines = [prompt]
    for name, value in rewards.items():
        lines.append(f"{name} {value:.4f}" if math.isfinite(value) else f"{name} failed")
    if advantage is not None:
        lines.append(f"advantage {advantage:+.3f}")
    return "\n".join(lines)


def _wrap(text: str, font, width: int) -> list[str]:
    """Greedy word wrap of one paragraph to ``width`` pixels (a word longer than the width is
    cut by characters)."""
    lines: list[str] = []
    current = ""
    for word in text.split():
        candidate = f"{current} {word}".strip()
        if font.getlength(candidate) <= width:
            current = candidate
            continue
        if current:
            lines.append(current)
        while len(word) > 1 and font.getlength(word) > width:
            cut = 1
            while cut < len(word) and font.getlength(word[: cut + 1]) <= width:
                cut += 1
            lines.append(word[:cut])
            word = word[cut:]
        current = word
    if current or not lines:
        lines.append(current)
    return lines


def _caption_lines(caption: str, font, width: int) -> list[str]:
    """A caption's first line (the prompt) wrapped to at most :data:`PROMPT_LINES` lines (the
    last one ending in an ellipsis when cut); every other line wrapped in full."""
    prompt, *rest = caption.split("\n")
    lines = _wrap(prompt, font, width)
    if len(lines) > PROMPT_LINES:
        last = lines[PROMPT_LINES - 1]
        while last and font.getlength(last + "…") > width:
            last = last[:-1]
        lines = lines[: PROMPT_LINES - 1] + [last + "…"]
    for line in rest:
        lines.extend(_wrap(line, font, width))
    return lines


def _to_pil(image: torch.Tensor):
    """A float CHW tensor in [0, 1] as an RGB PIL image."""
    from PIL import Image

    array = (image.float().cpu().clamp(0, 1) * 255).round().to(torch.uint8)
    array = array.expand(3, -1, -1) if array.shape[0] == 1 else array[:3]
    return Image.fromarray(array.permute(1, 2, 0).numpy(), mode="RGB")


def save_image_grid(
    images,
    path: Path,
    captions: Sequence[str] | None = None,
    columns: int = 4,
    min_side: int = MIN_PANEL_SIDE,
) -> None:
    """Images (float CHW in [0, 1], sizes may differ) as one grid PNG, written atomically.

    Each panel is upscaled by an integer factor (nearest neighbour: a tiny model's pixels
    stay pixels) until its longer side is at least ``min_side``; with ``captions`` (one per
    image, :func:`sample_caption`) each panel gets its text on a white band below it.
    """
    from PIL import Image, ImageDraw, ImageFont

    if len(images) == 0:  # a list or a batched tensor
        return
    if captions is not None and len(captions) != len(images):
        raise InputError(f"save_image_grid got {len(images)} images but {len(captions)} captions.")
    panels = [_to_pil(im) for im in images]
    side = max(max(p.size) for p in panels)
    factor = max(1, -(-min_side // side))  # ceil: 32 px -> x8 = 256 px
    panels = [p.resize((p.width * factor, p.height * factor), Image.NEAREST) for p in panels]
    width = max(p.width for p in panels)  # sizes differ with per-item resolutions
    height = max(p.height for p in panels)  # and with edits that keep aspect ratios
    font = ImageFont.load_default(size=FONT_SIZE)
    line_height = FONT_SIZE + 4
    margin = 4
    texts = [_caption_lines(c, font, width - 2 * margin) for c in captions or []]
    band = max((len(t) for t in texts), default=0) * line_height + (2 * margin if texts else 0)
    columns = max(1, min(columns, len(panels)))
    rows = -(-len(panels) // columns)
    pad = 4
    cell_w, cell_h = width + pad, height + band + pad
    grid = Image.new("RGB", (columns * cell_w + pad, rows * cell_h + pad), "white")
    draw = ImageDraw.Draw(grid)
    for i, panel in enumerate(panels):
        x, y = pad + (i % columns) * cell_w, pad + (i // columns) * cell_h
        grid.paste(panel, (x, y))
        for j, line in enumerate(texts[i] if texts else []):
            draw.text((x + margin, y + height + margin + j * line_height), line, "black", font)
    buffer = io.BytesIO()
    grid.save(buffer, format="png")
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
