"""PacoSFTTrainer: parameters change, loss logged, gradient accumulation, resume, curriculum."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from paco_reward.errors import ConfigError, InputTypeError, PathNotFoundError
from paco_reward.training import PacoSFTCollator, PacoSFTConfig, PacoSFTTrainer
from paco_reward.training.callbacks import read_metrics
from paco_reward.training.loading import build_trainer, load_model_and_processor, lora_config
from paco_reward.training.toy import colour_pairs


@pytest.fixture(scope="module")
def pairs():
    return colour_pairs(16, seed=5, size=28)


def _config(tmp_path, model_dir, **overrides) -> PacoSFTConfig:
    values = dict(
        output_dir=str(tmp_path / "run"),
        model_name_or_path=str(model_dir),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        learning_rate=1e-2,
        max_steps=3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        eval_split="",
    )
    values.update(overrides)
    return PacoSFTConfig(**values)


def _trainer(cfg, pairs, eval_pairs=None, collator=None):
    model, processor = load_model_and_processor(cfg)
    return PacoSFTTrainer(
        model=model,
        args=cfg,
        train_dataset=pairs,
        eval_dataset=eval_pairs,
        processing_class=processor,
        data_collator=collator,
        peft_config=lora_config(cfg),
    )


def test_lora_loss_logged_and_every_trainable_parameter_changed(tmp_path, tiny_model_dir, pairs):
    cfg = _config(tmp_path, tiny_model_dir)
    trainer = _trainer(cfg, pairs, eval_pairs=pairs.select(range(8)))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n and "language_model" in n for n in trainable)
    trainer.train()
    for name, param in trainer.model.named_parameters():
        changed = not torch.equal(before[name], param.detach())
        assert changed == (name in trainable), name
    rows = read_metrics(cfg.output_dir)
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    metrics = trainer.evaluate()
    assert {
        "eval_decision_accuracy",
        "eval_roc_auc",
        "eval_p_yes_on_yes",
        "eval_p_yes_on_no",
    } <= set(metrics)
    assert 0.0 <= metrics["eval_p_yes_on_no"] <= 1.0
    assert (tmp_path / "run" / "loss_curve.png").stat().st_size > 1000
    assert any("eval_roc_auc" in r for r in read_metrics(cfg.output_dir))


def test_full_finetune_respects_freeze_switches(tmp_path, tiny_model_dir, pairs):
    cfg = _config(tmp_path, tiny_model_dir, use_lora=False, max_steps=1, freeze_merger=False)
    trainer = _trainer(cfg, pairs)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    for name, param in trainer.model.named_parameters():
        changed = not torch.equal(before[name], param.detach())
        if "visual" in name and "merger" not in name:
            assert not changed and not param.requires_grad, name
        elif "merger" in name or "language_model.layers" in name:
            assert changed, name


def test_lora_with_unfrozen_vision_tower_and_merger(tmp_path, tiny_model_dir):
    cfg = _config(tmp_path, tiny_model_dir, freeze_vision_tower=False, freeze_merger=False)
    model = _trainer(cfg, colour_pairs(4, seed=1, size=28)).model
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("visual.blocks" in n and "lora_" in n for n in names)
    assert any("merger" in n and "modules_to_save" in n for n in names)


@pytest.mark.parametrize("mode", ["paper", "reference"])
def test_gradient_accumulation_keeps_the_update(tmp_path, tiny_model_dir, pairs, mode):
    """One batch of 4 and two accumulated batches of 2 give the same SGD update."""
    params = {}
    for batch, accumulation in ((4, 1), (2, 2)):
        cfg = _config(
            tmp_path / f"{batch}x{accumulation}",
            tiny_model_dir,
            use_lora=False,
            freeze_vision_tower=False,
            freeze_merger=False,
            max_steps=1,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            optim="sgd",
            learning_rate=1.0,
            max_grad_norm=0.0,
            lr_scheduler_type="constant",
            loss_mode=mode,
            first_token_weight=0.3,
        )
        trainer = _trainer(cfg, pairs)
        start = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        trainer.train()
        params[batch] = {n: p.detach() - start[n] for n, p in trainer.model.named_parameters()}
    moved = 0
    for name, update in params[4].items():
        torch.testing.assert_close(params[2][name], update, atol=2e-6, rtol=1e-4, msg=name)
        moved += int(update.abs().max() > 0)
    assert moved > 10


def test_resume_continues_the_same_loss_curve(tmp_path, tiny_model_dir, pairs):
    common = dict(
        use_lora=False,
        freeze_vision_tower=False,
        freeze_merger=False,
        max_steps=6,
        learning_rate=3e-3,
        per_device_train_batch_size=2,
    )
    full_cfg = _config(
        tmp_path / "a", tiny_model_dir, save_strategy="steps", save_steps=3, **common
    )
    _trainer(full_cfg, pairs).train()
    full = {r["step"]: r["loss"] for r in read_metrics(full_cfg.output_dir) if "loss" in r}
    resumed_cfg = _config(tmp_path / "b", tiny_model_dir, **common)
    trainer = _trainer(resumed_cfg, pairs)
    trainer.train(resume_from_checkpoint=str(tmp_path / "a" / "run" / "checkpoint-3"))
    resumed = {r["step"]: r["loss"] for r in read_metrics(resumed_cfg.output_dir) if "loss" in r}
    assert sorted(resumed) == [4, 5, 6]
    for step in (4, 5, 6):
        assert resumed[step] == pytest.approx(full[step], rel=1e-4), step


def test_load_best_model_at_end_restores_the_best_checkpoint(tmp_path, tiny_model_dir, pairs):
    """Full fine-tuning with ``load_best_model_at_end``: after training, the weights are the
    best checkpoint's (Trainer's raw load_state_dict would silently keep the last ones)."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    cfg = _config(
        tmp_path,
        tiny_model_dir,
        use_lora=False,
        max_steps=4,
        learning_rate=3e-2,
        per_device_train_batch_size=2,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="steps",
        save_steps=1,
        load_best_model_at_end=True,
        # "Best" = highest eval loss: an early checkpoint, so restoring it is visible.
        metric_for_best_model="loss",
        greater_is_better=True,
    )
    trainer = _trainer(cfg, pairs, eval_pairs=pairs.select(range(4)))
    trainer.train()
    best = trainer.state.best_model_checkpoint
    assert best is not None
    assert best != str(Path(cfg.output_dir) / "checkpoint-4")  # otherwise nothing to restore
    expected = Qwen2_5_VLForConditionalGeneration.from_pretrained(best).state_dict()
    for name, value in trainer.model.state_dict().items():
        torch.testing.assert_close(value, expected[name], msg=name)


class _RecordingCollator(PacoSFTCollator):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[bool, bool]] = []  # (training batch?, reasoning_first)

    def __call__(self, rows):
        self.calls.append((len(rows) == 2, self.reasoning_first))  # eval batches have 4 rows
        return super().__call__(rows)


def test_reasoning_warmup_switches_format_and_evaluates_answer_first(
    tmp_path, tiny_model_dir, pairs
):
    cfg = _config(
        tmp_path,
        tiny_model_dir,
        max_steps=5,
        reasoning_warmup_steps=2,
        per_device_train_batch_size=2,
        eval_strategy="steps",
        eval_steps=1,
    )
    model, processor = load_model_and_processor(cfg)
    collator = _RecordingCollator(processor)
    trainer = PacoSFTTrainer(
        model=model,
        args=cfg,
        train_dataset=pairs,
        eval_dataset=pairs.select(range(4)),
        processing_class=processor,
        data_collator=collator,
        peft_config=lora_config(cfg),
    )
    trainer.train()
    train_formats = [first for training, first in collator.calls if training]
    eval_formats = [first for training, first in collator.calls if not training]
    assert eval_formats and not any(eval_formats)
    # Reasons-first for the warm-up steps (±1 batch of data-loader look-ahead), then answer-first.
    switch = train_formats.index(False)
    assert train_formats[0] and 2 <= switch <= 3 and not any(train_formats[switch:])


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"first_token_weight": 1.2}, r"first_token_weight must be in \[0, 1\]; got 1.2"),
        ({"loss_mode": "tokens"}, r"loss_mode 'tokens' is not one of \('paper', 'reference'\)"),
        ({"model_dtype": "fp8"}, r"model_dtype 'fp8' is not one of"),
        ({"lora_r": 0}, r"lora_r and lora_alpha must be positive; got 0, 64"),
        ({"lora_dropout": 1.0}, r"lora_dropout must be in \[0, 1\); got 1.0"),
        ({"reasoning_warmup_steps": -1}, r"reasoning_warmup_steps must be >= 0; got -1"),
        ({"tiny_vision": "huge"}, r"tiny_vision must be 'base' or 'wide'; got 'huge'"),
        (
            {"reasoning_warmup_steps": 5, "dataloader_num_workers": 2},
            r"needs dataloader_num_workers=0",
        ),
        ({"image_max_pixels": 0}, r"image_max_pixels must be positive or None; got 0"),
        ({"image_min_pixels": 900, "image_max_pixels": 800}, r"image_min_pixels \(900\) exceeds"),
    ],
)
def test_config_validation(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        PacoSFTConfig(output_dir=str(tmp_path), **overrides)


def test_bad_lora_targets_and_missing_inputs_raise(tmp_path, tiny_model_dir):
    with pytest.raises(ConfigError, match=r"lora_target_modules \['qkv'\] are not linear layers"):
        load_model_and_processor(_config(tmp_path, tiny_model_dir, lora_target_modules=["qkv"]))
    with pytest.raises(ConfigError, match="model_name_or_path is not set"):
        load_model_and_processor(PacoSFTConfig(output_dir=str(tmp_path)))
    with pytest.raises(PathNotFoundError, match="No pair dataset at"):
        build_trainer(_config(tmp_path, tiny_model_dir, dataset_path=str(tmp_path)))
    with pytest.raises(InputTypeError, match="args must be a PacoSFTConfig"):
        PacoSFTTrainer(None, args=json, train_dataset=[])


def test_gradient_checkpointing_with_lora_trains(tmp_path, tiny_model_dir, pairs):
    """``gradient_checkpointing: true`` (the recipes' name) checkpoints the model's layers in
    training, without transformers' warning that the name is deprecated, and LoRA trains."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = _config(tmp_path, tiny_model_dir, gradient_checkpointing=True, max_steps=2)
    assert not [w for w in caught if "checkpointing" in str(w.message)]
    trainer = _trainer(cfg, pairs)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert not trainer.model.is_activation_checkpointing  # train() turns it on
    trainer.train()
    assert trainer.model.is_activation_checkpointing
    after = dict(trainer.model.named_parameters())
    assert all(not torch.equal(before[n], after[n].detach()) for n in before)
    # off unless asked for (trl's SFTConfig defaults it to on)
    assert _config(tmp_path, tiny_model_dir).activation_checkpointing is False


@pytest.mark.parametrize("frozen", [True, False])
def test_the_vision_tower_is_in_the_backward_only_when_it_trains(
    tmp_path, tiny_model_dir, pairs, frozen
):
    """LoRA with gradient checkpointing: transformers then makes every sub-model's input
    embeddings require a gradient, the vision tower's patch embedding too. A frozen vision
    tower (the recipes') runs without autograd, so the backward recomputes none of its
    blocks; one with LoRA is recomputed and trains."""
    from paco_reward.modeling import vision_tower

    cfg = _config(tmp_path, tiny_model_dir, gradient_checkpointing=True, max_steps=1,
                  freeze_vision_tower=frozen)  # fmt: skip
    trainer = _trainer(cfg, pairs)
    calls = []  # per call of a vision block's layer: whether a backward ran it
    for block in vision_tower(trainer.model).blocks:
        for child in block.children():
            child.register_forward_pre_hook(
                lambda m, a: calls.append(torch._C._current_graph_task_id() != -1)
            )
    lora_b = {n: p.detach().clone() for n, p in trainer.model.named_parameters()
              if p.requires_grad and "visual" in n and "lora_B" in n}  # fmt: skip
    trainer.train()
    assert calls and not all(calls)  # the forward ran the vision tower
    assert any(calls) is not frozen
    changed = [
        not torch.equal(b, trainer.model.get_parameter(n).detach()) for n, b in lora_b.items()
    ]
    assert (len(changed) == 0) if frozen else all(changed)


def test_warmup_batches_use_plain_mle_and_answer_first_batches_the_first_token_weight(
    tmp_path, tiny_model_dir, pairs
):
    from paco_reward.training.loss import first_token_weighted_loss

    cfg = _config(tmp_path, tiny_model_dir, first_token_weight=0.9, reasoning_warmup_steps=3)
    trainer = _trainer(cfg, pairs)
    trainer.model.train()
    rows = [pairs[i] for i in range(4)]
    for reasoning_first, alpha in ((True, None), (False, 0.9)):
        trainer.data_collator.reasoning_first = reasoning_first
        batch = trainer.data_collator(rows)
        labels = batch["labels"]
        with torch.no_grad():
            loss = trainer.compute_loss(trainer.model, dict(batch))
            inputs = {k: v for k, v in batch.items() if k not in ("labels", "reasoning_first")}
            logits = trainer.model(**inputs).logits
        expected = first_token_weighted_loss(logits, labels, alpha=alpha)
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
