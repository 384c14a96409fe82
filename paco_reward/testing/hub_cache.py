"""Put a model folder into a Hugging Face cache as a hub repository's revision, so a test
loads ``"owner/name"`` (``revision=...``, offline) through the same hub resolution as a user's
machine, with nothing downloaded.

    >>> import tempfile
    >>> from pathlib import Path
    >>> tmp = Path(tempfile.mkdtemp())
    >>> _ = (tmp / "model").mkdir(), (tmp / "model" / "config.json").write_text("{}")
    >>> snapshot = install_in_hub_cache(tmp / "model", "acme/tiny", tmp / "hub", revision="v1")
    >>> (tmp / "hub" / "models--acme--tiny" / "refs" / "v1").read_text() == snapshot.name
    True
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

__all__ = ["install_in_hub_cache"]


def install_in_hub_cache(
    folder: str | Path, repo_id: str, cache: str | Path, revision: str = "main"
) -> Path:
    """Copy ``folder`` into the cache ``cache`` (what ``HF_HUB_CACHE`` or ``cache_dir`` names)
    as ``repo_id`` at the branch or tag ``revision``, under a commit hash of its own.

    Returns:
        The snapshot folder (edit its files to make this revision differ from another).
    """
    repo = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    shutil.copytree(folder, snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return snapshot
