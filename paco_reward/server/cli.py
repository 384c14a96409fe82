"""``paco-reward serve MODEL``: the OpenAI-compatible reward server.

paco-reward serve ./PaCo-Reward-7B --port 8000
paco-reward serve Qwen/Qwen2.5-VL-7B-Instruct --adapter ./lora --api-key "$KEY"
python -m paco_reward.server.cli serve ./model     # without the paco-reward entry point
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os

logger = logging.getLogger(__name__)

API_KEY_ENV = "PACO_REWARD_API_KEY"


def register(subparsers) -> None:
    """Add the ``serve`` subcommand to ``paco-reward``."""
    parser = subparsers.add_parser(
        "serve", help="serve a PaCo evaluator over an OpenAI-compatible HTTP API"
    )
    parser.add_argument("model", help="model folder or hub id (merged PaCo-Reward or a base model)")
    parser.add_argument("--adapter", help="PEFT LoRA adapter folder/id on top of MODEL")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"require 'Authorization: Bearer KEY' on /v1 routes (default: ${API_KEY_ENV})",
    )
    parser.add_argument("--served-model-name", help="model name clients use (default: folder name)")
    parser.add_argument("--max-batch-size", type=int, default=32, help="pairs per micro-batch")
    parser.add_argument(
        "--max-wait-ms", type=float, default=5.0, help="longest wait for a micro-batch to fill"
    )
    parser.add_argument("--max-body-mb", type=float, default=64.0, help="request body limit")
    parser.add_argument(
        "--max-image-pixels", type=int, default=4096 * 4096, help="per-image width*height limit"
    )
    parser.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--dtype", help="torch dtype, e.g. bfloat16 (default: bf16 on GPU)")
    parser.set_defaults(func=run_serve)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn
    from PIL import Image

    from paco_reward.local_backend import LocalBackend
    from paco_reward.server.app import create_app
    from paco_reward.server.config import ServerConfig

    if not _is_loopback(args.host) and not args.api_key:
        logger.warning(
            "Serving on %s without --api-key: anyone who can reach this address can use the "
            "model. Set --api-key (or $%s) or bind 127.0.0.1.",
            args.host,
            API_KEY_ENV,
        )
    config = ServerConfig(
        model_name="pending",
        api_key=args.api_key or None,
        max_batch_size=args.max_batch_size,
        max_wait_ms=args.max_wait_ms,
        max_body_bytes=int(args.max_body_mb * 2**20),
        max_image_pixels=args.max_image_pixels,
    )
    # PIL's own bomb guard (process-wide; this process only serves): never decode more
    # than our limit, even on a path that skipped the header check.
    Image.MAX_IMAGE_PIXELS = config.max_image_pixels
    backend = LocalBackend.from_pretrained(
        args.model,
        adapter=args.adapter,
        device=args.device,
        dtype=args.dtype,
        batch_size=args.max_batch_size,
    )
    config.model_name = args.served_model_name or backend.name
    app = create_app(backend, config)
    print(f"paco-reward serve: model {config.model_name!r} on http://{args.host}:{args.port}/v1")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m paco_reward.server.cli serve ...``)."""
    parser = argparse.ArgumentParser(prog="paco-reward")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
