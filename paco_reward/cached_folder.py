"""Folders a slow, deterministic job builds once and reuses (pretrained stand-ins, the demo's
world generator and CLIP): keyed by a hash of everything that shapes them, built in
``<folder>.partial`` and renamed into place only when finished, so an interrupted job leaves
nothing that looks done.

    >>> key = cache_key({"config": {"steps": 10}, "version": 1})
    >>> if not is_cached(out, "info.json", key):                         # doctest: +SKIP
    ...     work = partial_folder(out)
    ...     train_into(work)
    ...     publish_folder(work, out, "info.json", {"key": key, "seconds": 12.0})
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from paco_reward.atomic_io import atomic_write_text


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
        raise ValueError(f"the info of {output_dir} must hold its cache 'key'.")
    output_dir = Path(output_dir)
    atomic_write_text(work / info_file, json.dumps(info, indent=2))
    shutil.rmtree(output_dir, ignore_errors=True)
    work.rename(output_dir)
    return output_dir
