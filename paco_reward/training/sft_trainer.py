"""``PacoSFTTrainer``: supervised fine-tuning of the pairwise evaluator.

A ``transformers.Trainer`` that overrides only what PaCo-Reward needs:

* ``compute_loss``: :func:`~paco_reward.training.loss.first_token_weighted_loss`, with the
  accumulated batch's normaliser so gradient accumulation keeps the loss scale;
* ``get_batch_samples``: counts that normaliser and switches the collator from
  reasons-first to answer-first targets when ``reasoning_warmup_steps`` have passed;
* ``prediction_step`` / ``evaluate``: teacher-forced decision-token metrics
  (:mod:`paco_reward.training.metrics`), always on answer-first targets;
* ``_load_from_checkpoint`` / ``_load_best_model``: reload fully fine-tuned weights through
  ``from_pretrained`` (transformers 5's checkpoint key names; see ``_reload_full_weights``).

    >>> cfg = PacoSFTConfig(output_dir="out", model_name_or_path="Qwen/Qwen2.5-VL-7B-Instruct",
    ...                     dataset_path="pairs/")                      # doctest: +SKIP
    >>> trainer = PacoSFTTrainer(args=cfg)                              # doctest: +SKIP
    >>> trainer.train()                                                 # doctest: +SKIP
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import Trainer

from paco_reward.training.callbacks import MetricsFileCallback
from paco_reward.training.collator import IGNORE_INDEX, PacoSFTCollator
from paco_reward.training.loss import first_token_weighted_loss, loss_normaliser
from paco_reward.training.metrics import compute_decision_metrics
from paco_reward.training.sft_config import (
    LM_LINEAR_LAYERS,
    TOY_DATASET,
    VISION_LINEAR_LAYERS,
    PacoSFTConfig,
)
from paco_reward.yes_no import YesNoTokens, yes_probability

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------- model and data
def build_or_locate_model(args: PacoSFTConfig) -> str:
    """The model folder to load; builds the from-scratch tiny model when ``tiny_model``."""
    if not args.model_name_or_path:
        raise ValueError("model_name_or_path is not set; give a Qwen2.5-VL folder or hub id.")
    path = Path(args.model_name_or_path)
    if args.tiny_model and not (path / "config.json").is_file():
        from paco_reward.testing.qwen import TINY_VISION_TOWERS, build_tiny_model

        side = args.image_max_pixels or 28 * 28
        logger.info("Building a from-scratch tiny Qwen2.5-VL at %s", path)
        build_tiny_model(
            path,
            seed=args.seed,
            min_pixels=args.image_min_pixels or side,
            max_pixels=side,
            vision_config=TINY_VISION_TOWERS[args.tiny_vision],
        )
    return str(args.model_name_or_path)


def lora_target_regex(args: PacoSFTConfig) -> str:
    """Regex (peft full-match) of the linear layers that get LoRA: the language model's
    ``lora_target_modules``, plus the vision tower's linear layers when it is not frozen."""
    unknown = sorted(set(args.lora_target_modules) - set(LM_LINEAR_LAYERS))
    if unknown:
        raise ValueError(
            f"lora_target_modules {unknown} are not linear layers of the language model; "
            f"choose from {list(LM_LINEAR_LAYERS)}."
        )
    names = "|".join(args.lora_target_modules)
    pattern = rf".*language_model\.layers\.\d+\.(self_attn|mlp)\.({names})"
    if not args.freeze_vision_tower:
        pattern += rf"|.*visual\.blocks\.\d+\.(attn|mlp)\.({'|'.join(VISION_LINEAR_LAYERS)})"
    return pattern


def load_model_and_processor(args: PacoSFTConfig):
    """Load Qwen2.5-VL and its processor, then apply LoRA or freezing as configured.

    Returns:
        ``(model, processor)``; with LoRA the model is a ``peft.PeftModel``.
    """
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    path = build_or_locate_model(args)
    kwargs = {"dtype": args.torch_dtype}
    if args.attn_implementation:
        kwargs["attn_implementation"] = args.attn_implementation
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(path, **kwargs)
    processor = AutoProcessor.from_pretrained(path)
    visual = model.model.visual
    if args.use_lora:
        from peft import LoraConfig, get_peft_model

        model.requires_grad_(False)
        lora = LoraConfig(
            r=args.lora_r,
            lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout,
            target_modules=lora_target_regex(args),
            modules_to_save=None if args.freeze_merger else ["merger"],
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
    else:
        model.requires_grad_(True)
        visual.requires_grad_(not args.freeze_vision_tower)
        visual.merger.requires_grad_(not args.freeze_merger)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    logger.info("Trainable parameters: %d / %d (%.2f%%)", trainable, total, 100 * trainable / total)
    return model, processor


def load_pair_datasets(args: PacoSFTConfig):
    """``(train, eval)`` datasets from ``dataset_path`` (PAIR_SCHEMA) or the toy generator."""

    if not args.dataset_path:
        raise ValueError(f"dataset_path is not set; give a pair dataset folder or {TOY_DATASET!r}.")
    if args.dataset_path == TOY_DATASET:
        from paco_reward.training.toy import colour_pair_splits

        splits = colour_pair_splits(args.toy_train_size, args.toy_test_size, seed=args.seed)
    else:
        splits = load_pair_dataset_dict(args.dataset_path)
    if args.train_split not in splits:
        raise ValueError(
            f"train_split {args.train_split!r} not in {args.dataset_path!r} (has {list(splits)})."
        )
    train = splits[args.train_split]
    if args.max_train_samples is not None:
        train = train.select(range(min(args.max_train_samples, len(train))))
    evaluation = None
    if args.eval_split:
        if args.eval_split not in splits:
            raise ValueError(
                f"eval_split {args.eval_split!r} not in {args.dataset_path!r} (has {list(splits)}); "
                "set eval_split to one of them or to ''."
            )
        evaluation = splits[args.eval_split]
        if args.max_eval_samples is not None:
            evaluation = evaluation.select(range(min(args.max_eval_samples, len(evaluation))))
    return train, evaluation


def load_pair_dataset_dict(path: str | Path):
    """Load an exported pair dataset: a ``save_to_disk`` folder, a folder holding ``hf/``,
    or one holding ``parquet/<split>.parquet``."""
    import datasets

    path = Path(path)
    for candidate in (path, path / "hf"):
        if (candidate / "dataset_dict.json").is_file():
            return datasets.load_from_disk(str(candidate))
    parquet = path / "parquet"
    if parquet.is_dir() and any(parquet.glob("*.parquet")):
        files = {p.stem: str(p) for p in sorted(parquet.glob("*.parquet"))}
        splits = datasets.load_dataset("parquet", data_files=files)
        return splits.cast_column("image_a", datasets.Image()).cast_column(
            "image_b", datasets.Image()
        )
    raise ValueError(
        f"No pair dataset at {str(path)!r}: expected a DatasetDict saved with save_to_disk "
        "(dataset_dict.json), or hf/ or parquet/ inside it."
    )


# ---------------------------------------------------------------------- trainer
class PacoSFTTrainer(Trainer):
    """SFT trainer of the PaCo pairwise evaluator (see the module docstring).

    Args:
        model: a loaded model, or None to load ``args.model_name_or_path`` (LoRA/freezing
            applied as configured).
        args: :class:`PacoSFTConfig`.
        train_dataset / eval_dataset: PAIR_SCHEMA datasets; None loads ``args.dataset_path``.
        processing_class: the processor (loaded with the model when ``model`` is None).
        data_collator: defaults to :class:`PacoSFTCollator` with the recipe's pixel caps.
    """

    # compute_loss divides by the accumulated batch's normaliser itself.
    loss_is_scaled_for_ga = True

    def __init__(
        self,
        model=None,
        args: PacoSFTConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        data_collator=None,
        compute_metrics=None,
        callbacks=None,
        **kwargs,
    ) -> None:
        if not isinstance(args, PacoSFTConfig):
            raise TypeError(f"args must be a PacoSFTConfig; got {type(args).__name__}.")
        # ---- model + processor
        if model is None:
            model, loaded_processor = load_model_and_processor(args)
            processing_class = processing_class or loaded_processor
        if processing_class is None:
            raise ValueError("processing_class (the model's processor) is required with a model.")
        # ---- data
        if train_dataset is None:
            train_dataset, loaded_eval = load_pair_datasets(args)
            eval_dataset = eval_dataset if eval_dataset is not None else loaded_eval
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
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            data_collator=data_collator,
            compute_metrics=compute_metrics or compute_decision_metrics,
            callbacks=[MetricsFileCallback(), *(callbacks or [])],
            **kwargs,
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
            loss_normaliser(b["labels"], self.args.loss_mode)
            for b in batch_samples
            if "labels" in b
        )
        count = torch.tensor(count, device=device, dtype=torch.float32)
        if self.args.world_size > 1:
            count = self.accelerator.gather(count.reshape(1)).sum()
        return batch_samples, count

    # ------------------------------------------------------------------ resume
    def _reload_full_weights(self, checkpoint: str, model) -> bool:
        """transformers 5 saves Qwen2.5-VL weights under the original checkpoint key names but
        ``Trainer`` reloads them (on resume and for ``load_best_model_at_end``) with a raw
        ``load_state_dict``, which silently loads nothing. For a fully fine-tuned (non-PEFT,
        non-sharded) model, reload through ``from_pretrained``, which maps the keys; returns
        False when ``Trainer``'s own path applies."""
        if (
            not (Path(checkpoint) / "model.safetensors").is_file()
            or hasattr(model, "peft_config")
            or self.is_fsdp_enabled
            or self.is_deepspeed_enabled
        ):
            return False
        reloaded = type(model).from_pretrained(checkpoint, dtype=model.dtype)
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
