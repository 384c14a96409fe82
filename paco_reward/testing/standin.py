"""STAND-IN PRETRAINING: teach a from-scratch tiny Qwen2.5-VL to describe single images.

A real PaCo-Reward starts from Qwen2.5-VL-7B-Instruct, which already reads images: it can
say what a picture shows before it ever sees a consistency pair. The tiny model of
:mod:`paco_reward.testing.qwen` starts from random weights. This module gives it a
short stand-in for that pretraining: plain next-token training on ``(image, description)``
examples ("Describe the image." → "Shape circle, colour red, ..."), one image per
example, no pairs and no consistency labels. The PaCo SFT
(:class:`paco_reward.training.PacoSFTTrainer`) then starts from the saved folder, as it
would start from the real base model.

The examples come from a caller's function (``make_example(rng) -> (image, text)``), e.g.
single panels of the synthetic world (:func:`data_pipeline.synthetic.describe_panel`).
A finished run is cached: :func:`pretrain_describer` returns an existing folder whose
``standin.json`` records the same configuration instead of training again.

    >>> config = StandInConfig(steps=600)                                  # doctest: +SKIP
    >>> path = pretrain_describer("cache/standin", make_example, config)   # doctest: +SKIP
    >>> rm = PacoReward.from_pretrained(path)                              # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from paco_reward.cached_folder import build_once, cache_key, read_info
from paco_reward.errors import ConfigError, WeightsMismatchError

logger = logging.getLogger(__name__)

DESCRIBE_INSTRUCTION = "Describe the image."
INFO_FILE = "standin.json"
IGNORE_INDEX = -100
# Bump when the training procedure changes, so cached folders are not reused.
PROCEDURE_VERSION = 1

ExampleFn = Callable[[random.Random], tuple[Image.Image, str]]


@dataclass
class StandInConfig:
    """How the stand-in pretraining runs (every field is part of the cache key)."""

    steps: int = field(default=600, metadata={"help": "Optimizer steps."})
    batch_size: int = field(default=32, metadata={"help": "Examples per step."})
    learning_rate: float = field(default=2e-3, metadata={"help": "Peak AdamW learning rate."})
    warmup_steps: int = field(
        default=50, metadata={"help": "Linear warm-up steps; then cosine decay to 10 %."}
    )
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    image_pixels: int = field(
        default=56 * 56, metadata={"help": "Pixel budget of every image (min = max)."}
    )
    tiny_vision: str = field(
        default="wide",
        metadata={
            "help": "Vision tower of the tiny model (paco_reward.testing.qwen.TINY_VISION_TOWERS)."
        },
    )
    text_config: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Overrides of the tiny model's text config (e.g. hidden_size)."},
    )
    seed: int = field(default=0, metadata={"help": "Seed of the weights and the examples."})
    eval_examples: int = field(
        default=200, metadata={"help": "Fresh examples the read-out accuracy is measured on."}
    )
    instruction: str = field(
        default=DESCRIBE_INSTRUCTION, metadata={"help": "The user turn's text after the image."}
    )
    expand_text_layers: int = field(
        default=0,
        metadata={
            "help": "Text layers appended after the pretraining as identity blocks "
            "(expand_text_layers()): the saved model computes what the pretrained one does, "
            "with room for the fine-tuning to learn more."
        },
    )

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "image_pixels"):
            if getattr(self, name) < 1:
                raise ConfigError(
                    f"StandInConfig.{name} must be >= 1; got {getattr(self, name)!r}."
                )
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be > 0; got {self.learning_rate!r}.")
        if not 0 <= self.warmup_steps < self.steps:
            raise ConfigError(
                f"warmup_steps must be in [0, steps={self.steps}); got {self.warmup_steps!r}."
            )
        if self.expand_text_layers < 0:
            raise ConfigError(f"expand_text_layers must be >= 0; got {self.expand_text_layers!r}.")
        if self.eval_examples < 0:
            raise ConfigError(f"eval_examples must be >= 0; got {self.eval_examples!r}.")

    def key(self, data_id: str) -> str:
        """Cache key of a run on the examples named ``data_id``."""
        return cache_key({"config": asdict(self), "data": data_id, "version": PROCEDURE_VERSION})


class DescribeCollator:
    """``[(image, text), ...]`` → inputs of one "describe" turn per example, the prompt
    rendered by the scorer's own code (:func:`paco_reward.local_backend.render_prompt_ids`)
    and labels on the description and the end-of-turn token only."""

    def __init__(self, processor, instruction: str, pixels: int) -> None:
        from paco_reward.images import ImagePolicy
        from paco_reward.local_backend import render_prompt_ids

        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.policy = ImagePolicy.from_processor(processor, pixels, pixels)
        self.merge = processor.image_processor.merge_size**2
        self.prompt = render_prompt_ids(processor, instruction, num_images=1)
        self.end_of_turn = self.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def __call__(self, examples: Sequence[tuple[Image.Image, str]]) -> dict:
        from paco_reward.images import load_image, resize_for_model
        from paco_reward.local_backend import expand_image_tokens
        from paco_reward.training.collator import pad_right

        images = [
            resize_for_model(load_image(img, f"examples[{k}]"), self.policy, f"examples[{k}]")
            for k, (img, _) in enumerate(examples)
        ]
        out = self.processor.image_processor(
            images=images, size=self.policy.processor_size, return_tensors="pt"
        )
        tokens = (out["image_grid_thw"].prod(-1) // self.merge).tolist()
        rows, labels = [], []
        for k, (_, text) in enumerate(examples):
            prompt = expand_image_tokens(self.prompt, self.processor.image_token_id, [tokens[k]])
            answer = self.tokenizer.encode(text, add_special_tokens=False) + [self.end_of_turn]
            rows.append(prompt + answer)
            labels.append([IGNORE_INDEX] * len(prompt) + answer)
        input_ids, label_ids, mask = pad_right(rows, labels, self.tokenizer.pad_token_id)
        return {
            "input_ids": input_ids,
            "attention_mask": mask,
            "labels": label_ids,
            "mm_token_type_ids": (input_ids == self.processor.image_token_id).int(),
            "pixel_values": out["pixel_values"],
            "image_grid_thw": out["image_grid_thw"],
        }


def description_loss(model, batch: dict):
    """Mean next-token cross-entropy over the description tokens. Logits are computed
    only from the first position that predicts a description token (``logits_to_keep``):
    the prompt's positions need none, and they are most of the sequence."""
    import torch.nn.functional as F

    inputs = dict(batch)
    labels = inputs.pop("labels")
    start = int(labels.ne(IGNORE_INDEX).float().argmax(-1).min()) - 1
    logits = model(**inputs, use_cache=False, logits_to_keep=labels.shape[1] - start).logits
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
        labels[:, start + 1 :].reshape(-1),
        ignore_index=IGNORE_INDEX,
    )


def _lr_factor(step: int, config: StandInConfig) -> float:
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def clause_accuracy(generated: Sequence[str], targets: Sequence[str]) -> dict[str, float]:
    """Read-out accuracy of generated descriptions: the fraction of comma-separated clauses
    equal to the target's clause at the same place (per clause name, the clause's first
    word), and the fraction of exact descriptions.

    >>> clause_accuracy(["Shape circle, colour red."], ["Shape circle, colour blue."])
    {'exact': 0.0, 'shape': 1.0, 'colour': 0.0}
    """

    def clauses(text: str) -> list[str]:
        return [c.strip().lower() for c in text.strip().rstrip(".").split(",")]

    out: dict[str, float] = {"exact": 0.0}
    counts: dict[str, list[int]] = {}
    for text, target in zip(generated, targets):
        out["exact"] += float(text.strip() == target.strip())
        got = clauses(text)
        for k, want in enumerate(clauses(target)):
            name = want.split(" ")[0]
            counts.setdefault(name, []).append(int(k < len(got) and got[k] == want))
    n = max(1, len(targets))
    out["exact"] /= n
    out.update({name: sum(v) / len(v) for name, v in counts.items()})
    return out


def evaluate_describer(model, processor, examples, instruction: str, pixels: int) -> dict:
    """Greedy descriptions of ``examples`` and their :func:`clause_accuracy`."""
    import torch

    collator = DescribeCollator(processor, instruction, pixels)
    prompt_len = len(collator.prompt) - 1
    generated = []
    model.eval()
    for start in range(0, len(examples), 64):
        chunk = examples[start : start + 64]
        batch = collator([(img, "") for img, _ in chunk])
        # Every prompt has the same length (one image of a fixed budget), so the batch
        # needs no padding once the empty answer's end-of-turn token is cut.
        width = int(batch["labels"].ne(IGNORE_INDEX).float().argmax(-1).min())
        inputs = {
            k: v[:, :width] if k in ("input_ids", "attention_mask", "mm_token_type_ids") else v
            for k, v in batch.items()
            if k != "labels"
        }
        with torch.inference_mode():
            out = model.generate(**inputs, max_new_tokens=48, do_sample=False)
        generated += processor.tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    del prompt_len
    return clause_accuracy(generated, [text for _, text in examples])


def pretrain_describer(
    output_dir: str | Path,
    make_example: ExampleFn,
    config: StandInConfig | None = None,
    data_id: str = "",
    progress: bool = True,
    base_model: str | Path | None = None,
) -> Path:
    """Train (or reuse) the stand-in: a tiny Qwen2.5-VL that describes single images.

    Args:
        output_dir: where the model folder goes. If it holds a finished run with the same
            configuration and ``data_id`` (``standin.json``), it is returned as is.
        make_example: ``rng -> (image, description)``; called ``steps * batch_size`` times
            with one seeded ``random.Random`` (and ``eval_examples`` times with another).
        config: :class:`StandInConfig`.
        data_id: names the example source in the cache key (e.g. the world's settings).
        progress: show a progress bar.
        base_model: start from this model folder instead of a freshly built tiny model.

    Returns:
        ``output_dir``: a Hugging Face folder (weights, processor) that
        ``PacoReward.from_pretrained`` and the SFT trainer load.
    """
    from paco_reward.testing.qwen import TINY_VISION_TOWERS

    config = config or StandInConfig()
    if config.tiny_vision not in TINY_VISION_TOWERS:
        raise ConfigError(
            f"tiny_vision {config.tiny_vision!r} is not one of {sorted(TINY_VISION_TOWERS)}."
        )
    key = config.key(data_id + (f"|base={base_model}" if base_model else ""))
    return build_once(
        output_dir,
        INFO_FILE,
        key,
        lambda work: _train_describer(work, make_example, config, data_id, progress, base_model),
    )


def _train_describer(
    work: Path,
    make_example: ExampleFn,
    config: StandInConfig,
    data_id: str,
    progress: bool,
    base_model: str | Path | None,
) -> dict:
    """Train the stand-in into ``work``; returns its info (see :func:`pretrain_describer`)."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from paco_reward.testing.qwen import TINY_VISION_TOWERS, build_tiny_model

    if base_model is None:
        build_tiny_model(
            work,
            seed=config.seed,
            min_pixels=config.image_pixels,
            max_pixels=config.image_pixels,
            vision_config=TINY_VISION_TOWERS[config.tiny_vision],
            text_config=dict(config.text_config),
        )
        source = work
    else:
        source = Path(base_model)
    torch.manual_seed(config.seed)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(source, dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(source)
    collator = DescribeCollator(processor, config.instruction, config.image_pixels)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, config))
    rng = random.Random(f"standin-train-{config.seed}")
    losses: list[float] = []
    start = time.perf_counter()
    model.train()
    bar = tqdm(range(config.steps), desc="stand-in pretraining", disable=not progress)
    for step in bar:
        batch = collator([make_example(rng) for _ in range(config.batch_size)])
        loss = description_loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 25 == 0 or step == config.steps - 1:
            bar.set_postfix(loss=f"{sum(losses[-25:]) / len(losses[-25:]):.3f}")
    elapsed = time.perf_counter() - start
    eval_rng = random.Random(f"standin-eval-{config.seed}")
    held_out = [make_example(eval_rng) for _ in range(config.eval_examples)]
    readout = (
        evaluate_describer(model, processor, held_out, config.instruction, config.image_pixels)
        if held_out
        else {}
    )
    if config.expand_text_layers:
        model = expand_text_layers(model, config.expand_text_layers)
    model.save_pretrained(work)
    processor.save_pretrained(work)
    info = {
        "config": asdict(config),
        "data_id": data_id,
        "base_model": str(base_model) if base_model else None,
        "train_seconds": elapsed,
        "final_loss": sum(losses[-25:]) / len(losses[-25:]),
        "loss_every_25_steps": losses[::25],
        "readout_accuracy": readout,
    }
    logger.info(
        "Stand-in pretraining: %d steps in %.0f s, read-out %s", config.steps, elapsed, readout
    )
    return info


def expand_text_layers(model, n: int):
    """``model`` with ``n`` decoder layers appended to its language model, each an identity
    block: fresh weights, but attention output and MLP down projections zeroed, so the
    residual stream passes through unchanged and the expanded model computes exactly what
    ``model`` computes (block expansion, as in LLaMA Pro, arXiv 2401.02415). Fine-tuning
    then trains the new layers from there.

    A tiny model learns to read panels best with two text layers; comparing two panels at
    one token needs more depth, which the PaCo SFT gets from these layers.
    """
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    config = model.config
    layers = config.text_config.num_hidden_layers
    config.text_config.num_hidden_layers = layers + n
    config.text_config.layer_types = [config.text_config.layer_types[0]] * (layers + n)
    expanded = Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=torch.float32)
    missing, unexpected = expanded.load_state_dict(model.state_dict(), strict=False)
    new = {f".layers.{i}." for i in range(layers, layers + n)}
    if unexpected or any(not any(m in key for m in new) for key in missing):
        raise WeightsMismatchError(f"block expansion lost weights: {unexpected or missing}")
    with torch.no_grad():
        for layer in expanded.model.language_model.layers[layers:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    expanded.generation_config = model.generation_config
    return expanded


def read_standin_info(path: str | Path) -> dict[str, Any] | None:
    """The ``standin.json`` of a stand-in folder (None when there is none)."""
    return read_info(path, INFO_FILE)
