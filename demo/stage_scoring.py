"""Stage: build a tiny evaluator offline, score pairs, a set and a 2x2 grid."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from demo.context import DemoContext, print_table
from paco_reward import PacoReward
from paco_reward.testing import build_tiny_qwen2_5_vl


def _panel(colour: tuple[int, int, int], shape: str, size: int = 64) -> Image.Image:
    image = Image.new("RGB", (size, size), (245, 245, 240))
    draw = ImageDraw.Draw(image)
    box = (12, 12, size - 12, size - 12)
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    else:
        draw.rectangle(box, fill=colour)
    return image


def run(ctx: DemoContext) -> None:
    model_dir = build_tiny_qwen2_5_vl(ctx.path("models", "tiny-untrained"), seed=ctx.seed)
    ctx.artifacts["untrained_evaluator"] = model_dir
    rm = PacoReward.from_pretrained(model_dir)

    red_circle, red_square = _panel((200, 30, 30), "circle"), _panel((200, 30, 30), "square")
    blue_circle = _panel((30, 30, 200), "circle")
    theme = "a red circle drawn in flat style"
    pairs = [
        ("red circle", "red circle", red_circle, red_circle),
        ("red circle", "red square", red_circle, red_square),
        ("red circle", "blue circle", red_circle, blue_circle),
    ]
    scores = rm.score_pairs([(a, b, theme) for _, _, a, b in pairs])
    symmetric = rm.score_pairs([(a, b, theme) for _, _, a, b in pairs], symmetric=True)
    print_table(
        "Untrained tiny evaluator: pair scores (random weights, so ~0.5 is expected)",
        ["image A", "image B", "score", "symmetric"],
        [[na, nb, float(s), float(t)] for (na, nb, _, _), s, t in zip(pairs, scores, symmetric)],
    )

    grid = Image.new("RGB", (128, 128))
    for k, panel in enumerate([red_circle, red_square, blue_circle, red_circle]):
        grid.paste(panel, ((k % 2) * 64, (k // 2) * 64))
    grid.save(ctx.path("grid_2x2.png"))
    result = rm.score_grid(
        grid, "FOUR-PANEL Images with a 2x2 grid layout. A red circle. [TOP]-[LEFT]: ..."
    )
    rows = [
        [f"panel {i}", f"panel {j}", float(s)] for (i, j), s in zip(result.pairs, result.scores)
    ]
    rows.append(["mean", "", result.mean])
    print_table("2x2 grid: all 6 panel pairs (each panel encoded once)", ["A", "B", "score"], rows)
    assert np.isfinite(result.scores).all()
