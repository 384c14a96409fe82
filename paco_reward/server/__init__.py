"""``paco-reward serve``: an OpenAI-compatible, micro-batched reward server (needs the
``serve`` extra: fastapi, uvicorn).

Imports are lazy, so the ``serve`` command of ``paco_reward.cli`` costs nothing until it
runs (its arguments' :class:`~paco_reward.server.config.ServerConfig` is the one light module).

    >>> from paco_reward.server import ServerConfig, create_app   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ServerConfig": "paco_reward.server.config",
    "create_app": "paco_reward.server.app",
    "ServerProcess": "paco_reward.server.runner",
    "ServerThread": "paco_reward.server.runner",
    "free_port": "paco_reward.server.runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'paco_reward.server' has no attribute {name!r}")
