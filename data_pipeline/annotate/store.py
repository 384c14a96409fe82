"""The annotation app's view of a work folder: instances to rank, panel files, the ranking
store and its progress.

Submissions go to the work folder's append-only store ``annotations.jsonl`` (the raw ranking
format of :mod:`data_pipeline.rankings` plus ``time``: one record per annotator per instance,
fsync'ed before the answer). The pipeline's next stage reads it as it is:
:func:`data_pipeline.rankings.read_merged` merges new rankings into ``rankings.jsonl`` before
``paco-data pairs`` uses them. A file lock makes check-then-append one step, also across
several servers on the same folder. The store is read once (and again only when another
process changed it); a submission appends to the file and to the index in memory.

Every error is an :class:`AnnotateError` with an HTTP status and a message fit for the page:
it names the instance or candidate, never a path on the server (details go to the log).

    >>> store = AnnotationStore("runs/work")                    # doctest: +SKIP
    >>> view = store.next_for("alice")                          # doctest: +SKIP
    >>> store.submit("alice", view["instance_id"], [["1_2"], ["1_0", "1_1"], ["1_3"]])  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import threading
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from data_pipeline.annotate.config import shown
from data_pipeline.instances import INSTANCES_FILE
from data_pipeline.prompts import PROMPTS_FILE
from data_pipeline.rankings import (
    ANNOTATIONS_FILE,
    annotation_store,
    check_ranking,
    kendalls_w,
    load_annotations,
    load_rankings,
    merge_rankings,
    merge_sources,
    normalise_ranking,
    pairwise_agreement,
)
from data_pipeline.storage import DataPipelineError, read_jsonl

try:  # POSIX: one writer at a time across processes; elsewhere the thread lock alone.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

logger = logging.getLogger(__name__)

LOCK_FILE = ".annotations.lock"
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
}
REFERENCE = "reference"


class AnnotateError(DataPipelineError):
    """A request the app refuses; ``status`` is its HTTP status, ``code`` a short tag."""

    status = 400
    code = "bad_request"


class NoInstancesError(AnnotateError):
    """The work folder holds no instance to rank: no or an empty ``instances.jsonl`` (HTTP 404)."""

    status, code = 404, "no_instances"


class UnreadableWorkFolderError(AnnotateError):
    """A file of the work folder (instances, rankings, annotations) cannot be read or no
    longer fits the others (HTTP 409); the message says which stage to re-run."""

    status, code = 409, "unreadable_work_folder"


class NotFoundError(AnnotateError):
    """No instance, or no panel of an instance, has the requested id (HTTP 404)."""

    status, code = 404, "not_found"


class MissingPanelError(AnnotateError):
    """A panel an instance names has no image inside the work folder (HTTP 404)."""

    status, code = 404, "missing_panel"


class StaleInstanceError(AnnotateError):
    """A ranking for an instance that is no longer in ``instances.jsonl`` (HTTP 409): reload."""

    status, code = 409, "stale_instance"


class AlreadyRankedError(AnnotateError):
    """The annotator has already ranked this instance (HTTP 409)."""

    status, code = 409, "already_ranked"


class InvalidRankingError(AnnotateError):
    """A submitted ranking does not place each candidate of its instance once (HTTP 400)."""

    status, code = 400, "invalid_ranking"


def candidate_id(panel: dict) -> str:
    """The id the app gives a candidate panel: ``"<grid>_<pos>"`` (a name
    :func:`data_pipeline.rankings.candidate_names` also accepts)."""
    return f"{panel['grid']}_{panel['pos']}"


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _now() -> str:
    # timezone.utc, not datetime.UTC: the package supports Python 3.10.
    now = datetime.now(timezone.utc)  # noqa: UP017
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RankingIndex:
    """Rankings, and the instances each annotator ranked: a screen looks one annotator up
    without scanning every ranking."""

    def __init__(self, records: list[dict]) -> None:
        self.records = records
        self.by_annotator: dict[str, set[str]] = defaultdict(set)
        for r in records:
            self.by_annotator[r["annotator"]].add(r["instance_id"])

    def add(self, record: dict) -> None:
        self.records.append(record)
        self.by_annotator[record["annotator"]].add(record["instance_id"])

    def ranked_by(self, annotator: str) -> set[str]:
        return self.by_annotator.get(annotator, set())


class AnnotationStore:
    """Instances, panels and rankings of one work folder, for the annotation app.

    Files are re-read when they change (``instances.jsonl`` rebuilt, another server appended
    to the store), so the folder stays the one source of truth; this store's own appends
    update its index instead.

    Args:
        work_dir: the pipeline's work folder.
    """

    def __init__(self, work_dir: str | Path) -> None:
        self.work_dir = Path(work_dir)
        self._root = self.work_dir.resolve()
        self._lock = threading.RLock()
        self._cache: dict[str, tuple[object, object]] = {}

    # ------------------------------------------------------------------ reading
    def _cached(self, name: str, signature, load):
        hit = self._cache.get(name)
        if hit is not None and hit[0] == signature:
            return hit[1]
        value = load()
        self._cache[name] = (signature, value)
        return value

    def instances(self) -> dict[str, dict]:
        """Instances by id, in ``instances.jsonl`` order.

        Raises:
            NoInstancesError: the folder has no instances yet.
            UnreadableWorkFolderError: ``instances.jsonl`` is malformed.
        """
        path = self.work_dir / INSTANCES_FILE
        signature = _signature(path)
        if signature is None:
            raise NoInstancesError(
                "This work folder has no ranking instances yet (no instances.jsonl): run "
                "`paco-data instances WORK` (stage 3) first, then reload this page."
            )

        def load():
            try:
                records = read_jsonl(path)
                return {r["instance_id"]: r for r in records}
            except (DataPipelineError, KeyError, TypeError) as err:
                logger.error("cannot read %s: %s", path, err)
                raise UnreadableWorkFolderError(
                    "instances.jsonl of this work folder could not be read; the server log "
                    "says why. Rebuild it with `paco-data instances WORK`."
                ) from None

        with self._lock:
            instances = self._cached("instances", signature, load)
        if not instances:
            raise NoInstancesError(
                "instances.jsonl of this work folder is empty: `paco-data instances WORK` made "
                "no instance (each needs two grids of a prompt), so there is nothing to rank."
            )
        return instances

    def prompts(self) -> dict[str, dict]:
        """Prompt records by id (empty when the folder has no ``prompts.jsonl``)."""
        path = self.work_dir / PROMPTS_FILE

        def load():
            if not path.is_file():
                return {}
            try:
                return {r["prompt_id"]: r for r in read_jsonl(path)}
            except (DataPipelineError, KeyError) as err:
                logger.warning("prompts not shown: cannot read %s: %s", path, err)
                return {}

        with self._lock:
            return self._cached("prompts", _signature(path), load)

    def _external(self) -> tuple[RankingIndex, list[str], str]:
        """Rankings from the files of the last ``paco-data rankings`` merge (kept in the merge,
        never rewritten), their paths and the merge method."""
        try:
            sources, method = merge_sources(self.work_dir)
        except DataPipelineError as err:
            logger.error("%s", err)
            raise UnreadableWorkFolderError(
                "rankings.jsonl of this work folder does not say which ranking files it was "
                "merged from, so new rankings cannot be merged with them; run `paco-data "
                "rankings WORK FILES...` once (the server log has details)."
            ) from None
        signature = (tuple(sources), tuple(_signature(Path(p)) for p in sources))

        def load():
            for p in sources:
                if not Path(p).is_file():
                    logger.error("ranking file of the last merge is gone: %s", p)
                    raise UnreadableWorkFolderError(
                        "a ranking file that rankings.jsonl was merged from is missing (the "
                        "server log names it); re-run `paco-data rankings WORK FILES...`."
                    )
            instances = self.instances()
            try:
                return RankingIndex([r for p in sources for r in load_rankings(p, instances)])
            except DataPipelineError as err:
                logger.error("%s", err)
                raise UnreadableWorkFolderError(
                    "a ranking file that rankings.jsonl was merged from no longer fits "
                    "instances.jsonl (the server log says where); re-run `paco-data rankings`."
                ) from None

        with self._lock:
            return self._cached("external", signature, load), sources, method

    def _stored(self) -> RankingIndex:
        """The store's index: read from disk on the first call and when another process has
        changed the file since, else the one :meth:`submit` keeps up to date."""
        path = self.work_dir / ANNOTATIONS_FILE

        def load():
            try:
                return RankingIndex(load_annotations(self.work_dir))
            except DataPipelineError as err:
                logger.error("%s", err)
                raise UnreadableWorkFolderError(
                    f"{ANNOTATIONS_FILE} of this work folder has a malformed record (the server "
                    "log says which); fix or remove that line."
                ) from None

        with self._lock:
            return self._cached("stored", _signature(path), load)

    def all_rankings(self) -> list[dict]:
        """Every raw ranking of the folder: ranking files of the last merge, then the store."""
        with self._lock:
            return self._external()[0].records + self._stored().records

    def ranked_by(self, annotator: str) -> set[str]:
        """Ids of the instances ``annotator`` has ranked (in the store or a ranking file)."""
        with self._lock:
            external, stored = self._external()[0], self._stored()
            return external.ranked_by(annotator) | stored.ranked_by(annotator)

    # ------------------------------------------------------------------ panels
    def _panel(self, instance: dict, panel_id: str) -> dict:
        if panel_id == REFERENCE:
            return instance["reference"]
        for c in instance["candidates"]:
            if candidate_id(c) == panel_id:
                return c
        raise NotFoundError(f"instance {instance['instance_id']} has no panel {shown(panel_id)}.")

    def _describe(self, instance: dict, panel_id: str) -> str:
        where = "reference panel" if panel_id == REFERENCE else f"candidate {panel_id}"
        return f"the {where} of instance {instance['instance_id']} (prompt {instance['prompt_id']})"

    def panel_file(self, instance_id: str, panel_id: str) -> tuple[Path, str]:
        """The image file of a panel, looked up in the instance's own record, and its media
        type. Nothing of the request but the two ids is used.

        Raises:
            NotFoundError: unknown instance or panel.
            MissingPanelError: the file is gone, outside the work folder, or not an image.
        """
        instance = self.instances().get(instance_id)
        if instance is None:
            raise NotFoundError(f"no instance {shown(instance_id)} in this work folder.")
        panel = self._panel(instance, panel_id)
        raw = Path(str(panel.get("path", "")))
        path = (raw if raw.is_absolute() else self._root / raw).resolve()
        media_type = IMAGE_TYPES.get(path.suffix.lower())
        if not path.is_relative_to(self._root) or media_type is None:
            logger.error("refusing to serve %s: outside %s or not an image", path, self._root)
            raise MissingPanelError(
                f"{self._describe(instance, panel_id)} does not name an image inside the work "
                "folder; rebuild the panels and instances."
            )
        if not path.is_file():
            logger.error("panel file missing: %s", path)
            raise MissingPanelError(
                f"The image file of {self._describe(instance, panel_id)} ({raw.name}) is "
                "missing from the work folder; re-run `paco-data grids` to cut it again."
            )
        return path, media_type

    def _missing_panels(self, instance: dict) -> list[str]:
        problems = []
        for panel_id in [REFERENCE, *(candidate_id(c) for c in instance["candidates"])]:
            try:
                self.panel_file(instance["instance_id"], panel_id)
            except MissingPanelError as err:
                problems.append(str(err))
        return problems

    # ------------------------------------------------------------------ screens
    def view(self, instance_id: str, annotator: str) -> dict:
        """What the page shows for one instance (JSON-ready)."""
        instances = self.instances()
        instance = instances.get(instance_id)
        if instance is None:
            raise NotFoundError(f"no instance {shown(instance_id)} in this work folder.")
        prompt = self.prompts().get(instance["prompt_id"], {})
        panel_texts = prompt.get("panels") or []

        def panel(p: dict, panel_id: str) -> dict:
            pos = p.get("pos")
            text = panel_texts[pos] if isinstance(pos, int) and 0 <= pos < len(panel_texts) else ""
            url = f"/api/instances/{quote(instance_id, safe='')}/panels/{quote(panel_id, safe='')}"
            return {"id": panel_id, "url": url, "text": text}

        criteria = []
        for dimension, items in (prompt.get("criteria") or {}).items():
            entries = [
                {"title": str(title), "text": str(text)}
                for title, text in (items or {}).items()
                if text
            ]
            if entries:
                criteria.append({"dimension": str(dimension), "items": entries})
        ranked = self.ranked_by(annotator)
        return {
            "instance_id": instance_id,
            "index": list(instances).index(instance_id) + 1,
            "total": len(instances),
            "ranked_by_you": len(ranked & instances.keys()),
            "already_ranked": instance_id in ranked,
            "prompt_id": instance["prompt_id"],
            "theme": instance.get("theme") or prompt.get("theme", ""),
            "category": instance.get("category", "uncategorised"),
            "criteria": criteria,
            "reference": panel(instance["reference"], REFERENCE),
            "candidates": [panel(c, candidate_id(c)) for c in instance["candidates"]],
            "problems": self._missing_panels(instance),
        }

    def next_for(self, annotator: str, after: str | None = None) -> dict | None:
        """The first instance (in ``instances.jsonl`` order) ``annotator`` has not ranked,
        starting after ``after`` (a skipped instance) and wrapping round; ``None`` when every
        instance is ranked."""
        instances = self.instances()
        ranked = self.ranked_by(annotator)
        order = list(instances)
        start = order.index(after) + 1 if after in instances else 0
        for instance_id in order[start:] + order[:start]:
            if instance_id not in ranked and instance_id != after:
                return self.view(instance_id, annotator)
        if after in instances and after not in ranked:
            return self.view(after, annotator)
        return None

    # ------------------------------------------------------------------ writing
    @contextlib.contextmanager
    def _exclusive(self):
        with self._lock:
            if fcntl is None:
                yield
                return
            with open(self.work_dir / LOCK_FILE, "a") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _groups(self, instance: dict, ranking: list[list[str]]) -> list[list[int]]:
        ids = [candidate_id(c) for c in instance["candidates"]]
        index = {cid: i for i, cid in enumerate(ids)}
        seen: set[str] = set()
        groups = []
        for group in ranking:
            if not group:
                raise InvalidRankingError("the ranking has an empty tie group.")
            for cid in group:
                if cid not in index:
                    raise InvalidRankingError(
                        f"{shown(cid)} is not a candidate of instance {instance['instance_id']} "
                        f"(its candidates are {', '.join(ids)}); reload the page."
                    )
                if cid in seen:
                    raise InvalidRankingError(
                        f"candidate {shown(cid)} appears twice in the ranking."
                    )
                seen.add(cid)
            groups.append(sorted(index[cid] for cid in group))
        left_out = [cid for cid in ids if cid not in seen]
        if left_out:
            raise InvalidRankingError(
                f"the ranking leaves out {', '.join(left_out)}: place every candidate."
            )
        # The pipeline's own check, so what is stored is what `paco-data rankings` accepts.
        return normalise_ranking({"ranking": groups}, len(ids), "submission")

    def submit(
        self,
        annotator: str,
        instance_id: str,
        ranking: list[list[str]],
        seconds: float | None = None,
    ) -> dict:
        """Check and store one ranking (candidate ids in tie groups, best first), then
        nothing else. Nothing is written unless every check passes.

        Returns:
            The stored record.

        Raises:
            StaleInstanceError: the instance is not (any more) in ``instances.jsonl``.
            InvalidRankingError: unknown, repeated or missing candidates.
            MissingPanelError: the instance has a panel whose image is missing.
            AlreadyRankedError: ``annotator`` has ranked this instance already.
        """
        with self._exclusive():
            instances = self.instances()
            instance = instances.get(instance_id)
            if instance is None:
                raise StaleInstanceError(
                    f"instance {shown(instance_id)} is not in this work folder's instances.jsonl "
                    "(was it rebuilt?); nothing was stored. Reload the page."
                )
            groups = self._groups(instance, ranking)
            problems = self._missing_panels(instance)
            if problems:
                raise MissingPanelError(problems[0] + " Nothing was stored.")
            # Fresh: while the lock is held no other server appends.
            stored = self._stored()
            if instance_id in self.ranked_by(annotator):
                raise AlreadyRankedError(
                    f"{annotator} has already ranked instance {instance_id}; nothing was stored."
                )
            record = {
                "instance_id": instance_id,
                "annotator": annotator,
                "ranking": groups,
                "time": _now(),
            }
            if seconds is not None and math.isfinite(seconds) and seconds >= 0:
                record["seconds"] = round(float(seconds), 2)
            checked = check_ranking(record, "submission", instances)  # what the pipeline accepts
            annotation_store(self.work_dir).append(record)
            # The file now holds the index's records plus this one: add it, read nothing.
            stored.add(checked)
            self._cache["stored"] = (_signature(self.work_dir / ANNOTATIONS_FILE), stored)
            logger.info("stored %s's ranking of %s: %s", annotator, instance_id, groups)
            return record

    # ------------------------------------------------------------------ progress
    def progress(self) -> dict:
        """Counts per annotator and per category, and agreement (Kendall's W, pairwise)."""
        instances = self.instances()
        with self._lock:  # one snapshot, while a submission may be adding to the index
            stored = list(self._stored().records)
            raw = self.all_rankings()
        by_instance: dict[str, dict[str, list[list[int]]]] = defaultdict(dict)
        for r in raw:
            by_instance[r["instance_id"]][r["annotator"]] = r["ranking"]
        _, agreement = merge_rankings(raw, instances) if raw else ([], {})

        annotators = []
        for name, count in sorted(Counter(r["annotator"] for r in raw).items()):
            mine = [r for r in stored if r["annotator"] == name]
            seconds = [r["seconds"] for r in mine if "seconds" in r]
            agree = total = 0
            for rankings in by_instance.values():
                if name in rankings:
                    for other, ranking in rankings.items():
                        if other != name:
                            a, t = pairwise_agreement([rankings[name], ranking])
                            agree, total = agree + a, total + t
            annotators.append(
                {
                    "annotator": name,
                    "rankings": count,
                    "in_store": len(mine),
                    "last": max((r.get("time", "") for r in mine), default=None) or None,
                    "median_seconds": statistics.median(seconds) if seconds else None,
                    "agreement_with_others": agree / total if total else None,
                    "compared_pairs": total,
                }
            )

        categories: dict[str, dict] = {}
        ws: dict[str, list[float]] = defaultdict(list)
        for instance_id, inst in instances.items():
            cat = categories.setdefault(
                inst.get("category", "uncategorised"),
                {"instances": 0, "ranked": 0, "rankings": 0, "multi_annotated": 0},
            )
            rankings = by_instance.get(instance_id, {})
            cat["instances"] += 1
            cat["ranked"] += bool(rankings)
            cat["rankings"] += len(rankings)
            if len(rankings) >= 2:
                cat["multi_annotated"] += 1
                w = kendalls_w(list(rankings.values()), len(inst["candidates"]))
                if not math.isnan(w):
                    ws[inst.get("category", "uncategorised")].append(w)
        for name, cat in categories.items():
            cat["kendall_w_mean"] = sum(ws[name]) / len(ws[name]) if ws[name] else None
        return {
            "instances": len(instances),
            "ranked": sum(bool(by_instance.get(i)) for i in instances),
            "rankings": len(raw),
            "in_store": len(stored),
            "annotators": annotators,
            "categories": [{"category": k, **v} for k, v in sorted(categories.items())],
            "agreement": {
                "kendall_w_mean": agreement.get("kendall_w_mean"),
                "pairwise_agreement": agreement.get("pairwise_agreement"),
                "pairwise_comparisons": agreement.get("pairwise_comparisons", 0),
                "instances_multi_annotated": agreement.get("instances_multi_annotated", 0),
            },
        }
