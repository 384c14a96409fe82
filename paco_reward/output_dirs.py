"""A run's output folder, treated as transformers' Trainer scripts treat it.

A folder that holds another run's checkpoints or metrics is refused: training into it would
rotate that run's checkpoints away (or the new run's, when the old names sort higher), make
``resume_from_checkpoint: latest`` resume the other run, and append both runs' rows to one
``metrics.jsonl``. A run may use such a folder when it resumes (``resume_from_checkpoint``),
when it overwrites (``overwrite_output_dir: true``: the earlier run's outputs are deleted
first), or when the folder's saved config is this run's own (the same recipe and overrides,
started again). The GRPO trainer, the SFT trainer and ``paco-data demo`` share this check.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> check_output_dir(folder, {"seed": 0}, markers=["metrics.jsonl"], outputs=["metrics.jsonl"])
    'new'
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from paco_reward.errors import OutputDirInUseError

logger = logging.getLogger(__name__)

__all__ = ["RUN_INDEPENDENT_FIELDS", "check_config_output_dir", "check_output_dir", "same_run"]

# Fields that say how a run is started, not what it trains: two configs that differ only here
# are the same run (``output_dir`` may be written relative or absolute).
RUN_INDEPENDENT_FIELDS = (
    "paco_rl_version",
    "output_dir",
    "resume_from_checkpoint",
    "overwrite_output_dir",
)


def same_run(saved: Mapping[str, Any] | None, config: Mapping[str, Any]) -> bool:
    """Whether a folder's saved config ``saved`` describes the run ``config`` describes
    (both as plain YAML values; :data:`RUN_INDEPENDENT_FIELDS` not compared)."""
    if not isinstance(saved, Mapping):
        return False

    def keep(values: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in values.items() if k not in RUN_INDEPENDENT_FIELDS}

    return keep(saved) == keep(config)


def check_output_dir(
    output_dir: str | Path,
    config: Mapping[str, Any],
    *,
    markers: Sequence[str],
    outputs: Sequence[str],
    saved_config: Mapping[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    what: str = "run",
) -> str:
    """Refuse ``output_dir`` when it holds another run's outputs; returns how it is used.

    Args:
        output_dir: the run's folder (need not exist).
        config: this run's config as plain YAML values.
        markers: glob patterns (relative to ``output_dir``) of what marks a run's outputs
            (its checkpoints, its metrics file).
        outputs: glob patterns of what ``overwrite`` deletes (the files and folders the run
            writes; anything else in the folder is left alone).
        saved_config: the config the folder's earlier run saved, or ``None``.
        resume: this run resumes from a checkpoint (the folder is its own).
        overwrite: delete the earlier run's ``outputs`` and start fresh.
        what: the run's kind, for the message (``"GRPO run"``).

    Returns:
        ``"new"`` (nothing there), ``"resume"``, ``"same"`` (the folder's saved config is this
        run's) or ``"overwritten"``.

    Raises:
        OutputDirInUseError: another run's outputs are there and none of the above applies.
    """
    folder = Path(output_dir)
    found = sorted({p.name for pattern in markers for p in folder.glob(pattern)})
    if not found:
        return "new"
    if resume:
        return "resume"
    if overwrite:
        for pattern in outputs:
            for path in folder.glob(pattern):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
        logger.warning("overwrite_output_dir: deleted the earlier run's outputs in %s.", folder)
        return "overwritten"
    if same_run(saved_config, config):
        return "same"
    shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
    why = "its saved config differs" if saved_config is not None else "it has no saved config"
    raise OutputDirInUseError(
        f"output_dir {str(folder)!r} holds another run's outputs ({shown}; {why}). A {what} "
        "into it would rotate that run's checkpoints away and mix both runs' metrics. "
        "Resume it with --resume_from_checkpoint, start over with --overwrite_output_dir true "
        "(deletes them), or pass another --output_dir."
    )


def check_config_output_dir(
    config,
    *,
    markers: Sequence[str],
    outputs: Sequence[str],
    what: str,
    is_main_process: bool = True,
) -> str:
    """:func:`check_output_dir` for a trainer's config (a
    :class:`~paco_reward.yaml_config.YamlConfig` with ``output_dir``,
    ``resume_from_checkpoint`` and ``overwrite_output_dir``): the folder's saved config is its
    ``training_config.yaml``. With ``overwrite_output_dir`` only the main process deletes;
    the others return ``"overwritten"`` and wait for it."""
    import yaml

    from paco_reward.yaml_config import SAVED_CONFIG

    if config.overwrite_output_dir and not is_main_process:
        return "overwritten"
    folder = Path(config.output_dir)
    saved = folder / SAVED_CONFIG
    return check_output_dir(
        folder,
        config.to_plain(),
        markers=markers,
        outputs=[*outputs, SAVED_CONFIG],
        saved_config=yaml.safe_load(saved.read_text()) if saved.is_file() else None,
        resume=bool(config.resume_from_checkpoint),
        overwrite=config.overwrite_output_dir,
        what=what,
    )
