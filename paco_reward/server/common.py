"""What ``paco-reward serve`` and ``paco-reward gateway`` share at the HTTP level: OpenAI's
error body, request ids, the body limit, the API key check, the unknown-model answer and the
answer to an internal error.

    >>> error_response(404, "no such model", "model_not_found").status_code
    404
"""

from __future__ import annotations

import hmac
import logging
import uuid
from collections.abc import Mapping
from typing import TypeVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse

from paco_reward.server.decode import RequestError
from paco_reward.server.limits import BodyLimitMiddleware

_Entry = TypeVar("_Entry")

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-request-id"

# The body's "type" of each status (vLLM's names where it has them).
ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    502: "BadGatewayError",
    504: "GatewayTimeoutError",
}


def error_response(
    status: int, message: str, code: str, headers: dict | None = None
) -> JSONResponse:
    """OpenAI's error answer: ``{"error": {"message", "type", "code"}}`` with ``status``."""
    kind = ERROR_TYPES.get(status, "InvalidRequestError" if status < 500 else "ServerError")
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": code}}, status, headers=headers
    )


def request_id_of(request: Request) -> str:
    return request.scope.get("state", {}).get("request_id", "-")


class RequestIdMiddleware:
    """Pure ASGI middleware: gives every request an id (the client's ``X-Request-ID`` when
    it is short and plain, else a new one), kept in ``scope["state"]`` for the logs and
    returned in the response's ``X-Request-ID`` header."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
        plain = given and len(given) <= 64 and all(c.isalnum() or c in "-_." for c in given)
        request_id = given if plain else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER.encode(), request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_id)


def check_api_key(request: Request, api_key: str | None) -> None:
    """Raise a 401 :class:`RequestError` unless ``api_key`` is None or the request sends
    ``Authorization: Bearer <api_key>`` (compared in constant time)."""
    if api_key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode(), api_key.encode()
    )
    if not ok:
        raise RequestError(
            "missing or wrong API key: send 'Authorization: Bearer <key>'",
            status=401,
            code="invalid_api_key",
        )


def served_entry(served: Mapping[str, _Entry], name: object, where: str = "server") -> _Entry:
    """What ``served`` holds for the ``model`` a request names, or the 404 that lists the
    served names."""
    if name is None:  # not "model `None` does not exist": the field is what is missing
        raise RequestError(
            f"the request body has no 'model' field; add \"model\": one of {sorted(served)} "
            "(see /v1/models).",
            status=400,
            code="model_missing",
        )
    if not isinstance(name, str):
        raise RequestError(
            f"'model' must be a string naming a served model, one of {sorted(served)}; got "
            f"{type(name).__name__} {name!r}.",
            status=400,
            code="invalid_model",
        )
    if name not in served:
        raise RequestError(
            f"The model `{name}` does not exist. This {where} serves {sorted(served)} "
            "(see /v1/models).",
            status=404,
            code="model_not_found",
        )
    return served[name]


def add_request_middleware(app: Starlette, max_body_bytes: int, who: str) -> None:
    """The body limit (413 in OpenAI's body, naming ``who`` refuses) inside the request ids."""
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=max_body_bytes,
        too_large=lambda: error_response(
            413,
            f"request body exceeds the {who}'s limit of {max_body_bytes} bytes",
            "body_too_large",
        ),
    )
    app.add_middleware(RequestIdMiddleware)


async def request_error(request: Request, err: RequestError) -> JSONResponse:
    """Exception handler: a refused request (or any error with a ``status`` and a ``code``),
    answered with what was wrong with it."""
    return error_response(err.status, str(err), err.code)


async def internal_error(request: Request, err: Exception) -> JSONResponse:
    """Exception handler: an internal failure is logged with the request id and answered
    without its text (no paths, no exception details)."""
    request_id = request_id_of(request)
    logger.error(
        "internal error on %s (request %s): %s: %s",
        request.url.path,
        request_id,
        type(err).__name__,
        err,
        exc_info=(type(err), err, err.__traceback__),
    )
    # Starlette answers this outside the middleware stack: add the id header here.
    return error_response(
        500,
        f"internal server error (request id {request_id})",
        "internal_error",
        headers={REQUEST_ID_HEADER: request_id},
    )
