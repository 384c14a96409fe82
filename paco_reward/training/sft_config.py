"""Configuration of the PaCo-Reward SFT trainer (:class:`PacoSFTConfig`).

A trl ``SFTConfig``: every field of ``transformers.TrainingArguments`` and of trl's
``SFTConfig`` is available (learning rate, scheduler, batch sizes, bf16, gradient
checkpointing, DeepSpeed/FSDP, checkpointing, ...), plus the fields below. Where trl changes
a ``TrainingArguments`` default (bf16, gradient checkpointing, logging steps, learning rate,
max_length), the ``TrainingArguments`` one is kept, so a recipe means what it says. A YAML
recipe maps 1:1 onto these fields (see ``recipes/``): :meth:`PacoSFTConfig.from_yaml` loads
one (``{"key": value}`` overrides on top), :meth:`~PacoSFTConfig.to_yaml` writes one, as
``GRPOConfig`` does; a run saves its own as ``training_config.yaml``. Gradient checkpointing is written
``gradient_checkpointing``, as in ``GRPOConfig``; it sets what transformers 5 calls
``activation_checkpointing`` (a recipe may use that name too).

    >>> cfg = PacoSFTConfig(output_dir="out", model_name_or_path="Qwen/Qwen2.5-VL-7B-Instruct",
    ...                     dataset_path="pairs/")
    >>> cfg.first_token_weight, cfg.loss_mode, cfg.lora_r
    (0.1, 'paper', 32)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from trl import SFTConfig

from paco_reward.errors import ConfigError
from paco_reward.hub import check_kwargs
from paco_reward.training.loss import LOSS_MODES
from paco_reward.yaml_config import YAMLConfig

logger = logging.getLogger(__name__)

TOY_DATASET = "toy-colour-pairs"
DTYPES = ("auto", "float32", "bfloat16", "float16")
# Linear layers of a Qwen-VL language model (attention + MLP; the same names in Qwen2.5-VL and
# Qwen3-VL), matched only inside ``language_model`` so the vision tower's identically named
# MLP layers are left alone.
LM_LINEAR_LAYERS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Linear layers of a vision block: attention qkv/proj, then Qwen2.5-VL's gated MLP
# (gate/up/down_proj) or Qwen3-VL's (linear_fc1/fc2); each family matches its own.
VISION_LINEAR_LAYERS = (
    "qkv",
    "proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "linear_fc1",
    "linear_fc2",
)
# This config's names of activation checkpointing -> TrainingArguments' (transformers 5).
CHECKPOINTING = {
    "gradient_checkpointing": "activation_checkpointing",
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",
}
# model_init_kwargs keys that are fields of their own, and the field to set instead.
MODEL_INIT_RESERVED = {
    "dtype": "the dtype field",
    "torch_dtype": "the dtype field",
    "attn_implementation": "the attn_implementation field",
    "trust_remote_code": "the trust_remote_code field",
}


@dataclass
class PacoSFTConfig(YAMLConfig, SFTConfig):
    """Arguments of :class:`~paco_reward.training.PacoSFTTrainer` (see the module docstring).

    Defaults follow the paper (arXiv 2512.04784): LoRA r=32, alpha=64, dropout 0 on every
    linear layer of the language model, vision tower and merger frozen, α = 0.1.

    Example:
        >>> cfg = PacoSFTConfig.from_yaml("recipes/paco_reward_7b_lora.yaml",
        ...                               {"max_steps": 100, "use_cpu": True})  # doctest: +SKIP
        >>> cfg.to_yaml("runs/7b/training_config.yaml")                         # doctest: +SKIP
    """

    # Never written by to_yaml: keep a hub token in HF_TOKEN.
    SECRET_FIELDS = ("hub_token",)

    # ------------------------------------------------------------------ TrainingArguments defaults
    learning_rate: float = field(default=5e-5, metadata={"help": "AdamW learning rate."})
    bf16: bool | None = field(
        default=False, metadata={"help": "bf16 mixed precision (TrainingArguments' default: off)."}
    )
    # Recipes write gradient_checkpointing (GRPOConfig's and trl's name); transformers 5 calls
    # it activation_checkpointing, and __post_init__ sets that from it (see CHECKPOINTING).
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Recompute activations in the backward pass instead of keeping them: less "
            "memory, slower steps (sets TrainingArguments' activation_checkpointing)."
        },
    )
    gradient_checkpointing_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "Keyword arguments of the model's gradient checkpointing, e.g. "
            "{use_reentrant: false} (sets TrainingArguments' activation_checkpointing_kwargs)."
        },
    )
    activation_checkpointing: bool | None = field(
        default=None,
        metadata={"help": "TrainingArguments' name of gradient_checkpointing; write that."},
    )
    activation_checkpointing_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata={"help": "TrainingArguments' name of gradient_checkpointing_kwargs; write that."},
    )
    logging_steps: float = field(
        default=500, metadata={"help": "Log every N optimizer steps (a ratio when < 1)."}
    )
    dataset_kwargs: dict | str | None = field(
        default_factory=lambda: {"skip_prepare_dataset": True},
        metadata={
            "help": "trl dataset preparation; skipped: the collator renders each pair row with "
            "the scorer's templates."
        },
    )
    # ------------------------------------------------------------------ model
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "Qwen-VL-family model folder or hub id, loaded as the class its config names "
            "(e.g. Qwen/Qwen2.5-VL-7B-Instruct, Qwen/Qwen3-VL-8B-Instruct)."
        },
    )
    tiny_model: bool = field(
        default=False,
        metadata={
            "help": "Build a from-scratch tiny Qwen2.5-VL (paco_reward.testing.build_tiny_qwen2_5_vl; "
            "its pixel budget from image_min/max_pixels) at model_name_or_path when that folder "
            "does not exist (CPU recipes, tests)."
        },
    )
    tiny_vision: str = field(
        default="wide",
        metadata={
            "help": "Vision tower of the tiny_model build: 'wide' (multi-token images, e.g. the "
            "synthetic world at 56 px) or 'base' (1 token per image, e.g. toy-colour-pairs); "
            "see paco_reward.testing.qwen.TINY_VISION_TOWERS."
        },
    )
    dtype: str = field(
        default="auto",
        metadata={
            "help": f"dtype the weights are loaded in, one of {DTYPES}; 'auto' = bfloat16 "
            "when bf16 is set, else float32."
        },
    )
    attn_implementation: str | None = field(
        default=None,
        metadata={
            "help": "Attention kernel ('sdpa', 'flash_attention_2', 'eager'); None = default."
        },
    )
    model_init_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "Other keyword arguments of the model's from_pretrained "
            "(AutoModelForImageTextToText; trl's name), e.g. {revision: v1.0, device_map: auto, "
            "low_cpu_mem_usage: true}. The hub ones (revision, cache_dir, token, "
            "local_files_only) load the processor too. The dtype and attention kernel are "
            "dtype and attn_implementation; device_map is dropped when several "
            "processes train. Keep a hub token in HF_TOKEN, not here: the config is saved "
            "with the run."
        },
    )
    trust_remote_code: bool = field(
        default=False,
        metadata={
            "help": "Run the model repository's own code; passed to the model's and the "
            "processor's from_pretrained."
        },
    )
    # ------------------------------------------------------------------ LoRA / freezing
    use_lora: bool = field(
        default=True, metadata={"help": "Train a LoRA adapter (True) or fine-tune fully (False)."}
    )
    lora_r: int = field(default=32, metadata={"help": "LoRA rank (paper: 32)."})
    lora_alpha: int = field(default=64, metadata={"help": "LoRA alpha (paper: 64)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout (paper: 0)."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: list(LM_LINEAR_LAYERS),
        metadata={
            "help": "Names of the language model's linear layers that get LoRA "
            f"(default: all of them, {list(LM_LINEAR_LAYERS)})."
        },
    )
    freeze_vision_tower: bool = field(
        default=True,
        metadata={
            "help": "Keep the vision tower frozen. With LoRA, False adds LoRA to its linear "
            "layers; with full fine-tuning, False trains its weights."
        },
    )
    freeze_merger: bool = field(
        default=True,
        metadata={
            "help": "Keep the vision-language merger (and Qwen3-VL's DeepStack mergers) frozen. "
            "False trains them (with LoRA they are saved with the adapter as modules to save)."
        },
    )
    # ------------------------------------------------------------------ data
    dataset_path: str | None = field(
        default=None,
        metadata={
            "help": "Pair dataset (PAIR_SCHEMA): a DatasetDict folder from save_to_disk, its "
            f"parent holding hf/ or parquet/, or {TOY_DATASET!r} for built-in relational "
            "coloured-square pairs."
        },
    )
    train_split: str = field(default="train", metadata={"help": "Split to train on."})
    eval_split: str | None = field(
        default="test", metadata={"help": "Split to evaluate on; None or '' = no evaluation."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use at most this many training rows (None = all)."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Use at most this many evaluation rows (None = all)."}
    )
    toy_train_size: int = field(
        default=4000, metadata={"help": f"Training rows generated for {TOY_DATASET!r}."}
    )
    toy_test_size: int = field(
        default=400, metadata={"help": f"Held-out rows generated for {TOY_DATASET!r}."}
    )
    image_min_pixels: int | None = field(
        default=None,
        metadata={"help": "Minimum image area in pixels (None = the processor's)."},
    )
    image_max_pixels: int | None = field(
        default=None,
        metadata={"help": "Maximum image area in pixels (paper: 2,097,152; None = processor's)."},
    )
    max_length: int | None = field(
        default=None,
        metadata={
            "help": "Maximum tokens per row; longer reasons are cut (the decision token and "
            "prompt never are). None = no limit (trl's default is 1024)."
        },
    )
    # ------------------------------------------------------------------ objective
    first_token_weight: float = field(
        default=0.1,
        metadata={"help": "α: loss weight of the decision (Yes/No) token, in [0, 1] (paper: 0.1)."},
    )
    loss_mode: str = field(
        default="paper",
        metadata={
            "help": f"One of {LOSS_MODES}: 'paper' = per-sequence α·CE(decision) + "
            "(1-α)/(n-1)·ΣCE(rest); 'reference' = the released PaCo-RL code's token weighting."
        },
    )
    reasoning_warmup_steps: int = field(
        default=0,
        metadata={
            "help": "Curriculum: for this many optimizer steps the target is rendered "
            "reasons-first ('<reasons> So No.') with a plain MLE loss, then answer-first "
            "('No. <reasons>') with the first-token weight. Lets small models learn "
            "relational judgements that answer-first training alone does not."
        },
    )

    skip_plan_check: bool = field(
        default=False,
        metadata={
            "help": "Train even when the start-up plan says the weights and optimizer states "
            "alone exceed the GPU (paco-reward plan)."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start fresh in an output_dir that holds another run's checkpoints or "
            "metrics, deleting them (checkpoint-*, metrics.jsonl, loss_curve.png, "
            "final_metrics.json). Without it such a folder is refused unless the run resumes "
            "(resume_from_checkpoint) or its saved training_config.yaml is this run's "
            "(transformers' Trainer's name)."
        },
    )
    save_merged: bool = field(
        default=False,
        metadata={
            "help": "After LoRA training, also save base+adapter merged into output_dir/merged "
            "(loadable by PacoReward.from_pretrained and vLLM)."
        },
    )

    def __post_init__(self) -> None:
        # The collator needs the raw pair columns; nothing may drop them.
        self.remove_unused_columns = False
        self._set_activation_checkpointing()
        super().__post_init__()
        if not 0.0 <= self.first_token_weight <= 1.0:
            raise ConfigError(
                f"first_token_weight must be in [0, 1]; got {self.first_token_weight!r}."
            )
        if self.loss_mode not in LOSS_MODES:
            raise ConfigError(f"loss_mode {self.loss_mode!r} is not one of {LOSS_MODES}.")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype {self.dtype!r} is not one of {DTYPES}.")
        if self.lora_r <= 0 or self.lora_alpha <= 0:
            raise ConfigError(
                f"lora_r and lora_alpha must be positive; got {self.lora_r!r}, {self.lora_alpha!r}."
            )
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ConfigError(f"lora_dropout must be in [0, 1); got {self.lora_dropout!r}.")
        if self.tiny_vision not in ("base", "wide"):
            raise ConfigError(f"tiny_vision must be 'base' or 'wide'; got {self.tiny_vision!r}.")
        if self.reasoning_warmup_steps < 0:
            raise ConfigError(
                f"reasoning_warmup_steps must be >= 0; got {self.reasoning_warmup_steps!r}."
            )
        if 0 < self.max_steps <= self.reasoning_warmup_steps:
            logger.warning(
                "reasoning_warmup_steps=%d is not below max_steps=%d: every step trains "
                "reasons-first, the decision token is never trained answer-first and "
                "decision_accuracy stays at chance. Lower --reasoning_warmup_steps (0 turns the "
                "warm-up off) or raise --max_steps.",
                self.reasoning_warmup_steps,
                self.max_steps,
            )
        if self.reasoning_warmup_steps and self.dataloader_num_workers:
            raise ConfigError(
                "reasoning_warmup_steps needs dataloader_num_workers=0 (the collator switches "
                f"format in the main process); got {self.dataloader_num_workers!r} workers."
            )
        for name in ("image_min_pixels", "image_max_pixels", "max_length"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be positive or None; got {value!r}.")
        if (
            self.image_min_pixels is not None
            and self.image_max_pixels is not None
            and self.image_min_pixels > self.image_max_pixels
        ):
            raise ConfigError(
                f"image_min_pixels ({self.image_min_pixels}) exceeds image_max_pixels "
                f"({self.image_max_pixels})."
            )
        if self.eval_split == "":
            self.eval_split = None
        # After super().__post_init__, which parses a JSON string into a dict.
        self.model_init_kwargs = (
            check_kwargs(
                self.model_init_kwargs,
                name="model_init_kwargs",
                reserved=MODEL_INIT_RESERVED,
                error=ConfigError,
            )
            or None
        )

    def _set_activation_checkpointing(self) -> None:
        """Give TrainingArguments' ``activation_checkpointing*`` the values of this config's
        ``gradient_checkpointing*`` before it reads them (so it does not warn that the old
        name is deprecated); it then mirrors them back. A recipe may write either name; both,
        with different values, is an error."""
        for ours, theirs in CHECKPOINTING.items():
            value, other = getattr(self, ours), getattr(self, theirs)
            if value is not None and other is not None and value != other:
                raise ConfigError(
                    f"{ours}={value!r} and {theirs}={other!r} disagree: {theirs} is "
                    f"TrainingArguments' name of {ours}; set {ours} only."
                )
            if other is None:
                setattr(self, theirs, value)

    @property
    def torch_dtype(self):
        """The dtype model weights are loaded in."""
        import torch

        if self.dtype == "auto":
            return torch.bfloat16 if self.bf16 else torch.float32
        return getattr(torch, self.dtype)
