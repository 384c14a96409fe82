"""The progress counts of the annotation app (data_pipeline.annotate.progress): kept up to date
by each submission, equal to a recount from scratch with the pipeline's own functions (also
after a restart reads them back), and read, not recomputed, by each progress request."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter, defaultdict

from tests.annotate.conftest import make_work
from tests.annotate.test_annotate_http import ids_of, rank, read_instances


def recount(work, ranking_file) -> dict:
    """/api/progress computed from scratch: every ranking read from the files, one per
    annotator (canonical name) and instance, the first; statistics by the pipeline's
    functions, the overall agreement by the merge ``paco-data rankings`` runs."""
    from data_pipeline.annotate.config import canonical_annotator
    from data_pipeline.rankings import (
        kendalls_w,
        load_annotations,
        load_rankings,
        merge_rankings,
        pairwise_agreement,
    )

    instances = {i["instance_id"]: i for i in read_instances(work)}
    raw = [(r, False) for r in load_rankings(ranking_file, instances)]
    raw += [(r, True) for r in load_annotations(work)]
    counted, seen = [], set()
    for record, stored in raw:
        key = (canonical_annotator(record["annotator"]), record["instance_id"])
        if key not in seen:
            seen.add(key)
            counted.append(({**record, "annotator": key[0]}, stored))
    by_instance = defaultdict(dict)
    for record, _ in counted:
        by_instance[record["instance_id"]][record["annotator"]] = record["ranking"]

    annotators = []
    for name in sorted({r["annotator"] for r, _ in counted}):
        mine = [r for r, stored in counted if r["annotator"] == name and stored]
        seconds = [r["seconds"] for r in mine if "seconds" in r]
        agree = compared = 0
        for rankings in by_instance.values():
            for other, ranking in rankings.items():
                if name in rankings and other != name:
                    a, c = pairwise_agreement([rankings[name], ranking])
                    agree, compared = agree + a, compared + c
        annotators.append(
            {
                "annotator": name,
                "rankings": sum(r["annotator"] == name for r, _ in counted),
                "in_store": len(mine),
                "last": max((r["time"] for r in mine), default=None),
                "median_seconds": statistics.median(seconds) if seconds else None,
                "agreement_with_others": agree / compared if compared else None,
                "compared_pairs": compared,
            }
        )
    categories = {}
    for instance_id, instance in instances.items():
        rankings = by_instance.get(instance_id, {})
        category = categories.setdefault(
            instance["category"],
            {"instances": 0, "ranked": 0, "rankings": 0, "multi_annotated": 0, "ws": []},
        )
        category["instances"] += 1
        category["ranked"] += bool(rankings)
        category["rankings"] += len(rankings)
        if len(rankings) >= 2:
            category["multi_annotated"] += 1
            w = kendalls_w(list(rankings.values()), len(instance["candidates"]))
            if not math.isnan(w):
                category["ws"].append(w)
    for category in categories.values():
        ws = category.pop("ws")
        category["kendall_w_mean"] = sum(ws) / len(ws) if ws else None
    _, agreement = merge_rankings([r for r, _ in counted], instances)
    return {
        "instances": len(instances),
        "ranked": sum(c["ranked"] for c in categories.values()),
        "rankings": len(counted),
        "in_store": sum(stored for _, stored in counted),
        "annotators": annotators,
        "categories": [{"category": k, **v} for k, v in sorted(categories.items())],
        "agreement": {
            k: agreement[k]
            for k in (
                "kendall_w_mean",
                "pairwise_agreement",
                "pairwise_comparisons",
                "instances_multi_annotated",
            )
        },
    }


def assert_same(actual, expected, where: str = "progress") -> None:
    """Equal, floats to 12 digits (sums taken in another order)."""
    if isinstance(expected, float) and isinstance(actual, float):
        assert math.isclose(actual, expected, rel_tol=1e-12), (where, actual, expected)
    elif isinstance(expected, dict) and isinstance(actual, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list) and isinstance(actual, list):
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, (where, actual, expected)


def test_progress_equals_a_recount_after_random_submissions(tmp_path, client_for):
    from data_pipeline.annotate import AnnotationStore
    from data_pipeline.pipeline import simulate_rankings
    from data_pipeline.rankings import ingest_rankings

    work = make_work(tmp_path, n_prompts=2)  # 96 instances in 2 categories
    instances = read_instances(work)
    # The ranking files of the last merge count too: simulated annotators on a few instances.
    simulated = simulate_rankings(work, tmp_path / "all_simulated.jsonl").read_text()
    ranking_file = tmp_path / "simulated.jsonl"
    ranking_file.write_text("".join(simulated.splitlines(keepends=True)[:45]))
    ingest_rankings(work, ranking_file)

    client = client_for(work)
    rng = random.Random(41)
    names = ["alice", "ALICE", "alice.", "bob", "Bob-", "carol", "dave", "SIM0", "sim1"]
    statuses = Counter()
    for _ in range(300):
        instance = rng.choice(instances[:40])  # crowded: most instances get several rankings
        order = rng.sample(range(len(instance["candidates"])), len(instance["candidates"]))
        groups, cut = [], 0
        while cut < len(order):  # random tie groups
            size = rng.choice([1, 1, 1, 2])
            groups.append(order[cut : cut + size])
            cut += size
        ids = ids_of(instance)
        body = {"annotator": rng.choice(names), "instance_id": instance["instance_id"],
                "ranking": [[ids[i] for i in g] for g in groups]}  # fmt: skip
        if rng.random() < 0.7:
            body["seconds"] = round(rng.uniform(1, 60), 2)
        response = client.post("/api/rankings", json=body)
        statuses[response.status_code] += 1
        if rng.random() < 0.1:
            client.get("/api/progress")  # counts built mid-way, then kept up to date
    assert statuses[201] > 100 and statuses[409] > 50 and set(statuses) == {201, 409}

    progress = client.get("/api/progress").json()
    expected = recount(work, ranking_file)
    assert_same(progress, expected)
    assert progress["agreement"]["instances_multi_annotated"] > 20
    # A restart reads the same counts back from the files.
    assert AnnotationStore(work).progress() == progress


def test_a_progress_request_computes_no_statistics(work, client_for, monkeypatch):
    """Each submission adds its own comparisons; a progress request only reads the totals.
    (Before, each request recomputed every instance's statistics: 0.1-0.25 s at 6,624
    rankings, and a client polling it raised the submissions' p95 from 15-28 to 60-99 ms;
    ``python -m benchmarks.annotate_load``.)"""
    import data_pipeline.rankings as rankings

    client = client_for(work)
    instances = read_instances(work)
    for instance in instances[:30]:
        rank(client, "alice", instance, [[0], [1], [2], [3]])
        rank(client, "bob", instance, [[1], [0], [3], [2]])
    first = client.get("/api/progress").json()  # the counts are built on the first request
    assert first["agreement"]["instances_multi_annotated"] == 30

    calls = []
    positions = rankings.positions  # what every agreement statistic ranks with
    monkeypatch.setattr(rankings, "positions", lambda groups: calls.append(1) or positions(groups))
    for _ in range(5):
        assert client.get("/api/progress").json() == first
    assert calls == []
    rank(client, "carol", instances[0], [[0], [1], [2], [3]])
    # Two pairwise comparisons and one Kendall's W of the 3 rankings of that instance.
    assert len(calls) == 2 * 2 + 3
    assert client.get("/api/progress").json()["agreement"]["pairwise_comparisons"] == 30 * 6 + 2 * 6
    assert len(calls) == 7


def test_progress_after_the_instances_are_rebuilt(work, client_for):
    """Rankings of instances that are gone count for their annotators, not for the
    categories or the agreement (before, the progress page failed with a 500)."""
    from data_pipeline.instances import PairingConfig, build_instances

    client = client_for(work)
    first = read_instances(work)[0]
    rank(client, "alice", first, [[0], [1], [2], [3]])
    rank(client, "bob", first, [[0], [1], [2], [3]])
    assert client.get("/api/progress").json()["agreement"]["pairwise_comparisons"] == 6
    build_instances(work, PairingConfig(rule="same_position"))
    response = client.get("/api/progress")
    assert response.status_code == 200, response.text
    progress = response.json()
    assert (progress["instances"], progress["ranked"], progress["rankings"]) == (48, 0, 2)
    assert [a["rankings"] for a in progress["annotators"]] == [1, 1]
    assert progress["agreement"]["pairwise_comparisons"] == 0
    assert (
        json.loads((work / "annotations.jsonl").read_text().splitlines()[0])["annotator"] == "alice"
    )
