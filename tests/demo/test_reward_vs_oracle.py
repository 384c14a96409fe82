"""``python -m demo.reward_vs_oracle`` at tiny scale: every reward of a demo output folder
scores the generator's grids, and its r with the oracle is scipy's Pearson r of those
scores with the oracle's per-grid readings."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr

from demo import reward_vs_oracle as tool


def test_each_reward_is_correlated_with_the_oracle_on_the_same_grids(
    tmp_path, tiny_world_models, capsys
):
    demo_output = tmp_path / "demo_output"
    (demo_output / "models").mkdir(parents=True)
    (demo_output / "models" / "tiny-trained").symlink_to(tiny_world_models["world_evaluator"])
    out = tmp_path / "result.json"
    status = tool.main(
        [
            "--demo_output", str(demo_output), "--grids", "6",
            "--generator", str(tiny_world_models["world_generator"]),
            "--clip", str(tiny_world_models["world_clip"]), "--json", str(out),
        ]
    )  # fmt: skip
    assert status == 0
    result = json.loads(out.read_text())
    # The world evaluator is not in this folder: left out, not an error.
    assert list(result["rewards"]) == [
        "train stage's evaluator (renders)",
        "CLIP-I (world CLIP)",
        "CLIP-T (world CLIP)",
    ]
    assert "Rewards vs the oracle on 6 generated grids" in capsys.readouterr().out

    # The same grids again, judged and scored here: the tool's r is Pearson's.
    from diffusers import FluxPipeline

    from demo.world_generator import GeneratorConfig, generator_world, sample_grids
    from demo.world_judge import judge_grids
    from paco_grpo.rewards import CLIPImageReward

    records = generator_world(GeneratorConfig()).make_prompts(6, start=tool.START)
    images = sample_grids(
        FluxPipeline.from_pretrained(tiny_world_models["world_generator"]), records, seed=0
    )
    consistency = [item["consistency"] for item in judge_grids(images, records)["per_item"]]
    assert result["oracle"]["consistency"] == pytest.approx(np.mean(consistency))
    scores = CLIPImageReward(str(tiny_world_models["world_clip"]))(
        [torch.from_numpy(np.array(im)).permute(2, 0, 1).float() / 255 for im in images],
        [r["prompt"] for r in records],
        [{"layout": r["layout"], "theme": r["theme"]} for r in records],
    )
    clip_i = result["rewards"]["CLIP-I (world CLIP)"]
    assert clip_i["mean"] == pytest.approx(float(np.mean(scores)), abs=1e-6)
    assert np.ptp(consistency) > 0, consistency  # else r says nothing
    expected = pearsonr(np.asarray(scores, dtype=float), consistency).statistic
    assert clip_i["r_consistency"] == pytest.approx(expected, abs=1e-6)


def test_pearson_is_nan_for_a_constant_side():
    assert np.isnan(tool.pearson(np.ones(4), np.arange(4.0)))
    assert tool.pearson(np.arange(4.0), 2 * np.arange(4.0)) == pytest.approx(1.0)
