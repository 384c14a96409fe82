"""``paco-reward serve MODEL [MODEL ...]``: the OpenAI-compatible reward server, and
``paco-reward gateway NAME=URL [NAME=URL ...]``: one port in front of several servers.

    paco-reward serve ./PaCo-Reward-7B --port 8000
    paco-reward serve Qwen/Qwen2.5-VL-7B-Instruct --adapter ./lora --api_key "$KEY"
    paco-reward serve ./model --max_batch_size 64 --max_body_bytes 134217728
    paco-reward serve ./PaCo-Reward-7B ./gemma-3-4b-it --served_model_name PaCo-Reward-7B \\
        Gemma-3-4B-IT --device cuda:0 cuda:1
    paco-reward gateway PaCo-Reward-7B=http://127.0.0.1:8001/v1 \\
        Gemma-3-4B-IT=http://127.0.0.1:8002/v1 --port 8000

Every :class:`~paco_reward.server.config.ServerConfig` limit is a flag of ``serve`` and
holds for every model it serves; each per-model option (``--adapter``, ``--device``,
``--dtype``) takes one value for every model or one per model, in MODEL's order.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError
from paco_reward.launch import is_loopback
from paco_reward.server.config import ServerConfig
from paco_reward.server.gateway_config import GatewayConfig

logger = logging.getLogger(__name__)

API_KEY_ENV = "PACO_REWARD_API_KEY"
NO_ADAPTER = "none"


@dataclass(kw_only=True)
class ServeArguments(ServerConfig):
    """Serve one PaCo evaluator, or several behind one port, over an OpenAI-compatible HTTP
    API (loopback by default)."""

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
    host: str = config_field("127.0.0.1", help="Bind address (default: loopback only).")
    port: int = config_field(8000, help="TCP port.")
    device: list[str] = config_field(
        list,
        help="torch device: one that every model shares, or one per model, e.g. cuda:0 cuda:1 "
        "(default: cuda if available).",
    )
    dtype: list[str] = config_field(
        list, help="torch dtype, one for every model or one per model (default: bf16 on GPU)."
    )

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
        for option in ("adapter", "device", "dtype"):
            self.per_model(option)

    def names(self) -> list[str]:
        """The served name of each model."""
        if not self.served_model_name:
            adapters = self.per_model("adapter")
            return [Path(str(a or m)).name for m, a in zip(self.model, adapters)]
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

    def server_config(self) -> ServerConfig:
        """The server's own settings (without the models and the binding arguments)."""
        names = set(ServerConfig.__dataclass_fields__) - {"served_model_name"}
        return ServerConfig(**{name: getattr(self, name) for name in names})


@dataclass(kw_only=True)
class GatewayArguments(GatewayConfig):
    """One port in front of several OpenAI-compatible servers (vLLM, paco-reward serve),
    each request routed by the model it names (loopback by default)."""

    upstreams: list[str] = config_field(
        help="NAME=URL of each upstream: the model name it serves (requests pass unchanged) "
        "and its API root, e.g. PaCo-Reward-7B=http://127.0.0.1:8001/v1.",
        positional=True,
        nargs="+",
    )
    host: str = config_field("127.0.0.1", help="Bind address (default: loopback only).")
    port: int = config_field(8000, help="TCP port.")

    def __post_init__(self) -> None:
        self.api_key = _key_from_environment(self.api_key)
        super().__post_init__()
        self.upstream_urls()

    def upstream_urls(self) -> dict[str, str]:
        """``{name: url}`` from the NAME=URL arguments."""
        urls: dict[str, str] = {}
        for item in self.upstreams:
            name, sep, url = item.partition("=")
            if not sep or not name.strip() or not url.strip():
                raise ConfigError(
                    f"upstream {item!r} is not NAME=URL; e.g. "
                    "PaCo-Reward-7B=http://127.0.0.1:8001/v1."
                )
            if name in urls:
                raise ConfigError(f"upstream name {name!r} is given twice: {self.upstreams}.")
            urls[name] = url
        return urls


def _key_from_environment(api_key: str | None) -> str | None:
    return api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None


def _warn_if_open(host: str, api_key: str | None) -> None:
    if not is_loopback(host) and not api_key:
        logger.warning(
            "Serving on %s without --api_key: anyone who can reach this address can use the "
            "model. Set --api_key (or $%s) or bind 127.0.0.1.",
            host,
            API_KEY_ENV,
        )


def serve(args: ServeArguments) -> int:
    import uvicorn
    from PIL import Image

    from paco_reward.local_backend import LocalBackend
    from paco_reward.server.app import create_app

    _warn_if_open(args.host, args.api_key)
    config = args.server_config()
    # PIL's own bomb guard (process-wide; this process only serves): never decode more
    # than our limit, even on a path that skipped the header check.
    Image.MAX_IMAGE_PIXELS = config.max_image_pixels
    loading = zip(
        args.names(),
        args.model,
        args.per_model("adapter"),
        args.per_model("device"),
        args.per_model("dtype"),
    )
    backends = {
        name: LocalBackend.from_pretrained(
            model, adapter=adapter, device=device, dtype=dtype, batch_size=config.max_batch_size
        )
        for name, model, adapter, device, dtype in loading
    }
    app = create_app(backends, config)
    print(f"paco-reward serve: models {list(backends)} on http://{args.host}:{args.port}/v1")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


def gateway(args: GatewayArguments) -> int:
    import uvicorn

    from paco_reward.server.gateway import create_gateway

    _warn_if_open(args.host, args.api_key)
    upstreams = args.upstream_urls()
    fields = GatewayConfig.__dataclass_fields__
    app = create_gateway(upstreams, GatewayConfig(**{name: getattr(args, name) for name in fields}))
    print(f"paco-reward gateway: {upstreams} on http://{args.host}:{args.port}/v1")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


COMMANDS = [
    Command("serve", ServeArguments, serve, "Serve PaCo evaluators over HTTP, behind one port."),
    Command(
        "gateway",
        GatewayArguments,
        gateway,
        "One port in front of several OpenAI-compatible servers, routed by model.",
    ),
]


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m paco_reward.server.cli serve ...``): the serving
    commands only, so it starts without the training extra (a vLLM venv has no trl)."""
    return run_cli("paco-reward", "Serve PaCo evaluators.", COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
