"""``paco-reward``: score, explain, train, plan, merge, serve, gateway, tiny: every command here.

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
    paco-reward serve ./PaCo-Reward-7B ./gemma-3-4b-it --served_model_name PaCo-Reward-7B \
        Gemma-3-4B-IT --device cuda:0 cuda:1
    paco-reward gateway PaCo-Reward-7B=http://127.0.0.1:8001/v1 \
        Gemma-3-4B-IT=http://127.0.0.1:8002/v1 --port 8000
    paco-reward tiny tiny_judge --panels .   # offline: a tiny random judge and sample panels

Every :class:`~paco_reward.server.config.ServerConfig` limit is a flag of ``serve`` and holds
for every model it serves; ``serve``'s per-model options (``--adapter``, ``--revision``,
``--dtype``, ``--device``) take one value for every model or one per model, in MODEL's order.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError
from paco_reward.hub import default_model_name
from paco_reward.server.config import ServerConfig
from paco_reward.server.gateway_config import GatewayConfig, Upstream
from paco_reward.templates import DEFAULT_TEMPLATE, TEMPLATES, get_template

logger = logging.getLogger(__name__)

__all__ = [
    "COMMANDS",
    "ExplainArguments",
    "GatewayArguments",
    "MergeArguments",
    "ModelArguments",
    "ScoreArguments",
    "ServeArguments",
    "TinyArguments",
    "main",
]

# Where ``serve`` and ``gateway`` read their API key when ``--api_key`` is not given.
API_KEY_ENV = "PACO_REWARD_API_KEY"
# ``serve --adapter``'s value for a model without one.
NO_ADAPTER = "none"
# ``serve``'s loading options that take one value per model, and those shared by every model.
PER_MODEL = ("adapter", "revision", "dtype", "device")
SHARED = ("cache_dir", "trust_remote_code", "attn_implementation")
# The scorer's options of the commands that score (``score``, ``explain``, ``serve``; not ``merge``).
SCORING = ("vision_attention",)


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
        return {name: getattr(self, name) for name in (*PER_MODEL, *SHARED)}

    def load(self):
        """The :class:`~paco_reward.PacoReward` these arguments name."""
        from paco_reward import PacoReward

        return PacoReward.from_pretrained(self.model, **self.load_kwargs())


@dataclass(kw_only=True)
class _ScoringArguments(ModelArguments):
    vision_attention: str = config_field(
        "auto",
        help="Qwen-VL vision attention: auto (one call per window length where transformers' "
        "forward is the checked one, else transformers' own), grouped (or fail), stock.",
    )

    def load_kwargs(self) -> dict[str, Any]:
        return {**super().load_kwargs(), **{name: getattr(self, name) for name in SCORING}}


@dataclass(kw_only=True)
class _JudgementArguments(_ScoringArguments):
    prompt: str | None = config_field(
        None, help="Theme / criterion / edit instruction filling the template."
    )
    template: str | None = config_field(
        None,
        help=f"One of {sorted(TEMPLATES)} or a format string with {{prompt}} (default: consistency).",
    )

    def __post_init__(self) -> None:
        # Checked now, before the model loads (minutes for a 7B judge), not by the template
        # after it ("got None").
        template = get_template(self.template or DEFAULT_TEMPLATE)
        if template.needs_prompt and not (self.prompt or "").strip():
            raise ConfigError(
                f"--prompt is missing: the {template.name!r} template needs the theme, criterion "
                'or edit instruction; add --prompt "a red fox in four seasons" (or a --template '
                "without {prompt}, such as rank)."
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
        super().__post_init__()


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
class ServeArguments(_ScoringArguments, ServerConfig):
    """Serve one PaCo evaluator, or several behind one port, over an OpenAI-compatible HTTP
    API (loopback by default). The per-model options (``--adapter``, ``--revision``,
    ``--dtype``, ``--device``) take one value for every model or one per model, in MODEL's
    order; the other loading options hold for every model."""

    model: list[str] = config_field(
        help="Model folder(s) or hub id(s) (merged PaCo-Reward or a base model); several are "
        "served behind one port, a request's model picking one.",
        positional=True,
        nargs="+",
    )
    served_model_name: list[str] = config_field(
        list,
        help="The name of each MODEL in /v1/models and in requests, in MODEL's order "
        "(default: each folder's name).",
    )
    adapter: list[str] = config_field(
        list,
        help=f"PEFT LoRA adapter folder/id on top of MODEL: one for every model, or one per "
        f"model ({NO_ADAPTER!r} for a model without).",
    )
    revision: list[str] = config_field(
        list, help="Branch, tag or commit of each MODEL on the hub (default: main)."
    )
    dtype: list[str] = config_field(
        list, help="torch dtype, one for every model or one per model (default: bf16 on GPU)."
    )
    device: list[str] = config_field(
        list,
        help="torch device: one that every model shares, or one per model, e.g. cuda:0 cuda:1 "
        "(default: this process's GPU, else the CPU).",
    )
    host: str = config_field("127.0.0.1", help="Bind address (default: loopback only).")
    port: int = config_field(8000, help="TCP port.")

    def __post_init__(self) -> None:
        self.api_key = _key_from_environment(self.api_key)
        self.server_config()  # checks the limits
        if not self.model:
            raise ConfigError("give one MODEL or more.")
        names = self.names()
        if len(set(names)) != len(names):
            raise ConfigError(
                f"two models would be served as the same name: {names}; give each its own "
                "with --served_model_name NAME [NAME ...]."
            )
        for option in PER_MODEL:
            self.per_model(option)

    def names(self) -> list[str]:
        """The served name of each model."""
        if not self.served_model_name:
            adapters = self.per_model("adapter")
            return [default_model_name(m, a) for m, a in zip(self.model, adapters)]
        if len(self.served_model_name) != len(self.model) or not all(
            name.strip() for name in self.served_model_name
        ):
            raise ConfigError(
                f"--served_model_name takes one non-empty name per MODEL ({len(self.model)}: "
                f"{self.model}); got {self.served_model_name}."
            )
        return list(self.served_model_name)

    def per_model(self, option: str) -> list[str | None]:
        """``option``'s value for each model, in MODEL's order (None: not given)."""
        values = getattr(self, option)
        count = len(self.model)
        if len(values) not in (0, 1, count):
            raise ConfigError(
                f"--{option} takes one value for every model or one per model ({count}: "
                f"{self.model}); got {len(values)}: {values}."
            )
        values = values * count if len(values) == 1 else values or [None] * count
        if option == "adapter":
            values = [None if v is not None and v.lower() == NO_ADAPTER else v for v in values]
        return values

    def models(self) -> list[tuple[str, str, dict[str, Any]]]:
        """``(served name, MODEL, from_pretrained keyword arguments)`` of each model."""
        shared = {name: getattr(self, name) for name in (*SHARED, *SCORING)}
        per_model = zip(*(self.per_model(option) for option in PER_MODEL))
        return [
            (name, model, {**shared, **dict(zip(PER_MODEL, values))})
            for name, model, values in zip(self.names(), self.model, per_model)
        ]

    def server_config(self) -> ServerConfig:
        """The server's own settings (without the models and the binding arguments)."""
        names = set(ServerConfig.__dataclass_fields__) - {"served_model_name"}
        return ServerConfig(**{name: getattr(self, name) for name in names})


@dataclass(kw_only=True)
class TinyArguments:
    """Build a tiny offline judge (a randomly initialised Qwen2.5-VL, a few MB) and, with
    --panels, sample images to score with it: a first try without downloading anything."""

    output_dir: str = config_field(help="Folder to write the judge to (its name).", positional=True)
    panels: str | None = config_field(
        None, help="Also write panel_1.png, panel_2.png and grid.png to this folder."
    )
    seed: int = config_field(0, help="Seed of the random weights.")


@dataclass(kw_only=True)
class GatewayArguments(GatewayConfig):
    """One port in front of several OpenAI-compatible servers (vLLM, paco-reward serve),
    each request routed by the model it names (loopback by default)."""

    upstreams: list[str] = config_field(
        help="NAME=URL of each upstream: the model name it serves (requests pass unchanged) "
        "and its API root, e.g. PaCo-Reward-7B=http://127.0.0.1:8001/v1; "
        "NAME=URL,key_env=VARIABLE gives that upstream its own key, read from $VARIABLE.",
        positional=True,
        nargs="+",
    )
    host: str = config_field("127.0.0.1", help="Bind address (default: loopback only).")
    port: int = config_field(8000, help="TCP port.")

    def __post_init__(self) -> None:
        self.api_key = _key_from_environment(self.api_key)
        super().__post_init__()
        self.upstream_urls()

    def upstream_urls(self) -> dict[str, Upstream]:
        """``{name: Upstream}`` from the NAME=URL[,key_env=VARIABLE] arguments."""
        urls: dict[str, Upstream] = {}
        for item in self.upstreams:
            upstream = Upstream.from_argument(item)
            if upstream.name in urls:
                raise ConfigError(
                    f"upstream name {upstream.name!r} is given twice: {self.upstreams}."
                )
            urls[upstream.name] = upstream
        return urls


def _key_from_environment(api_key: str | None) -> str | None:
    return api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None


def _warn_if_open(host: str, api_key: str | None) -> None:
    from paco_reward.launch import is_loopback

    if not is_loopback(host) and not api_key:
        logger.warning(
            "Serving on %s without --api_key: anyone who can reach this address can use the "
            "model. Set --api_key (or $%s) or bind 127.0.0.1.",
            host,
            API_KEY_ENV,
        )


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

    from paco_reward.server.app import create_app
    from paco_reward.server.limits import uvicorn_options
    from paco_reward.transformers_backend import TransformersBackend

    _warn_if_open(args.host, args.api_key)
    config = args.server_config()
    # PIL's own bomb guard (process-wide; this process only serves): never decode more
    # than our limit, even on a path that skipped the header check.
    Image.MAX_IMAGE_PIXELS = config.max_image_pixels
    backends = {
        name: TransformersBackend.from_pretrained(
            model, **load_kwargs, batch_size=config.max_batch_size
        )
        for name, model, load_kwargs in args.models()
    }
    app = create_app(backends, config)
    print(f"paco-reward serve: models {list(backends)} on http://{args.host}:{args.port}/v1")
    uvicorn.run(app, host=args.host, port=args.port, **uvicorn_options(config))
    return 0


def gateway(args: GatewayArguments) -> int:
    import uvicorn

    from paco_reward.server.gateway import create_gateway
    from paco_reward.server.limits import uvicorn_options

    _warn_if_open(args.host, args.api_key)
    upstreams = args.upstream_urls()
    app = create_gateway(upstreams, args)  # the arguments are a checked GatewayConfig
    listed = {name: upstream.api_root for name, upstream in upstreams.items()}
    print(f"paco-reward gateway: {listed} on http://{args.host}:{args.port}/v1")
    uvicorn.run(app, host=args.host, port=args.port, **uvicorn_options(args))
    return 0


def tiny(args: TinyArguments) -> int:
    from paco_reward.testing import build_tiny_qwen2_5_vl
    from paco_reward.testing.samples import write_sample_panels

    print(f"{build_tiny_qwen2_5_vl(args.output_dir, seed=args.seed)}: a tiny judge with random "
          "weights (its scores mean nothing; it loads and scores as a real one does)")  # fmt: skip
    if args.panels is not None:
        for path in write_sample_panels(args.panels):
            print(path)
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
        reads_inputs=True,
    ),  # fmt: skip
    Command("plan", _sft_plan_cls, plan, "Memory per process of a launch.", recipe=True),
    Command("merge", MergeArguments, merge, "Merge a LoRA adapter into its base model."),
    Command("serve", ServeArguments, serve, "Serve PaCo evaluators over HTTP, behind one port."),
    Command(
        "gateway",
        GatewayArguments,
        gateway,
        "One port in front of several OpenAI-compatible servers, routed by model.",
    ),
    Command("tiny", TinyArguments, tiny, "Build a tiny offline judge and sample panels."),
]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``paco-reward``; returns the exit status."""
    return run_cli("paco-reward", __doc__.splitlines()[0], COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
