"""``PacoSFTTrainer``: supervised fine-tuning of the pairwise evaluator.

A trl ``SFTTrainer`` (with its config, :class:`PacoSFTConfig`, an ``SFTConfig``) over the
model, processor and pair datasets the script loaded (:func:`~paco_reward.training.loading.build_trainer`;
LoRA through ``peft_config`` as in trl), with the scorer's own collator (rows are rendered by
:mod:`paco_reward.templates`; trl's dataset preparation is skipped). It overrides only what
PaCo-Reward needs:

* ``compute_loss``: :func:`~paco_reward.training.loss.first_token_weighted_loss`, with the
  accumulated batch's normaliser so gradient accumulation keeps the loss scale;
* ``get_batch_samples``: counts that normaliser and switches the collator from
  reasons-first to answer-first targets when ``reasoning_warmup_steps`` have passed;
* ``prediction_step`` / ``evaluate``: teacher-forced decision-token metrics
  (:mod:`paco_reward.training.metrics`), always on answer-first targets;
* ``_load_from_checkpoint`` / ``_load_best_model``: reload fully fine-tuned weights through
  ``from_pretrained`` (transformers 5's checkpoint key names, huggingface/transformers#43701;
  see ``_reload_full_weights``).

A vision tower none of whose parameters trains (the recipes' ``freeze_vision_tower`` and
``freeze_merger``) runs without autograd (:func:`freeze_vision_tower_in_backward`).

    >>> model, processor = load_model_and_processor(cfg)                # doctest: +SKIP
    >>> trainer = PacoSFTTrainer(model, cfg, train_dataset=train, eval_dataset=test,
    ...                          processing_class=processor, peft_config=lora_config(cfg, model))  # doctest: +SKIP
    >>> trainer.train()                                                 # doctest: +SKIP
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from trl import SFTTrainer

from paco_reward.errors import InputError, InputTypeError
from paco_reward.modeling import load_vision_language_model, vision_tower
from paco_reward.training.callbacks import MetricsFileCallback
from paco_reward.training.collator import PacoSFTCollator
from paco_reward.training.loss import IGNORE_INDEX, first_token_weighted_loss, loss_normalizer
from paco_reward.training.metrics import compute_decision_metrics
from paco_reward.training.sft_config import PacoSFTConfig
from paco_reward.yes_no import YesNoTokens, yes_probability

logger = logging.getLogger(__name__)


def freeze_vision_tower_in_backward(model) -> bool:
    """Run the vision tower of ``model`` (a Qwen-VL-family model, through a PEFT wrapper too)
    with autograd off when none of its parameters, mergers included, is trained; returns
    whether it does.

    transformers' ``enable_input_require_grads``, which trl and ``Trainer`` call for LoRA with
    gradient checkpointing, hooks every sub-model's input embeddings, the vision tower's patch
    embedding among them. Its output then requires a gradient, and each step's backward
    recomputes and differentiates every vision block for a gradient nothing reads: at the 7B
    recipe's pixel budget the 32 blocks' checkpointed inputs alone are 13.6 GB.

    Example:
        >>> freeze_vision_tower_in_backward(trainer.model)  # doctest: +SKIP
        True
    """
    visual = vision_tower(model)
    if any(p.requires_grad for p in visual.parameters()):
        return False
    modes: list[bool] = []

    def grad_off(module, args) -> None:
        modes.append(torch.is_grad_enabled())
        torch.set_grad_enabled(False)

    def grad_back(module, args, output) -> None:
        torch.set_grad_enabled(modes.pop())

    visual.register_forward_pre_hook(grad_off)
    visual.register_forward_hook(grad_back, always_call=True)
    return True


# ---------------------------------------------------------------------- trainer
class PacoSFTTrainer(SFTTrainer):
    """SFT trainer of the PaCo pairwise evaluator (see the module docstring).

    Args:
        model: the loaded Qwen-VL-family model (see :func:`~paco_reward.training.loading.load_model_and_processor`).
        args: :class:`PacoSFTConfig`.
        train_dataset / eval_dataset: pair-schema datasets.
        processing_class: the model's processor.
        data_collator: defaults to :class:`PacoSFTCollator` with the recipe's pixel caps.
        peft_config: a ``peft.LoraConfig`` (``lora_config(args, model)``), or ``None`` to train the
            model as loaded.
    """

    _tag_names = ["trl", "sft", "paco-rl"]
    # compute_loss divides by the accumulated batch's normaliser itself.
    loss_is_scaled_for_ga = True

    def __init__(
        self,
        model,
        args: PacoSFTConfig,
        train_dataset,
        eval_dataset=None,
        processing_class=None,
        data_collator=None,
        compute_metrics=None,
        callbacks=None,
        peft_config=None,
        **kwargs,
    ) -> None:
        if not isinstance(args, PacoSFTConfig):
            raise InputTypeError(f"args must be a PacoSFTConfig; got {type(args).__name__}.")
        if processing_class is None:
            raise InputError("processing_class (the model's processor) is required.")
        # ---- the scorer's own collator: prompts rendered as the scorer renders them
        if data_collator is None:
            data_collator = PacoSFTCollator(
                processing_class,
                min_pixels=args.image_min_pixels,
                max_pixels=args.image_max_pixels,
                max_length=args.max_length,
            )
        if hasattr(data_collator, "reasoning_first"):
            # Before the first step (the data loader collates one batch ahead of the loop).
            data_collator.reasoning_first = args.reasoning_warmup_steps > 0
        self.yes_no = YesNoTokens.from_tokenizer(processing_class.tokenizer)
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            compute_metrics=compute_metrics or compute_decision_metrics,
            callbacks=[MetricsFileCallback(), *(callbacks or [])],
            peft_config=peft_config,
            **kwargs,
        )
        freeze_vision_tower_in_backward(self.model)
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in self.model.parameters())
        logger.info(
            "Trainable parameters: %d / %d (%.2f%%)", trainable, total, 100 * trainable / total
        )

    # ------------------------------------------------------------------ curriculum
    def in_reasoning_warmup(self) -> bool:
        """Whether the current optimizer step renders targets reasons-first."""
        return self.state.global_step < self.args.reasoning_warmup_steps

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        collator = self.data_collator
        if hasattr(collator, "reasoning_first"):
            collator.reasoning_first = self.in_reasoning_warmup()
        batch_samples, _ = super().get_batch_samples(epoch_iterator, num_batches, device)
        count = sum(
            loss_normalizer(b["labels"], self.args.loss_mode)
            for b in batch_samples
            if "labels" in b
        )
        count = torch.tensor(count, device=device, dtype=torch.float32)
        if self.args.world_size > 1:
            count = self.accelerator.gather(count.reshape(1)).sum()
        return batch_samples, count

    # ------------------------------------------------------------------ resume
    # Private overrides, because of huggingface/transformers#43701 (open): transformers 5
    # saves Qwen2.5-VL weights under the original checkpoint key names, but ``Trainer``
    # reloads them (on resume and for ``load_best_model_at_end``) with a raw
    # ``load_state_dict``, which silently loads nothing. Remove when that is fixed upstream.
    def _reload_full_weights(self, checkpoint: str, model) -> bool:
        """For a fully fine-tuned (non-PEFT, non-sharded) model, reload through
        ``from_pretrained``, which maps the keys; returns False when ``Trainer``'s own path
        applies."""
        if (
            not (Path(checkpoint) / "model.safetensors").is_file()
            or hasattr(model, "peft_config")
            or self.is_fsdp_enabled
            or self.is_deepspeed_enabled
        ):
            return False
        reloaded = load_vision_language_model(checkpoint, type(model), dtype=model.dtype)
        model.load_state_dict(reloaded.state_dict(), strict=True)
        return True

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        model = model if model is not None else self.model
        if not self._reload_full_weights(resume_from_checkpoint, model):
            super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _load_best_model(self) -> None:
        if not self._reload_full_weights(self.state.best_model_checkpoint, self.model):
            super()._load_best_model()

    # ------------------------------------------------------------------ loss
    def _forward(self, model, inputs):
        """Logits from the first position that predicts a supervised token onwards, and the
        labels aligned with them (the answer only: memory stays small with long prompts)."""
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        flags = inputs.pop("reasoning_first", None)
        reasoning_first = bool(flags.any()) if flags is not None else False
        supervised = labels[:, 1:].ne(IGNORE_INDEX)
        has_any = supervised.any(-1)
        first = torch.where(has_any, supervised.float().argmax(-1), labels.shape[1] - 1)
        start = int(first.min())
        outputs = model(**inputs, use_cache=False, logits_to_keep=labels.shape[1] - start)
        return outputs, outputs.logits, labels[:, start:], reasoning_first

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs, logits, labels, reasoning_first = self._forward(model, inputs)
        # Reasons-first targets (the warm-up) train with plain MLE: their first token is no decision.
        warmup = model.training and reasoning_first
        loss = first_token_weighted_loss(
            logits,
            labels,
            alpha=None if warmup else self.args.first_token_weight,
            mode=self.args.loss_mode,
            num_items=num_items_in_batch if model.training else None,
        )
        if model.training and self.args.world_size > 1:
            loss = loss * self.args.world_size  # DDP averages gradients over processes
        return (loss, outputs) if return_outputs else loss

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, *args, **kwargs):
        """Evaluate on answer-first targets (what the scorer reads), also during warm-up."""
        collator = self.data_collator
        previous = getattr(collator, "reasoning_first", None)
        if previous is not None:
            collator.reasoning_first = False
        try:
            return super().evaluate(*args, **kwargs)
        finally:
            if previous is not None:
                collator.reasoning_first = previous

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """Loss plus ``[B, 3]`` rows (score, decision-token correct, label) for the metrics."""
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            _, logits, labels, _ = self._forward(model, inputs)
            loss = first_token_weighted_loss(
                logits, labels, alpha=self.args.first_token_weight, mode=self.args.loss_mode
            ).detach()
        if prediction_loss_only:
            return loss, None, None
        shifted = labels[:, 1:]
        supervised = shifted.ne(IGNORE_INDEX)
        position = supervised.float().argmax(-1)
        rows = torch.arange(len(labels), device=labels.device)
        decision_logits = logits[rows, position].float()
        target = shifted[rows, position]
        score = yes_probability(decision_logits, tokens=self.yes_no)
        correct = decision_logits.argmax(-1).eq(target)
        label = torch.isin(target, torch.tensor(self.yes_no.yes, device=target.device))
        predictions = torch.stack([score, correct.float(), label.float()], dim=-1)
        return loss, predictions, label.float()
