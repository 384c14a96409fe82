"""The epoch's shape on N processes, and the one-job check, before anything loads."""

from __future__ import annotations

import pytest

from paco_grpo.epoch_shape import EpochShape, EpochShapeError, allowed_process_counts
from paco_grpo.grpo_config import GRPOConfig
from paco_reward.errors import ConfigError, InputError
from paco_reward.launch import LaunchError, check_single_job


def _plan(nproc: int, **overrides) -> EpochShape:
    cfg = GRPOConfig.from_yaml("recipes/grpo_flux_t2is.yaml", overrides)
    return EpochShape.from_config(cfg, nproc)


def test_the_paper_recipe_on_7_and_8_processes():
    # 42 prompts x 16 images = 672; minibatches of 4; 'auto': one step per pass
    seven, eight = _plan(7), _plan(8)
    assert (seven.images_per_process, seven.minibatches_per_pass) == (96, 24)
    assert (eight.images_per_process, eight.minibatches_per_pass) == (84, 21)
    for shape in (seven, eight):
        assert shape.gradient_accumulation_steps == shape.minibatches_per_pass
        assert shape.optimizer_steps_per_epoch == 1
    assert _plan(8, num_iterations=2).optimizer_steps_per_epoch == 2


def test_a_process_count_that_does_not_divide_the_epoch_is_refused_naming_the_allowed():
    with pytest.raises(
        EpochShapeError, match=r"672 images .* over 5 processes.*\[1, 2, 3, 4, 6, 7, 8"
    ):
        _plan(5)
    assert 5 not in allowed_process_counts(672) and 7 in allowed_process_counts(672)
    assert all(672 % n == 0 for n in allowed_process_counts(672))


def test_a_number_for_one_process_count_is_checked_on_another():
    assert _plan(8, gradient_accumulation_steps=21).optimizer_steps_per_epoch == 1
    assert _plan(8, gradient_accumulation_steps=7).optimizer_steps_per_epoch == 3
    # 21 was written for 8 processes: on 7 each process trains 24 minibatches
    with pytest.raises(
        EpochShapeError, match=r"does not divide the 24 .*'auto'.*\[1, 2, 3, 4, 6, 8, 12, 24\]"
    ):
        _plan(7, gradient_accumulation_steps=21)


@pytest.mark.parametrize("value", [0, -1, "some", 1.5])
def test_gradient_accumulation_steps_is_a_positive_integer_or_auto(value):
    with pytest.raises(
        ConfigError, match="gradient_accumulation_steps must be a positive integer or 'auto'"
    ):
        _plan(1, gradient_accumulation_steps=value)


def test_a_launcher_world_that_accelerate_does_not_share_is_refused():
    check_single_job(8, {"WORLD_SIZE": "8", "RANK": "3"})
    check_single_job(1, {})
    with pytest.raises(LaunchError, match=r"WORLD_SIZE=8 .*rank 3.*job of 1.*ACCELERATE_USE_CPU=1"):
        check_single_job(1, {"WORLD_SIZE": "8", "RANK": "3"})


def test_minibatches_split_to_the_count_every_process_runs():
    from types import SimpleNamespace

    from paco_grpo.rollout import Rollout

    cfg = GRPOConfig.from_yaml("recipes/grpo_flux_t2is.yaml")  # minibatches of 4
    rollout = Rollout.__new__(Rollout)
    rollout.config, rollout.accelerator = cfg, SimpleNamespace(process_index=0)
    samples = [{"size": (32, 32)}] * 7 + [{"size": (32, 64)}] * 2
    natural = rollout.minibatches(samples, epoch=0, iteration=0)
    assert [len(b) for b in natural] == [4, 3, 2]  # one size per minibatch
    more = rollout.minibatches(samples, epoch=0, iteration=0, count=5)
    assert len(more) == 5 and sorted(i for b in more for i in b) == list(range(9))
    assert all(len({samples[i]["size"] for i in b}) == 1 for b in more)
    with pytest.raises(InputError, match="cannot split 9 samples into 10 minibatches"):
        rollout.minibatches(samples, epoch=0, iteration=0, count=10)


def test_fsdp_refuses_editing_pipelines_on_several_processes():
    from paco_grpo.epoch_shape import check_sharding

    check_sharding(sharded=True, editing=False, num_processes=8)
    check_sharding(sharded=False, editing=True, num_processes=8)
    check_sharding(sharded=True, editing=True, num_processes=1)
    with pytest.raises(EpochShapeError, match="FSDP with an editing pipeline.*multi_gpu.yaml"):
        check_sharding(sharded=True, editing=True, num_processes=2)
