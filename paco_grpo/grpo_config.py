"""``GRPOConfig``: every knob of the PaCo-GRPO trainer, with help and start-up validation.

A recipe is a YAML file whose keys are these fields, flat except where training and
evaluation differ: ``train:`` and ``test:`` map 1:1 to :class:`TrainSection` /
:class:`EvalSection`. Fields take the names of ``transformers.TrainingArguments`` and trl's
``GRPOConfig`` wherever the idea is the same (``lora_r``, ``num_train_epochs``,
``num_generations``, ``epsilon``, ``report_to``, ``gradient_checkpointing``, ...); an
unknown key fails at load time, naming it and listing the valid ones. Command-line flags
override with dotted names (``--train.resolution 256``). ``config.json`` in a run's output
folder reloads with :meth:`GRPOConfig.from_yaml`.

    >>> cfg = GRPOConfig(model_name_or_path="tiny", prompt_file="p.txt", rewards={"panel_colour_agreement": 1.0})
    >>> cfg.train.resolution, cfg.test.resolution
    (512, 1024)
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paco_grpo.advantages import AGGREGATORS, NORMALIZATIONS, STD_SCOPES
from paco_grpo.pipelines import PIPELINE_SPECS
from paco_grpo.sde import CPS_LOG_PROBS, SDE_TYPES
from paco_reward.command_line import apply_overrides, coerce_floats
from paco_reward.errors import ConfigError
from paco_reward.hub import PIPELINE_KWARGS, check_kwargs

logger = logging.getLogger(__name__)

__all__ = ["GRPOConfig", "EvalSection", "TrainSection"]

# The pipelines whose guidance is true CFG with a negative prompt (for the fields' help).
TRUE_CFG_PIPELINES = tuple(name for name, spec in PIPELINE_SPECS.items() if spec.true_cfg)
DTYPES = ("float32", "bfloat16", "float16")
MIXED_PRECISION = ("no", "fp16", "bf16")
PROMPT_FORMATS = ("auto", "t2is", "text", "parquet")


def _check_resolution(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 16 or value % 16:
        raise ConfigError(f"{name} must be a positive multiple of 16 pixels; got {value!r}.")


def _check_weights(name: str, weights: dict[str, float]) -> None:
    if not isinstance(weights, dict) or not weights:
        raise ConfigError(
            f"{name} must be a non-empty mapping of reward name to weight, e.g. "
            f"{{'consistency': 1.0}}; got {weights!r}."
        )
    bad = {k: w for k, w in weights.items() if not isinstance(w, (int, float)) or w < 0}
    if bad:
        raise ConfigError(f"{name} weights must be numbers >= 0; got {bad}.")


@dataclass
class TrainSection:
    """How training samples are drawn (the behaviour policy)."""

    resolution: int = field(
        default=512,
        metadata={
            "help": "Square image side in pixels for training samples (the paper trains at 512)."
        },
    )
    num_steps: int = field(
        default=10, metadata={"help": "Denoising steps when sampling for training."}
    )
    noise_level: float = field(
        default=0.7,
        metadata={
            "help": "Noise level a of the stochastic steps: sde `std_t = a*sqrt(sigma/(1-sigma))`; cps `std = sigma_next*sin(a*pi/2)` with 0 < a <= 1."
        },
    )
    sde_type: str = field(
        default="sde",
        metadata={
            "help": f"Stochastic step at the noise steps, one of {SDE_TYPES}: sde (Flow-GRPO's reverse-time SDE) or cps (coefficient-preserving sampling, the released code's `cps` flag; keeps the flow's marginal coefficients exactly). Evaluation always samples with the deterministic ODE."
        },
    )
    cps_log_prob: str = field(
        default="gaussian",
        metadata={
            "help": f"Log-probability of a CPS step, one of {CPS_LOG_PROBS}: gaussian (`log N(x'; mean, std^2)` averaged over elements, as the SDE's) or released (the released code's `-mean((x' - mean)^2)`, not a density: its log-ratio is `2*std^2` times the Gaussian one, so `epsilon` clips differently). Only with sde_type: cps."
        },
    )
    noise_steps: list[int] = field(
        default_factory=lambda: [1],
        metadata={"help": "Step indices that take the SDE step; only these are trained."},
    )
    guidance_scale: float = field(
        default=3.5,
        metadata={
            "help": f"FLUX/Kontext embedded guidance when sampling and training; for {', '.join(TRUE_CFG_PIPELINES)} the true-CFG scale (above 1, z_image above 0, CFG runs with negative_prompt)."
        },
    )

    def __post_init__(self) -> None:
        _check_resolution("train.resolution", self.resolution)
        if self.num_steps < 1:
            raise ConfigError(f"train.num_steps must be >= 1; got {self.num_steps}.")
        if self.noise_level <= 0:
            raise ConfigError(
                f"train.noise_level must be > 0 (a = 0 has no log-probability to train); got {self.noise_level}."
            )
        if not self.noise_steps or any(not 0 <= s < self.num_steps for s in self.noise_steps):
            raise ConfigError(
                f"train.noise_steps must be a non-empty list of step indices in [0, {self.num_steps - 1}]; "
                f"got {self.noise_steps!r}."
            )
        if self.sde_type not in SDE_TYPES:
            raise ConfigError(f"train.sde_type must be one of {SDE_TYPES}; got {self.sde_type!r}.")
        if self.cps_log_prob not in CPS_LOG_PROBS:
            raise ConfigError(
                f"train.cps_log_prob must be one of {CPS_LOG_PROBS}; got {self.cps_log_prob!r}."
            )
        if self.sde_type == "sde" and self.cps_log_prob != "gaussian":
            raise ConfigError(
                f"train.cps_log_prob={self.cps_log_prob!r} applies only to train.sde_type: cps "
                "(the SDE step's log-probability is always its Gaussian density); set "
                "train.sde_type: cps or drop train.cps_log_prob."
            )
        if self.sde_type == "cps":
            if self.noise_level > 1:
                raise ConfigError(
                    f"train.noise_level must be in (0, 1] with train.sde_type: cps (std = "
                    f"sigma_next*sin(a*pi/2) grows only up to a = 1; a and 2 - a give the same "
                    f"std); got {self.noise_level}."
                )
            if self.num_steps - 1 in self.noise_steps:
                raise ConfigError(
                    f"train.noise_steps includes the last step ({self.num_steps - 1}), whose next "
                    "sigma is 0: with train.sde_type: cps its std = sigma_next*sin(a*pi/2) is 0, "
                    "a deterministic step with no log-probability; drop it from "
                    f"train.noise_steps (got {self.noise_steps!r})."
                )


@dataclass
class EvalSection:
    """Evaluation: EMA weights, ODE sampling, its own resolution and rewards."""

    resolution: int = field(
        default=1024,
        metadata={
            "help": "Square image side in pixels for evaluation (the paper evaluates at 1024)."
        },
    )
    num_steps: int = field(default=10, metadata={"help": "Denoising steps (ODE) at evaluation."})
    guidance_scale: float = field(
        default=3.5,
        metadata={
            "help": f"FLUX/Kontext embedded guidance at evaluation ({', '.join(TRUE_CFG_PIPELINES)}: true-CFG scale)."
        },
    )
    every: int = field(
        default=10,
        metadata={"help": "Evaluate every N epochs (and after the last); 0 disables evaluation."},
    )
    num_prompts: int = field(
        default=16,
        metadata={"help": "How many prompts of the test prompt file to evaluate (0 = all)."},
    )
    prompt_file: str | None = field(
        default=None,
        metadata={
            "help": "Test prompts (T2IS JSONL, text, or (prompt, image) parquet for editing pipelines); defaults to the training prompt_file."
        },
    )
    rewards: dict[str, float] | None = field(
        default=None,
        metadata={"help": "Reward name -> weight at evaluation; defaults to the training rewards."},
    )
    reward_kwargs: dict[str, dict] | None = field(
        default=None,
        metadata={
            "help": "Per-reward constructor arguments at evaluation; defaults to the training ones."
        },
    )
    seed: int = field(
        default=1234,
        metadata={"help": "Seed of the evaluation noise (fixed, so evaluations are comparable)."},
    )

    def __post_init__(self) -> None:
        _check_resolution("test.resolution", self.resolution)
        if self.num_steps < 1:
            raise ConfigError(f"test.num_steps must be >= 1; got {self.num_steps}.")
        if self.every < 0 or self.num_prompts < 0:
            raise ConfigError(
                f"test.every and test.num_prompts must be >= 0; got every={self.every}, "
                f"num_prompts={self.num_prompts}."
            )
        if self.rewards is not None:
            _check_weights("test.rewards", self.rewards)


@dataclass
class GRPOConfig:
    """Configuration of :class:`paco_grpo.grpo_trainer.GRPOTrainer` (one recipe = one config)."""

    # ---- model
    model_name_or_path: str = field(
        metadata={
            "help": "Pipeline folder or hub id of the `pipeline` type (e.g. black-forest-labs/FLUX.1-dev, black-forest-labs/FLUX.1-Kontext-dev, Qwen/Qwen-Image, Qwen/Qwen-Image-Edit-2509, stabilityai/stable-diffusion-3.5-large, Tongyi-MAI/Z-Image-Turbo)."
        }
    )
    prompt_file: str = field(
        metadata={
            "help": "Training prompts: T2IS JSONL (idx, prompt, layout, ...), a text file (one prompt per line) or (prompt, image) parquet."
        }
    )
    rewards: dict[str, float] = field(
        metadata={
            "help": "Reward name -> weight, e.g. {consistency: 1.0, clip_t: 1.0}; names from paco_grpo.rewards.REWARDS."
        }
    )
    output_dir: str = field(
        default="grpo_output",
        metadata={
            "help": "Checkpoints, metrics.jsonl, TensorBoard logs, sample grids, reward curve."
        },
    )
    prompt_format: str = field(
        default="auto",
        metadata={
            "help": f"One of {PROMPT_FORMATS}; auto picks t2is for .jsonl, parquet for .parquet, else text."
        },
    )
    layout: str | None = field(
        default=None,
        metadata={
            "help": "Grid layout ('2x2', '1x4') of text-to-image-set prompts that name none. Each prompt's layout is, in order: its line's `layout` field, the layout its text names, then this value; a prompt with none fails when the prompt file is loaded."
        },
    )
    pipeline: str = field(
        default="flux",
        metadata={
            "help": "Policy pipeline, one of the registered generators (paco_grpo.pipelines): "
            + ", ".join(
                f"{name} ({spec.diffusers_class}{', editing' if spec.edits else ''})"
                for name, spec in PIPELINE_SPECS.items()
            )
            + ". Editing pipelines read (prompt, image) parquet; each reference is resized preserving its aspect ratio to the train/test resolution's area, the edit has the reference's size, and GRPO groups are keyed by (prompt id, image hash)."
        },
    )
    negative_prompt: str = field(
        default=" ",
        metadata={
            "help": f"{', '.join(TRUE_CFG_PIPELINES)} only: the negative prompt of true CFG (used when guidance_scale > 1, z_image > 0; Qwen-Image's examples use ' ', Flux2KleinPipeline and ZImagePipeline use '', and step-distilled klein models run no CFG)."
        },
    )
    item_resolution_overrides: bool = field(
        default=False,
        metadata={
            "help": "Use each prompt item's height/width instead of train/test.resolution (editing pipelines: height x width is the reference area). Off by default: T2IS metadata says 1024 for every item, which would undo the 512 training resolution."
        },
    )
    max_sequence_length: int = field(
        default=512,
        metadata={
            "help": "Text tokens per prompt: T5's for FLUX.1 and SD3.5, the text encoder's for qwen_image (at most 1024) and FLUX.2."
        },
    )
    dtype: str = field(
        default="float32", metadata={"help": f"Dtype of the frozen weights, one of {DTYPES}."}
    )
    mixed_precision: str = field(
        default="no", metadata={"help": f"accelerate mixed precision, one of {MIXED_PRECISION}."}
    )
    gradient_checkpointing: bool = field(
        default=False,
        metadata={
            "help": "Recompute the transformer's activations in the backward pass instead of keeping them: less memory, slower steps."
        },
    )
    skip_plan_check: bool = field(
        default=False,
        metadata={
            "help": "Launch even when the start-up plan says the weights and optimizer states alone exceed the GPU (paco-grpo plan)."
        },
    )
    seed: int = field(
        default=42, metadata={"help": "Seed of prompts order, sampling noise and LoRA init."}
    )
    # loading arguments of the pipeline (checked at the end of __post_init__)
    model_init_kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": f"Keyword arguments of the pipeline's from_pretrained (trl's name), one of {list(PIPELINE_KWARGS)}, e.g. {{revision: v1.0, variant: bf16, local_files_only: true}}. The weights' dtype is `dtype`. device_map 'cuda' or 'cpu' loads the weights there directly; 'balanced' spreads the components over every visible GPU (a one-process run only). Keep a hub token in HF_TOKEN, not here: the config is saved with the run."
        },
    )
    # ---- LoRA
    lora_r: int = field(default=64, metadata={"help": "LoRA rank r."})
    lora_alpha: int = field(default=128, metadata={"help": "LoRA alpha."})
    lora_target_modules: list[str] | None = field(
        default=None,
        metadata={
            "help": "Module name suffixes of the transformer that get LoRA; left out, the pipeline's default (its registered spec's lora_target_modules: the attention and feed-forward projections). Each must name a module of the loaded transformer."
        },
    )
    lora_init: str = field(
        default="gaussian", metadata={"help": "peft init_lora_weights ('gaussian' or 'default')."}
    )
    # ---- epoch shape
    num_train_epochs: int = field(
        default=100, metadata={"help": "Stop after this many epochs (sampling + training rounds)."}
    )
    prompts_per_epoch: int = field(
        default=42, metadata={"help": "m: distinct prompts sampled per epoch (over all processes)."}
    )
    num_generations: int = field(
        default=16, metadata={"help": "k: images per prompt; one GRPO group."}
    )
    sample_batch_size: int = field(
        default=8, metadata={"help": "Images per sampling forward pass per process."}
    )
    per_device_train_batch_size: int = field(
        default=8, metadata={"help": "Samples per training minibatch per process."}
    )
    per_device_eval_batch_size: int = field(
        default=4, metadata={"help": "Images per sampling batch per process at evaluation."}
    )
    gradient_accumulation_steps: int | str = field(
        default=1,
        metadata={
            "help": "Minibatches per optimizer step, or 'auto': one optimizer step per pass over a process's share of the epoch (the paper's setting, right on any number of processes). A number must divide the minibatches each process trains per pass; the trainer checks it at start-up for the launched process count."
        },
    )
    num_iterations: int = field(
        default=1, metadata={"help": "mu: passes over an epoch's samples (PPO inner epochs)."}
    )
    # ---- optimisation
    learning_rate: float = field(
        default=3e-4, metadata={"help": "AdamW learning rate of the LoRA weights."}
    )
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1."})
    adam_beta2: float = field(default=0.999, metadata={"help": "AdamW beta2."})
    adam_epsilon: float = field(default=1e-8, metadata={"help": "AdamW epsilon."})
    weight_decay: float = field(default=1e-4, metadata={"help": "AdamW weight decay."})
    max_grad_norm: float = field(
        default=1.0, metadata={"help": "Gradient clipping norm (0 disables)."}
    )
    lr_scheduler_type: str = field(
        default="constant_with_warmup",
        metadata={
            "help": "transformers scheduler name (constant, constant_with_warmup, linear, cosine)."
        },
    )
    warmup_steps: int = field(
        default=0,
        metadata={"help": "LR warmup in optimizer steps (the same on any number of processes)."},
    )
    # ---- GRPO objective
    epsilon: float = field(default=1e-4, metadata={"help": "PPO clip epsilon of the ratio."})
    adv_clip_max: float = field(
        default=5.0, metadata={"help": "Advantages are clipped to [-adv_clip_max, adv_clip_max]."}
    )
    beta: float = field(
        default=0.0,
        metadata={
            "help": "KL weight to the frozen base policy; at 0 (the paper's recipe) the frozen base's forward pass is skipped."
        },
    )
    log_kl: bool = field(
        default=False,
        metadata={
            "help": "Compute and log the KL to the frozen base even at beta = 0 (one more transformer forward per trained step)."
        },
    )
    # ---- rewards -> advantages
    reward_kwargs: dict[str, dict] = field(
        default_factory=dict,
        metadata={
            "help": "Per-reward constructor arguments, e.g. {consistency: {model: PATH}} or {consistency: {model: SERVED_NAME, server_url: 'http://host:8000/v1'}} (server_url may list replicas); see paco_grpo.rewards."
        },
    )
    async_rewards: bool = field(
        default=True,
        metadata={
            "help": "Score each sampling batch on a background event loop while the next batch is sampled (rewards with an async twin await their server; in-process ones run in a worker thread). The scores equal synchronous scoring exactly; false scores in the trainer thread. Logged as time/reward_wait and time/reward_share."
        },
    )
    max_failed_fraction: float = field(
        default=0.1,
        metadata={
            "help": "Stop the run (RewardFailureError, before any optimizer step on the epoch) when a reward of weight > 0 scored NaN for more than this share of an epoch's samples; failures within it are left out of their group and logged. 1.0 never stops. See docs/grpo.md, 'When a reward fails'."
        },
    )
    aggregator: str = field(
        default="log_tamed", metadata={"help": f"Reward aggregation, one of {sorted(AGGREGATORS)}."}
    )
    log_taming_threshold: float | str = field(
        default=0.2, metadata={"help": "Log taming delta: a number, 'mean' or 'median'."}
    )
    std_scope: str = field(
        default="global", metadata={"help": f"Advantage scale, one of {STD_SCOPES}."}
    )
    std_floor: float = field(default=1e-4, metadata={"help": "Floor of the std divisor."})
    normalization: str = field(
        default="group",
        metadata={
            "help": f"One of {NORMALIZATIONS}; legacy_uncentred reproduces the released code."
        },
    )
    # ---- EMA, checkpoints, logging
    use_ema: bool = field(
        default=True,
        metadata={
            "help": "Keep an EMA of the LoRA weights (stepped per optimizer step); evaluation uses it."
        },
    )
    ema_decay: float = field(
        default=0.9, metadata={"help": "EMA decay (with diffusers' (1+n)/(10+n) warm-up cap)."}
    )
    save_every: int = field(
        default=10,
        metadata={"help": "Checkpoint every N epochs (and after the last); 0 = only the last."},
    )
    save_total_limit: int = field(
        default=3, metadata={"help": "Keep at most this many checkpoints (oldest deleted)."}
    )
    resume_from_checkpoint: str | None = field(
        default=None,
        metadata={
            "help": "Checkpoint folder, or 'latest' for the newest in output_dir/checkpoints."
        },
    )
    num_sample_images: int = field(
        default=8, metadata={"help": "Training images saved as a grid PNG per epoch (0 disables)."}
    )
    report_to: list[str] = field(
        default_factory=lambda: ["tensorboard"],
        metadata={
            "help": "accelerate trackers to log to (tensorboard, wandb, ...; [] or ['none'] for none); TensorBoard writes under output_dir/paco-grpo. metrics.jsonl and the reward curve are always written."
        },
    )
    train: TrainSection = field(
        default_factory=TrainSection, metadata={"help": "Training sampling section."}
    )
    test: EvalSection = field(default_factory=EvalSection, metadata={"help": "Evaluation section."})

    def __post_init__(self) -> None:
        if not isinstance(self.train, TrainSection):
            self.train = _from_dict(TrainSection, self.train, "train.")
        if not isinstance(self.test, EvalSection):
            self.test = _from_dict(EvalSection, self.test, "test.")
        _check_weights("rewards", self.rewards)
        choices = {
            "pipeline": (self.pipeline, tuple(PIPELINE_SPECS)),  # registered so far
            "prompt_format": (self.prompt_format, PROMPT_FORMATS),
            "dtype": (self.dtype, DTYPES),
            "mixed_precision": (self.mixed_precision, MIXED_PRECISION),
            "aggregator": (self.aggregator, tuple(sorted(AGGREGATORS))),
            "std_scope": (self.std_scope, STD_SCOPES),
            "normalization": (self.normalization, NORMALIZATIONS),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {allowed}; got {value!r}.")
        if isinstance(self.log_taming_threshold, str):
            if self.log_taming_threshold not in ("mean", "median"):
                raise ConfigError(
                    f"log_taming_threshold must be a number, 'mean' or 'median'; got {self.log_taming_threshold!r}."
                )
        elif self.log_taming_threshold < 0:
            raise ConfigError(
                f"log_taming_threshold must be >= 0; got {self.log_taming_threshold}."
            )
        positive = {
            "lora_r": self.lora_r,
            "lora_alpha": self.lora_alpha,
            "num_train_epochs": self.num_train_epochs,
            "prompts_per_epoch": self.prompts_per_epoch,
            "sample_batch_size": self.sample_batch_size,
            "per_device_train_batch_size": self.per_device_train_batch_size,
            "per_device_eval_batch_size": self.per_device_eval_batch_size,
            "num_iterations": self.num_iterations,
            "save_total_limit": self.save_total_limit,
            "max_sequence_length": self.max_sequence_length,
        }
        for name, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer; got {value!r}.")
        accumulation = self.gradient_accumulation_steps
        if accumulation != "auto" and (not isinstance(accumulation, int) or accumulation < 1):
            raise ConfigError(
                f"gradient_accumulation_steps must be a positive integer or 'auto'; got {accumulation!r}."
            )
        if self.num_generations < 2:
            raise ConfigError(
                f"num_generations must be >= 2 (a group of one has no relative advantage); got {self.num_generations}."
            )
        if self.learning_rate <= 0 or self.epsilon <= 0 or self.adv_clip_max <= 0:
            raise ConfigError(
                "learning_rate, epsilon and adv_clip_max must be > 0; got "
                f"{self.learning_rate}, {self.epsilon}, {self.adv_clip_max}."
            )
        if isinstance(self.report_to, str):
            self.report_to = [self.report_to]
        self.report_to = [t for t in self.report_to if t != "none"]
        if self.beta < 0 or self.std_floor <= 0:
            raise ConfigError(
                f"beta must be >= 0 and std_floor > 0; got {self.beta}, {self.std_floor}."
            )
        if not 0.0 <= self.max_failed_fraction <= 1.0:
            raise ConfigError(
                f"max_failed_fraction must be in [0, 1] (0: any failure stops the run, 1: none "
                f"does); got {self.max_failed_fraction!r}."
            )
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"ema_decay must be in [0, 1); got {self.ema_decay}.")
        if self.save_every < 0 or self.num_sample_images < 0 or self.warmup_steps < 0:
            raise ConfigError("save_every, num_sample_images and warmup_steps must be >= 0.")
        spec = PIPELINE_SPECS[self.pipeline]
        if self.lora_target_modules is None:  # the pipeline's own, never another model's
            self.lora_target_modules = list(spec.lora_target_modules)
        if not self.lora_target_modules:
            raise ConfigError(
                "lora_target_modules is empty; list the transformer projections to adapt, or "
                f"leave it out for the {self.pipeline} pipeline's default."
            )
        if spec.edits:
            for name, path in (
                ("prompt_file", self.prompt_file),
                ("test.prompt_file", self.test.prompt_file),
            ):
                fmt = self.prompt_format
                if path is not None and fmt == "auto":
                    fmt = "parquet" if str(path).endswith(".parquet") else "other"
                if path is not None and fmt != "parquet":
                    raise ConfigError(
                        f"pipeline={self.pipeline!r} edits a reference image per prompt, so {name} "
                        f"must be (prompt, image) parquet; got {path!r} with "
                        f"prompt_format={self.prompt_format!r}."
                    )
        unknown_kwargs = set(self.reward_kwargs) - set(self.rewards)
        if unknown_kwargs:
            raise ConfigError(
                f"reward_kwargs names {sorted(unknown_kwargs)} which are not in rewards {sorted(self.rewards)}."
            )
        if not isinstance(self.async_rewards, bool):
            raise ConfigError(f"async_rewards must be true or false; got {self.async_rewards!r}.")
        bad_kwargs = {n: kw for n, kw in self.reward_kwargs.items() if not isinstance(kw, dict)}
        if bad_kwargs:
            raise ConfigError(
                f"reward_kwargs values must be mappings of constructor arguments, e.g. "
                f"{{consistency: {{model: PATH}}}}; got {bad_kwargs}."
            )
        # model_init_kwargs: known pipeline loading arguments only
        self.model_init_kwargs = check_kwargs(
            self.model_init_kwargs,
            name="model_init_kwargs",
            allowed=PIPELINE_KWARGS,
            reserved={"dtype": "the dtype field", "torch_dtype": "the dtype field"},
            error=ConfigError,
        )

    # ------------------------------------------------------------------ (de)serialisation
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GRPOConfig:
        """Build from a mapping, failing on unknown keys (in the sections too).

        ``paco_rl_version`` (written by :meth:`save_json`) is accepted and checked."""
        data = dict(data)
        version = data.pop(VERSION_KEY, None)
        if version is not None:
            from paco_grpo import __version__

            if version != __version__:
                logger.warning(
                    "config written by paco-rl %s, loaded by %s; check the run reproduces.",
                    version,
                    __version__,
                )
        return _from_dict(cls, data, "")

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> GRPOConfig:
        """Load a YAML recipe (or a run's ``config.json``), then apply ``{"dotted.key": value}``
        overrides.

        Example:
            >>> GRPOConfig.from_yaml("recipes/grpo_tiny_cpu.yaml", {"num_train_epochs": 2})  # doctest: +SKIP
        """
        import yaml

        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a recipe must be a YAML mapping of config fields.")
        data = apply_overrides(data, overrides or {})
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save_json(self, path: str | Path) -> None:
        """Write the config with the library version, atomically; reloads with :meth:`from_yaml`."""
        from paco_grpo import __version__
        from paco_reward.atomic_io import atomic_write_text

        payload = {VERSION_KEY: __version__, **self.to_dict()}
        atomic_write_text(path, json.dumps(payload, indent=2) + "\n")


VERSION_KEY = "paco_rl_version"


def _from_dict(cls, data: dict[str, Any], prefix: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'} must be a mapping; got {data!r}.")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"Unknown config key(s) {[prefix + k for k in unknown]} for {cls.__name__}; valid keys: "
            f"{sorted(prefix + n for n in names)}."
        )
    return cls(**coerce_floats(cls, data, prefix))
