"""Folders a slow, deterministic job builds once and reuses (pretrained stand-ins, the demo's
world generator and CLIP): keyed by a hash of everything that shapes them, built in
``<folder>.partial`` and renamed into place only when finished, so an interrupted job leaves
nothing that looks done. One process at a time builds a folder (:func:`build_lock`): another
that asks for it meanwhile waits, then reuses the result. :func:`build_once` does all of it.

    >>> def train_into(work: Path) -> dict:                               # doctest: +SKIP
    ...     ...  # write the model into ``work``
    ...     return {"seconds": 12.0}
    >>> key = cache_key({"config": {"steps": 10}, "version": 1})
    >>> build_once(out, "info.json", key, train_into)                     # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from paco_reward.atomic_io import atomic_write_text
from paco_reward.errors import InputError

logger = logging.getLogger(__name__)


def cache_key(payload: dict) -> str:
    """A short, stable hash of a JSON-able ``payload`` (the configuration and versions)."""
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def read_info(output_dir: str | Path, info_file: str) -> dict | None:
    """The info a finished build wrote into ``output_dir`` (None when there is none)."""
    info = Path(output_dir) / info_file
    return json.loads(info.read_text()) if info.is_file() else None


def is_cached(output_dir: str | Path, info_file: str, key: str) -> bool:
    """Whether ``output_dir`` holds a finished build of ``key``."""
    info = read_info(output_dir, info_file)
    return info is not None and info.get("key") == key


def partial_folder(output_dir: str | Path) -> Path:
    """``<output_dir>.partial``, emptied: where a build writes until it is finished."""
    output_dir = Path(output_dir)
    work = output_dir.with_name(output_dir.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def publish_folder(work: Path, output_dir: str | Path, info_file: str, info: dict) -> Path:
    """Write ``info`` (holding the ``"key"``) into the finished ``work`` folder and move it to
    ``output_dir``, replacing what was there; returns ``output_dir``."""
    if "key" not in info:
        raise InputError(f"the info of {output_dir} must hold its cache 'key'.")
    output_dir = Path(output_dir)
    atomic_write_text(work / info_file, json.dumps(info, indent=2))
    shutil.rmtree(output_dir, ignore_errors=True)
    work.rename(output_dir)
    return output_dir


@contextmanager
def build_lock(output_dir: str | Path) -> Iterator[None]:
    """Hold the exclusive lock of building ``output_dir`` (``<output_dir>.lock``).

    A second process that enters it for the same folder waits until the first leaves, and
    then finds the folder built. The operating system releases the lock of a process that
    dies, so a killed build never blocks the next one (which starts over).
    """
    output_dir = Path(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(output_dir.with_name(output_dir.name + ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        logger.warning("%s is being built by another process; waiting for it.", output_dir)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def build_once(
    output_dir: str | Path, info_file: str, key: str, build: Callable[[Path], dict]
) -> Path:
    """``output_dir`` holding a finished build of ``key``: reused when there is one, else
    ``build(work)`` writes it into an empty ``<output_dir>.partial`` and returns its info,
    which is published with the key. One process at a time (:func:`build_lock`)."""
    output_dir = Path(output_dir)
    with build_lock(output_dir):
        if is_cached(output_dir, info_file, key):
            logger.info("Reusing %s (key %s).", output_dir, key)
            return output_dir
        work = partial_folder(output_dir)
        return publish_folder(work, output_dir, info_file, {"key": key, **build(work)})
