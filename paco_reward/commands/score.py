"""``paco-reward score`` and ``paco-reward explain``: score image pairs, a set or a grid.

paco-reward score MODEL A.png B.png --prompt "a red fox"
paco-reward score MODEL --grid grid.png --prompt "FOUR-PANEL Images with a 2x2 grid layout ..."
paco-reward explain MODEL A.png B.png --prompt "a red fox"
"""

from __future__ import annotations

import argparse
import json

from paco_reward.templates import TEMPLATES


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="model folder or hub id (merged PaCo-Reward or a base model)")
    parser.add_argument("--adapter", help="PEFT LoRA adapter folder/id on top of MODEL")
    parser.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    parser.add_argument(
        "--dtype", help="torch dtype name, e.g. bfloat16 (default: bf16 on GPU, fp32 on CPU)"
    )
    parser.add_argument(
        "--prompt", help="theme / criterion / edit instruction filling the template"
    )
    parser.add_argument(
        "--template",
        default=None,
        help=f"one of {sorted(TEMPLATES)} or a format string with {{prompt}} (default: consistency)",
    )


def register(subparsers) -> None:
    score = subparsers.add_parser(
        "score", help="score image pairs, a set of images, or a grid image"
    )
    _add_model_args(score)
    score.add_argument("images", nargs="*", help="two images (a pair) or more (all pairs of a set)")
    score.add_argument(
        "--grid", help="a grid image to cut into panels (layout from --layout or --prompt)"
    )
    score.add_argument("--layout", help="grid layout such as 2x2 (default: read from --prompt)")
    score.add_argument("--symmetric", action="store_true", help="score both orders and average")
    score.set_defaults(func=run_score)

    explain = subparsers.add_parser(
        "explain", help="generate the judgement and reasons for one pair"
    )
    _add_model_args(explain)
    explain.add_argument("images", nargs=2, help="the two images (reference/source first)")
    explain.add_argument("--max-new-tokens", type=int, default=256)
    explain.set_defaults(func=run_explain)


def _load(args):
    from paco_reward import PacoReward

    return PacoReward.from_pretrained(
        args.model, adapter=args.adapter, device=args.device, dtype=args.dtype
    )


def run_score(args) -> int:
    if args.grid is None and len(args.images) < 2:
        raise SystemExit("paco-reward score: give two or more images, or --grid GRID.")
    rm = _load(args)
    if args.grid is not None:
        result = rm.score_grid(
            args.grid,
            args.prompt,
            layout=args.layout,
            template=args.template,
            symmetric=args.symmetric,
        )
    elif len(args.images) == 2:
        score = rm.score(
            *args.images, args.prompt, template=args.template, symmetric=args.symmetric
        )
        print(json.dumps({"score": score}))
        return 0
    else:
        result = rm.score_set(
            args.images, args.prompt, template=args.template, symmetric=args.symmetric
        )
    print(
        json.dumps(
            {
                "mean": result.mean,
                "pairs": [
                    {"a": i, "b": j, "score": float(s)}
                    for (i, j), s in zip(result.pairs, result.scores)
                ],
            }
        )
    )
    return 0


def run_explain(args) -> int:
    rm = _load(args)
    judgement = rm.explain(
        *args.images, args.prompt, template=args.template, max_new_tokens=args.max_new_tokens
    )
    print(
        json.dumps(
            {"score": judgement.score, "answer": judgement.answer, "reasons": judgement.reasons}
        )
    )
    return 0
