"""The options of each ``paco-*`` command, kept between runs so that ``--help`` and usage
errors need no heavy import.

A command's options come from its config class; some classes (``PacoSFTConfig`` on trl's
``SFTConfig``, ``GRPOConfig`` with the generator registry) import torch and transformers,
seconds before argparse can say anything. The first run of a command builds its options
from the class and stores them here as plain data (:func:`paco_reward.command_line.argument_spec`);
later runs build the parser from that data and import the class only to run the command.

The file is keyed by a fingerprint of what the options are made of: the source files of
the packages (path, size and modification time) and the versions of the libraries whose
dataclasses feed them. An edit or an upgrade is a new key, so a stale entry is never used.
The folder is ``$PACO_CLI_CACHE`` or ``~/.cache/paco-rl/cli``; ``PACO_CLI_CACHE=off`` turns
the cache off. A folder that cannot be written only costs the speed.

Example:
    >>> key = fingerprint(["paco_reward"])
    >>> len(key)
    16
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["cache_folder", "fingerprint", "load_entry", "store_entry"]

# The libraries whose dataclasses (TrainingArguments, SFTConfig) become options.
LIBRARIES = ("transformers", "trl", "diffusers", "peft", "accelerate")
CACHE_ENV = "PACO_CLI_CACHE"
# The folder that holds the packages (this checkout, or site-packages for a wheel).
ROOT = Path(__file__).resolve().parent.parent


def cache_folder() -> Path | None:
    """Where the entries are kept; None when ``$PACO_CLI_CACHE`` is ``off``."""
    where = os.environ.get(CACHE_ENV)
    if where and where.lower() in ("off", "0", "none"):
        return None
    if where:
        return Path(where)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "paco-rl" / "cli"


def fingerprint(packages: Sequence[str]) -> str:
    """A key that changes with any source file of ``packages`` (under :data:`ROOT`) and with
    the version of each of :data:`LIBRARIES`."""
    digest = hashlib.sha256()
    for library in LIBRARIES:
        try:
            digest.update(f"{library}={metadata.version(library)};".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{library}=;".encode())
    for package in sorted(set(packages)):
        folder = _package_folder(package)  # the copy Python imports, wherever it is
        for path in sorted(folder.rglob("*.py")):
            stat = path.stat()
            digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def _package_folder(package: str) -> Path:
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else ROOT / package


def _path(prog: str, key: str) -> Path | None:
    folder = cache_folder()
    return None if folder is None else folder / f"{prog}-{key}.json"


def load_entry(prog: str, key: str) -> dict[str, Any]:
    """What is stored for ``prog`` under ``key`` (``{}`` when nothing is)."""
    path = _path(prog, key)
    if path is None:
        return {}
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return entry if isinstance(entry, dict) else {}


def store_entry(prog: str, key: str, update: dict[str, Any]) -> None:
    """Merge ``update`` (``{"commands": [...]}`` or ``{"arguments": {name: specs}}``) into the
    entry of ``prog`` under ``key``; a folder that cannot be written is skipped."""
    from paco_reward.atomic_io import atomic_write_text

    path = _path(prog, key)
    if path is None:
        return
    entry = load_entry(prog, key)
    for name, value in update.items():
        if isinstance(value, dict) and isinstance(entry.get(name), dict):
            entry[name] = {**entry[name], **value}
        else:
            entry[name] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(entry))
    except OSError:
        pass
