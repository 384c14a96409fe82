"""The synthetic world: determinism, ground truth, no single-image label leakage."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from data_pipeline.storage import DataPipelineError
from data_pipeline.synthetic import (
    PanelSpec,
    SimulatedAnnotators,
    SyntheticWorld,
    panel_layout,
    panel_similarity,
    render_panel,
)
from paco_reward.errors import ConfigError, InputError
from paco_reward.grids import split_grid, split_panel_prompts


def test_prompts_are_t2is_records_in_any_layout():
    world = SyntheticWorld(seed=3)
    prompts = world.make_prompts(6, layouts=[(2, 2), (1, 4), (2, 3)])
    assert [p["layout"] for p in prompts] == ["2x2", "1x4", "2x3"] * 2
    for p in prompts:
        rows, cols = map(int, p["layout"].split("x"))
        _, panels = split_panel_prompts(p["prompt"], expected=rows * cols)
        assert (p["height"], p["width"]) == (rows * 64, cols * 64)
        assert set(p["criteria"]) == {"Identity", "Style", "Logic"}
    assert len({p["category"] for p in prompts}) == 3


def test_grids_are_deterministic_and_match_ground_truth():
    world = SyntheticWorld(seed=0, panel_size=56)
    record = world.make_prompts(1, layouts=[(2, 3)])[0]
    a = np.asarray(world.render_grid(record, 2))
    b = np.asarray(SyntheticWorld(seed=0, panel_size=56).render_grid(record, 2))
    assert a.shape == (112, 168, 3) and (a == b).all()
    assert not (a == np.asarray(world.render_grid(record, 3))).all()
    specs = world.panel_specs(record, 2)
    panels = split_grid(world.render_grid(record, 2), 2, 3)
    for k, (spec, panel) in enumerate(zip(specs, panels)):
        expected = np.asarray(world.render_panel(spec, seed=_seed(record, 2, k)))
        assert (np.asarray(panel) == expected).all()


def _seed(record, grid, k):
    from data_pipeline.synthetic import hash_seed

    return hash_seed(record["idx"], grid, k)


def test_panels_show_their_attributes():
    from data_pipeline.synthetic import COLOURS, PanelSpec

    red_spec = PanelSpec("square", "red", "plain", "warm", "plain", 0, 0)
    blue_spec = PanelSpec("square", "blue", "plain", "warm", "plain", 0, 0)
    for seed in range(5):
        layout = panel_layout(red_spec, 64, seed=seed)
        x0, y0, x1, y1 = layout.box
        centre = ((x0 + x1) // 2, (y0 + y1) // 2)
        assert render_panel(red_spec, 64, seed=seed).getpixel(centre) == COLOURS["red"]
        assert render_panel(blue_spec, 64, seed=seed).getpixel(centre) == COLOURS["blue"]
        assert render_panel(red_spec, 64, seed=seed).getpixel((0, 0)) == layout.background
    assert panel_similarity(
        red_spec, PanelSpec("square", "blue", "plain", "warm", "plain", 0, 1)
    ) == (pytest.approx(5 / 6))


def test_panel_spec_rejects_unknown_values():
    with pytest.raises(InputError, match="palette"):
        PanelSpec("square", "red", "plain", "white", "plain", 0, 0)
    with pytest.raises(InputError, match="step"):
        PanelSpec("square", "red", "plain", "warm", "plain", 0, -1)


def test_attributes_are_not_readable_from_one_panel():
    """Every attribute value is about as frequent in panels that keep the prompt's value
    as in panels that broke it (a label must need both images)."""
    world = SyntheticWorld(seed=0)
    prompts = world.make_prompts(60)
    kept, broken = Counter(), Counter()
    for record in prompts:
        base = record["synthetic"]["attributes"]
        for g in range(4):
            for spec in world.panel_specs(record, g):
                (kept if spec.colour == base["colour"] else broken)[spec.colour] += 1
    assert sum(broken.values()) > 80
    for colour in kept:
        p_kept = kept[colour] / sum(kept.values())
        p_broken = broken[colour] / sum(broken.values())
        assert abs(p_kept - p_broken) < 0.08, (colour, p_kept, p_broken)


def test_simulated_annotators_rank_by_truth():
    world = SyntheticWorld(seed=0)
    record = world.make_prompts(1)[0]
    prompts = {record["idx"]: record}
    cands = [{"grid": "1", "pos": k, "path": ""} for k in range(4)]
    instance = {
        "instance_id": "i",
        "prompt_id": record["idx"],
        "reference": {"grid": "0", "pos": 0},
        "candidates": cands,
    }
    exact = SimulatedAnnotators(n=2, noise=0.0, tie_margin=0.0)
    truth = exact.true_scores(instance, world, prompts)
    rankings = exact.annotate([instance], world, prompts)
    assert len(rankings) == 2 and rankings[0]["annotator"] == "sim0"
    groups = [[c] if isinstance(c, int) else c for c in rankings[0]["ranking"]]
    flat = [c for g in groups for c in g]
    assert sorted(flat) == [0, 1, 2, 3]
    assert [truth[c] for c in flat] == sorted(truth, reverse=True)
    assert all(len({truth[c] for c in g}) == 1 for g in groups)  # only equal truths tie


def test_annotators_say_when_no_candidate_matches_a_broken_reference():
    world = SyntheticWorld(seed=4, panel_break=0.6)
    prompts = {p["idx"]: p for p in world.make_prompts(12)}
    instances = [
        {"instance_id": f"{idx}-{g}", "prompt_id": idx, "reference": {"grid": str(g), "pos": 0},
         "candidates": [{"grid": str(c), "pos": 0} for c in range(4) if c != g]}
        for idx in prompts
        for g in range(4)
    ]  # fmt: skip
    exact = SimulatedAnnotators(n=1, noise=0.0, tie_margin=0.0)
    flagged = {r["instance_id"] for r in exact.annotate(instances, world, prompts)
               if r.get("none_consistent")}  # fmt: skip
    best = {i["instance_id"]: max(exact.true_scores(i, world, prompts)) for i in instances}
    assert flagged == {i for i, b in best.items() if b < 0.75} and 0 < len(flagged) < len(best)
    never = SimulatedAnnotators(n=1, noise=0.0, none_consistent_below=None)
    assert not any("none_consistent" in r for r in never.annotate(instances, world, prompts))


@pytest.mark.parametrize(
    "kwargs, match",
    [({"panel_size": 8}, "panel_size"), ({"grid_drift": 1.5}, "grid_drift")],
)
def test_world_validation(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SyntheticWorld(**kwargs)


def test_annotator_validation():
    with pytest.raises(ConfigError, match="n must be >= 1"):
        SimulatedAnnotators(n=0)
    with pytest.raises(ConfigError, match="noise and tie_margin"):
        SimulatedAnnotators(noise=-1)
    with pytest.raises(ConfigError, match="none_consistent_below must be in"):
        SimulatedAnnotators(none_consistent_below=1.25)
    with pytest.raises(DataPipelineError, match="not a synthetic prompt"):
        SyntheticWorld().panel_specs({"idx": "x", "layout": "2x2"}, 0)


def test_pair_labels_are_not_readable_from_the_candidate_alone():
    """Through the real pairing, ranking and labelling stages: each attribute of the
    candidate (image_b) and of the reference (image_a) is distributed alike in
    consistent and inconsistent pairs, while their agreement differs sharply."""
    from data_pipeline.instances import make_instances
    from data_pipeline.pairs import LabelRule, rankings_to_pairs
    from data_pipeline.rankings import merge_rankings

    world = SyntheticWorld(seed=11)
    prompts = {p["idx"]: p for p in world.make_prompts(240)}
    panels = [
        {"prompt_id": pid, "grid": str(g), "pos": k, "path": f"{pid}/{g}_{k}.png"}
        for pid in prompts
        for g in range(4)
        for k in range(4)
    ]
    instances = {i["instance_id"]: {**i, "theme": "t"} for i in make_instances(panels, prompts)}
    raw = SimulatedAnnotators(n=3, seed=0).annotate(list(instances.values()), world, prompts)
    for r in raw:
        r["ranking"] = [[c] if isinstance(c, int) else c for c in r["ranking"]]
    merged, _ = merge_rankings(raw, instances)
    # The synthetic pipeline's rule: whole tie groups of equal-looking candidates.
    rule = LabelRule(ties="all")
    pairs = rankings_to_pairs(instances, {m["instance_id"]: m for m in merged}, rule)
    specs = {}

    def spec(pair, key):
        grid, pos = pair[key].split(":")
        cache_key = (pair["prompt_id"], grid)
        if cache_key not in specs:
            specs[cache_key] = world.panel_specs(prompts[pair["prompt_id"]], int(grid))
        return specs[cache_key][int(pos)]

    by_label = {label: [p for p in pairs if p["label"] == label] for label in (0, 1)}
    assert min(len(v) for v in by_label.values()) > 2000
    for key in ("panel_a", "panel_b"):
        for attribute in ("shape", "colour", "marking", "palette", "texture", "outline"):
            dist = {}
            for label, group in by_label.items():
                counts = Counter(getattr(spec(p, key), attribute) for p in group)
                dist[label] = {v: n / len(group) for v, n in counts.items()}
            tv = 0.5 * sum(
                abs(dist[0].get(v, 0) - dist[1].get(v, 0)) for v in set(dist[0]) | set(dist[1])
            )
            assert tv < 0.05, (key, attribute, dist)
    agree = {
        label: np.mean([panel_similarity(spec(p, "panel_a"), spec(p, "panel_b")) for p in group])
        for label, group in by_label.items()
    }
    assert agree[1] > agree[0] + 0.2


def test_equal_looking_candidates_always_tie():
    """With noise, candidates equally similar to the reference share one tie group in every
    annotator's ranking; no two candidates of different similarity are ever tied at 0 margin."""
    world = SyntheticWorld(seed=3)
    records = world.make_prompts(6)
    prompts = {r["idx"]: r for r in records}
    instances = [
        {
            "instance_id": f"{r['idx']}-{g}-{k}",
            "prompt_id": r["idx"],
            "reference": {"grid": "0", "pos": k},
            "candidates": [{"grid": str(g), "pos": c, "path": ""} for c in range(4)],
        }
        for r in records
        for g in (1, 2, 3)
        for k in range(4)
    ]
    annotators = SimulatedAnnotators(n=3, noise=0.1, tie_margin=0.0)
    by_id = {i["instance_id"]: i for i in instances}
    tied_groups = 0
    for ranking in annotators.annotate(instances, world, prompts):
        truth = annotators.true_scores(by_id[ranking["instance_id"]], world, prompts)
        groups = [[c] if isinstance(c, int) else c for c in ranking["ranking"]]
        assert [len({truth[c] for c in g}) for g in groups] == [1] * len(groups)
        assert len(groups) == len(set(truth))
        tied_groups += sum(len(g) > 1 for g in groups)
    assert tied_groups > 0


def test_pose_moves_the_character_between_consistent_panels():
    """Without pose, two renders of one spec differ only by a 2-pixel shift; with pose the
    character moves and resizes, so their pixels differ far more."""
    spec = PanelSpec("square", "red", "plain", "neutral", "plain", 0, 0)

    def red_box(image):
        red = np.all(np.asarray(image) == (215, 40, 40), axis=-1)
        ys, xs = np.nonzero(red)
        return xs.min(), ys.min(), xs.max(), ys.max()

    still = {red_box(render_panel(spec, 64, seed=s, pose=False)) for s in range(12)}
    posed = {red_box(render_panel(spec, 64, seed=s)) for s in range(12)}
    assert max(b[0] for b in still) - min(b[0] for b in still) <= 4
    assert max(b[0] for b in posed) - min(b[0] for b in posed) >= 12
    assert max(b[2] - b[0] for b in posed) - min(b[2] - b[0] for b in posed) >= 8  # sizes vary
    world = SyntheticWorld(seed=0)
    record = world.make_prompts(1)[0]
    assert world.render_grid(record, 0).size == (128, 128)


def test_lighting_changes_the_shade_not_the_palette():
    """Each panel is lit at its own shade; the background's hue (the palette) stays: warm
    backgrounds are redder than blue, cool ones bluer than red, neutral ones grey."""
    from data_pipeline.synthetic import PALETTES, SHADES

    shades = set()
    for palette in PALETTES:
        spec = PanelSpec("circle", "green", "plain", palette, "plain", 0, 0)
        for seed in range(20):
            image = render_panel(spec, 64, seed=seed)
            layout = panel_layout(spec, 64, seed=seed)
            r, g, b = image.getpixel((0, 0))
            assert (r, g, b) == PALETTES[palette][layout.shade]
            assert {"warm": r > b, "cool": b > r, "neutral": r == g == b}[palette]
            shades.add(layout.shade)
        light = render_panel(spec, 64, seed=0, lighting=False).getpixel((0, 0))
        assert light == PALETTES[palette]["light"]
    assert shades == set(SHADES)


def test_pixels_do_not_decide_ground_truth_pairs():
    """On the default world, mean absolute pixel difference barely separates identical
    panels from panels two or more attributes apart (ROC-AUC near 0.5); without pose and
    lighting it does (the reason the default world varies them). AUC from scipy's
    Mann-Whitney U."""
    from scipy.stats import mannwhitneyu

    from data_pipeline.synthetic import ATTRIBUTES, hash_seed

    def auc(world):
        pixels, labels = [], []
        for record in world.make_prompts(12):
            panels = [
                (
                    g,
                    spec,
                    np.asarray(world.render_panel(spec, hash_seed(record["idx"], g, k)), float),
                )
                for g in range(4)
                for k, spec in enumerate(world.panel_specs(record, g))
            ]
            for i, (ga, a, image_a) in enumerate(panels):
                for gb, b, image_b in panels[i + 1 :]:
                    differences = sum(getattr(a, key) != getattr(b, key) for key in ATTRIBUTES)
                    if ga != gb and differences != 1:
                        pixels.append(-np.abs(image_a - image_b).mean())
                        labels.append(differences == 0)
        pixels, labels = np.array(pixels), np.array(labels)
        assert labels.sum() > 50 and (~labels).sum() > 50
        u = mannwhitneyu(pixels[labels], pixels[~labels]).statistic
        return u / (labels.sum() * (~labels).sum())

    varied, still = (
        auc(SyntheticWorld(seed=0)),
        auc(SyntheticWorld(seed=0, pose=False, lighting=False)),
    )
    assert varied < 0.65 and still > varied + 0.15, (varied, still)


def test_a_work_folder_of_another_world_is_refused_unless_overwritten(tmp_path):
    from data_pipeline.pipeline import SyntheticConfig, make_synthetic_inputs
    from paco_reward.errors import OutputDirInUseError

    small = SyntheticConfig(n_prompts=2, grids_per_prompt=2, layouts=["2x2"], seed=0)
    make_synthetic_inputs(tmp_path, small)
    grids = sorted(p.relative_to(tmp_path) for p in (tmp_path / "inputs").rglob("*.png"))
    make_synthetic_inputs(tmp_path, small)  # the same world: resumes
    other = SyntheticConfig(n_prompts=1, grids_per_prompt=2, layouts=["2x2"], seed=1)
    with pytest.raises(OutputDirInUseError, match=rf"{tmp_path}.*--overwrite_output_dir true"):
        make_synthetic_inputs(tmp_path, other)
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "inputs").rglob("*.png")) == grids
    make_synthetic_inputs(tmp_path, other, overwrite=True)  # emptied: only the new world's grids
    assert len(list((tmp_path / "inputs").rglob("*.png"))) == 2
