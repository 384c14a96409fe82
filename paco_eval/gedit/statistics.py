"""GEdit-Bench aggregation, as Step1X-Edit@570eba6 ``calculate_statistics.py::analyze_scores``
computes it, with the micro mean beside it.

Per language: each group's mean SC, PQ and O over its rows (``O = sqrt(SC * PQ)`` per row),
the same over its ``Intersection_exist`` rows (the "-I" columns), and the headline as the
unweighted mean of the group means (``macro``, the official figure). ``micro`` is the mean
over rows (lmms-eval's convention), named so it is never mistaken for the official one.

Modes: in the reference mode a group without rows gives NaN and so does the headline
(``np.mean`` of an empty list, as the released script); in the default mode the headline is
the mean over the groups that have scored rows, the number of groups is reported, and items
without scores (missing edits, unparsed answers) are counted in ``coverage``.

    >>> recs = [{"task_type": "color_alter", "language": "en", "intersection": True,
    ...          "sc": 8.0, "pq": 2.0}]
    >>> table = analyze(recs, "en", groups=["color_alter"])
    >>> table["fullset"]["macro"]["overall"], table["coverage"]["scored"]
    (4.0, 1)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from paco_eval.gedit.data import GROUPS, check_group, normalize_language

__all__ = ["METRICS", "analyze"]

METRICS = ("sc", "pq", "overall")


def _mean(values: list[float]) -> float:
    if not values:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.mean(values))


def _is_scored(rec: dict) -> bool:
    sc, pq = rec.get("sc"), rec.get("pq")
    return sc is not None and pq is not None and not (math.isnan(sc) or math.isnan(pq))


def analyze(
    records: Iterable[dict[str, Any]],
    language: str,
    *,
    reference: bool = False,
    groups: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Group means, macro and micro headlines for one language.

    Args:
        records: per item ``task_type``, ``language``, ``intersection`` and ``sc``/``pq``
            (``None``/NaN when the item is missing).
        language: ``en`` or ``cn`` (``zh`` accepted).
        reference: the released script's semantics (an empty group is NaN and makes the
            headline NaN); default: the headline is over the groups with scored rows.
        groups: the groups in the table (default all 11, in the released order).

    Returns:
        ``{"language", "fullset": {"groups": {g: {sc, pq, overall, n}}, "macro": {..},
        "micro": {..}, "n_groups"}, "intersection": {same}, "coverage": {"items", "scored",
        "missing"}}``.

    Raises:
        InputError: an unknown language or group.
    """
    lang = normalize_language(language)
    names = list(GROUPS) if groups is None else [check_group(g) for g in groups]
    rows = [r for r in records if normalize_language(r["language"]) == lang]
    coverage = {"items": len(rows), "scored": sum(_is_scored(r) for r in rows)}
    coverage["missing"] = coverage["items"] - coverage["scored"]
    out: dict[str, Any] = {"language": lang, "coverage": coverage}
    for part, keep in (("fullset", lambda r: True), ("intersection", lambda r: r["intersection"])):
        table: dict[str, dict[str, float]] = {}
        pooled: dict[str, list[float]] = {m: [] for m in METRICS}
        for g in names:
            vals: dict[str, list[float]] = {m: [] for m in METRICS}
            for r in rows:
                if r["task_type"] != g or not keep(r) or not _is_scored(r):
                    continue
                sc, pq = r["sc"], r["pq"]
                for m, v in zip(METRICS, (sc, pq, math.sqrt(sc * pq))):
                    vals[m].append(v)
                    pooled[m].append(v)
            table[g] = {m: _mean(vals[m]) for m in METRICS} | {"n": len(vals["sc"])}
        present = [g for g in names if table[g]["n"] > 0]
        over = names if reference else present
        macro = {m: _mean([table[g][m] for g in over]) if over else float("nan") for m in METRICS}
        if reference:  # np.mean over the group means, NaN ones included
            macro = {m: float(np.mean([table[g][m] for g in names])) for m in METRICS}
        out[part] = {
            "groups": table,
            "macro": macro,
            "micro": {m: _mean(pooled[m]) for m in METRICS},
            "n_groups": len(present),
        }
    return out
