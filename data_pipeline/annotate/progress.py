"""What ``/api/progress`` shows (counts per annotator and per category, and agreement), kept up
to date one ranking at a time.

Adding a ranking costs its comparisons with the other rankings of its instance; a progress
request reads the totals. Neither grows with the folder's rankings, so a page polling the
progress does not slow the submissions down. The statistics are the pipeline's own
(:func:`~data_pipeline.rankings.kendalls_w`, :func:`~data_pipeline.rankings.pairwise_agreement`):
on the same rankings, the progress page and ``agreement.json`` agree.

    >>> counts = ProgressCounts({"i": {"category": "c", "candidates": [{}, {}]}})
    >>> counts.add("alice", {"instance_id": "i", "ranking": [[0], [1]]}, stored=True)
    >>> counts.add("bob", {"instance_id": "i", "ranking": [[1], [0]]}, stored=True)
    >>> counts.snapshot()["agreement"]["pairwise_agreement"]
    0.0
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from data_pipeline.rankings import Groups, kendalls_w, pairwise_agreement

UNCATEGORISED = "uncategorised"


@dataclass
class AnnotatorCounts:
    """One annotator's rankings (all, and those in the app's store) and agreement."""

    rankings: int = 0
    in_store: int = 0
    last: str | None = None
    seconds: list[float] = field(default_factory=list)  # sorted, for the median
    agree: int = 0
    compared: int = 0

    def row(self, name: str) -> dict:
        n = len(self.seconds)
        median = None if n == 0 else (self.seconds[(n - 1) // 2] + self.seconds[n // 2]) / 2
        return {
            "annotator": name,
            "rankings": self.rankings,
            "in_store": self.in_store,
            "last": self.last,
            "median_seconds": median,
            "agreement_with_others": self.agree / self.compared if self.compared else None,
            "compared_pairs": self.compared,
        }


@dataclass
class CategoryCounts:
    """One category's instances, rankings and Kendall's W per multi-annotated instance."""

    instances: int = 0
    ranked: int = 0
    rankings: int = 0
    multi_annotated: int = 0
    kendall_w: dict[str, float] = field(default_factory=dict)  # instance id -> W, where defined

    def row(self, name: str) -> dict:
        ws = self.kendall_w.values()
        return {
            "category": name,
            "instances": self.instances,
            "ranked": self.ranked,
            "rankings": self.rankings,
            "multi_annotated": self.multi_annotated,
            "kendall_w_mean": math.fsum(ws) / len(ws) if ws else None,
        }


class ProgressCounts:
    """The progress of the rankings of one set of instances, counted as rankings arrive.

    Each ranking is added once, under its annotator's canonical name; the caller skips a
    second ranking of an instance by the same annotator. A ranking of an instance that is not
    in ``instances`` (it was rebuilt since) counts for its annotator and the totals, not for
    the categories or the agreement: it has no candidates to compare.

    Args:
        instances: the work folder's instances by id.
    """

    def __init__(self, instances: dict[str, dict]) -> None:
        self.instances = instances
        self.by_instance: dict[str, dict[str, Groups]] = {}
        self.annotators: dict[str, AnnotatorCounts] = {}
        self.categories: dict[str, CategoryCounts] = {}
        for instance in instances.values():
            self._category(instance).instances += 1
        self.rankings = self.in_store = 0
        self.agree = self.compared = 0

    def _category(self, instance: dict) -> CategoryCounts:
        return self.categories.setdefault(instance.get("category", UNCATEGORISED), CategoryCounts())

    def add(self, annotator: str, record: dict, stored: bool) -> None:
        """Count one ranking (``instance_id``, ``ranking`` as tie groups, optional ``time``
        and ``seconds``) by ``annotator``; ``stored``: it is in the app's store."""
        counts = self.annotators.setdefault(annotator, AnnotatorCounts())
        counts.rankings += 1
        self.rankings += 1
        if stored:
            counts.in_store += 1
            self.in_store += 1
            counts.last = max(counts.last or "", record.get("time") or "") or None
            if "seconds" in record:
                bisect.insort(counts.seconds, record["seconds"])
        instance = self.instances.get(record["instance_id"])
        if instance is None:
            return
        ranking = record["ranking"]
        others = self.by_instance.setdefault(record["instance_id"], {})
        for other, their_ranking in others.items():
            agree, compared = pairwise_agreement([ranking, their_ranking])
            for who in (counts, self.annotators[other]):
                who.agree += agree
                who.compared += compared
            self.agree += agree
            self.compared += compared
        others[annotator] = ranking
        category = self._category(instance)
        category.rankings += 1
        category.ranked += len(others) == 1
        category.multi_annotated += len(others) == 2
        if len(others) >= 2:
            # Undefined (NaN) only while every ranking ties all candidates, never again after.
            w = kendalls_w(list(others.values()), len(instance["candidates"]))
            if not math.isnan(w):
                category.kendall_w[record["instance_id"]] = w

    def snapshot(self) -> dict:
        """The counts as ``/api/progress`` answers them (JSON-ready)."""
        ws = [w for category in self.categories.values() for w in category.kendall_w.values()]
        return {
            "instances": len(self.instances),
            "ranked": sum(category.ranked for category in self.categories.values()),
            "rankings": self.rankings,
            "in_store": self.in_store,
            "annotators": [self.annotators[name].row(name) for name in sorted(self.annotators)],
            "categories": [self.categories[name].row(name) for name in sorted(self.categories)],
            "agreement": {
                "kendall_w_mean": math.fsum(ws) / len(ws) if ws else None,
                "pairwise_agreement": self.agree / self.compared if self.compared else None,
                "pairwise_comparisons": self.compared,
                "instances_multi_annotated": len(ws),
            },
        }
