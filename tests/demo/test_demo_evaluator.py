"""The demo's claim that its trained evaluator beats the image-similarity baselines, on a
smaller world (fewer prompts, shorter stand-in pretraining and SFT) and for two seeds,
each a separate process (evaluator_run.py), run side by side.

The two runs are 14 minutes of CPU work that share nothing with the other tests, so they
start in the background as soon as the session has collected this test (at a lower priority:
they soak up the cores the rest of the suite leaves idle), and this test, moved to the end of
the session, collects their results (tests/demo/conftest.py). `make test` runs this file as a
session of its own, started with the quick tests and collected after the slow ones, so its
wait covers the whole of `make test`."""

from __future__ import annotations

import json

import pytest

PIXEL, CLIP, PACO = (
    "pixel similarity (Pixel L1)",
    "tiny CLIP-I",
    "tiny PaCo evaluator (PacoReward.score)",
)


@pytest.mark.slow
def test_the_evaluator_beats_pixel_similarity_and_clip_on_truth_pairs(evaluator_runs):
    runs = evaluator_runs
    results = []
    for run in runs:
        out, err = run.communicate(timeout=3600)  # at low priority beside all of make test
        assert run.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r in results:
        paco, pixel, clip = r[PACO], r[PIXEL], r[CLIP]
        # Baselines near chance: the world varies pose and lighting, not identity.
        assert max(pixel["roc_auc"], clip["roc_auc"]) < 0.7, r
        # Both margins depend on the CPU (same code, bit-identical reruns on one machine), so
        # they are asserted with room for that. ROC-AUC: seed 0 gave 0.834 against 0.563 on an
        # Intel machine, seed 1 0.664 against 0.575 there (+0.089; more on AMD ones).
        assert paco["roc_auc"] >= max(pixel["roc_auc"], clip["roc_auc"]) + 0.05, r
        # The evaluator's accuracy is at its own threshold (P(Yes) >= 0.5), the baselines' at
        # their best threshold on these very pairs: seed 1 gave 0.713 on one machine and 0.668
        # on another, against 0.576 (0.669 against 0.595 on the Intel one).
        assert paco["accuracy"] >= max(pixel["accuracy"], clip["accuracy"]) + 0.05, r
