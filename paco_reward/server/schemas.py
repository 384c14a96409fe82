"""Request bodies of ``paco-reward serve`` as pydantic models, and the safe JSON reader.

A body is read by :func:`parse_body`: its nesting depth is checked before ``json.loads``
(a body of 100,000 brackets would otherwise recurse through the parser), then it is
validated against the route's model. Validators carry the messages a client sees; the
server's own limits (sizes, lengths) are passed in the validation ``context`` by the route.
Every failure is a :class:`~paco_reward.server.decode.RequestError` (HTTP 4xx) naming the
field, never an exception of the parser.

    >>> parse_body(b'{"model": "m", "images": ["data:..."], "pairs": [[0, 0, "x"]]}', ScoreRequest).pairs
    [[0, 0, 'x']]
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from paco_reward.server.decode import RequestError

__all__ = ["ChatCompletionRequest", "ScoreRequest", "load_json", "parse_body"]

MAX_JSON_DEPTH = 32


def json_depth(raw: bytes) -> int:
    """The deepest ``[`` / ``{`` nesting of a JSON text (brackets inside strings ignored)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def load_json(raw: bytes) -> dict:
    """A request body as a JSON object, its depth checked before it is parsed."""
    if json_depth(raw) > MAX_JSON_DEPTH:
        raise RequestError(f"request body is JSON nested deeper than {MAX_JSON_DEPTH} levels.")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise RequestError(f"request body is not valid JSON ({err}).") from None
    if not isinstance(body, dict):
        raise RequestError(f"request body must be a JSON object; got {type(body).__name__}.")
    return body


def parse_body(raw: bytes | dict, model: type[BaseModel], context: dict | None = None):
    """``model`` from a request body (or its loaded JSON object), or a :class:`RequestError`
    saying what is wrong."""
    body = raw if isinstance(raw, dict) else load_json(raw)
    try:
        return model.model_validate(body, context=context or {})
    except ValidationError as err:
        first = err.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "value_error":
            raise RequestError(message) from None
        raise RequestError(f"'{where}': {message}.") from None


def _int_in(value: Any, name: str, low: int, high: int, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(f"'{name}' must be an integer in [{low}, {high}]; got {value!r}.")
    return value


class ChatCompletionRequest(BaseModel):
    """OpenAI chat completion for one pair: one user message with two ``image_url`` parts,
    then the instruction. Other OpenAI fields (``temperature``, ...) are accepted and
    ignored: a judgement is greedy."""

    model_config = ConfigDict(extra="allow")

    model: Any = None
    messages: Any = None
    stream: bool | None = False
    n: int | None = 1
    logprobs: bool | None = False
    top_logprobs: Any = None
    max_tokens: Any = None
    max_completion_tokens: Any = None
    logprob_token_ids: Any = None

    # filled by the validator
    image_urls: list[Any] = []
    instruction: str = ""
    num_tokens: int = 1
    top_k: int = 0

    @model_validator(mode="after")
    def _check(self, info) -> ChatCompletionRequest:
        limits = info.context or {}
        if self.stream:
            raise RequestError("streaming is not supported; send stream=false.")
        if (self.n or 1) != 1:
            raise RequestError(f"only n=1 is supported; got n={self.n!r}.")
        max_new = limits.get("max_new_tokens", 1024)
        if self.max_completion_tokens is not None:
            self.num_tokens = _int_in(
                self.max_completion_tokens, "max_completion_tokens", 1, max_new, 1
            )
        else:
            self.num_tokens = _int_in(self.max_tokens, "max_tokens", 1, max_new, min(256, max_new))
        self.top_k = _int_in(
            self.top_logprobs, "top_logprobs", 0, limits.get("max_top_logprobs", 20), 0
        )
        ids = self.logprob_token_ids or []
        vocab = limits.get("vocab_size", 2**31)
        if (
            not isinstance(ids, list)
            or len(ids) > 256
            or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in ids
            )
        ):
            raise RequestError(
                f"'logprob_token_ids' must be a list of at most 256 token ids in [0, {vocab})."
            )
        self.logprob_token_ids = ids
        self.image_urls, self.instruction = _pair_message(self.messages)
        return self


def _pair_message(messages: Any) -> tuple[list, str]:
    if (
        not isinstance(messages, list)
        or len(messages) != 1
        or not isinstance(messages[0], dict)
        or messages[0].get("role") != "user"
        or not isinstance(messages[0].get("content"), list)
    ):
        raise RequestError(
            "'messages' must hold exactly one user message whose content is a list: two "
            "image_url parts, then the instruction text (as paco_reward.build_messages)."
        )
    urls, texts = [], []
    for k, part in enumerate(messages[0]["content"]):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "image_url":
            if texts:
                raise RequestError("put both images before the instruction text.")
            image_url = part.get("image_url")
            urls.append(image_url.get("url") if isinstance(image_url, dict) else image_url)
        elif kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise RequestError(
                f"messages[0].content[{k}]: expected an 'image_url' or 'text' part; "
                f"got {str(part)[:80]!r}."
            )
    if len(urls) != 2:
        raise RequestError(
            f"a PaCo evaluator compares exactly 2 images per request; got {len(urls)} "
            "(too many or too few images). Use /v1/score for many pairs."
        )
    if not texts or not "".join(texts).strip():
        raise RequestError("the user message needs the instruction text after the images.")
    return urls, "\n".join(texts)


class ScoreRequest(BaseModel):
    """Native batch scoring: images once, pairs of indices into them (with a prompt each)."""

    model_config = ConfigDict(extra="ignore")

    model: Any = None
    images: Any = None
    pairs: Any = None
    template: str | None = None
    symmetric: bool = False

    @field_validator("images")
    @classmethod
    def _images(cls, value: Any) -> list:
        if not isinstance(value, list) or not value:
            raise RequestError("'images' must be a non-empty list of base64 data URLs.")
        return value

    @model_validator(mode="after")
    def _pairs(self) -> ScoreRequest:
        if not isinstance(self.pairs, list) or not self.pairs:
            raise RequestError("'pairs' must be a non-empty list of [i, j] or [i, j, prompt].")
        n = len(self.images)
        for k, pair in enumerate(self.pairs):
            ok = isinstance(pair, list) and len(pair) in (2, 3)
            ok = ok and all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n for i in pair[:2]
            )
            if not ok or (len(pair) == 3 and not isinstance(pair[2], (str, type(None)))):
                raise RequestError(
                    f"pairs[{k}] must be [i, j] or [i, j, prompt] with i, j indices into "
                    f"'images' (0..{n - 1}); got {str(pair)[:80]!r}."
                )
        return self
