"""``paco-reward serve``: an OpenAI-compatible, micro-batched reward server for one model or
several behind one port, and ``paco-reward gateway``: one port in front of several
OpenAI-compatible servers (needs the ``serve`` extra: fastapi, uvicorn, httpx).

Imports are lazy, so the ``serve`` and ``gateway`` commands of ``paco_reward.cli`` cost nothing
until they run (their arguments' :class:`~paco_reward.server.config.ServerConfig` and
:class:`~paco_reward.server.gateway_config.GatewayConfig` are the light modules).

    >>> from paco_reward.server import ServerConfig, create_app   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GatewayConfig": "paco_reward.server.gateway_config",
    "ServerConfig": "paco_reward.server.config",
    "create_app": "paco_reward.server.app",
    "create_gateway": "paco_reward.server.gateway",
    "ServerProcess": "paco_reward.server.runner",
    "ServerThread": "paco_reward.server.runner",
    "free_port": "paco_reward.server.runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'paco_reward.server' has no attribute {name!r}")
