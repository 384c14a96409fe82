"""``ServerConfig``: limits and batching of ``paco-reward serve`` (every served model's);
``ConnectionLimits``: the connection settings it shares with ``paco-reward gateway``."""

from __future__ import annotations

from dataclasses import dataclass, field

from paco_reward.errors import ConfigError


@dataclass(kw_only=True)  # after a subclass's positional fields (ServerConfig("name"))
class ConnectionLimits:
    """How long a client may take to send a request, how many connections are served at
    once, how long a stop (SIGTERM, Ctrl-C) waits for requests in flight, and whether each
    request is logged: the settings
    both ``paco-reward serve`` and ``paco-reward gateway`` pass to uvicorn
    (:func:`paco_reward.server.limits.uvicorn_options`).

    Example:
        >>> ConnectionLimits(request_timeout=5).max_connections
        1024
    """

    request_timeout: float = field(
        default=30.0,
        metadata={
            "help": "seconds a client has to send a whole request (head and body) from when it "
            "connects or its previous request ends; past it the connection is closed (a slow "
            "or stalled client holds no socket for longer)"
        },
    )
    max_connections: int = field(
        default=1024,
        metadata={
            "help": "connections (and requests in flight) served at once; past it new requests "
            "get 503 at once (clients retry)"
        },
    )
    shutdown_timeout: float = field(
        default=10.0,
        metadata={
            "help": "seconds a stop (SIGTERM, Ctrl-C) waits for requests in flight before "
            "cancelling them and closing every connection"
        },
    )

    access_log: bool = field(
        default=False,
        metadata={
            "help": "log one line per request on stdout (client, request line, status: "
            "uvicorn's access log); off by default"
        },
    )

    def __post_init__(self) -> None:
        for name in ("request_timeout", "shutdown_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds; got {getattr(self, name)}.")
        if self.max_connections < 1:
            raise ConfigError(f"max_connections must be >= 1; got {self.max_connections}.")


@dataclass
class ServerConfig(ConnectionLimits):
    """Settings of the reward server. The defaults are the safe ones (loopback only,
    bounded bodies and images).

    Example:
        >>> ServerConfig(served_model_name="tiny", max_batch_size=16).max_wait_ms
        5.0
    """

    served_model_name: str | None = field(
        default=None,
        metadata={
            "help": "name of the one served model in /v1/models and in requests (default: its "
            "folder's name); several models are named by create_app's mapping"
        },
    )
    api_key: str | None = field(
        default=None,
        metadata={"help": "when set, every /v1 request needs 'Authorization: Bearer <key>'"},
    )
    max_batch_size: int = field(
        default=32, metadata={"help": "most pairs one micro-batch (one forward pass) scores"}
    )
    max_wait_ms: float = field(
        default=5.0,
        metadata={"help": "longest a request waits for others to join its micro-batch (ms)"},
    )
    max_queue: int = field(
        default=4096,
        metadata={
            "help": "pairs waiting for one model beyond this answer 503 (overloaded; clients retry)"
        },
    )
    max_body_bytes: int = field(
        default=64 * 2**20, metadata={"help": "largest request body accepted (bytes); else 413"}
    )
    max_image_bytes: int = field(
        default=20 * 2**20, metadata={"help": "largest encoded image accepted (bytes)"}
    )
    max_image_pixels: int = field(
        default=4096 * 4096,
        metadata={"help": "largest width*height accepted, checked on the header before decoding"},
    )
    max_images: int = field(default=64, metadata={"help": "most images in one /v1/score request"})
    max_pairs: int = field(default=256, metadata={"help": "most pairs in one /v1/score request"})
    max_instruction_chars: int = field(
        default=16384, metadata={"help": "longest instruction text (characters) accepted"}
    )
    max_new_tokens: int = field(
        default=1024, metadata={"help": "largest max_tokens a chat request may ask for"}
    )
    max_top_logprobs: int = field(
        default=20, metadata={"help": "largest top_logprobs a chat request may ask for"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.served_model_name is not None and (
            not isinstance(self.served_model_name, str) or not self.served_model_name.strip()
        ):
            raise ConfigError(
                f"served_model_name must be a non-empty string; got {self.served_model_name!r}."
            )
        if self.api_key is not None and not self.api_key:
            raise ConfigError("api_key must be a non-empty string or None (no authentication).")
        for name in (
            "max_batch_size",
            "max_queue",
            "max_body_bytes",
            "max_image_bytes",
            "max_image_pixels",
            "max_images",
            "max_pairs",
            "max_instruction_chars",
            "max_new_tokens",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1; got {getattr(self, name)}.")
        if self.max_wait_ms < 0:
            raise ConfigError(f"max_wait_ms must be >= 0; got {self.max_wait_ms}.")
        if not 0 <= self.max_top_logprobs:
            raise ConfigError(f"max_top_logprobs must be >= 0; got {self.max_top_logprobs}.")
