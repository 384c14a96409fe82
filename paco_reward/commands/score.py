"""``paco-reward score`` and ``paco-reward explain``: score image pairs, a set or a grid.

paco-reward score MODEL A.png B.png --prompt "a red fox"
paco-reward score MODEL --grid grid.png --prompt "FOUR-PANEL Images with a 2x2 grid layout ..."
paco-reward explain MODEL A.png B.png --prompt "a red fox"
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from paco_reward.command_line import Command, config_field
from paco_reward.errors import ConfigError
from paco_reward.templates import TEMPLATES


@dataclass
class ModelArguments:
    """Which evaluator to load, and the instruction to ask it."""

    model: str = config_field(
        help="Model folder or hub id (merged PaCo-Reward or a base model).", positional=True
    )
    adapter: str | None = config_field(None, help="PEFT LoRA adapter folder/id on top of MODEL.")
    device: str | None = config_field(None, help="torch device (default: cuda if available).")
    dtype: str | None = config_field(
        None, help="torch dtype, e.g. bfloat16 (default: bf16 on GPU)."
    )
    prompt: str | None = config_field(
        None, help="Theme / criterion / edit instruction filling the template."
    )
    template: str | None = config_field(
        None,
        help=f"One of {sorted(TEMPLATES)} or a format string with {{prompt}} (default: consistency).",
    )

    def load(self):
        from paco_reward import PacoReward

        return PacoReward.from_pretrained(
            self.model, adapter=self.adapter, device=self.device, dtype=self.dtype
        )


@dataclass
class ScoreArguments(ModelArguments):
    """Score two images (a pair), more (every pair of a set), or a grid cut into panels."""

    images: list[str] = config_field(
        list, help="Two images (a pair) or more (all pairs of a set).", positional=True, nargs="*"
    )
    grid: str | None = config_field(
        None, help="A grid image to cut into panels (layout from --layout or --prompt)."
    )
    layout: str | None = config_field(
        None, help="Grid layout such as 2x2 (default: from --prompt)."
    )
    symmetric: bool = config_field(False, help="Score both orders and average.")

    def __post_init__(self) -> None:
        if self.grid is None and len(self.images) < 2:
            raise ConfigError("give two or more images, or --grid GRID.")


@dataclass
class ExplainArguments(ModelArguments):
    """Generate the judgement and its reasons for one pair."""

    images: list[str] = config_field(
        list, help="The two images (reference/source first).", positional=True, nargs=2
    )
    max_new_tokens: int = config_field(256, help="Longest judgement generated.")


def score(args: ScoreArguments) -> int:
    rm = args.load()
    kwargs = {"template": args.template, "symmetric": args.symmetric}
    if args.grid is not None:
        result = rm.score_grid(args.grid, args.prompt, layout=args.layout, **kwargs)
    elif len(args.images) == 2:
        print(json.dumps({"score": rm.score(*args.images, args.prompt, **kwargs)}))
        return 0
    else:
        result = rm.score_set(args.images, args.prompt, **kwargs)
    pairs = [{"a": i, "b": j, "score": float(s)} for (i, j), s in zip(result.pairs, result.scores)]
    print(json.dumps({"mean": result.mean, "pairs": pairs}))
    return 0


def explain(args: ExplainArguments) -> int:
    judgement = args.load().explain(
        *args.images, args.prompt, template=args.template, max_new_tokens=args.max_new_tokens
    )
    print(
        json.dumps(
            {"score": judgement.score, "answer": judgement.answer, "reasons": judgement.reasons}
        )
    )
    return 0


COMMANDS = [
    Command("score", ScoreArguments, score, "Score image pairs, a set of images, or a grid."),
    Command("explain", ExplainArguments, explain, "Generate the judgement for one pair."),
]
