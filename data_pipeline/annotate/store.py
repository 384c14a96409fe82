"""The annotation app's view of a work folder: instances to rank, panel files, the ranking
store and its progress.

Submissions go to the work folder's append-only store ``annotations.jsonl`` (the raw ranking
format of :mod:`data_pipeline.rankings` plus ``time``: one record per annotator per instance,
fsync'ed before the answer). The pipeline's next stage reads it as it is:
:func:`data_pipeline.rankings.read_merged` merges new rankings into ``rankings.jsonl`` before
``paco-data pairs`` uses them. A file lock makes check-then-append one step, also across
several servers on the same folder. The store is read once (and again only when another
process changed it); a submission appends to the file and to the index in memory, which
keeps the progress counts too (:mod:`data_pipeline.annotate.progress`).

Annotator names compare in their canonical form (:func:`~data_pipeline.annotate.config.canonical_annotator`):
``ALICE`` and ``alice.`` are ``alice``, who ranks each instance once. New rankings are stored
under the canonical name; rankings stored before under another form of it are read as hers
(the first of an instance counts), and the store is never rewritten.

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
import threading
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from data_pipeline.annotate.config import canonical_annotator, shown
from data_pipeline.annotate.progress import ProgressCounts
from data_pipeline.instances import INSTANCES_FILE
from data_pipeline.prompts import PROMPTS_FILE
from data_pipeline.rankings import (
    ANNOTATIONS_FILE,
    annotation_store,
    check_ranking,
    load_annotations,
    load_rankings,
    merge_sources,
    normalise_ranking,
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
    """Every ranking of a work folder (the ranking files of the last merge, then the store),
    the instances each annotator ranked, so a screen looks one annotator up without scanning
    every ranking, and the progress counts, built on the first progress request and then
    kept up to date.

    An annotator's second ranking of an instance under another form of the name (``ALICE``
    after ``alice``, stored before names compared canonically) is kept in ``records`` but
    not counted.

    Args:
        instances: the folder's instances by id.
        external / stored: the records of the ranking files and of the store.
    """

    def __init__(self, instances: dict[str, dict], external: list[dict], stored: list[dict]):
        self.instances = instances
        self.records: list[dict] = []
        self.by_annotator: dict[str, set[str]] = defaultdict(set)
        self.counted: list[tuple[str, dict, bool]] = []  # (canonical name, record, in store)
        self._progress: ProgressCounts | None = None
        for record in external:
            self.add(record, stored=False)
        for record in stored:
            self.add(record, stored=True)
        if len(self.counted) < len(self.records):
            logger.warning(
                "%d rankings repeat an annotator's ranking of an instance under another form "
                "of the name (e.g. 'ALICE' after 'alice'); the first of each is counted.",
                len(self.records) - len(self.counted),
            )

    def add(self, record: dict, stored: bool) -> None:
        self.records.append(record)
        name = canonical_annotator(record["annotator"])
        ranked = self.by_annotator[name]
        if record["instance_id"] in ranked:
            return
        ranked.add(record["instance_id"])
        self.counted.append((name, record, stored))
        if self._progress is not None:
            self._progress.add(name, record, stored)

    def ranked_by(self, annotator: str) -> set[str]:
        """Ids of the instances ``annotator`` (any form of the name) has ranked."""
        return self.by_annotator.get(canonical_annotator(annotator), set())

    def progress(self) -> ProgressCounts:
        if self._progress is None:
            self._progress = ProgressCounts(self.instances)
            for name, record, stored in self.counted:
                self._progress.add(name, record, stored)
        return self._progress


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

    def _external(self) -> tuple[list[dict], tuple]:
        """Rankings from the files of the last ``paco-data rankings`` merge (kept in the merge,
        never rewritten), and the signature of those files."""
        try:
            sources, _ = merge_sources(self.work_dir)
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
                return [r for p in sources for r in load_rankings(p, instances)]
            except DataPipelineError as err:
                logger.error("%s", err)
                raise UnreadableWorkFolderError(
                    "a ranking file that rankings.jsonl was merged from no longer fits "
                    "instances.jsonl (the server log says where); re-run `paco-data rankings`."
                ) from None

        with self._lock:
            return self._cached("external", signature, load), signature

    def _stored(self) -> list[dict]:
        try:
            return load_annotations(self.work_dir)
        except DataPipelineError as err:
            logger.error("%s", err)
            raise UnreadableWorkFolderError(
                f"{ANNOTATIONS_FILE} of this work folder has a malformed record (the server "
                "log says which); fix or remove that line."
            ) from None

    def _index(self) -> RankingIndex:
        """The folder's ranking index: built on the first call and when a file it comes from
        has changed since (instances rebuilt, another process appended to the store), else
        the one :meth:`submit` keeps up to date."""
        with self._lock:
            instances = self.instances()
            external, external_signature = self._external()
            signature = (
                self._cache["instances"][0],  # instances.jsonl as `instances` was read
                external_signature,
                _signature(self.work_dir / ANNOTATIONS_FILE),
            )
            return self._cached(
                "index", signature, lambda: RankingIndex(instances, external, self._stored())
            )

    def all_rankings(self) -> list[dict]:
        """Every raw ranking of the folder: ranking files of the last merge, then the store."""
        with self._lock:
            return list(self._index().records)

    def ranked_by(self, annotator: str) -> set[str]:
        """Ids of the instances ``annotator`` (any form of the name) has ranked, in the store
        or a ranking file."""
        with self._lock:
            return set(self._index().ranked_by(annotator))

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
        """Check and store one ranking (candidate ids in tie groups, best first) under the
        annotator's canonical name, then nothing else. Nothing is written unless every check
        passes.

        Returns:
            The stored record.

        Raises:
            StaleInstanceError: the instance is not (any more) in ``instances.jsonl``.
            InvalidRankingError: unknown, repeated or missing candidates.
            MissingPanelError: the instance has a panel whose image is missing.
            AlreadyRankedError: ``annotator`` (any form of the name) has ranked this
                instance already.
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
            index = self._index()
            annotator = canonical_annotator(annotator)
            if instance_id in index.ranked_by(annotator):
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
            # The store now holds the index's records plus this one: add it, read nothing.
            index.add(checked, stored=True)
            instances_and_external = self._cache["index"][0][:2]
            store_now = _signature(self.work_dir / ANNOTATIONS_FILE)
            self._cache["index"] = ((*instances_and_external, store_now), index)
            logger.info("stored %s's ranking of %s: %s", annotator, instance_id, groups)
            return record

    # ------------------------------------------------------------------ progress
    def progress(self) -> dict:
        """Counts per annotator and per category, and agreement (Kendall's W, pairwise), from
        counts kept up to date (:class:`~data_pipeline.annotate.progress.ProgressCounts`)."""
        with self._lock:
            return self._index().progress().snapshot()
