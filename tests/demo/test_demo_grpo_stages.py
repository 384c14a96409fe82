"""The demo's two RL stages, as ``make demo`` runs them: every reward they train on is a real
score (a reward that cannot score gives NaN, and a stage whose reward is NaN for every sample
trains on nothing while still printing a table)."""

from __future__ import annotations

import json
import logging
import math

import pytest

from demo.__main__ import main


@pytest.mark.slow
def test_rl_stages_train_on_finite_rewards(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="paco_grpo")
    status = main(["--output_dir", str(tmp_path), "--stages", "scoring", "grpo", "grpo_edit"])
    assert status == 0
    for stage in ("grpo", "grpo_edit"):
        rows = [
            json.loads(line)
            for line in (tmp_path / stage / "run" / "metrics.jsonl").read_text().splitlines()
        ]
        means = {
            key: row[key]
            for row in rows
            for key in row
            if key.startswith(("reward/", "eval/reward/")) and key.endswith("/mean")
        }
        assert means, f"{stage}: no reward was logged"
        assert all(math.isfinite(v) for v in means.values()), (stage, means)
    failed = [r.getMessage() for r in caplog.records if "NaN" in r.getMessage()]
    assert not failed, failed[:3]
