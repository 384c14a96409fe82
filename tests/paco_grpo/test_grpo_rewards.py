"""Reward contract, registry, and the two built-in rewards; prompt loaders."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from PIL import Image

from paco_grpo.data import load_prompts
from paco_grpo.rewards import (
    REWARDS,
    ConsistencyReward,
    PanelColourAgreementReward,
    build_reward,
    build_rewards,
)
from paco_grpo.testing.flux_kontext import write_tiny_edit_prompts
from paco_reward.errors import LayoutError, PromptError


def _grid(colours, size=16):
    image = torch.zeros(3, 2 * size, 2 * size)
    for k, colour in enumerate(colours):
        r, c = divmod(k, 2)
        image[:, r * size : (r + 1) * size, c * size : (c + 1) * size] = torch.tensor(colour)[
            :, None, None
        ]
    return image


def test_panel_colour_agreement_closed_form():
    reward = PanelColourAgreementReward(layout="2x2")
    same = _grid([(0.2, 0.4, 0.6)] * 4)
    two = _grid([(0, 0, 0), (0, 0, 0), (1, 1, 1), (1, 1, 1)])
    scores = reward([same, two], ["p", "p"], [{}, {}])
    # 4 of the 6 pairs are black-white (distance sqrt(3)), 2 are equal
    np.testing.assert_allclose(scores, [1.0, 1.0 - 4 / 6])
    # PIL and uint8 arrays give the same score
    pil = Image.fromarray((two.permute(1, 2, 0).numpy() * 255).astype(np.uint8))
    np.testing.assert_allclose(reward([pil], ["p"], [{}]), [1.0 - 4 / 6])


def test_panel_colour_agreement_layout_sources():
    image = _grid([(0, 0, 0), (1, 1, 1), (0, 0, 0), (1, 1, 1)])  # columns differ, rows agree
    by_rows = PanelColourAgreementReward(layout=None)(
        [image, image], ["a 2x1 grid", "a 1x2 grid"], [{}, {}]
    )
    np.testing.assert_allclose(by_rows, [1.0, 0.0], atol=1e-6)
    from_meta = PanelColourAgreementReward(layout="1x2")([image], ["p"], [{"layout": "2x1"}])
    np.testing.assert_allclose(from_meta, [1.0])


def test_failed_item_is_nan_with_a_logged_reason(caplog):
    reward = PanelColourAgreementReward(layout=None)
    with caplog.at_level(logging.WARNING, logger="paco_grpo.rewards"):
        scores = reward([_grid([(0, 0, 0)] * 4)], ["no layout here"], [{}])
    assert np.isnan(scores[0]) and "no grid layout for 'no layout here'" in caplog.text


@pytest.mark.parametrize("reward_layout", [None, "2x2"])
def test_a_prompts_own_layout_comes_before_the_rewards(reward_layout):
    """A 1x4 prompt is cut 1x4 whatever the reward's explicit layout; metadata wins over both."""
    strip = torch.zeros(3, 16, 64)
    for k, colour in enumerate([(0, 0, 0), (0, 0, 0), (1, 1, 1), (1, 1, 1)]):
        strip[:, :, k * 16 : (k + 1) * 16] = torch.tensor(colour, dtype=torch.float32)[
            :, None, None
        ]
    reward = PanelColourAgreementReward(layout=reward_layout)
    prompt = "FOUR-PANEL Images with a 1x4 grid layout. A fox. [PANEL-1]: a. [PANEL-2]: b."
    np.testing.assert_allclose(reward([strip], [prompt], [{}]), [1.0 - 4 / 6])
    np.testing.assert_allclose(reward([strip], ["p"], [{"layout": "1x2"}]), [0.0], atol=1e-6)


def test_consistency_reward_equals_score_grid(tiny_reward):
    reward = ConsistencyReward(tiny_reward)
    rng = np.random.default_rng(0)
    grids = [torch.as_tensor(rng.uniform(0, 1, (3, 64, 64)), dtype=torch.float32) for _ in range(2)]
    prompt = "FOUR-PANEL Images with a 2x2 grid layout. A fox. [TOP]-[LEFT]: sleeping."
    scores = reward(grids, [prompt, prompt], [{"layout": "2x2"}, {}])
    expected = [tiny_reward.score_grid(g, prompt).mean for g in grids]
    np.testing.assert_allclose(scores, expected, rtol=1e-6)
    assert scores[0] != scores[1]
    bad = reward([grids[0][:, :1, :]], ["p"], [{"layout": "2x2"}])  # one row cannot be cut in two
    assert np.isnan(bad[0])


def test_registry_resolves_names_and_lists_valid_ones():
    assert set(REWARDS) >= {"consistency", "panel_colour_agreement"}
    assert isinstance(
        build_reward("panel_colour_agreement", layout="1x2"), PanelColourAgreementReward
    )
    with pytest.raises(
        ValueError,
        match=r"Unknown reward 'clip_tt'; valid rewards: \['clip_i', 'clip_t', 'consistency'",
    ):
        build_reward("clip_tt")
    with pytest.raises(ValueError, match=r"Unknown reward\(s\) \['nope'\]"):
        build_rewards({"nope": 1.0, "panel_colour_agreement": 1.0})


def test_every_reward_holding_a_model_takes_a_device_by_name():
    """build_rewards passes the process's device to the rewards whose constructor names a
    ``device`` parameter: every built-in reward with a model, none without."""
    import inspect

    from paco_grpo.rewards.registry import _takes_device

    holding_a_model = {"clip_t", "pickscore", "clip_i", "consistency", "t2is_consistency", "edit_consistency", "ocr"}
    assert {name for name, cls in REWARDS.items() if _takes_device(cls)} == holding_a_model
    for name in holding_a_model:
        parameter = inspect.signature(REWARDS[name]).parameters["device"]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is None
    # a reward without a model is built as before, the process's device left out
    reward = build_reward("panel_colour_agreement", device=torch.device("cpu"), layout="1x2")
    assert reward.layout == "1x2" and not hasattr(reward, "device")
    assert list(build_rewards({"panel_colour_agreement": 1.0}, device="cuda:1")) == [
        "panel_colour_agreement"
    ]


def test_load_t2is_and_text(tmp_path):
    items = load_prompts("recipes/data/t2is_train_metadata.jsonl")
    assert len(items) == 150 and len({i.id for i in items}) == 150
    first = items[0]
    assert first.id == "0003" and first.metadata["layout"] == "2x2"
    assert len(first.metadata["panel_prompts"]) == 4 and first.height == 1024
    text = tmp_path / "p.txt"
    text.write_text("a fox\n\n a bird in a 1x4 strip\n")
    items = load_prompts(text, layout="2x2")
    assert [(i.id, i.prompt) for i in items] == [("0", "a fox"), ("2", "a bird in a 1x4 strip")]
    assert [i.metadata["layout"] for i in items] == ["2x2", "1x4"]  # the prompt's own first


def test_t2is_layout_field_then_prompt_then_recipe(tmp_path):
    import json

    rows = [
        {"idx": "a", "prompt": "a 2x3 grid of foxes", "layout": "1x2"},
        {"idx": "b", "prompt": "a 2x3 grid of foxes"},
        {"idx": "c", "prompt": "foxes"},
    ]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    layouts = [i.metadata["layout"] for i in load_prompts(path, layout="1x4")]
    assert layouts == ["1x2", "2x3", "1x4"]
    with pytest.raises(LayoutError, match=r"p.jsonl:3: no grid layout.*'foxes'.*recipe's `layout`"):
        load_prompts(path)


def test_load_parquet_prompt_image_pairs(tmp_path):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    Image.new("RGB", (8, 6), (255, 0, 0)).save(buffer, format="PNG")
    pq.write_table(
        pa.table(
            {"prompt": ["make it blue"], "image": [{"bytes": buffer.getvalue(), "path": None}]}
        ),
        tmp_path / "edit.parquet",
    )
    (item,) = load_prompts(tmp_path / "edit.parquet")
    assert item.prompt == "make it blue" and item.metadata["source_image"].size == (8, 6)
    # Other columns reach the rewards as metadata (e.g. CLIP-T's text of the edit).
    pq.write_table(
        pa.table(
            {
                "prompt": ["make it blue"] * 2,
                "image": [buffer.getvalue()] * 2,
                "panel_prompts": [["a blue image"], None],
                "layout": ["1x1", "1x1"],
            }
        ),
        tmp_path / "extra.parquet",
    )
    first, second = load_prompts(tmp_path / "extra.parquet")
    assert first.metadata["panel_prompts"] == ["a blue image"]
    assert first.metadata["layout"] == second.metadata["layout"] == "1x1"
    assert "panel_prompts" not in second.metadata and "image" not in first.metadata
    pq.write_table(
        pa.table({"prompt": ["x"], "image": [b"not an image"]}), tmp_path / "bad.parquet"
    )
    with pytest.raises(PromptError, match="not a decodable image"):
        load_prompts(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"prompt": ["x"], "image": [None]}), tmp_path / "none.parquet")
    with pytest.raises(PromptError, match="has no 'image'"):
        load_prompts(tmp_path / "none.parquet")
    pq.write_table(pa.table({"prompt": [""], "image": [b""]}), tmp_path / "np.parquet")
    with pytest.raises(PromptError, match="row 0 needs a non-empty 'prompt'"):
        load_prompts(tmp_path / "np.parquet")


def test_a_parquet_image_cell_may_list_several_references(tmp_path):
    """A multi-reference edit's ``image`` cell is a list: the references in order, the first
    also the source; the same references in another order are another (id, images) pair."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from paco_grpo.data import edit_references

    path = write_tiny_edit_prompts(tmp_path / "plus.parquet", references=2)
    items = load_prompts(path)
    assert [[im.size for im in edit_references(it)] for it in items] == [
        [(48, 48), (48, 48)], [(96, 48), (48, 48)], [(48, 48), (48, 96)], [(96, 48), (48, 96)],
    ]  # fmt: skip
    assert all(it.metadata["source_image"] is edit_references(it)[0] for it in items)
    rows = pq.read_table(path).to_pylist()
    swapped = [{**rows[0], "image": rows[0]["image"][::-1]}, rows[0]]
    pq.write_table(pa.Table.from_pylist(swapped), tmp_path / "swapped.parquet")
    assert len(load_prompts(tmp_path / "swapped.parquet")) == 2
    pq.write_table(pa.Table.from_pylist([rows[0], rows[0]]), tmp_path / "dupe.parquet")
    with pytest.raises(PromptError, match="duplicate prompt ids"):
        load_prompts(tmp_path / "dupe.parquet")


def test_prompt_loader_errors(tmp_path):
    with pytest.raises(PromptError, match="No prompt file"):
        load_prompts(tmp_path / "missing.txt")
    nameless = tmp_path / "n.txt"
    nameless.write_text("a 2x2 grid of foxes\na fox\n")
    with pytest.raises(LayoutError, match=r"n.txt:2: no grid layout"):
        load_prompts(nameless)
    empty = tmp_path / "e.txt"
    empty.write_text("\n")
    with pytest.raises(PromptError, match="no prompts found"):
        load_prompts(empty)
    bad = tmp_path / "b.jsonl"
    bad.write_text("{not json}\n")
    with pytest.raises(PromptError, match="b.jsonl:1: not valid JSON"):
        load_prompts(bad)
    bad.write_text(json.dumps({"idx": "1"}) + "\n")
    with pytest.raises(PromptError, match="needs a non-empty 'prompt'"):
        load_prompts(bad)
    bad.write_text(
        json.dumps({"idx": "1", "prompt": "a"})
        + "\n"
        + json.dumps({"idx": "1", "prompt": "b"})
        + "\n"
    )
    with pytest.raises(PromptError, match=r"duplicate prompt ids \['1'\]"):
        load_prompts(bad, layout="2x2")
    with pytest.raises(PromptError, match="prompt format must be"):
        load_prompts(empty, format="csv")
