"""``ServerConfig``: limits and batching of ``paco-reward serve`` (every served model's)."""

from __future__ import annotations

from dataclasses import dataclass, field

from paco_reward.errors import ConfigError


@dataclass
class ServerConfig:
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
