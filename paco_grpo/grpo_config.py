"""``GRPOConfig``: every knob of the PaCo-GRPO trainer, with help and start-up validation.

A recipe is a YAML file whose keys are these fields, flat except where training and
evaluation differ: ``train:`` and ``test:`` map 1:1 to :class:`TrainSection` /
:class:`EvalSection`. Fields take the names of ``transformers.TrainingArguments`` and trl's
``GRPOConfig`` wherever the idea is the same (``lora_r``, ``num_train_epochs``,
``num_generations``, ``epsilon``, ``report_to``, ``gradient_checkpointing``, ``bf16``,
``dtype``, ...), and where its unit is an epoch rather than a step, their pattern with the
unit named (``save_epochs``, ``test.eval_epochs`` beside ``save_steps``, ``eval_steps``); an
unknown key fails at load time, naming it and listing the valid ones. Command-line flags
override with dotted names (``--train.resolution 256``). It loads and saves YAML as
``PacoSFTConfig`` does (:meth:`GRPOConfig.from_yaml`, :meth:`~GRPOConfig.to_yaml`); a run
saves its own as ``training_config.yaml``, which reloads as the config it ran with.

    >>> cfg = GRPOConfig(model_name_or_path="tiny", prompt_file="p.txt", rewards={"panel_colour_agreement": 1.0})
    >>> cfg.train.resolution, cfg.test.resolution
    (512, 1024)
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from paco_grpo.advantages import AGGREGATORS, NORMALIZATIONS, STD_SCOPES
from paco_grpo.gardo import UNCERTAINTY_SIGNS
from paco_grpo.pipelines import PIPELINE_SPECS
from paco_grpo.sde import CPS_LOG_PROBS, SDE_TYPES
from paco_reward.command_line import config_from_mapping
from paco_reward.errors import ConfigError
from paco_reward.hub import PIPELINE_KWARGS, check_kwargs
from paco_reward.yaml_config import YAMLConfig

logger = logging.getLogger(__name__)

__all__ = ["GRPOConfig", "EvalSection", "TrainSection"]

# The fields' help names the registered generators from their specs: whose guidance is true
# CFG with a negative prompt and above what scale it runs, whose is embedded, which hub ids ship.
TRUE_CFG_PIPELINES = tuple(name for name, spec in PIPELINE_SPECS.items() if spec.true_cfg)
EMBEDDED_GUIDANCE_PIPELINES = tuple(n for n, spec in PIPELINE_SPECS.items() if not spec.true_cfg)
_THRESHOLDS = ", ".join(
    f"{name} above {spec.cfg_threshold:g}"
    for name, spec in PIPELINE_SPECS.items()
    if spec.true_cfg and spec.cfg_threshold != 1
)
_CFG_RUNS = "above 1" + (f"; {_THRESHOLDS}" if _THRESHOLDS else "")
_HUB_IDS = ", ".join(hub_id for spec in PIPELINE_SPECS.values() for hub_id in spec.architectures)
DTYPES = ("float32", "bfloat16", "float16")
PROMPT_FORMATS = ("auto", "t2is", "text", "parquet")
KL_REFERENCES = ("base", "adapter")


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
            "help": f"The embedded guidance of {', '.join(EMBEDDED_GUIDANCE_PIPELINES)} when sampling and training; for {', '.join(TRUE_CFG_PIPELINES)} the true-CFG scale (CFG with negative_prompt runs {_CFG_RUNS})."
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
            "help": f"The embedded guidance of {', '.join(EMBEDDED_GUIDANCE_PIPELINES)} at evaluation ({', '.join(TRUE_CFG_PIPELINES)}: the true-CFG scale)."
        },
    )
    eval_epochs: int = field(
        default=10,
        metadata={
            "help": "Evaluate every N epochs (and after the last); 0 disables evaluation. (TrainingArguments' eval_steps counts optimizer steps; this counts epochs.)"
        },
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
            "help": "Per-reward constructor arguments at evaluation (e.g. a judge of another family: {consistency: {model: Gemma-3-4B-IT, server_url: ...}}); defaults to the training ones. A reward whose arguments equal its training ones is the training instance."
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
        if self.eval_epochs < 0 or self.num_prompts < 0:
            raise ConfigError(
                f"test.eval_epochs and test.num_prompts must be >= 0; got eval_epochs={self.eval_epochs}, "
                f"num_prompts={self.num_prompts}."
            )
        if self.rewards is not None:
            _check_weights("test.rewards", self.rewards)


@dataclass
class GRPOConfig(YAMLConfig):
    """Configuration of :class:`paco_grpo.grpo_trainer.GRPOTrainer` (one recipe = one config)."""

    # ---- model
    model_name_or_path: str = field(
        metadata={
            "help": f"Pipeline folder or hub id of the `pipeline` type (the hub ids whose architectures ship, for `paco-grpo plan`: {_HUB_IDS})."
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
            "help": f"{', '.join(TRUE_CFG_PIPELINES)} only: the negative prompt of true CFG (used when guidance_scale is {_CFG_RUNS}; Qwen-Image's examples use ' ', Flux2KleinPipeline and ZImagePipeline use '', and step-distilled klein models run no CFG)."
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
    bf16: bool = field(
        default=False,
        metadata={
            "help": "bf16 mixed precision of the policy's forward and backward (TrainingArguments' name; accelerate's mixed_precision='bf16')."
        },
    )
    fp16: bool = field(
        default=False,
        metadata={
            "help": "fp16 mixed precision (TrainingArguments' name; accelerate's mixed_precision='fp16')."
        },
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
    # ---- hacking signals and GARDO (docs/grpo.md, "Is my run hacking its reward?")
    feature_model: str | None = field(
        default=None,
        metadata={
            "help": "Image feature model (a transformers folder or hub id loaded with AutoModel + AutoImageProcessor; GARDO uses facebook/dinov3-vitl16-pretrain-lvd1689m) for the in-group diversity signal (hacking/diversity/*) and diversity_advantage. None: no feature model, no diversity signal."
        },
    )
    diversity_advantage: bool = field(
        default=False,
        metadata={
            "help": "GARDO's diversity-aware advantage instead of the group-normalised one: per group, a sample at or above the group's mean aggregated score gets (r - mean) * d_i / mean(d) (d_i: its minimum cosine feature distance to the group's others), one below it r - mean; no division by a std; clipped to adv_clip_max. Needs feature_model."
        },
    )
    kl_reference: str = field(
        default="base",
        metadata={
            "help": f"The KL's reference policy, one of {KL_REFERENCES}: base (the frozen base model, LoRA disabled) or adapter (GARDO's resettable reference: a second LoRA adapter on the same transformer, copied from the policy at start and reset to it at the next epoch when a logged step's KL exceeds reference_reset_kl or after reference_reset_epochs epochs; saved and resumed with the run)."
        },
    )
    reference_reset_kl: float = field(
        default=3e-4,
        metadata={
            "help": "kl_reference: adapter: a logged step's KL above this resets the reference at the next epoch (GARDO's kl_thres)."
        },
    )
    reference_reset_epochs: int = field(
        default=15,
        metadata={
            "help": "kl_reference: adapter: reset when more than this many epochs passed since the last reset (GARDO's reset_freq)."
        },
    )
    kl_gate_rewards: list[str] = field(
        default_factory=list,
        metadata={
            "help": "GARDO's uncertainty-gated KL: auxiliary reward names (in rewards, each with weight 0: scored, not trained) whose batch ranks are compared with the aggregated score's; the KL acts only on the share kl_gate_kappa of most uncertain samples. Empty: the KL acts on every sample. Needs beta > 0."
        },
    )
    kl_gate_kappa: float = field(
        default=0.1,
        metadata={
            "help": "Starting share of gated samples; adapted each epoch x1.1 / x0.9 when the mean uncertainty leaves the last 20 epochs' range, clipped to [0.02, 0.2]."
        },
    )
    kl_gate_sign: str = field(
        default="paper",
        metadata={
            "help": f"One of {UNCERTAINTY_SIGNS}: paper gates the samples the proxy ranks above the auxiliaries (over-optimistic); released reproduces the released code's rank(main) - mean(rank(aux)), which gates the opposite ones (paco_grpo.gardo.rank_uncertainty)."
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
    save_epochs: int = field(
        default=10,
        metadata={
            "help": "Checkpoint every N epochs (and after the last); 0 = only the last. (TrainingArguments' save_steps counts optimizer steps; this counts epochs.)"
        },
    )
    save_total_limit: int = field(
        default=3,
        metadata={
            "help": "Keep at most this many of this run's checkpoints (the oldest deleted; "
            "never the one just written, never another run's)."
        },
    )
    resume_from_checkpoint: str | None = field(
        default=None,
        metadata={
            "help": "Checkpoint folder, or 'latest' for the one the folder's last run saved "
            "last in output_dir/checkpoints."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start fresh in an output_dir that holds another run's checkpoints or "
            "metrics, deleting them (checkpoints/, metrics.jsonl, samples/, the reward curve, "
            "TensorBoard logs). Without it such a folder is refused unless the run resumes "
            "or its saved config is this run's (transformers' Trainer's name)."
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
            self.train = config_from_mapping(TrainSection, self.train, "config", "train.")
        if not isinstance(self.test, EvalSection):
            self.test = config_from_mapping(EvalSection, self.test, "config", "test.")
        _check_weights("rewards", self.rewards)
        choices = {
            "pipeline": (self.pipeline, tuple(PIPELINE_SPECS)),  # registered so far
            "prompt_format": (self.prompt_format, PROMPT_FORMATS),
            "dtype": (self.dtype, DTYPES),
            "aggregator": (self.aggregator, tuple(sorted(AGGREGATORS))),
            "std_scope": (self.std_scope, STD_SCOPES),
            "normalization": (self.normalization, NORMALIZATIONS),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {allowed}; got {value!r}.")
        if self.bf16 and self.fp16:
            raise ConfigError("bf16 and fp16 are both set; choose one mixed precision.")
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
        if self.save_epochs < 0 or self.num_sample_images < 0 or self.warmup_steps < 0:
            raise ConfigError("save_epochs, num_sample_images and warmup_steps must be >= 0.")
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
        self._check_gardo()
        # model_init_kwargs: known pipeline loading arguments only
        self.model_init_kwargs = check_kwargs(
            self.model_init_kwargs,
            name="model_init_kwargs",
            allowed=PIPELINE_KWARGS,
            reserved={"dtype": "the dtype field", "torch_dtype": "the dtype field"},
            error=ConfigError,
        )

    def _check_gardo(self) -> None:
        """The GARDO options and the feature model, each usable alone."""
        if self.kl_reference not in KL_REFERENCES:
            raise ConfigError(
                f"kl_reference must be one of {KL_REFERENCES}; got {self.kl_reference!r}."
            )
        if self.kl_gate_sign not in UNCERTAINTY_SIGNS:
            raise ConfigError(
                f"kl_gate_sign must be one of {UNCERTAINTY_SIGNS}; got {self.kl_gate_sign!r}."
            )
        if self.diversity_advantage and not self.feature_model:
            raise ConfigError(
                "diversity_advantage needs image features: set feature_model (GARDO's: "
                "facebook/dinov3-vitl16-pretrain-lvd1689m) or drop diversity_advantage."
            )
        if self.kl_reference == "adapter" and self.beta <= 0 and not self.log_kl:
            raise ConfigError(
                "kl_reference: adapter has no KL to act in at beta = 0; set beta > 0 (GARDO's "
                "recipes use 0.01 to 0.07) or log_kl: true."
            )
        if self.reference_reset_kl <= 0 or self.reference_reset_epochs < 1:
            raise ConfigError(
                f"reference_reset_kl must be > 0 and reference_reset_epochs >= 1; got "
                f"{self.reference_reset_kl}, {self.reference_reset_epochs}."
            )
        if self.kl_gate_rewards:
            unknown = [n for n in self.kl_gate_rewards if n not in self.rewards]
            if unknown:
                raise ConfigError(
                    f"kl_gate_rewards names {unknown}, not in rewards {sorted(self.rewards)}; add "
                    "each auxiliary reward to rewards with weight 0 (scored, not trained)."
                )
            weighted = {n: self.rewards[n] for n in self.kl_gate_rewards if self.rewards[n] != 0}
            if weighted:
                raise ConfigError(
                    f"kl_gate_rewards {weighted} have weight > 0 in rewards; GARDO's auxiliary "
                    "rewards only estimate uncertainty: give them weight 0."
                )
            if not any(w > 0 for w in self.rewards.values()):
                raise ConfigError(
                    "kl_gate_rewards needs a reward of weight > 0 to gate (the proxy)."
                )
            if self.beta <= 0:
                raise ConfigError("kl_gate_rewards gates the KL term; set beta > 0.")
        if not 0 < self.kl_gate_kappa <= 1:
            raise ConfigError(f"kl_gate_kappa must be in (0, 1]; got {self.kl_gate_kappa}.")

    # ------------------------------------------------------------------ derived
    @property
    def mixed_precision(self) -> str:
        """accelerate's name of the mixed precision: ``"bf16"``, ``"fp16"`` or ``"no"``."""
        return "bf16" if self.bf16 else "fp16" if self.fp16 else "no"

    def separate_test_rewards(self) -> dict[str, dict]:
        """The evaluation rewards built apart from the training ones, as ``{name: constructor
        arguments}``: those of ``test.rewards`` that training has not, or whose
        ``test.reward_kwargs`` differ from the training ones (a judge of another family, as
        in ``recipes/grpo_flux_t2is_cross_judge.yaml``). Every other evaluation reward is its
        training instance, its model loaded once.

        Example:
            >>> cfg = GRPOConfig.from_yaml("recipes/grpo_flux_t2is_cross_judge.yaml")  # doctest: +SKIP
            >>> cfg.separate_test_rewards()  # doctest: +SKIP
            {'consistency': {'model': 'Gemma-3-4B-IT', 'server_url': 'http://127.0.0.1:8000/v1', ...}}
        """
        train = self.reward_kwargs or {}
        test = self.test.reward_kwargs or train
        return {
            name: dict(test.get(name) or {})
            for name in self.test.rewards or self.rewards
            if name not in self.rewards or (test.get(name) or {}) != (train.get(name) or {})
        }

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
