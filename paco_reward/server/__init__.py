"""``paco-reward serve``: an OpenAI-compatible, micro-batched reward server (needs the
``serve`` extra: fastapi, uvicorn).

    >>> from paco_reward.server import ServerConfig, create_app   # doctest: +SKIP
"""

from paco_reward.server.app import create_app
from paco_reward.server.config import ServerConfig
from paco_reward.server.runner import ServerProcess, ServerThread, free_port

__all__ = ["ServerConfig", "ServerProcess", "ServerThread", "create_app", "free_port"]
