"""What the routes of ``paco-reward serve`` share: the served models, each with its own
micro-batcher, and the server's settings.

A request's ``model`` picks one :class:`ServedModel`; an unknown name is a 404 listing the
served names. The limits and the API key are the server's, so they hold for every model.

    >>> state = ServerState.build({"judge": backend}, ServerConfig())   # doctest: +SKIP
    >>> state.model("judge").batcher                                     # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from starlette.requests import Request

from paco_reward.images import resize_for_model
from paco_reward.server.batcher import MicroBatcher
from paco_reward.server.common import check_api_key, served_entry
from paco_reward.server.config import ServerConfig
from paco_reward.server.decode import RequestError, decode_data_url
from paco_reward.server.schemas import load_json
from paco_reward.yes_no import YesNoTokens

__all__ = ["ServedModel", "ServerState"]


@dataclass
class ServedModel:
    """One evaluator behind the server: its backend, its micro-batcher (requests for this
    model are batched together, never with another model's) and its yes/no token ids."""

    name: str
    backend: object
    batcher: MicroBatcher
    created: int
    exact: YesNoTokens
    canonical: YesNoTokens

    @classmethod
    def build(cls, name: str, backend, config: ServerConfig) -> ServedModel:
        batcher = MicroBatcher(
            backend,
            max_batch_size=config.max_batch_size,
            max_wait_ms=config.max_wait_ms,
            max_queue=config.max_queue,
        )
        tokenizer = backend.tokenizer
        return cls(
            name=name,
            backend=backend,
            batcher=batcher,
            created=int(time.time()),
            exact=YesNoTokens.from_tokenizer(tokenizer, canonical=False),
            canonical=YesNoTokens.from_tokenizer(tokenizer, canonical=True),
        )

    def entry(self, config: ServerConfig) -> dict:
        """Its ``/v1/models`` entry, with the ``paco`` advertisement the remote client reads
        (yes/no token ids, pixel budget, batch size)."""
        return {
            "id": self.name,
            "object": "model",
            "created": self.created,
            "owned_by": "paco-rl",
            "paco": {
                "yes_no_token_ids": {
                    "canonical": [*self.canonical.yes, *self.canonical.no],
                    "exact": [*self.exact.yes, *self.exact.no],
                },
                # null: the model's processor resizes (Gemma-3, ...); send the images as they are
                "image_policy": asdict(policy) if (policy := self.backend.image_policy) else None,
                "max_batch_size": config.max_batch_size,
            },
        }

    def health(self) -> dict:
        return {"queued_pairs": self.batcher.queued_pairs, "batching": self.batcher.stats.as_dict()}


@dataclass
class ServerState:
    """The server's settings and its models by served name."""

    config: ServerConfig
    models: dict[str, ServedModel]

    @classmethod
    def build(cls, backends: Mapping[str, object], config: ServerConfig) -> ServerState:
        models = {name: ServedModel.build(name, b, config) for name, b in backends.items()}
        return cls(config=config, models=models)

    # ------------------------------------------------------------------ request helpers
    def authorize(self, request: Request) -> None:
        check_api_key(request, self.config.api_key)

    def model(self, name: object) -> ServedModel:
        """The model a request names, or a 404 listing the served names."""
        return served_entry(self.models, name)

    async def read(self, request: Request) -> tuple[ServedModel, dict]:
        """Authorize, read the JSON body and pick the model it names."""
        self.authorize(request)
        body = load_json(await request.body())
        return self.model(body.get("model")), body

    def decode_images(self, served: ServedModel, urls: list, where: str) -> list:
        config = self.config
        images = []
        for k, url in enumerate(urls):
            name = f"{where}[{k}]"
            image = decode_data_url(url, name, config.max_image_bytes, config.max_image_pixels)
            images.append(resize_for_model(image, served.backend.image_policy, name))
        return images

    def check_instruction(self, text: str, where: str) -> None:
        limit = self.config.max_instruction_chars
        if len(text) > limit:
            raise RequestError(
                f"{where} is {len(text)} characters, above the server's limit of {limit}.",
                status=413,
                code="instruction_too_long",
            )

    def check_count(self, what: str, count: int, limit: int) -> None:
        if count > limit:
            raise RequestError(
                f"too many {what}: {count} > the server's limit of {limit}; split the request.",
                status=413,
                code=f"too_many_{what}",
            )
