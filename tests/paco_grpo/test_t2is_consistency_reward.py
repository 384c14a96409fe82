"""``t2is_consistency``: T2IS-Bench's consistency protocol as a (test) reward gives what
``paco-eval t2is judge`` gives for the same panels saved as the benchmark's files."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from paco_eval.t2is.consistency import judge_case
from paco_eval.t2is.data import CaseImages, T2ISCase
from paco_grpo.rewards import build_reward
from paco_reward import PacoReward


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    from paco_grpo.testing.flux import build_tiny_flux

    return build_tiny_flux(tmp_path_factory.mktemp("flux") / "tiny_flux")


CRITERIA = {"Identity": {"fox": "The fox is the same fox.", "tail": "Its tail is as long."},
            "Style": {"paint": "Every panel is a watercolour."}}  # fmt: skip


def _grid() -> Image.Image:
    grid = Image.new("RGB", (64, 64))
    for k, colour in enumerate([(200, 40, 40), (40, 200, 40), (40, 40, 200), (200, 200, 40)]):
        panel = Image.new("RGB", (32, 32), colour)
        panel.paste((255, 255, 255), (0, 0, 6 + 4 * k, 10))
        grid.paste(panel, (32 * (k % 2), 32 * (k // 2)))  # row-major
    return grid


def test_the_reward_is_the_benchmark_judges_number(tiny_model_dir, tmp_path):
    grid = _grid()
    meta = {"layout": "2x2", "criteria": CRITERIA}
    reward = build_reward("t2is_consistency", model=str(tiny_model_dir), device="cpu")
    value = reward([grid], ["FOUR-PANEL Images with a 2x2 grid layout of a fox"], [meta])[0]

    paths = []
    for k in range(4):  # the grid cut row-major into the benchmark's files
        box = (32 * (k % 2), 32 * (k // 2), 32 * (k % 2) + 32, 32 * (k // 2) + 32)
        paths.append(tmp_path / f"0001_0001_{k:04d}.png")
        grid.crop(box).save(paths[-1])
    case = T2ISCase("0001_0001", "t", 4, criteria={d: list(v.values()) for d, v in CRITERIA.items()})
    judge = PacoReward.from_pretrained(tiny_model_dir, canonical_yes_no=False, device="cpu")
    row = judge_case(judge, case, CaseImages("0001_0001", paths, [0, 1, 2, 3]))
    expected = np.mean([np.mean(d["scores"]) for d in row["dimensions"].values()])
    assert value == pytest.approx(expected, abs=1e-6)

    # the benchmark's question, not PaCo-Reward's own criteria template
    criteria = build_reward("consistency", model=str(tiny_model_dir), device="cpu", template="criteria")
    assert criteria([grid], ["a fox, 2x2"], [meta])[0] != pytest.approx(value, abs=1e-6)


def test_a_run_logs_the_benchmark_consistency_of_its_held_out_prompts(flux_dir, tiny_model_dir, tmp_path):
    """The T2IS protocol as an evaluation reward with its own judge: logged per evaluation
    beside the training reward, never trained on."""
    import json

    from paco_grpo.grpo_config import GRPOConfig
    from paco_grpo.grpo_trainer import GRPOTrainer

    cfg = GRPOConfig.from_yaml("recipes/grpo_tiny_cpu.yaml", {
        "model_name_or_path": str(flux_dir), "output_dir": str(tmp_path / "run"),
        "prompt_file": "tests/data/t2is_train_metadata.jsonl", "report_to": [],
        "num_train_epochs": 1, "num_iterations": 1, "prompts_per_epoch": 2, "num_generations": 2,
        "sample_batch_size": 4, "per_device_train_batch_size": 4, "num_sample_images": 0,
        "save_epochs": 0, "test.eval_epochs": 1, "test.num_prompts": 2, "per_device_eval_batch_size": 2,
        "test.rewards": {"panel_colour_agreement": 1.0, "t2is_consistency": 0.0},
        "test.reward_kwargs": {"t2is_consistency": {"model": str(tiny_model_dir), "device": "cpu"}},
    })  # fmt: skip
    GRPOTrainer(cfg).train()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    value = rows[-1]["eval/reward/t2is_consistency/mean"]
    assert 0 < value < 1
    assert not any(k.startswith("reward/t2is_consistency") for k in rows[-1])  # not a training reward
