"""The LAION aesthetic predictor against Flow-GRPO's released scorer, on a tiny CLIP and head.

Reference: ``flow_grpo/aesthetic_scorer.py`` of github.com/yifan123/flow_grpo at commit
ac4c86e (the improved-aesthetic-predictor's ``simple_inference.py`` arithmetic: CLIP
``get_image_features``, divided by its norm, into the MLP), run by
``tests/reference/flow_grpo_aesthetic_peer.py`` in the transformers 4.49 venv of the
t2v-metrics peer (``.venv-t2v-metrics``; transformers 5's ``get_image_features`` returns an
output object the released code cannot divide). ``PACO_REF_FLOW_GRPO`` names a checkout or
git directory of the repository; the file is copied at that commit into a temporary folder.
Without it :func:`test_frozen_flow_grpo_ratings` checks against the numbers that run printed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from paco_reward.aesthetics import LaionAestheticPredictor
from paco_reward.testing.aesthetics import HEAD_FILE, build_tiny_aesthetic_predictor

REPO = Path(__file__).resolve().parents[2]
COMMIT = "ac4c86e"
PEER_SCRIPT = Path(__file__).with_name("flow_grpo_aesthetic_peer.py")

# Printed by test_flow_grpo_peer (flow_grpo @ ac4c86e, transformers 4.49.0).
FROZEN_RATINGS = [4.83365535736084, 5.3153886795043945, 5.082796573638916, 4.824448585510254]


def images() -> np.ndarray:
    """Four deterministic 48x40 RGB images (uint8 NHWC)."""
    return np.stack([np.random.default_rng(k).integers(0, 256, (40, 48, 3), dtype=np.uint8)
                     for k in range(4)])  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_aesthetic_predictor(tmp_path_factory.mktemp("aesthetic_ref"), seed=0)


@pytest.mark.slow
def test_flow_grpo_peer(tiny, tmp_path):
    checkout = os.environ.get("PACO_REF_FLOW_GRPO")
    python = Path(os.environ.get("PACO_T2V_METRICS_PYTHON", REPO / ".venv-t2v-metrics/bin/python"))
    if not checkout or not python.exists():
        pytest.skip("needs PACO_REF_FLOW_GRPO (a checkout of github.com/yifan123/flow_grpo) "
                    "and the t2v-metrics venv (make .venv-t2v-metrics/.installed-stamp)")  # fmt: skip
    clip, head = tiny
    package = tmp_path / "source" / "flow_grpo"
    (package / "assets").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "assets" / "__init__.py").write_text("")
    scorer_code = subprocess.run(
        ["git", "-C", checkout, "show", f"{COMMIT}:flow_grpo/aesthetic_scorer.py"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    (package / "aesthetic_scorer.py").write_bytes(scorer_code)
    (package / "assets" / HEAD_FILE).write_bytes(head.read_bytes())
    np.save(tmp_path / "images.npy", images())
    # openai/clip-vit-large-patch14's layout: the image processor in preprocessor_config.json
    # only (transformers 4 misreads transformers 5's processor_config.json)
    published = tmp_path / "clip"
    shutil.copytree(clip, published)
    (published / "processor_config.json").unlink()
    run = subprocess.run(
        [str(python), str(PEER_SCRIPT), "--source", str(tmp_path / "source"), "--clip", str(published),
         "--images", str(tmp_path / "images.npy")],
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    reference = json.loads(run.stdout.strip().splitlines()[-1])
    ours = LaionAestheticPredictor.from_pretrained(clip, head, device="cpu").ratings(list(images()))
    print(f"\nflow_grpo @ {COMMIT} (transformers {reference['transformers']}): "
          f"ratings = {reference['ratings']}; ours {ours.tolist()}")  # fmt: skip
    np.testing.assert_allclose(ours, reference["ratings"], rtol=1e-5)


def test_frozen_flow_grpo_ratings(tiny):
    clip, head = tiny
    ours = LaionAestheticPredictor.from_pretrained(clip, head, device="cpu").ratings(list(images()))
    np.testing.assert_allclose(ours, FROZEN_RATINGS, rtol=1e-5)
