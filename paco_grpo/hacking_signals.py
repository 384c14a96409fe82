"""Signals that a run is gaming its reward, computed every epoch from the gathered batch
(docs/grpo.md, "Is my run hacking its reward?").

A hacked reward shows before the samples look wrong: the groups stop disagreeing (the
group std of the reward falls, more groups have zero std, the advantages shrink), the
images of a group become alike (the in-group feature distance falls), and the training
judge starts to score the evaluation images above a held-out judge of the same criterion.
Each function here returns flat ``{metric name: float}`` rows the trainer logs to
``metrics.jsonl`` and its trackers under ``hacking/``.

    >>> import numpy as np
    >>> rows = group_std_signals({"consistency": np.array([0.5, 0.5, 0.2, 0.8])}, [0, 0, 1, 1])
    >>> rows["hacking/consistency/group_std_min"], rows["hacking/consistency/zero_std_fraction"]
    (0.0, 0.5)
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from paco_reward.errors import InputError

__all__ = [
    "PREFIX",
    "advantage_signals",
    "group_std_signals",
    "held_out_gaps",
    "in_group_diversity",
]

PREFIX = "hacking/"
ZERO_STD = 1e-8  # a group whose finite scores spread less than this has "zero std"


def _groups(group_ids: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    groups: dict[Hashable, list[int]] = {}
    for i, key in enumerate(group_ids):
        groups.setdefault(key, []).append(i)
    return groups


def group_std_signals(
    rewards: Mapping[str, np.ndarray], group_ids: Sequence[Hashable]
) -> dict[str, float]:
    """Per reward: the min / mean / max over groups of the within-group std of its finite
    scores, and the share of groups with zero std (groups with fewer than 2 finite scores
    are left out; NaN when none is left)."""
    groups = _groups(group_ids)
    out: dict[str, float] = {}
    for name, values in rewards.items():
        values = np.asarray(values, dtype=np.float64)
        if len(values) != len(group_ids):
            raise InputError(f"reward {name!r} has {len(values)} scores for {len(group_ids)} ids.")
        stds = []
        for members in groups.values():
            finite = values[members][np.isfinite(values[members])]
            if finite.size >= 2:
                stds.append(float(finite.std()))
        s = np.array(stds)
        key = f"{PREFIX}{name}/"
        out[key + "group_std_min"] = float(s.min()) if s.size else float("nan")
        out[key + "group_std_mean"] = float(s.mean()) if s.size else float("nan")
        out[key + "group_std_max"] = float(s.max()) if s.size else float("nan")
        out[key + "zero_std_fraction"] = float((s < ZERO_STD).mean()) if s.size else float("nan")
    return out


def advantage_signals(advantages: np.ndarray) -> dict[str, float]:
    """min, max and mean |A| of the epoch's advantages (before the clip)."""
    a = np.asarray(advantages, dtype=np.float64)
    return {
        f"{PREFIX}advantage_min": float(a.min()),
        f"{PREFIX}advantage_max": float(a.max()),
        f"{PREFIX}advantage_abs_mean": float(np.abs(a).mean()),
    }


def in_group_diversity(features: np.ndarray, group_ids: Sequence[Hashable]) -> dict[str, float]:
    """Mean pairwise cosine distance ``1 - cos`` between the images of each group (features
    L2-normalised), averaged over groups, with its min over groups: 0 when every group's
    images are one picture (the consistency reward's hack)."""
    f = np.asarray(features, dtype=np.float64)
    if len(f) != len(group_ids):
        raise InputError(f"{len(f)} feature rows for {len(group_ids)} group ids.")
    f = f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)
    per_group = []
    for members in _groups(group_ids).values():
        if len(members) < 2:
            continue
        cos = np.clip(f[members] @ f[members].T, -1.0, 1.0)
        upper = np.triu_indices(len(members), k=1)
        per_group.append(float((1.0 - cos[upper]).mean()))
    d = np.array(per_group)
    return {
        f"{PREFIX}diversity/mean": float(d.mean()) if d.size else float("nan"),
        f"{PREFIX}diversity/min": float(d.min()) if d.size else float("nan"),
    }


def held_out_gaps(
    train_judge: Mapping[str, float], held_out: Mapping[str, float]
) -> dict[str, float]:
    """``training judge's mean - held-out judge's mean`` on the same evaluation images, per
    criterion both scored: a gap that grows while training reward rises is the trained
    judge being gamed."""
    return {
        f"{PREFIX}held_out_gap/{name}": float(train_judge[name] - held_out[name])
        for name in train_judge
        if name in held_out
    }
