"""Stage 4: human rankings: ingest, merge annotators, measure agreement.

Input JSONL, one ranking per line::

    {"instance_id": "...", "annotator": "a1", "ranking": [2, [0, 1], 3]}

Rankings come from files (``paco-data rankings WORK R1.jsonl ...``) and from the work
folder's own store ``annotations.jsonl``, which ``paco-data annotate`` appends to (same
format plus ``time``; one record per annotator per instance, fsync'ed). Every merge reads
both. When the store has grown since the last merge, :func:`read_merged` (what
``paco-data pairs`` and ``export`` read) merges again with the files of the last merge
(recorded in ``agreement.json``), so stored rankings reach the pairs with no extra step.

``ranking`` lists candidate indices (into the instance's ``candidates``) best first;
a nested list is a tie. ``order`` is accepted as an alias of ``ranking`` and an
optional ``ties`` (list of index lists) marks further ties. An optional
``"none_consistent": true`` says that even the best candidate does not match the reference
(a broken reference): the instance then gives no consistent pair when most of its
annotators say so (:func:`merge_rankings`). Several annotators of one
instance are merged by Borda count or by pairwise majority (Copeland); candidates
whose merged scores are equal stay tied, and ties are discarded when pairs are made.

    >>> merge_instance([[[0], [1], [2]], [[0], [2], [1]]], 3, "borda")["ranking"]
    [[0], [1, 2]]
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from itertools import combinations
from pathlib import Path

from data_pipeline.instances import read_instances
from data_pipeline.storage import (
    AppendOnlyJsonl,
    DataPipelineError,
    read_jsonl,
    write_json,
    write_jsonl,
)
from paco_reward.errors import InputError

logger = logging.getLogger(__name__)

MERGED_FILE = "rankings.jsonl"
AGREEMENT_FILE = "agreement.json"
ANNOTATIONS_FILE = "annotations.jsonl"
METHODS = ("borda", "majority")

Groups = list[list[int]]


def candidate_names(instance: dict) -> dict[str, int]:
    """Names a ranking may use for an instance's candidates: ``"<grid>_<pos>.png"`` (the
    ConsistencyRank file name), ``"<grid>_<pos>"`` and the panel path."""
    names: dict[str, int] = {}
    for index, c in enumerate(instance["candidates"]):
        for name in (f"{c['grid']}_{c['pos']}.png", f"{c['grid']}_{c['pos']}", c.get("path")):
            if name:
                names[str(name)] = index
    return names


def _member(m, names: dict[str, int] | None, where: str, item) -> int:
    if isinstance(m, str) and names is not None and m in names:
        return names[m]
    if isinstance(m, int) and not isinstance(m, bool):
        return m
    raise DataPipelineError(
        f"{where}: ranking entries must be candidate indices (or candidate file names such "
        f"as '1_0.png'), or lists of them for ties; got {item!r}."
    )


def normalise_ranking(
    record: dict,
    n_candidates: int | None = None,
    where: str = "",
    names: dict[str, int] | None = None,
) -> Groups:
    """A raw ranking (ints or candidate names / nested lists for ties, optional ``ties``) ->
    tie groups of candidate indices, best first.

    Raises:
        DataPipelineError: no ranking, an unknown entry, a repeated or missing candidate.
    """
    raw = record.get("ranking", record.get("order"))
    if not isinstance(raw, list) or not raw:
        raise DataPipelineError(f"{where}: no 'ranking' list (candidate indices, best first).")
    groups: Groups = []
    for item in raw:
        members = item if isinstance(item, list) else [item]
        if not members:
            raise DataPipelineError(f"{where}: empty tie group in ranking {raw!r}.")
        groups.append([_member(m, names, where, item) for m in members])
    for tie in record.get("ties") or []:
        tie = {_member(m, names, where, tie) for m in tie}
        hit = [g for g in groups if tie & set(g)]
        if len(hit) > 1:
            merged = sorted({m for g in hit for m in g})
            first = groups.index(hit[0])
            groups = [g for g in groups if g not in hit]
            groups.insert(first, merged)
    flat = [m for g in groups for m in g]
    if len(set(flat)) != len(flat):
        raise DataPipelineError(f"{where}: a candidate appears twice in ranking {raw!r}.")
    if n_candidates is not None and sorted(flat) != list(range(n_candidates)):
        raise DataPipelineError(
            f"{where}: ranking {raw!r} must order every candidate 0..{n_candidates - 1} exactly once."
        )
    return groups


def check_ranking(record: dict, where: str, instances: dict[str, dict] | None = None) -> dict:
    """One raw ranking record -> ``{"instance_id", "annotator", "ranking": groups}`` (plus
    ``time`` and ``seconds`` when the record has them); with ``instances`` it is checked
    against its instance.

    Raises:
        DataPipelineError: malformed ranking or an unknown instance id.
    """
    instance_id = record.get("instance_id")
    n = names = None
    if instances is not None:
        if instance_id not in instances:
            raise DataPipelineError(
                f"{where}: unknown instance_id {instance_id!r}; rankings must refer to "
                "instances.jsonl of the same work folder."
            )
        n = len(instances[instance_id]["candidates"])
        names = candidate_names(instances[instance_id])
    out = {
        "instance_id": instance_id,
        "annotator": str(record["annotator"]) if "annotator" in record else None,
        "ranking": normalise_ranking(record, n, where, names),
    }
    flag = record.get("none_consistent", False)
    if not isinstance(flag, bool):
        raise DataPipelineError(f"{where}: none_consistent must be true or false; got {flag!r}.")
    if flag:
        out["none_consistent"] = True
    out.update({k: record[k] for k in ("time", "seconds") if k in record})
    return out


def load_rankings(path: str | Path, instances: dict[str, dict] | None = None) -> list[dict]:
    """Read raw rankings; with ``instances`` each is checked against its instance.

    Returns records ``instance_id``, ``annotator`` (default ``"a<line>"``), ``ranking`` (groups).

    Raises:
        DataPipelineError: malformed ranking or an unknown instance id.
    """
    out = []
    for line, record in enumerate(read_jsonl(path), start=1):
        checked = check_ranking(record, f"{path}:{line}", instances)
        if checked["annotator"] is None:
            checked["annotator"] = f"a{line}"
        out.append(checked)
    return out


def annotation_store(work_dir: str | Path) -> AppendOnlyJsonl:
    """The work folder's append-only ranking store (``annotations.jsonl``)."""
    return AppendOnlyJsonl(Path(work_dir) / ANNOTATIONS_FILE)


def load_annotations(work_dir: str | Path, instances: dict[str, dict] | None = None) -> list[dict]:
    """The rankings stored in the work folder by ``paco-data annotate`` (empty if none),
    checked like :func:`load_rankings`. A line cut by a killed process is skipped.

    Raises:
        DataPipelineError: a stored record without annotator, or malformed (see
            :func:`check_ranking`).
    """
    out = []
    for number, record in enumerate(annotation_store(work_dir).load(), start=1):
        where = f"{ANNOTATIONS_FILE} record {number}"
        checked = check_ranking(record, where, instances)
        if checked["annotator"] is None:
            raise DataPipelineError(f"{where}: stored ranking has no 'annotator'.")
        out.append(checked)
    return out


def positions(groups: Groups) -> dict[int, float]:
    """Mid-rank (1 = best) of every candidate; tied candidates share their mean rank."""
    ranks: dict[int, float] = {}
    start = 1
    for g in groups:
        mid = start + (len(g) - 1) / 2
        for m in g:
            ranks[m] = mid
        start += len(g)
    return ranks


def _groups_from_scores(scores: dict[int, float]) -> Groups:
    groups: Groups = []
    for c in sorted(scores, key=lambda c: (-scores[c], c)):
        if groups and math.isclose(scores[groups[-1][0]], scores[c], abs_tol=1e-9):
            groups[-1].append(c)
        else:
            groups.append([c])
    return groups


def merge_instance(rankings: list[Groups], n_candidates: int, method: str = "borda") -> dict:
    """Merge several annotators' tie groups of one instance.

    ``borda``: a candidate scores the number of candidates ranked below it (+0.5 per tie),
    summed over annotators. ``majority``: Copeland, a candidate scores 1 per other candidate
    a strict majority prefers it to (+0.5 when neither side has a majority).

    Returns:
        ``{"ranking": groups best first (equal scores tied), "scores": [...]}``.
    """
    if method not in METHODS:
        raise InputError(f"method must be one of {list(METHODS)}; got {method!r}.")
    ranks = [positions(g) for g in rankings]
    scores: dict[int, float] = {}
    if method == "borda":
        for c in range(n_candidates):
            scores[c] = sum(
                sum(1.0 if r[o] > r[c] else 0.5 if r[o] == r[c] else 0.0 for o in r if o != c)
                for r in ranks
            )
    else:
        scores = dict.fromkeys(range(n_candidates), 0.0)
        for i, j in combinations(range(n_candidates), 2):
            prefer_i = sum(r[i] < r[j] for r in ranks)
            prefer_j = sum(r[j] < r[i] for r in ranks)
            if prefer_i > prefer_j:
                scores[i] += 1
            elif prefer_j > prefer_i:
                scores[j] += 1
            else:
                scores[i] += 0.5
                scores[j] += 0.5
    return {
        "ranking": _groups_from_scores(scores),
        "scores": [scores[c] for c in range(n_candidates)],
    }


def kendalls_w(rankings: list[Groups], n_candidates: int) -> float:
    """Kendall's coefficient of concordance W (tie-corrected) of m annotators over n
    candidates, in [0, 1]; NaN if undefined (fewer than 2 annotators or 2 candidates,
    or every annotator tied everything).

    >>> kendalls_w([[[0], [1], [2]], [[0], [1], [2]]], 3)
    1.0
    """
    m, n = len(rankings), n_candidates
    if m < 2 or n < 2:
        return float("nan")
    ranks = [positions(g) for g in rankings]
    totals = [sum(r[c] for r in ranks) for c in range(n)]
    mean = m * (n + 1) / 2
    s = sum((t - mean) ** 2 for t in totals)
    tie_term = sum(len(g) ** 3 - len(g) for groups in rankings for g in groups)
    denominator = m**2 * (n**3 - n) - m * tie_term
    return float(12 * s / denominator) if denominator > 0 else float("nan")


def pairwise_agreement(rankings: list[Groups]) -> tuple[int, int]:
    """(agreeing, compared) over annotator pairs and candidate pairs that both
    annotators strictly order."""
    agree = total = 0
    ranks = [positions(g) for g in rankings]
    for ra, rb in combinations(ranks, 2):
        for i, j in combinations(sorted(ra), 2):
            if ra[i] == ra[j] or rb[i] == rb[j]:
                continue
            total += 1
            agree += (ra[i] < ra[j]) == (rb[i] < rb[j])
    return agree, total


def merge_rankings(
    raw: list[dict], instances: dict[str, dict], method: str = "borda"
) -> tuple[list[dict], dict]:
    """Merge annotators per instance; also return agreement statistics.

    Returns:
        (merged records ``instance_id``, ``ranking``, ``scores``, ``n_annotators``,
        ``kendall_w``, ``none_consistent`` (a strict majority of the instance's annotators
        said no candidate matches the reference); agreement dict ``kendall_w_mean``, ``pairwise_agreement``,
        ``instances_multi_annotated``, ``annotators``).
    """
    if method not in METHODS:
        raise InputError(f"method must be one of {list(METHODS)}; got {method!r}.")
    by_instance: dict[str, list[Groups]] = defaultdict(list)
    flags: dict[str, int] = defaultdict(int)
    annotators: set[str] = set()
    for r in raw:
        by_instance[r["instance_id"]].append(r["ranking"])
        flags[r["instance_id"]] += bool(r.get("none_consistent"))
        annotators.add(r["annotator"])
    merged, ws = [], []
    agree = total = 0
    for instance_id, rankings in by_instance.items():
        n = len(instances[instance_id]["candidates"]) if instance_id in instances else None
        if n is None:
            raise DataPipelineError(f"ranking for unknown instance {instance_id!r}.")
        result = merge_instance(rankings, n, method)
        w = kendalls_w(rankings, n)
        a, t = pairwise_agreement(rankings)
        agree, total = agree + a, total + t
        if not math.isnan(w):
            ws.append(w)
        merged.append(
            {
                "instance_id": instance_id,
                "ranking": result["ranking"],
                "scores": result["scores"],
                "n_annotators": len(rankings),
                "kendall_w": None if math.isnan(w) else w,
                "method": method,
                "none_consistent": 2 * flags[instance_id] > len(rankings),
            }
        )
    agreement = {
        "method": method,
        "instances_ranked": len(merged),
        "instances_multi_annotated": len(ws),
        "annotators": len(annotators),
        "kendall_w_mean": sum(ws) / len(ws) if ws else None,
        "pairwise_agreement": agree / total if total else None,
        "pairwise_comparisons": total,
        "instances_none_consistent": sum(m["none_consistent"] for m in merged),
    }
    return merged, agreement


def ingest_rankings(
    work_dir: str | Path,
    rankings_path: str | Path | list[str | Path] | None = None,
    method: str = "borda",
) -> Path:
    """Stage 4: read raw rankings (one file or several, e.g. one per annotator) and the work
    folder's own store ``annotations.jsonl``, check them against ``instances.jsonl``, merge,
    write ``rankings.jsonl`` and ``agreement.json``.

    ``agreement.json`` also records the files (``sources``) and how much of the store
    (``annotations_bytes``) went into the merge, for :func:`refresh_rankings`.

    Raises:
        DataPipelineError: no ranking at all, or a malformed one.
    """
    work_dir = Path(work_dir)
    instances = read_instances(work_dir)
    if rankings_path is None:
        paths = []
    else:
        paths = rankings_path if isinstance(rankings_path, list) else [rankings_path]
    raw = [r for p in paths for r in load_rankings(p, instances)]
    # Measured before reading: a record appended meanwhile leaves the merge marked stale.
    store_bytes = _store_bytes(work_dir)
    raw += load_annotations(work_dir, instances)
    if not raw:
        raise DataPipelineError(
            f"no rankings for {work_dir}: give ranking files, or rank the instances with "
            f"`paco-data annotate {work_dir}` first."
        )
    merged, agreement = merge_rankings(raw, instances, method)
    agreement["sources"] = [str(Path(p).resolve()) for p in paths]
    agreement["annotations_bytes"] = store_bytes
    write_jsonl(work_dir / MERGED_FILE, merged)
    write_json(work_dir / AGREEMENT_FILE, agreement)
    logger.info("rankings: %d raw -> %d merged; agreement %s", len(raw), len(merged), agreement)
    return work_dir / MERGED_FILE


def _store_bytes(work_dir: Path) -> int:
    path = work_dir / ANNOTATIONS_FILE
    return path.stat().st_size if path.is_file() else 0


def _agreement(work_dir: Path) -> dict:
    path = work_dir / AGREEMENT_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def merge_sources(work_dir: str | Path) -> tuple[list[str], str]:
    """The ranking files and the method of the work folder's last merge (from
    ``agreement.json``); none and ``"borda"`` before the first.

    Raises:
        DataPipelineError: ``rankings.jsonl`` exists but ``agreement.json`` does not say
            which files it came from (written by an older version): re-run ``paco-data
            rankings`` once.
    """
    work_dir = Path(work_dir)
    if not (work_dir / MERGED_FILE).is_file():
        return [], "borda"
    agreement = _agreement(work_dir)
    if "sources" not in agreement:
        raise DataPipelineError(
            f"{work_dir / MERGED_FILE} exists but {AGREEMENT_FILE} does not record the ranking "
            f"files it was merged from; re-run `paco-data rankings {work_dir} FILES...` once so "
            "new rankings are merged with them instead of replacing them."
        )
    return list(agreement["sources"]), agreement.get("method", "borda")


def merge_is_stale(work_dir: str | Path) -> bool:
    """Whether ``annotations.jsonl`` has changed since ``rankings.jsonl`` was merged."""
    work_dir = Path(work_dir)
    store_bytes = _store_bytes(work_dir)
    if not (work_dir / MERGED_FILE).is_file():
        return store_bytes > 0
    return store_bytes != _agreement(work_dir).get("annotations_bytes", 0)


def refresh_rankings(work_dir: str | Path) -> Path:
    """Re-merge the work folder's rankings after its store changed: the files of the last
    merge (see :func:`merge_sources`) plus ``annotations.jsonl``, with the same method."""
    sources, method = merge_sources(work_dir)
    return ingest_rankings(work_dir, [Path(p) for p in sources], method)


def read_merged(work_dir: str | Path) -> dict[str, dict]:
    """Merged rankings of a work folder by ``instance_id``; merged again first when
    ``paco-data annotate`` has stored rankings since (:func:`merge_is_stale`), so the next
    stage always sees every stored ranking."""
    work_dir = Path(work_dir)
    if merge_is_stale(work_dir):
        logger.info("rankings: %s has new rankings; merging them", ANNOTATIONS_FILE)
        refresh_rankings(work_dir)
    return {r["instance_id"]: r for r in read_jsonl(work_dir / MERGED_FILE)}
