"""The tiny evaluator really learns a relational judgement ("same colour?").

Each image alone is a uniformly random colour, so the label cannot be read from one
image. Answer-first training alone stays at chance on this task; the reasons-first
warm-up (``reasoning_warmup_steps``) makes it learnable, and the held-out accuracy is
measured on answer-first targets, through the scorer (PacoReward) as well.
"""

from __future__ import annotations

import numpy as np
import pytest

from paco_reward import PacoReward
from paco_reward.training import PacoSFTConfig, PacoSFTTrainer
from paco_reward.training.loading import load_model_and_processor, lora_config
from paco_reward.training.metrics import decision_metrics
from paco_reward.training.toy import colour_pair_splits


@pytest.mark.slow
def test_tiny_model_learns_same_colour_with_reasoning_warmup(tmp_path):
    splits = colour_pair_splits(3000, 200, seed=0)
    cfg = PacoSFTConfig(
        output_dir=str(tmp_path / "run"),
        model_name_or_path=str(tmp_path / "base"),
        tiny_model=True,  # from scratch, 1 vision token per image
        tiny_vision="base",
        use_lora=False,
        freeze_vision_tower=False,
        freeze_merger=False,
        image_min_pixels=28 * 28,
        image_max_pixels=28 * 28,
        reasoning_warmup_steps=700,
        max_steps=950,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        per_device_train_batch_size=16,
        per_device_eval_batch_size=100,
        first_token_weight=0.5,
        logging_steps=50,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    model, processor = load_model_and_processor(cfg)
    trainer = PacoSFTTrainer(
        model,
        cfg,
        train_dataset=splits["train"],
        eval_dataset=splits["test"],
        processing_class=processor,
        peft_config=lora_config(cfg),
    )
    trainer.train()
    metrics = trainer.evaluate()
    assert metrics["eval_decision_accuracy"] >= 0.85, metrics
    assert metrics["eval_roc_auc"] >= 0.9, metrics
    # The scorer reads the same thing: score the held-out pairs through PacoReward.
    trainer.save_model(str(tmp_path / "trained"))
    trainer.processing_class.save_pretrained(str(tmp_path / "trained"))
    rm = PacoReward.from_pretrained(tmp_path / "trained", template="rank")
    test = splits["test"]
    scores = rm.score_pairs([(r["image_a"], r["image_b"], None) for r in test])
    scored = decision_metrics(scores, np.array(test["label"]))
    assert scored["score_accuracy"] == pytest.approx(metrics["eval_score_accuracy"], abs=0.011)
