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
  position, on a model loaded for it alone (``AutoModelForImageTextToText.from_pretrained`` of
  the saved folder: transformers' own vision attention);
* **PacoReward**: ``PacoReward.from_pretrained(folder).score_pairs(pairs)``, its own copy
  (``LocalBackend``, which groups the vision attention of that copy only).

With ``--family gemma3`` the judge is Gemma-3-4B-IT's architecture instead (the shipped
config at ``--scale`` of its text width and depth, the SigLIP tower's real 896 px input, 14 px
patches and width at ``--scale``, its first ``--vision_blocks`` blocks, 256 image tokens an
image: the judge registry's shrink function), scored by ``ProcessorBackend``: the same model
forward, each distinct image through the vision tower once (the reference runs it per pair).

It prints seconds per round, pairs/s, the ratio, and the largest score difference (the run
fails when it is over ``--tolerance``). ``docs/benchmarks.md`` has the figures::

    python -m benchmarks.scoring_speed
    python -m benchmarks.scoring_speed --family gemma3 --images 4 --pairs 6 --vision_blocks 2
"""

from __future__ import annotations

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


def qwen2_5_vl_judge(args: ScoringSpeedArguments, root: Path) -> tuple[Path, str]:
    """PaCo-Reward-7B's architecture, reduced, saved in a folder under ``root`` (a temporary
    directory); the folder and a line that describes the model."""
    from benchmarks.gpu_check import build_reward_model

    model, processor, config = build_reward_model(
        args.scale, torch.device("cpu"), torch.float32, vision_blocks=args.vision_blocks
    )
    folder = root / "model"
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    vision = config["vision_config"]
    described = (
        f"Qwen2.5-VL-7B at scale {args.scale}: {config['num_hidden_layers']} text layers of "
        f"{config['hidden_size']}, {vision['depth']} vision blocks of {vision['hidden_size']} "
        f"(patch {vision['patch_size']}, window {vision['window_size']} px, full attention in "
        f"blocks {vision['fullatt_block_indexes']})"
    )
    return folder, described


def gemma3_judge(args: ScoringSpeedArguments, root: Path) -> tuple[Path, str]:
    """Gemma-3-4B-IT's architecture, reduced (:func:`~paco_reward.architectures.scaled.shrink_gemma3`,
    the tower's first ``--vision_blocks`` blocks), built in a folder under ``root`` (a
    temporary directory) by :func:`paco_reward.testing.build_tiny_gemma3`; the folder and a
    line that describes the model."""
    from paco_reward.architectures import model_config
    from paco_reward.judges import JUDGE_SPECS

    spec = JUDGE_SPECS["gemma3"]
    shrunk = spec.shrunk(model_config("google/gemma-3-4b-it"), args.scale)
    text, vision = shrunk["text_config"], shrunk["vision_config"]
    vision["num_hidden_layers"] = args.vision_blocks
    folder = spec.build_tiny(
        root / "model", tokens_per_image=256, text_config=text, vision_config=vision
    )
    described = (
        f"Gemma-3-4B-IT at scale {args.scale}: {text['num_hidden_layers']} text layers of "
        f"{text['hidden_size']}, {vision['num_hidden_layers']} SigLIP blocks of "
        f"{vision['hidden_size']} ({vision['image_size']} px, patch {vision['patch_size']}, "
        "256 image tokens)"
    )
    return folder, described


JUDGES = {"qwen2_5_vl": qwen2_5_vl_judge, "gemma3": gemma3_judge}


def run(args: ScoringSpeedArguments) -> int:
    """Build the model in a temporary folder, load it twice (transformers' reference, and
    ``PacoReward``), score the pairs both ways interleaved, print the table; 1 when the
    scores differ by more than ``--tolerance``."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from paco_reward import PacoReward

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="scoring-speed-") as root:
        folder, described = JUDGES[args.family](args, Path(root))
        # Each path loads its own copy, as its user would: PacoReward changes the vision
        # attention of the instance it scores with, never the reference's.
        reference = TransformersReference(
            AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval(),
            AutoProcessor.from_pretrained(folder),
            args.batch_size,
        )
        reward = PacoReward.from_pretrained(
            folder, device="cpu", dtype=torch.float32, batch_size=args.batch_size
        )
        return compare(args, reference, reward, described)


def compare(args: ScoringSpeedArguments, reference: TransformersReference, reward,
            described: str) -> int:  # fmt: skip
    """Score the pairs with ``reference`` (transformers' forward) and ``reward``
    (``PacoReward``) interleaved and print the table; 1 when the scores differ by more than
    ``--tolerance``."""
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
    backend = reward.backend
    grouped = getattr(backend, "grouped_vision_attention", False)
    print(
        f"Scoring {args.pairs} pairs of {args.resolution} px images ({args.images} distinct), "
        f"batch {args.batch_size}, {args.rounds} rounds, {torch.get_num_threads()} threads; "
        f"{described}, fp32; PacoReward: {type(backend).__name__}"
        f"{', grouped vision attention' if grouped else ''}; each path its own copy of the "
        "model\n"
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
