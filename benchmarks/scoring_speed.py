"""Scoring speed on the CPU: transformers' own forward vs ``PacoReward``, the same pairs, one run.

The model is PaCo-Reward-7B's architecture (Qwen2.5-VL) with its real patch and window
structure (14 px patches, 112 px windows, 2 x 2 merge; the real tower's first
``--vision_blocks`` blocks: seven windowed, then one of full attention) at ``--scale`` of its
width and text depth, random weights, fp32, with the real
processor's pixel budget and chat template (:func:`benchmarks.gpu_check.build_reward_model`).
Both paths score the same ``--pairs`` pairs of ``--resolution`` px images (504 px: 25
windows an image) with varied themes, ``--batch_size`` pairs a forward, interleaved over
``--rounds`` (these machines are shared and noisy; the table gives the median):

* **transformers**: what a user of transformers writes, ``processor(text, images,
  padding=True)`` (left padding) + ``model(**inputs)``, the Yes/No probability of the last
  position, on an untouched copy of the model;
* **PacoReward**: ``PacoReward(LocalBackend(model, processor)).score_pairs(pairs)``.

With ``--family gemma3`` the judge is Gemma-3-4B-IT's architecture instead (the shipped
config at ``--scale`` of its text width and depth, the SigLIP tower's real 896 px input, 14 px
patches and width at ``--scale``, its first ``--vision_blocks`` blocks, 256 image tokens an
image), scored by ``PacoReward(ProcessorBackend(model, processor))``: the same model forward,
each distinct image through the vision tower once (the reference runs it per pair).

It prints seconds per round, pairs/s, the ratio, and the largest score difference (the run
fails when it is over ``--tolerance``). ``docs/benchmarks.md`` has the figures::

    python -m benchmarks.scoring_speed
    python -m benchmarks.scoring_speed --family gemma3 --images 4 --pairs 6 --vision_blocks 2
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError

THEMES = (
    "a red fox",
    "the same knight rides through four seasons in a misty valley, one castle on the hill",
    "a bowl of fruit on a wooden table, painted in the style of a Dutch still life",
)


@dataclass
class ScoringSpeedArguments:
    """transformers' own forward vs PacoReward on the same pairs (CPU, reduced 7B shape)."""

    family: str = config_field(
        "qwen2_5_vl",
        help="The judge's architecture: qwen2_5_vl (PaCo-Reward-7B) or gemma3 (Gemma-3-4B-IT).",
    )
    scale: float = config_field(0.125, help="Width and text depth of the 7B evaluator kept.")
    vision_blocks: int = config_field(
        8, help="The real vision tower's first blocks kept (8: 7 windowed, 1 full attention)."
    )
    resolution: int = config_field(504, help="Image side in pixels (504: 25 windows).")
    pairs: int = config_field(16, help="Pairs scored per round by each path.")
    images: int = config_field(8, help="Distinct images the pairs are drawn from.")
    batch_size: int = config_field(8, help="Pairs per forward (both paths).")
    rounds: int = config_field(3, help="Interleaved timing rounds (after a warm-up of each).")
    threads: int | None = config_field(None, help="torch threads (default: torch's).")
    tolerance: float = config_field(1e-5, help="Largest score difference allowed.")

    def __post_init__(self) -> None:
        if self.pairs < 1 or self.images < 2 or self.rounds < 1 or self.batch_size < 1:
            raise ConfigError("--pairs, --batch_size, --rounds >= 1 and --images >= 2.")
        if self.family not in FAMILIES:
            raise ConfigError(f"--family must be one of {FAMILIES}; got {self.family!r}.")


FAMILIES = ("qwen2_5_vl", "gemma3")


def make_pairs(args: ScoringSpeedArguments) -> list[tuple[Image.Image, Image.Image, str]]:
    """``args.pairs`` pairs over ``args.images`` random images, themes of varied lengths."""
    rng = np.random.default_rng(0)
    side = args.resolution
    images = [
        Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8))
        for _ in range(args.images)
    ]
    return [
        (images[k % args.images], images[(k + 1 + k // args.images) % args.images], THEMES[k % 3])
        for k in range(args.pairs)
    ]


class TransformersReference:
    """P(Yes)/(P(Yes)+P(No)) by transformers alone: the processor's chat template and call
    (left-padded batches), the model's forward, the last position's logits."""

    def __init__(self, model, processor, batch_size: int) -> None:
        from paco_reward.templates import render_instruction
        from paco_reward.yes_no import YesNoTokens

        self.model, self.processor, self.batch_size = model, processor, batch_size
        self.processor.tokenizer.padding_side = "left"
        self.render = lambda theme: render_instruction("consistency", theme)
        self.tokens = YesNoTokens.from_tokenizer(processor.tokenizer)

    @torch.inference_mode()
    def score_pairs(self, pairs) -> np.ndarray:
        from paco_reward.yes_no import yes_probability

        scores = []
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start : start + self.batch_size]
            texts = [self._text(theme) for _, _, theme in chunk]
            images = [[a, b] for a, b, _ in chunk]  # one list per prompt
            inputs = self.processor(
                text=texts,
                images=images,
                padding=True,
                add_special_tokens=False,  # the chat template writes them (Gemma's <bos>)
                return_tensors="pt",
            )
            logits = self.model(**inputs).logits[:, -1]
            scores.append(yes_probability(logits, tokens=self.tokens).double().numpy())
        return np.concatenate(scores)

    def _text(self, theme: str) -> str:
        content = [
            {"type": "image"},
            {"type": "image"},
            {"type": "text", "text": self.render(theme)},
        ]
        messages = [{"role": "user", "content": content}]
        return self.processor.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )


def _timed(score: Callable[[list], np.ndarray], pairs) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    scores = score(pairs)
    return time.perf_counter() - start, scores


def qwen2_5_vl_judge(args: ScoringSpeedArguments):
    """PaCo-Reward-7B's architecture, reduced; its backend and a line that describes it."""
    from benchmarks.gpu_check import build_reward_model
    from paco_reward.local_backend import LocalBackend

    model, processor, config = build_reward_model(
        args.scale, torch.device("cpu"), torch.float32, vision_blocks=args.vision_blocks
    )
    vision = config["vision_config"]
    described = (
        f"Qwen2.5-VL-7B at scale {args.scale}: {config['num_hidden_layers']} text layers of "
        f"{config['hidden_size']}, {vision['depth']} vision blocks of {vision['hidden_size']} "
        f"(patch {vision['patch_size']}, window {vision['window_size']} px, full attention in "
        f"blocks {vision['fullatt_block_indexes']})"
    )
    return model, processor, LocalBackend(model, processor, batch_size=args.batch_size), described


def gemma3_judge(args: ScoringSpeedArguments, root: Path):
    """Gemma-3-4B-IT's architecture, reduced (a folder under ``root``, a temporary directory,
    built by :func:`paco_reward.testing.build_tiny_gemma3`); its backend and a line that
    describes it."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from paco_reward.architectures import shipped_config
    from paco_reward.processor_backend import ProcessorBackend
    from paco_reward.testing.gemma3 import build_tiny_gemma3

    real = shipped_config("gemma3_4b_it.json")
    text, vision = real["text_config"], real["vision_config"]
    heads = vision["num_attention_heads"]
    text = {
        "vocab_size": 262208,
        "hidden_size": round(text["hidden_size"] * args.scale),
        "intermediate_size": round(text["intermediate_size"] * args.scale),
        "num_hidden_layers": max(1, round(text["num_hidden_layers"] * args.scale)),
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "query_pre_attn_scalar": 256,
        "sliding_window": text["sliding_window"],
        "layer_types": None,  # Gemma-3's five sliding-window layers, then one global
    }
    vision = {
        "hidden_size": round(vision["hidden_size"] * args.scale / heads) * heads,
        "intermediate_size": round(vision["intermediate_size"] * args.scale),
        "num_hidden_layers": args.vision_blocks,
        "num_attention_heads": heads,
        "image_size": vision["image_size"],
        "patch_size": vision["patch_size"],
    }
    folder = root / "model"
    build_tiny_gemma3(folder, tokens_per_image=256, text_config=text, vision_config=vision)
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    described = (
        f"Gemma-3-4B-IT at scale {args.scale}: {text['num_hidden_layers']} text layers of "
        f"{text['hidden_size']}, {vision['num_hidden_layers']} SigLIP blocks of "
        f"{vision['hidden_size']} ({vision['image_size']} px, patch {vision['patch_size']}, "
        "256 image tokens)"
    )
    return (
        model,
        processor,
        ProcessorBackend(model, processor, batch_size=args.batch_size),
        described,
    )


def run(args: ScoringSpeedArguments) -> int:
    """Build the model, score the pairs both ways interleaved, print the table; 1 when the
    scores differ by more than ``--tolerance``."""
    if args.threads:
        torch.set_num_threads(args.threads)
    with contextlib.ExitStack() as stack:
        if args.family == "gemma3":  # its model folder lives as long as the run
            root = stack.enter_context(tempfile.TemporaryDirectory(prefix="gemma3-speed-"))
            judged = gemma3_judge(args, Path(root))
        else:
            judged = qwen2_5_vl_judge(args)
        return compare(args, *judged)


def compare(args: ScoringSpeedArguments, model, processor, backend, described: str) -> int:
    """Score the pairs with ``model`` (transformers' forward, on a copy) and ``backend``
    (``PacoReward``) interleaved and print the table; 1 when the scores differ by more than
    ``--tolerance``."""
    from paco_reward import PacoReward

    reference = TransformersReference(copy.deepcopy(model), processor, args.batch_size)
    reward = PacoReward(backend)
    paths = {"transformers": reference.score_pairs, "PacoReward": reward.score_pairs}
    pairs = make_pairs(args)
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    scores: dict[str, np.ndarray] = {}
    for score in paths.values():  # warm-up: allocator, caches
        score(pairs[: args.batch_size])
    for _ in range(args.rounds):
        for name, score in paths.items():
            elapsed, scores[name] = _timed(score, pairs)
            seconds[name].append(elapsed)
    difference = float(np.abs(scores["PacoReward"] - scores["transformers"]).max())
    print(
        f"Scoring {args.pairs} pairs of {args.resolution} px images ({args.images} distinct), "
        f"batch {args.batch_size}, {args.rounds} rounds, {torch.get_num_threads()} threads; "
        f"{described}, fp32\n"
    )
    print("| path | s/round (median) | rounds | pairs/s |")
    print("|---|---:|---:|---:|")
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    for name, times in seconds.items():
        rounds = ", ".join(f"{t:.2f}" for t in times)
        print(f"| {name} | {medians[name]:.2f} | {rounds} | {args.pairs / medians[name]:.2f} |")
    print(
        f"\nPacoReward / transformers speed: {medians['transformers'] / medians['PacoReward']:.2f}x"
        f"; largest score difference {difference:.1e} (scores from {scores['PacoReward'].min():.3f}"
        f" to {scores['PacoReward'].max():.3f})"
    )
    if difference > args.tolerance:
        print(f"FAILED: the scores differ by {difference:.2e} > {args.tolerance}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    command = Command("scoring_speed", ScoringSpeedArguments, run, __doc__.splitlines()[0])
    return run_cli("python -m benchmarks.scoring_speed", __doc__.splitlines()[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
