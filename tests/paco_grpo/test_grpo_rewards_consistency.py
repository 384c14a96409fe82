"""consistency and edit_consistency on the tiny evaluator, against PacoReward.score_set /
score_edit called directly; the served-model check at start-up; the async twins."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from paco_grpo.rewards import (
    ConsistencyReward,
    EditConsistencyReward,
    RewardLoadError,
    build_reward,
    build_rewards,
)
from paco_reward.errors import ConfigError, RewardServerError
from paco_reward.grids import split_grid
from paco_reward.images import load_image

PROMPT = "FOUR-PANEL Images with a 2x2 grid layout. A red fox. [TOP]-[LEFT]: sleeping."
THEME = "FOUR-PANEL Images with a 2x2 grid layout. A red fox."
CRITERIA = {
    "Identity": {"Fur": "The fox's fur colour is the same.", "Face": "The face matches."},
    "Style": {"Medium": "All panels are watercolour."},
}


def _grids(n: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(3, 64, 64, generator=g) for _ in range(n)]


def _panels(grid):
    return split_grid(load_image(grid), 2, 2)


class _CountingBackend:
    """Wraps the real backend and counts score_batch calls and requests."""

    def __init__(self, backend):
        self._backend, self.calls, self.requests = backend, 0, 0

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def score_batch(self, images, pairs):
        self.calls += 1
        self.requests += len(pairs)
        return self._backend.score_batch(images, pairs)


def test_theme_consistency_equals_score_set_and_is_one_call(tiny_reward):
    reward = ConsistencyReward(tiny_reward)
    grids = _grids(3)
    counting = _CountingBackend(tiny_reward.backend)
    tiny_reward.backend = counting
    try:
        scores = reward(grids, [PROMPT] * 3, [{"layout": "2x2"}, {}, {}])
    finally:
        tiny_reward.backend = counting._backend
    expected = [tiny_reward.score_set(_panels(g), THEME).mean for g in grids]
    np.testing.assert_allclose(scores, expected, rtol=1e-6)
    assert len(set(scores.round(6))) == 3
    assert counting.calls == 1 and counting.requests == 3 * 6  # every pair once, one call
    sym = ConsistencyReward(tiny_reward, symmetric=True)(grids[:1], [PROMPT], [{}])
    np.testing.assert_allclose(
        sym, [tiny_reward.score_set(_panels(grids[0]), THEME, symmetric=True).mean], rtol=1e-6
    )


def test_a_prompt_files_theme_is_the_text_the_pairs_are_scored_under(tiny_reward, tmp_path):
    """The evaluator's training pairs carry the prompt record's theme (data_pipeline.prompts),
    so the reward scores under it too, from a T2IS file through load_prompts."""
    import json

    from paco_grpo.data import load_prompts

    theme = "Generate multiple images of a red fox."
    prompt = (  # one marker per panel, as load_prompts requires of a marked prompt
        f"{PROMPT} [TOP]-[RIGHT]: eating. [BOTTOM]-[LEFT]: running. [BOTTOM]-[RIGHT]: sitting."
    )
    path = tmp_path / "t2is.jsonl"
    path.write_text(
        json.dumps({"idx": "0", "prompt": prompt, "layout": "2x2", "theme": theme}) + "\n"
    )
    (item,) = load_prompts(path)
    grid = _grids(1, seed=5)
    score = ConsistencyReward(tiny_reward)(grid, [item.prompt], [item.metadata])
    assert score[0] == pytest.approx(tiny_reward.score_set(_panels(grid[0]), theme).mean, rel=1e-6)
    assert score[0] != pytest.approx(tiny_reward.score_set(_panels(grid[0]), THEME).mean, rel=1e-6)


def test_criteria_consistency_is_mean_over_criteria_then_dimensions(tiny_reward):
    reward = ConsistencyReward(tiny_reward, template="criteria")
    grids = _grids(2, seed=1)
    scores = reward(grids, [PROMPT, PROMPT], [{"criteria": CRITERIA}, {"layout": "2x2"}])
    panels = _panels(grids[0])

    def crit(text):
        return tiny_reward.score_set(panels, text, template="criteria").mean

    identity = np.mean(
        [crit("Fur: The fox's fur colour is the same."), crit("Face: The face matches.")]
    )
    style = crit("Medium: All panels are watercolour.")
    np.testing.assert_allclose(scores[0], np.mean([identity, style]), rtol=1e-6)
    assert scores[0] != pytest.approx(np.mean([identity, identity, style]))  # not a flat mean
    assert np.isnan(scores[1]) and reward.num_failed == 1  # no criteria in metadata
    with pytest.raises(ValueError, match=r"template must be one of \('consistency', 'criteria', 't2is'\)"):
        ConsistencyReward(tiny_reward, template="theme")


def test_consistency_failures_are_nan_and_async_twin_is_equal(tiny_reward):
    reward = ConsistencyReward(tiny_reward)
    grids = _grids(2, seed=2)
    bad = grids[1][:, :1, :]  # one row cannot be cut in two
    scores = reward([grids[0], bad], [PROMPT, PROMPT], [{}, {}])
    assert np.isfinite(scores[0]) and np.isnan(scores[1]) and reward.num_failed == 1
    again = asyncio.run(reward.acall([grids[0], bad], [PROMPT, PROMPT], [{}, {}]))
    np.testing.assert_array_equal(again, scores)


def test_edit_consistency_equals_score_edit(tiny_reward, random_images):
    reward = build_reward("edit_consistency", model=tiny_reward)
    sources = random_images(2, size=(48, 32), seed=3)
    edited = _grids(2, seed=4)
    prompts = ["make the fox blue", "add a hat"]
    meta = [{"source_image": s} for s in sources]
    scores = reward(edited, prompts, meta)
    expected = [
        tiny_reward.score_edit(s, e, p).overall for s, e, p in zip(sources, edited, prompts)
    ]
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(asyncio.run(reward.acall(edited, prompts, meta)), scores)
    missing = reward(edited[:1], prompts[:1], [{}])
    assert np.isnan(missing[0]) and reward.num_failed == 1


def test_a_multi_reference_edit_is_scored_against_each_reference(tiny_reward, random_images):
    """Each reference is scored as the edit's source (``score_edit``); the item's reward is
    their mean, or their minimum; one reference is the single-source reward."""
    sources = random_images(3, size=(48, 32), seed=5)
    (edited,) = _grids(1, seed=6)
    prompt = "the fox of picture 2 in the forest of picture 1"
    each = [tiny_reward.score_edit(s, edited, prompt).overall for s in sources]
    assert len(set(each)) == 3  # the references score differently
    metadata = [{"source_image": sources[0], "source_images": sources}]
    mean = build_reward("edit_consistency", model=tiny_reward)([edited], [prompt], metadata)
    np.testing.assert_allclose(mean, [np.mean(each)], rtol=1e-6, atol=1e-6)  # rounding: shared prefixes
    worst = build_reward("edit_consistency", model=tiny_reward, reference_aggregation="min")
    np.testing.assert_allclose(worst([edited], [prompt], metadata), [min(each)], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(
        asyncio.run(worst.acall([edited], [prompt], metadata)), worst([edited], [prompt], metadata)
    )
    single = build_reward("edit_consistency", model=tiny_reward)
    one = single([edited], [prompt], [{"source_images": sources[:1]}])
    np.testing.assert_allclose(one, [each[0]], rtol=1e-6, atol=1e-6)
    with pytest.raises(ConfigError, match="reference_aggregation must be one of"):
        build_reward("edit_consistency", model=tiny_reward, reference_aggregation="max")


@pytest.fixture(scope="module")
def served(tiny_reward):
    from paco_reward.server import ServerConfig, ServerThread, create_app

    app = create_app(tiny_reward.backend, ServerConfig("tiny-paco", max_batch_size=16))
    with ServerThread(app) as server:
        yield server


def test_served_consistency_checks_the_model_at_start_up(served, tiny_reward):
    remote = ConsistencyReward("tiny-paco", server_url=served.base_url, retries=0)
    grids = _grids(2, seed=5)
    local = ConsistencyReward(tiny_reward)(grids, [PROMPT] * 2, [{}, {}])
    np.testing.assert_allclose(remote(grids, [PROMPT] * 2, [{}, {}]), local, atol=1e-4)
    awaited = asyncio.run(
        EditConsistencyReward("tiny-paco", server_url=served.base_url).acall(
            grids, ["make it blue"] * 2, [{"source_image": g} for g in grids[::-1]]
        )
    )
    expected = [
        tiny_reward.score_edit(s, e, "make it blue").overall for s, e in zip(grids[::-1], grids)
    ]
    np.testing.assert_allclose(awaited, expected, atol=1e-4)
    with pytest.raises(RewardServerError, match="does not serve model 'PaCo-Reward-7B'"):
        build_rewards(
            {"consistency": 1.0},
            {"consistency": {"model": "PaCo-Reward-7B", "server_url": served.base_url}},
        )
    with pytest.raises(ValueError, match="cannot be applied to a served model"):
        ConsistencyReward("tiny-paco", server_url=served.base_url, adapter="lora")


def test_trainer_fails_fast_when_the_served_model_is_absent(served, tmp_path):
    from paco_grpo.grpo_config import GRPOConfig
    from paco_grpo.grpo_trainer import GRPOTrainer

    config = GRPOConfig.from_yaml(
        "recipes/grpo_tiny_cpu.yaml",
        {
            "model_name_or_path": str(tmp_path / "no-pipeline-here"),  # never reached
            "output_dir": str(tmp_path),
            "rewards": {"consistency": 1.0},
            "reward_kwargs": {"consistency": {"model": "wrong", "server_url": served.base_url}},
        },
    )
    with pytest.raises(RewardServerError, match=r"serves \['tiny-paco'\]"):
        GRPOTrainer(config)


def test_build_reward_load_errors_name_the_reward(tmp_path):
    with pytest.raises(RewardLoadError, match="reward 'consistency' could not load its model"):
        build_reward("consistency", model=str(tmp_path / "missing"))
    with pytest.raises(RewardLoadError, match=r"does not accept the arguments \['colour'\]"):
        build_reward("panel_colour_agreement", colour="red")
    with pytest.raises(ValueError, match="reward_kwargs values must be mappings"):
        build_rewards({"panel_colour_agreement": 1.0}, {"panel_colour_agreement": 3})


def test_a_1x4_text_prompt_is_cut_1x4_by_the_consistency_reward(tiny_reward, tmp_path):
    from paco_grpo.data import load_prompts

    path = tmp_path / "strips.txt"
    path.write_text(
        "FOUR-PANEL Images with a 1x4 grid layout. A red fox. [PANEL-1]: runs. "
        "[PANEL-2]: sits. [PANEL-3]: jumps. [PANEL-4]: sleeps.\n"
    )
    (item,) = load_prompts(path, layout="2x2")
    strip = torch.rand(3, 32, 128, generator=torch.Generator().manual_seed(3))
    score = ConsistencyReward(tiny_reward, layout="2x2")([strip], [item.prompt], [item.metadata])
    panels = split_grid(load_image(strip), 1, 4)
    theme = "FOUR-PANEL Images with a 1x4 grid layout. A red fox."
    assert score[0] == pytest.approx(tiny_reward.score_set(panels, theme).mean, rel=1e-6)


def test_build_rewards_loads_the_evaluator_on_the_process_device(tiny_model_dir, tiny_reward):
    (reward,) = build_rewards(
        {"consistency": 1.0}, {"consistency": {"model": str(tiny_model_dir)}}, device="cpu"
    ).values()
    assert reward.device == torch.device("cpu") == reward.evaluator.backend.device
    assert {p.device for p in reward.evaluator.backend.model.parameters()} == {reward.device}
    # a ready PacoReward is used as it is: its device is the reward's
    ready = build_reward("edit_consistency", model=tiny_reward, device="cuda:1")
    assert ready.evaluator is tiny_reward and ready.device == torch.device("cpu")


def test_a_served_evaluator_takes_the_process_device_without_using_it(served):
    rewards = build_rewards(
        {"consistency": 1.0, "edit_consistency": 1.0},
        {
            "consistency": {"model": "tiny-paco", "server_url": served.base_url},
            "edit_consistency": {"model": "tiny-paco", "server_url": served.base_url},
        },
        device="cuda:1",  # the server owns its device: not passed on, no GPU needed here
    )
    assert [r.device for r in rewards.values()] == [None, None]
    with pytest.raises(RewardLoadError, match=r"reward_kwargs of \['panel_colour_agreement'\]"):
        build_rewards(
            {"consistency": 1.0, "panel_colour_agreement": 1.0},
            {"panel_colour_agreement": {"device": "cpu"}},
        )
