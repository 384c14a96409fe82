"""``paco-data annotate``: rank candidate panels against a reference in the browser.

A small local web app (FastAPI, no front-end build, nothing from a CDN) walks an annotator
through the work folder's ranking instances and appends every ranking to the folder's store,
which the pipeline's next stage (``paco-data pairs``) reads as is.

    >>> from data_pipeline.annotate import AnnotateConfig, serve
    >>> serve(AnnotateConfig("runs/work", annotator="alice"))   # doctest: +SKIP
"""

from data_pipeline.annotate.config import AnnotateConfig
from data_pipeline.annotate.store import AnnotateError, AnnotationStore

__all__ = ["AnnotateConfig", "AnnotateError", "AnnotationStore", "create_app", "serve"]


def __getattr__(name: str):
    # The app needs FastAPI; importing the config or the store does not.
    if name in ("create_app", "serve"):
        from data_pipeline.annotate import app

        return getattr(app, name)
    raise AttributeError(name)
