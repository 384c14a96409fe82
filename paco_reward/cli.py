"""``paco-reward``: score, explain, train, plan, merge, serve: every command in this file.

Each command is a dataclass of its arguments and a function (a
:class:`~paco_reward.command_line.Command`); :func:`paco_reward.command_line.run_cli` turns
them into the command line. The commands that load an evaluator (``score``, ``explain``,
``merge``, ``serve``) share :class:`ModelArguments`: the model, its adapter, dtype and
device, and the hub arguments ``PacoReward.from_pretrained`` takes (a pinned ``--revision``,
``--cache_dir``, ``--trust_remote_code``, ``--attn_implementation``)::

    paco-reward score MODEL A.png B.png --prompt "a red fox" --revision v1.0
    paco-reward score MODEL --grid grid.png --prompt "FOUR-PANEL Images with a 2x2 grid layout ..."
    paco-reward explain MODEL A.png B.png --prompt "a red fox"
    paco-reward train recipes/tiny_cpu.yaml --max_steps 200 --output_dir runs/tiny
    paco-reward plan recipes/paco_reward_7b_lora.yaml --num_processes 8 --gpu_memory_gb 80 --sharded
    paco-reward merge Qwen/Qwen2.5-VL-7B-Instruct runs/lora runs/merged
    paco-reward serve ./PaCo-Reward-7B --port 8000
    paco-reward serve X-GenGroup/PaCo-Reward-7B --revision v1.0 --api_key "$KEY"
    paco-reward serve ./model --max_batch_size 64 --max_body_bytes 134217728

Every :class:`~paco_reward.server.config.ServerConfig` limit is a flag of ``serve``.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError
from paco_reward.server.config import ServerConfig
from paco_reward.templates import TEMPLATES

logger = logging.getLogger(__name__)

__all__ = [
    "COMMANDS",
    "ExplainArguments",
    "MergeArguments",
    "ModelArguments",
    "ScoreArguments",
    "ServeArguments",
    "main",
]

# Where ``serve`` reads its API key when ``--api_key`` is not given.
API_KEY_ENV = "PACO_REWARD_API_KEY"


@dataclass(kw_only=True)
class ModelArguments:
    """Which evaluator to load, and from where: the arguments of
    :meth:`paco_reward.PacoReward.from_pretrained` a command line gives.

    Example:
        >>> args = ModelArguments(model="acme/evaluator", revision="v1.0")
        >>> args.load_kwargs()["revision"]
        'v1.0'
    """

    model: str = config_field(
        help="Model folder or hub id (merged PaCo-Reward or a base model).", positional=True
    )
    adapter: str | None = config_field(None, help="PEFT LoRA adapter folder/id on top of MODEL.")
    revision: str | None = config_field(
        None, help="Branch, tag or commit of MODEL on the hub (default: main)."
    )
    cache_dir: str | None = config_field(
        None, help="Hugging Face cache to read MODEL (and a hub adapter) from."
    )
    trust_remote_code: bool = config_field(
        False, help="Run the code MODEL's repository ships (its own model classes)."
    )
    attn_implementation: str | None = config_field(
        None,
        help="Attention kernel: sdpa, eager, flash_attention_2 (default: transformers', sdpa).",
    )
    dtype: str | None = config_field(
        None, help="torch dtype, e.g. bfloat16 (default: bf16 on GPU, float32 on CPU)."
    )
    device: str | None = config_field(
        None, help="torch device, e.g. cuda:1 (default: this process's GPU, else the CPU)."
    )

    def load_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``PacoReward.from_pretrained`` (and ``TransformersBackend``'s)
        after ``MODEL``."""
        names = ("adapter", "revision", "cache_dir", "trust_remote_code",
                 "attn_implementation", "dtype", "device")  # fmt: skip
        return {name: getattr(self, name) for name in names}

    def load(self):
        """The :class:`~paco_reward.PacoReward` these arguments name."""
        from paco_reward import PacoReward

        return PacoReward.from_pretrained(self.model, **self.load_kwargs())


@dataclass(kw_only=True)
class _JudgementArguments(ModelArguments):
    prompt: str | None = config_field(
        None, help="Theme / criterion / edit instruction filling the template."
    )
    template: str | None = config_field(
        None,
        help=f"One of {sorted(TEMPLATES)} or a format string with {{prompt}} (default: consistency).",
    )


@dataclass(kw_only=True)
class ScoreArguments(_JudgementArguments):
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


@dataclass(kw_only=True)
class ExplainArguments(_JudgementArguments):
    """Generate the judgement and its reasons for one pair."""

    images: list[str] = config_field(
        list, help="The two images (reference/source first).", positional=True, nargs=2
    )
    max_new_tokens: int = config_field(256, help="Longest judgement generated.")


@dataclass(kw_only=True)
class MergeArguments(ModelArguments):
    """Merge a LoRA adapter into its base model: a plain Hugging Face (and vLLM) folder."""

    model: str = config_field(help="Base model folder or hub id.", positional=True)
    adapter: str = config_field(help="LoRA adapter folder.", positional=True)
    output_dir: str = config_field(help="Where the merged model goes.", positional=True)
    dtype: str | None = config_field(None, help="Saved weight dtype (default: the base's).")
    device: str | None = config_field(
        None, help="torch device the weights are merged on (default: the CPU)."
    )


@dataclass(kw_only=True)
class ServeArguments(ModelArguments, ServerConfig):
    """Serve a PaCo evaluator over an OpenAI-compatible HTTP API (loopback by default)."""

    host: str = config_field("127.0.0.1", help="Bind address (default: loopback only).")
    port: int = config_field(8000, help="TCP port.")

    def __post_init__(self) -> None:
        if self.api_key is None and os.environ.get(API_KEY_ENV):
            self.api_key = os.environ[API_KEY_ENV]
        super().__post_init__()

    def server_config(self) -> ServerConfig:
        """The server's own settings (without the model-loading and binding arguments)."""
        names = ServerConfig.__dataclass_fields__
        return ServerConfig(**{name: getattr(self, name) for name in names})


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


def train(config) -> int:
    from paco_reward.training import run_training

    metrics = run_training(config)
    if int(os.environ.get("RANK", "0")) == 0:  # once, also under torchrun
        print(json.dumps(metrics, indent=2))
    return 0


def plan(config) -> int:
    return config.print_plan(config.plan())


def merge(args: MergeArguments) -> int:
    from paco_reward.training.merge import merge_lora

    kwargs = args.load_kwargs()
    del kwargs["adapter"]
    print(merge_lora(args.model, args.adapter, args.output_dir, **kwargs))
    return 0


def serve(args: ServeArguments) -> int:
    import uvicorn
    from PIL import Image

    from paco_reward.launch import is_loopback
    from paco_reward.server.app import create_app
    from paco_reward.transformers_backend import TransformersBackend

    if not is_loopback(args.host) and not args.api_key:
        logger.warning(
            "Serving on %s without --api_key: anyone who can reach this address can use the "
            "model. Set --api_key (or $%s) or bind 127.0.0.1.",
            args.host,
            API_KEY_ENV,
        )
    config = args.server_config()
    # PIL's own bomb guard (process-wide; this process only serves): never decode more
    # than our limit, even on a path that skipped the header check.
    Image.MAX_IMAGE_PIXELS = config.max_image_pixels
    backend = TransformersBackend.from_pretrained(
        args.model, **args.load_kwargs(), batch_size=config.max_batch_size
    )
    app = create_app(backend, config)
    name = config.served_model_name or backend.name
    print(f"paco-reward serve: model {name!r} on http://{args.host}:{args.port}/v1")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


def _sft_config_cls():
    from paco_reward.training import PacoSFTConfig

    return PacoSFTConfig


def _sft_plan_cls():
    from paco_reward.training.planning import SFTPlanConfig

    return SFTPlanConfig


COMMANDS = [
    Command("score", ScoreArguments, score, "Score image pairs, a set of images, or a grid."),
    Command("explain", ExplainArguments, explain, "Generate the judgement for one pair."),
    Command(
        "train",
        _sft_config_cls,
        train,
        "SFT the pairwise evaluator from a YAML recipe.",
        recipe=True,
    ),  # fmt: skip
    Command("plan", _sft_plan_cls, plan, "Memory per process of a launch.", recipe=True),
    Command("merge", MergeArguments, merge, "Merge a LoRA adapter into its base model."),
    Command("serve", ServeArguments, serve, "Serve a PaCo evaluator over HTTP."),
]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``paco-reward``; returns the exit status."""
    return run_cli("paco-reward", __doc__.splitlines()[0], COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
