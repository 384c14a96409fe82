"""``GatewayConfig``: limits and timeouts of ``paco-reward gateway``."""

from __future__ import annotations

from dataclasses import dataclass, field

from paco_reward.errors import ConfigError


@dataclass
class GatewayConfig:
    """Settings of the gateway in front of several OpenAI-compatible servers. The body limit
    and the API key are those of ``paco-reward serve``, with the same defaults.

    Example:
        >>> GatewayConfig(upstream_timeout=30).connect_timeout
        10.0
    """

    api_key: str | None = field(
        default=None,
        metadata={
            "help": "when set, every request but /health needs 'Authorization: Bearer <key>'"
        },
    )
    max_body_bytes: int = field(
        default=64 * 2**20, metadata={"help": "largest request body accepted (bytes); else 413"}
    )
    upstream_timeout: float = field(
        default=600.0,
        metadata={
            "help": "seconds an upstream may take to start its answer, and between two parts of "
            "a streamed one; past it 504 (or the stream is cut)"
        },
    )
    connect_timeout: float = field(
        default=10.0,
        metadata={"help": "seconds to connect to an upstream; past it 504 (refused at once: 502)"},
    )
    health_timeout: float = field(
        default=5.0, metadata={"help": "seconds each upstream's /health may take in /health"}
    )

    def __post_init__(self) -> None:
        if self.api_key is not None and not self.api_key:
            raise ConfigError("api_key must be a non-empty string or None (no authentication).")
        if self.max_body_bytes < 1:
            raise ConfigError(f"max_body_bytes must be >= 1; got {self.max_body_bytes}.")
        for name in ("upstream_timeout", "connect_timeout", "health_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds; got {getattr(self, name)}.")
