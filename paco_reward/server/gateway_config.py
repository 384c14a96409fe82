"""``GatewayConfig``: limits and timeouts of ``paco-reward gateway``; ``Upstream``: one server
behind it (light: the command line imports it before parsing)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from paco_reward.errors import ConfigError
from paco_reward.server.config import ConnectionLimits

__all__ = ["GatewayConfig", "Upstream"]

# The suffix of a command-line upstream that names the environment variable of its key.
KEY_ENV_SUFFIX = ",key_env="


@dataclass
class GatewayConfig(ConnectionLimits):
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
        metadata={
            "help": "seconds to connect to an upstream; past it 504 (refused at once: 502); "
            "also the wait for a free pooled connection, past it 503"
        },
    )
    health_timeout: float = field(
        default=5.0, metadata={"help": "seconds each upstream's /health may take in /health"}
    )
    max_upstream_connections: int = field(
        default=256,
        metadata={
            "help": "connections open to the upstreams at once, all together; a request that "
            "finds none free within connect_timeout is a 503"
        },
    )
    forward_authorization: bool = field(
        default=False,
        metadata={
            "help": "pass the client's Authorization header on to upstreams without a key of "
            "their own (off: the client's key is the gateway's and stays here)"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.api_key is not None and not self.api_key:
            raise ConfigError("api_key must be a non-empty string or None (no authentication).")
        if self.max_body_bytes < 1:
            raise ConfigError(f"max_body_bytes must be >= 1; got {self.max_body_bytes}.")
        if self.max_upstream_connections < 1:
            raise ConfigError(
                f"max_upstream_connections must be >= 1; got {self.max_upstream_connections}."
            )
        for name in ("upstream_timeout", "connect_timeout", "health_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds; got {getattr(self, name)}.")


@dataclass(frozen=True)
class Upstream:
    """One server behind the gateway: the model name clients ask for, its root URL and the
    key it wants (``None``: it gets no ``Authorization`` header, unless the gateway forwards
    the client's).

    Example:
        >>> Upstream.parse("judge", "http://127.0.0.1:8001/v1", api_key="k").root
        'http://127.0.0.1:8001'
    """

    name: str
    root: str  # without the trailing /v1: vLLM serves /tokenize at the server root
    api_key: str | None = field(default=None, repr=False)  # never in logs or reprs

    @classmethod
    def parse(cls, name: object, url: object, api_key: str | None = None) -> Upstream:
        if isinstance(url, Upstream):
            return url
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"an upstream's model name must be a non-empty string; got {name!r}.")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"upstream {name!r}: {url!r} is not an http(s) URL; give the server's API root, "
                "e.g. http://127.0.0.1:8001/v1."
            )
        if api_key is not None and not api_key:
            raise ConfigError(f"upstream {name!r}: its api_key must be a non-empty string or None.")
        return cls(name, url.rstrip("/").removesuffix("/v1"), api_key)

    @classmethod
    def from_argument(cls, item: str, environ: Mapping[str, str] | None = None) -> Upstream:
        """An upstream from the command line's ``NAME=URL`` or ``NAME=URL,key_env=VARIABLE``
        (the upstream's own key, read from the environment variable ``VARIABLE``).

        Raises:
            ConfigError: not that form, or ``VARIABLE`` unset or empty.

        Example:
            >>> up = Upstream.from_argument("a=http://h:1/v1,key_env=A_KEY", {"A_KEY": "s"})
            >>> up.name, up.root, up.api_key
            ('a', 'http://h:1', 's')
        """
        environ = os.environ if environ is None else environ
        name, sep, url = item.partition("=")
        if not sep or not name.strip() or not url.strip():
            raise ConfigError(
                f"upstream {item!r} is not NAME=URL; e.g. PaCo-Reward-7B=http://127.0.0.1:8001/v1 "
                "(or NAME=URL,key_env=VARIABLE for an upstream with its own key)."
            )
        api_key = None
        url, sep, variable = (
            url.rpartition(KEY_ENV_SUFFIX) if KEY_ENV_SUFFIX in url else (url, "", "")
        )
        if sep:
            if not variable.strip():
                raise ConfigError(f"upstream {item!r}: key_env= names no environment variable.")
            api_key = environ.get(variable.strip())
            if not api_key:
                raise ConfigError(
                    f"upstream {name!r}: the environment variable {variable.strip()!r} "
                    "(key_env=) is unset or empty; export the upstream's key in it."
                )
        return cls.parse(name, url, api_key)

    @property
    def api_root(self) -> str:
        return self.root + "/v1"
