"""The FastAPI app of ``paco-data annotate`` and the function that serves it.

Errors are JSON ``{"error": {"message", "code"}}`` with a 4xx status; the message is meant
for the page and never holds an exception's text or a path on the server (those go to the
log). A refused request changes nothing stored.

    >>> app = create_app(AnnotateConfig("runs/work"))                 # doctest: +SKIP
    >>> serve(AnnotateConfig("runs/work", annotator="alice"))         # doctest: +SKIP
"""

from __future__ import annotations

import logging
from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from data_pipeline.annotate.config import AnnotateConfig
from data_pipeline.annotate.routes import api, pages, public
from data_pipeline.annotate.store import AnnotateError, AnnotationStore
from paco_reward.launch import is_loopback
from paco_reward.server.limits import BodyLimitMiddleware, request_deadline_protocol

logger = logging.getLogger(__name__)

STATIC_FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
# The page loads only its own script, style and images; nothing inline, nothing remote.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
# A ranking is a few hundred bytes. A body declared larger is refused before it is read, and
# one that turns out larger (chunked, whatever its Content-Length says) once this many bytes
# have arrived: the server holds no more than this of a request.
MAX_BODY_BYTES = 64 * 1024


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "code": code}},
        status_code=status,
        headers={"Cache-Control": "no-store"},
    )


def _validation_message(err: RequestValidationError) -> str:
    parts = []
    for e in err.errors()[:3]:
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
        # pydantic's own text says what was expected; the offending input is not echoed.
        message = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "Malformed request, nothing was stored (" + "; ".join(parts) + ")."


def _too_large() -> JSONResponse:
    return _error(
        413,
        f"The request body is larger than the {MAX_BODY_BYTES} bytes this server accepts "
        "(a ranking takes a few hundred); nothing was stored.",
        "too_large",
    )


def load_static() -> dict[str, tuple[bytes, str]]:
    """The page's files, read once from the installed package (never from a request path)."""
    root = files("data_pipeline.annotate") / "static"
    return {name: ((root / name).read_bytes(), media) for name, media in STATIC_FILES.items()}


def create_app(config: AnnotateConfig, store: AnnotationStore | None = None) -> FastAPI:
    """The annotation app for ``config.work_dir``.

    Args:
        config: work folder, default annotator and the optional shared key.
        store: the folder's :class:`AnnotationStore` (default: a new one).
    """
    app = FastAPI(title="paco-data annotate", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.config = config
    app.state.store = store or AnnotationStore(config.work_dir)
    app.state.static = load_static()

    @app.exception_handler(AnnotateError)
    async def _annotate_error(request: Request, err: AnnotateError) -> JSONResponse:
        logger.info("%s %s -> %d %s", request.method, request.url.path, err.status, err)
        return _error(err.status, str(err), err.code)

    @app.exception_handler(RequestValidationError)
    async def _bad_body(request: Request, err: RequestValidationError) -> JSONResponse:
        logger.info("%s %s -> 422 %s", request.method, request.url.path, err.errors()[:3])
        return _error(422, _validation_message(err), "malformed_request")

    @app.exception_handler(HTTPException)
    async def _http(request: Request, err: HTTPException) -> JSONResponse:
        message = "No such page or resource." if err.status_code == 404 else str(err.detail)
        return _error(err.status_code, message, "not_found" if err.status_code == 404 else "http")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, err: Exception) -> JSONResponse:
        logger.exception("%s %s failed", request.method, request.url.path)
        return _error(500, "The server failed on this request; its log says why.", "internal")

    loopback_only = is_loopback(config.host)

    @app.middleware("http")
    async def _guard(request: Request, call_next):
        # Bound to this machine, only this machine's names may address the server: a web
        # page whose domain is re-pointed at 127.0.0.1 (DNS rebinding) cannot read panels.
        host = (request.url.hostname or "").strip("[]").lower()
        if loopback_only and host not in LOOPBACK_NAMES:
            logger.warning("refused request for host %r", request.headers.get("host"))
            response = _error(400, "This server answers requests to 127.0.0.1 only.", "bad_host")
        # JSON only: a form or text/plain POST from another site (no CORS preflight) cannot
        # store a ranking in someone's name.
        elif request.method == "POST" and not request.headers.get("content-type", "").startswith(
            "application/json"
        ):
            response = _error(
                415, "Send JSON (Content-Type: application/json); nothing was stored.", "not_json"
            )
        else:
            response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    # Outside the guard (the middleware added last runs first): the body, at most
    # MAX_BODY_BYTES of it, is read before the app sees the request, and a client gone
    # half-way through its body ends the request here, with no answer to give.
    app.add_middleware(BodyLimitMiddleware, max_bytes=MAX_BODY_BYTES, too_large=_too_large)
    app.include_router(pages)
    app.include_router(public)
    app.include_router(api)
    return app


def serve(config: AnnotateConfig) -> None:
    """Run the app with uvicorn until interrupted. Every stored ranking is on disk
    (fsync'ed) before its answer is sent, so stopping the server at any time loses nothing.
    A connection whose request has not arrived whole ``config.request_timeout`` seconds after
    it began is closed."""
    import uvicorn

    store = AnnotationStore(config.work_dir)
    try:
        n = len(store.instances())
        logger.info("annotate: %d instances in %s", n, config.work_dir)
    except AnnotateError as err:
        # Served anyway: the page shows the message, and works once the stage is run.
        logger.warning("annotate: %s", err)
    uvicorn.run(
        create_app(config, store),
        host=config.host,
        port=config.port,
        log_level=config.log_level,
        access_log=config.log_level == "debug",
        http=request_deadline_protocol(config.request_timeout),
    )
