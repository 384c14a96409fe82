"""``paco-reward serve MODEL``: the OpenAI-compatible reward server.

    paco-reward serve ./PaCo-Reward-7B --port 8000
    paco-reward serve Qwen/Qwen2.5-VL-7B-Instruct --adapter ./lora --api_key "$KEY"
    paco-reward serve ./model --max_batch_size 64 --max_body_bytes 134217728

Every :class:`~paco_reward.server.config.ServerConfig` limit is a flag.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import dataclass

from paco_reward.command_line import Command, config_field
from paco_reward.server.config import ServerConfig

logger = logging.getLogger(__name__)

API_KEY_ENV = "PACO_REWARD_API_KEY"


@dataclass(kw_only=True)
class ServeArguments(ServerConfig):
    """Serve a PaCo evaluator over an OpenAI-compatible HTTP API (loopback by default)."""

    model: str = config_field(
        help="Model folder or hub id (merged PaCo-Reward or a base model).", positional=True
    )
    adapter: str | None = config_field(None, help="PEFT LoRA adapter folder/id on top of MODEL.")
    host: str = config_field("127.0.0.1", help="Bind address (default: loopback only).")
    port: int = config_field(8000, help="TCP port.")
    device: str | None = config_field(None, help="torch device (default: cuda if available).")
    dtype: str | None = config_field(
        None, help="torch dtype, e.g. bfloat16 (default: bf16 on GPU)."
    )

    def __post_init__(self) -> None:
        if self.api_key is None and os.environ.get(API_KEY_ENV):
            self.api_key = os.environ[API_KEY_ENV]
        super().__post_init__()

    def server_config(self) -> ServerConfig:
        """The server's own settings (without the model-loading and binding arguments)."""
        names = ServerConfig.__dataclass_fields__
        return ServerConfig(**{name: getattr(self, name) for name in names})


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def serve(args: ServeArguments) -> int:
    import uvicorn
    from PIL import Image

    from paco_reward.server.app import create_app
    from paco_reward.transformers_backend import TransformersBackend

    if not _is_loopback(args.host) and not args.api_key:
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
        args.model,
        adapter=args.adapter,
        device=args.device,
        dtype=args.dtype,
        batch_size=config.max_batch_size,
    )
    app = create_app(backend, config)
    name = config.served_model_name or backend.name
    print(f"paco-reward serve: model {name!r} on http://{args.host}:{args.port}/v1")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


COMMANDS = [Command("serve", ServeArguments, serve, "Serve a PaCo evaluator over HTTP.")]


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m paco_reward.server.cli serve ...``)."""
    from paco_reward.cli import main as paco_reward_main

    return paco_reward_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
