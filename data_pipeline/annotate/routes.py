"""Routes of the annotation app. Pages and their scripts come from the package; everything
else is JSON under ``/api`` (and the panel images, looked up by instance and panel id).

* ``GET /``, ``GET /progress``: the page (one ``index.html``; ``app.js`` shows the view);
* ``GET /static/app.js``, ``GET /static/style.css``;
* ``GET /api/health``, ``GET /api/config``, ``POST /api/session`` (key -> cookie): no key;
* ``GET /api/next?annotator=A[&after=ID]``: the first instance ``A`` has not ranked;
* ``GET /api/instances/{id}?annotator=A``: one instance's screen;
* ``GET /api/instances/{id}/panels/{panel}``: a panel image (``reference`` or a candidate id);
* ``POST /api/rankings``: store a ranking (:class:`~data_pipeline.annotate.schemas.RankingIn`);
* ``GET /api/progress``: counts and agreement.
"""

from __future__ import annotations

import hashlib
import hmac
import logging

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from data_pipeline.annotate.config import ANNOTATOR_RULE, check_annotator, shown
from data_pipeline.annotate.schemas import RankingIn, SessionIn
from data_pipeline.annotate.store import AnnotateError, AnnotationStore

logger = logging.getLogger(__name__)

COOKIE = "paco_annotate"
KEY_HEADER = "x-annotate-key"

pages = APIRouter()
public = APIRouter(prefix="/api")
api = APIRouter(prefix="/api")


class UnauthorizedError(AnnotateError):
    """A request without the shared key or a valid session cookie (HTTP 401)."""

    status, code = 401, "bad_key"


def session_token(key: str) -> str:
    """The cookie value for a key: a keyed hash, so the cookie is not the key itself."""
    return hmac.new(key.encode(), b"paco-annotate-session", hashlib.sha256).hexdigest()


def _authorized(request: Request) -> bool:
    key = request.app.state.config.key
    if key is None:
        return True
    header = request.headers.get(KEY_HEADER)
    if header is not None and hmac.compare_digest(header.encode(), key.encode()):
        return True
    cookie = request.cookies.get(COOKIE)
    return cookie is not None and hmac.compare_digest(cookie.encode(), session_token(key).encode())


def require_key(request: Request) -> None:
    if not _authorized(request):
        raise UnauthorizedError(
            "This annotation server needs the team's shared key: enter it on the page (or "
            "open the link with ?key=...)."
        )


def _store(request: Request) -> AnnotationStore:
    return request.app.state.store


def _annotator(annotator: str = Query(max_length=64)) -> str:
    try:
        return check_annotator(annotator)
    except ValueError:
        raise AnnotateError(
            f"annotator name {shown(annotator)} is not allowed; use {ANNOTATOR_RULE}."
        ) from None


def _no_store(payload) -> JSONResponse:
    return JSONResponse(payload, headers={"Cache-Control": "no-store"})


# ---------------------------------------------------------------------- pages
def _static(request: Request, name: str) -> Response:
    body, media_type = request.app.state.static[name]
    return Response(body, media_type=media_type, headers={"Cache-Control": "no-cache"})


@pages.get("/", include_in_schema=False)
@pages.get("/progress", include_in_schema=False)
def index(request: Request) -> Response:
    return _static(request, "index.html")


@pages.get("/static/app.js", include_in_schema=False)
def script(request: Request) -> Response:
    return _static(request, "app.js")


@pages.get("/static/style.css", include_in_schema=False)
def style(request: Request) -> Response:
    return _static(request, "style.css")


# ---------------------------------------------------------------------- no key needed
@public.get("/health")
def health() -> dict:
    return {"ok": True}


@public.get("/config")
def config(request: Request) -> JSONResponse:
    cfg = request.app.state.config
    return _no_store(
        {
            "annotator": cfg.annotator,
            "needs_key": cfg.key is not None,
            "authorized": _authorized(request),
            "work_name": cfg.work_dir.resolve().name,
            "annotator_rule": ANNOTATOR_RULE,
        }
    )


@public.post("/session")
def session(body: SessionIn, request: Request) -> JSONResponse:
    key = request.app.state.config.key
    if key is None:
        return _no_store({"authorized": True})
    if not hmac.compare_digest(body.key.encode(), key.encode()):
        logger.warning("wrong shared key from %s", request.client.host if request.client else "?")
        raise UnauthorizedError("That is not this server's shared key; nothing was changed.")
    response = _no_store({"authorized": True})
    response.set_cookie(COOKIE, session_token(key), httponly=True, samesite="strict")
    return response


# ---------------------------------------------------------------------- key needed
@api.get("/next", dependencies=[Depends(require_key)])
def next_instance(
    request: Request,
    annotator: str = Depends(_annotator),
    after: str | None = Query(default=None, max_length=128),
) -> JSONResponse:
    view = _store(request).next_for(annotator, after)
    return _no_store({"done": view is None, "instance": view})


@api.get("/instances/{instance_id}", dependencies=[Depends(require_key)])
def instance(instance_id: str, request: Request, annotator: str = Depends(_annotator)):
    return _no_store(_store(request).view(instance_id, annotator))


@api.get("/instances/{instance_id}/panels/{panel_id}", dependencies=[Depends(require_key)])
def panel(instance_id: str, panel_id: str, request: Request) -> Response:
    path, media_type = _store(request).panel_file(instance_id, panel_id)
    return Response(path.read_bytes(), media_type=media_type, headers={"Cache-Control": "no-cache"})


@api.post("/rankings", status_code=201, dependencies=[Depends(require_key)])
def submit(body: RankingIn, request: Request) -> JSONResponse:
    store = _store(request)
    record = store.submit(body.annotator, body.instance_id, body.ranking, body.seconds)
    following = store.next_for(body.annotator, body.instance_id)
    return JSONResponse(
        {"stored": record, "done": following is None, "next": following},
        status_code=201,
        headers={"Cache-Control": "no-store"},
    )


@api.get("/progress", dependencies=[Depends(require_key)])
def progress(request: Request) -> JSONResponse:
    return _no_store(_store(request).progress())
