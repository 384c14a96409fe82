"""The demo's claim that its trained evaluator beats the image-similarity baselines, on a
smaller world (fewer prompts, shorter stand-in pretraining and SFT) and for two seeds,
each a separate process (evaluator_run.py), run side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).with_name("evaluator_run.py")
# prompts, stand-in steps, SFT steps (of 16 pairs), pixels per panel: the demo's are
# 288 / 1600 / 400 of 2 x 16 / 112 x 112.
SCALE = os.environ.get("PACO_TEST_EVALUATOR_SCALE", "96 600 700 3136").split()
PIXEL, CLIP, PACO = (
    "pixel similarity (Pixel L1)",
    "tiny CLIP-I",
    "tiny PaCo evaluator (PacoReward.score)",
)


@pytest.mark.slow
def test_the_evaluator_beats_pixel_similarity_and_clip_on_truth_pairs(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(RUN.parents[2]),
        "OMP_NUM_THREADS": "1",
        "PACO_RL_CACHE": str(tmp_path / "cache"),
    }
    runs = [
        subprocess.Popen(
            [sys.executable, str(RUN), str(tmp_path / f"seed{seed}"), str(seed), *SCALE],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (0, 1)
    ]
    results = []
    for run in runs:
        out, err = run.communicate(timeout=1200)
        assert run.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r in results:
        paco, pixel, clip = r[PACO], r[PIXEL], r[CLIP]
        # Baselines near chance: the world varies pose and lighting, not identity.
        assert max(pixel["roc_auc"], clip["roc_auc"]) < 0.7, r
        assert paco["roc_auc"] >= max(pixel["roc_auc"], clip["roc_auc"]) + 0.10, r
        # The evaluator's accuracy is at its own threshold (P(Yes) >= 0.5), the baselines' at
        # their best threshold on these very pairs. Its margin depends on the CPU (same code,
        # bit-identical reruns on one machine: seed 1 gave 0.713 on one and 0.668 on another,
        # against 0.576), so it is asserted with room for that.
        assert paco["accuracy"] >= max(pixel["accuracy"], clip["accuracy"]) + 0.05, r
