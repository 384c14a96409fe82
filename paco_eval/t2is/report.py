"""T2IS-Bench's numbers from the results rows: Table 3's columns, per category, per case.

Both modes share the arithmetic of the released code (criterion = mean over pairs, dimension
= mean over criteria, alignment pooled over images); they differ where the released code
has a quirk (see :mod:`paco_eval.t2is`):

- ``reference``: a case's dimension is 0.0 when it has no criteria or no pair, and the
  table's dimension is the mean over the cases whose value is > 0 (as
  ``test_prompt_consistency.py``); a dimension no case has is 0.0; overall is the mean of all
  three.
- ``default``: a dimension the case lacks is ``None`` (not a zero), the table's value is the
  mean over the cases that have it, and nothing is 0.0 that was not scored 0.0.

    >>> rows = [{"key": "a", "dimensions": {"Style": {"scores": [0.5, 0.7]}}},
    ...         {"key": "b", "dimensions": {"Style": {"scores": [0.9]}}}]
    >>> consistency_table(rows, "default")["Style"]
    0.75
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from paco_eval.harness import mean_or_none
from paco_eval.t2is.data import ALIGNMENT_DIMENSIONS, CONSISTENCY_DIMENSIONS

__all__ = [
    "AVG_WEIGHTS",
    "PAPER_ROWS",
    "alignment_table",
    "case_consistency",
    "columns",
    "consistency_table",
    "fitted_avg",
]

# Avg. is not defined in the paper; these weights reproduce every Qwen-judge row of its
# Table 3 to 0.0005 (a fit, labelled so in every report).
AVG_WEIGHTS = {"aesthetics": 0.2, "alignment": 0.3, "consistency": 0.5}

# Table 3's Seedream 4.0 row (the only one whose images are public), as quoted in the
# reference notes; its aesthetics model is not published.
PAPER_ROWS = {
    "Seedream 4.0 (paper, Qwen judge)": {
        "PA-Entity": 0.813, "PA-Attribute": 0.800, "PA-Relation": 0.805,
        "VC-Identity": 0.486, "VC-Style": 0.479, "VC-Logic": 0.458, "Avg": 0.589,
    },
}  # fmt: skip

TABLE_ORDER = ("Identity", "Style", "Logic")  # Table 3's order of the VC columns


def case_consistency(row: Mapping[str, Any], mode: str) -> dict[str, float | None]:
    """A case's value per dimension (see the module docstring for the two modes)."""
    out: dict[str, float | None] = {}
    for dim in CONSISTENCY_DIMENSIONS:
        scores = (row.get("dimensions", {}).get(dim) or {}).get("scores") or []
        value = sum(scores) / len(scores) if scores else None
        out[dim] = (0.0 if value is None else value) if mode == "reference" else value
    return out


def consistency_table(rows: Iterable[Mapping[str, Any]], mode: str) -> dict[str, float | None]:
    """Per dimension over the cases, and ``overall`` (the mean of the three)."""
    values = [case_consistency(r, mode) for r in rows]
    table: dict[str, float | None] = {}
    for dim in CONSISTENCY_DIMENSIONS:
        if mode == "reference":
            positive = [v[dim] for v in values if v[dim] > 0]
            table[dim] = sum(positive) / len(positive) if positive else 0.0
        else:
            table[dim] = mean_or_none(v[dim] for v in values if v[dim] is not None)
    dims = [table[d] for d in CONSISTENCY_DIMENSIONS]
    table["overall"] = (sum(dims) / 3 if mode == "reference"
                        else mean_or_none(d for d in dims if d is not None))  # fmt: skip
    return table


def alignment_table(rows: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """Per dimension, pooled over every scored image (as the released script prints)."""
    rows = list(rows)
    return {dim: mean_or_none(r["scores"][dim] for r in rows if r["scores"].get(dim) is not None)
            for dim in ALIGNMENT_DIMENSIONS}  # fmt: skip


def fitted_avg(aesthetics: float | None, alignment: Sequence[float | None],
               consistency: Sequence[float | None]) -> float | None:  # fmt: skip
    """0.2 x Aesthetics + 0.3 x mean(PA) + 0.5 x mean(VC); ``None`` when a part is missing.

    Example:
        >>> round(fitted_avg(0.55, [0.813, 0.800, 0.805], [0.486, 0.479, 0.458]), 3)
        0.589
    """
    if aesthetics is None or any(v is None for v in (*alignment, *consistency)):
        return None
    w = AVG_WEIGHTS
    return (w["aesthetics"] * aesthetics + w["alignment"] * sum(alignment) / len(alignment)
            + w["consistency"] * sum(consistency) / len(consistency))  # fmt: skip


def columns(judges: Sequence[str]) -> list[str]:
    """Table 3's columns: one VC block per consistency judge (the first judge's unnamed, as
    the paper's Qwen columns; later ones suffixed with the judge's name), then Avg."""
    cols = ["Aesthetics", *(f"PA-{d}" for d in ALIGNMENT_DIMENSIONS)]
    for k, name in enumerate(judges):
        cols += [f"VC-{d}" + ("" if k == 0 else f" ({name})") for d in TABLE_ORDER]
    return [*cols, "Avg"]


def table_row(
    judges: Sequence[str],
    consistency: Mapping[str, Mapping[str, float | None]],
    alignment: Mapping[str, float | None] | None,
    aesthetics: float | None,
) -> dict[str, float | None]:
    """One row of the table from the parts (each may be missing: ``None``)."""
    row: dict[str, float | None] = {"Aesthetics": aesthetics}
    for dim in ALIGNMENT_DIMENSIONS:
        row[f"PA-{dim}"] = (alignment or {}).get(dim)
    for k, name in enumerate(judges):
        for dim in TABLE_ORDER:
            row[f"VC-{dim}" + ("" if k == 0 else f" ({name})")] = consistency.get(name, {}).get(dim)
    first = consistency.get(judges[0], {}) if judges else {}
    row["Avg"] = fitted_avg(aesthetics, [row[f"PA-{d}"] for d in ALIGNMENT_DIMENSIONS],
                            [first.get(d) for d in TABLE_ORDER])  # fmt: skip
    return row
