"""Stages 3-5: ranking instances, ranking merge + agreement, rankings -> pairs."""

from __future__ import annotations

import json

import pytest

from data_pipeline.instances import PairingConfig, make_instances
from data_pipeline.pairs import LabelRule, label_candidates, rankings_to_pairs, read_edit_pairs
from data_pipeline.rankings import (
    kendalls_w,
    load_rankings,
    merge_instance,
    merge_rankings,
    normalise_ranking,
    pairwise_agreement,
)
from data_pipeline.storage import DataPipelineError
from paco_reward.errors import ConfigError, InputError


def _panels(n_prompts=2, grids=4, panels=4):
    return [
        {"prompt_id": f"p{p}", "grid": str(g), "pos": k, "path": f"panels/p{p}/{g}_{k}.png"}
        for p in range(n_prompts)
        for g in range(grids)
        for k in range(panels)
    ]


def test_default_rule_reproduces_48_instances_per_prompt():
    instances = make_instances(_panels())
    assert len(instances) == 2 * 48
    inst = instances[0]
    assert len(inst["candidates"]) == 4
    assert {c["grid"] for c in inst["candidates"]} != {inst["reference"]["grid"]}
    assert len({c["grid"] for c in inst["candidates"]}) == 1
    # Stable ids: same input, same ids; all distinct.
    assert [i["instance_id"] for i in make_instances(_panels())] == [
        i["instance_id"] for i in instances
    ]
    assert len({i["instance_id"] for i in instances}) == len(instances)


@pytest.mark.parametrize(
    "config, per_prompt, n_candidates",
    [
        (PairingConfig(rule="all_other_grids"), 16, 12),
        (PairingConfig(rule="same_position"), 16, 3),
        (PairingConfig(rule="all_other_grids", max_candidates=5), 16, 5),
        (PairingConfig(rule="other_grid"), 36, 6),  # 3 grids of 2x3: 3 x 2 x 6
    ],
)
def test_configurable_rules(config, per_prompt, n_candidates):
    panels = _panels(1, 3, 6) if n_candidates == 6 else _panels(1)
    instances = make_instances(panels, config=config)
    assert len(instances) == per_prompt
    assert all(len(i["candidates"]) == n_candidates for i in instances)
    for i in instances:
        assert all(c["grid"] != i["reference"]["grid"] for c in i["candidates"])
        if config.rule == "same_position":
            assert all(c["pos"] == i["reference"]["pos"] for c in i["candidates"])


def test_shuffle_is_seeded():
    a = make_instances(_panels(1), config=PairingConfig(shuffle_candidates=True, seed=1))
    b = make_instances(_panels(1), config=PairingConfig(shuffle_candidates=True, seed=1))
    assert a == b
    assert any([c["pos"] for c in i["candidates"]] != [0, 1, 2, 3] for i in a)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rule": "random"}, "rule must be one of"),
        ({"min_candidates": 1}, "min_candidates must be >= 2"),
        ({"max_candidates": 1}, "max_candidates"),
    ],
)
def test_pairing_config_validation(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        PairingConfig(**kwargs)


def test_normalise_ranking_ties():
    assert normalise_ranking({"ranking": [2, [0, 1], 3]}, 4) == [[2], [0, 1], [3]]
    assert normalise_ranking({"order": [2, 0, 1, 3], "ties": [[1, 3]]}, 4) == [[2], [0], [1, 3]]


@pytest.mark.parametrize(
    "record, match",
    [
        ({}, "no 'ranking' list"),
        ({"ranking": [0, "a"]}, "candidate indices"),
        ({"ranking": [0, [], 1]}, "empty tie group"),
        ({"ranking": [0, 0, 1, 2]}, "appears twice"),
        ({"ranking": [0, 1, 2]}, "every candidate 0..3"),
    ],
)
def test_normalise_ranking_errors(record, match):
    with pytest.raises(DataPipelineError, match=match):
        normalise_ranking(record, 4, "x")


def test_merge_borda_and_majority():
    rankings = [[[0], [1], [2], [3]], [[1], [0], [2], [3]], [[0], [2], [1], [3]]]
    borda = merge_instance(rankings, 4, "borda")
    assert borda["ranking"] == [[0], [1], [2], [3]] and borda["scores"] == [8, 6, 4, 0]
    majority = merge_instance(rankings, 4, "majority")
    assert majority["ranking"] == [[0], [1], [2], [3]]
    # A perfect split stays tied (and is discarded later).
    assert merge_instance([[[0], [1]], [[1], [0]]], 2)["ranking"] == [[0, 1]]
    with pytest.raises(InputError, match="method must be one of"):
        merge_instance(rankings, 4, "median")


def test_kendalls_w_closed_forms():
    same = [[[0], [1], [2], [3]]] * 3
    assert kendalls_w(same, 4) == pytest.approx(1.0)
    opposite = [[[0], [1], [2]], [[2], [1], [0]]]
    assert kendalls_w(opposite, 3) == pytest.approx(0.0)
    # m=2, n=3, ranks (1,2,3) and (1,3,2): R=(2,5,5), S=6, W = 12*6/(4*24) = 0.75
    assert kendalls_w([[[0], [1], [2]], [[0], [2], [1]]], 3) == pytest.approx(0.75)
    assert kendalls_w([[[0], [1]]], 2) != kendalls_w([[[0], [1]]], 2)  # NaN with one annotator


def test_pairwise_agreement_counts():
    agree, total = pairwise_agreement([[[0], [1], [2]], [[0], [2], [1]]])
    assert (agree, total) == (2, 3)
    agree, total = pairwise_agreement([[[0, 1], [2]], [[0], [1], [2]]])
    assert (agree, total) == (2, 2)  # the tied pair is not compared


def test_load_and_merge_rankings_file(tmp_path):
    instances = {i["instance_id"]: i for i in make_instances(_panels(1))}
    ids = list(instances)[:2]
    path = tmp_path / "r.jsonl"
    path.write_text(
        "".join(
            json.dumps({"instance_id": i, "annotator": a, "ranking": r}) + "\n"
            for i in ids
            for a, r in (("a", [0, 1, 2, 3]), ("b", [0, 2, 1, 3]))
        )
    )
    raw = load_rankings(path, instances)
    merged, agreement = merge_rankings(raw, instances)
    assert len(merged) == 2 and merged[0]["ranking"][0] == [0] and merged[0]["n_annotators"] == 2
    assert agreement["annotators"] == 2 and agreement["pairwise_agreement"] == pytest.approx(5 / 6)
    # Candidates may be named by their ConsistencyRank file names.
    inst = instances[ids[0]]
    names = [f"{c['grid']}_{c['pos']}.png" for c in inst["candidates"]]
    named = tmp_path / "named.jsonl"
    named.write_text(
        json.dumps({"instance_id": ids[0], "ranking": [names[2], [names[0], names[3]], names[1]]})
        + "\n"
    )
    assert load_rankings(named, instances)[0]["ranking"] == [[2], [0, 3], [1]]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"instance_id": "nope", "ranking": [0, 1, 2, 3]}) + "\n")
    with pytest.raises(DataPipelineError, match="unknown instance_id 'nope'"):
        load_rankings(bad, instances)


@pytest.mark.parametrize(
    "groups, rule, expected",
    [
        ([[2], [0], [1], [3]], LabelRule(), {2: 1, 3: 0}),
        ([[2, 0], [1], [3]], LabelRule(), {3: 0}),  # tied top discarded
        ([[2], [0], [1, 3]], LabelRule(), {2: 1}),  # tied bottom discarded
        ([[2, 0], [1], [3]], LabelRule(ties="all"), {2: 1, 0: 1, 3: 0}),
        ([[2, 0], [1], [3]], LabelRule(ties="first"), {0: 1, 3: 0}),
        ([[2], [0, 1, 3]], LabelRule(ties="first"), {2: 1, 0: 0}),
        ([[2], [0, 1, 3]], LabelRule(top_k=2, ties="first"), {2: 1}),  # 0 would be both
        ([[2], [0], [1], [3]], LabelRule(top_k=2, bottom_k=2), {2: 1, 0: 1, 1: 0, 3: 0}),
        ([[0, 1, 2, 3]], LabelRule(), {}),
        ([[2], [0], [1], [3]], LabelRule(top_k=0, bottom_k=1), {3: 0}),
    ],
)
def test_label_rules(groups, rule, expected):
    assert label_candidates(groups, rule) == expected


def test_label_rule_validation():
    with pytest.raises(ConfigError, match="not both 0"):
        LabelRule(top_k=0, bottom_k=0)
    with pytest.raises(ConfigError, match="template must be one of"):
        LabelRule(template="nope")
    with pytest.raises(
        ConfigError, match=r"ties must be one of \('drop', 'all', 'first'\); got 'x'"
    ):
        LabelRule(ties="x")
    with pytest.raises(ConfigError, match="unknown templates"):
        LabelRule(template_mix={"nope": 0.1})
    with pytest.raises(ConfigError, match="sum to at most 1"):
        LabelRule(template_mix={"rank": 0.7, "criteria": 0.5})


def test_template_mix_asks_a_stable_fraction_with_other_templates():
    instances = {i["instance_id"]: {**i, "theme": "a red fox"} for i in make_instances(_panels(8))}
    merged = {k: {"ranking": [[1], [0], [2], [3]]} for k in instances}
    rule = LabelRule(template_mix={"rank": 0.25})
    pairs = rankings_to_pairs(instances, merged, rule)
    rank = [p for p in pairs if p["template"] == "rank"]
    assert {p["template"] for p in pairs} == {"consistency", "rank"}
    assert abs(len(rank) / len(pairs) - 0.25) < 0.06, (len(rank), len(pairs))
    assert all(p["prompt"] == "" for p in rank)
    assert all(p["prompt"] == "a red fox" for p in pairs if p["template"] == "consistency")
    again = rankings_to_pairs(instances, merged, rule)
    assert [(p["pair_id"], p["template"]) for p in again] == [
        (p["pair_id"], p["template"]) for p in pairs
    ]
    plain = rankings_to_pairs(instances, merged, LabelRule())
    assert len(plain) == len(pairs) and {p["template"] for p in plain} == {"consistency"}


def test_rankings_to_pairs_records():
    instances = {i["instance_id"]: {**i, "theme": "a red fox"} for i in make_instances(_panels(1))}
    merged = {k: {"ranking": [[1], [0], [2], [3]]} for k in list(instances)[:5]}
    pairs = rankings_to_pairs(instances, merged)
    assert len(pairs) == 10 and sum(p["label"] for p in pairs) == 5
    p = pairs[0]
    inst = instances[p["instance_id"]]
    assert p["image_a"] == inst["reference"]["path"] and p["prompt"] == "a red fox"
    assert p["image_b"] == inst["candidates"][1]["path"] and p["label"] == 1
    assert p["template"] == "consistency" and len({q["pair_id"] for q in pairs}) == 10
    rank_pairs = rankings_to_pairs(instances, merged, LabelRule(template="rank"))
    assert all(q["prompt"] == "" for q in rank_pairs)
    empty = {k: {**v, "theme": ""} for k, v in instances.items()}
    with pytest.raises(DataPipelineError, match="needs a prompt"):
        rankings_to_pairs(empty, merged)


def test_a_majority_saying_no_candidate_matches_leaves_only_inconsistent_pairs(tmp_path):
    instances = {i["instance_id"]: {**i, "theme": "a fox"} for i in make_instances(_panels(1))}
    first, second = list(instances)[:2]
    flags = {(first, "a"): True, (first, "b"): True, (first, "c"): False, (second, "a"): True}
    path = tmp_path / "r.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "instance_id": i,
                    "annotator": a,
                    "ranking": [1, 0, 2, 3],
                    **({"none_consistent": True} if flags.get((i, a)) else {}),
                }
            )
            + "\n"
            for i in (first, second)
            for a in "abc"
        )  # fmt: skip
    )
    merged, agreement = merge_rankings(load_rankings(path, instances), instances)
    by_id = {m["instance_id"]: m for m in merged}
    assert by_id[first]["none_consistent"] and not by_id[second]["none_consistent"]  # 2/3, 1/3
    assert agreement["instances_none_consistent"] == 1
    pairs = rankings_to_pairs(instances, by_id)
    labels = {(p["instance_id"], p["label"]) for p in pairs}
    assert labels == {(first, 0), (second, 0), (second, 1)}
    path.write_text(json.dumps({"instance_id": first, "ranking": [0, 1, 2, 3],
                                "none_consistent": "yes"}) + "\n")  # fmt: skip
    with pytest.raises(DataPipelineError, match="none_consistent must be true or false"):
        load_rankings(path, instances)


def test_read_edit_pairs(tmp_path, random_images):
    a, b = random_images(2)
    a.save(tmp_path / "src.png")
    b.save(tmp_path / "out.png")
    path = tmp_path / "edits.jsonl"
    rows = [
        {"id": "e1", "source": "src.png", "edited": "out.png", "instruction": "make it blue"},
        {"source": "src.png", "edited": "out.png", "instruction": "add a hat", "label": "No"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pairs = read_edit_pairs(path)
    assert [p["label"] for p in pairs] == [1, 0]
    assert pairs[0]["template"] == "edit_consistency" and pairs[0]["source"] == "edit"
    assert pairs[0]["prompt"] == "make it blue" and pairs[0]["image_a"].endswith("src.png")
    path.write_text(
        json.dumps({"source": "src.png", "edited": "missing.png", "instruction": "x"}) + "\n"
    )
    with pytest.raises(DataPipelineError, match="edited image .*missing.png.* does not exist"):
        read_edit_pairs(path)
    path.write_text(json.dumps({"source": "src.png", "edited": "out.png"}) + "\n")
    with pytest.raises(DataPipelineError, match="lacks \\['instruction'\\]"):
        read_edit_pairs(path)
    path.write_text(
        json.dumps({"source": "src.png", "edited": "out.png", "instruction": "x", "label": "maybe"})
        + "\n"
    )
    with pytest.raises(DataPipelineError, match="label must be"):
        read_edit_pairs(path)
