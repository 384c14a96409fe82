"""Asynchronous rewards: identical to synchronous scoring, ordered, overlapping, failures surface;
and the trainer's overlap path (same rewards, reward wait/share logged, exceptions re-raised)."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
import torch

from benchmarks.grpo_reward_overlap import KnownCostReward
from paco_grpo.async_rewards import AsyncRewardRunner, compute_rewards, thread_cuda_device
from paco_grpo.rewards import REWARDS, BaseReward, PanelColourAgreementReward, build_rewards
from paco_reward.devices import resolve_device


def _batches(n: int, size: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [[torch.rand(3, 32, 32, generator=g) for _ in range(size)] for _ in range(n)]


class _SlowFirst:
    """A plain callable (no acall) whose early batches take longest: finishing out of order
    would reorder the results if the runner did not keep them in submission order."""

    name = "slow_first"

    def __init__(self):
        self.calls, self.active, self.max_active = 0, 0, 0
        self._lock = threading.Lock()

    def __call__(self, images, prompts, metadata):
        with self._lock:
            self.calls += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            delay = max(0.0, 0.04 - 0.01 * self.calls)
        time.sleep(delay)
        with self._lock:
            self.active -= 1
        return np.array([float(img.mean()) for img in images])


class _Failing:
    name = "failing"

    def __init__(self, fail_on: int):
        self.fail_on, self.calls = fail_on, 0

    def __call__(self, images, prompts, metadata):
        self.calls += 1
        if self.calls == self.fail_on:
            raise RuntimeError("reward model crashed")
        return np.where(np.arange(len(images)) == 0, np.nan, 1.0)  # item 0 failed -> NaN


def test_async_scores_equal_sync_exactly_in_order():
    batches = _batches(5)
    meta = [{}] * 4
    sync = [
        compute_rewards(
            {"colour": PanelColourAgreementReward(layout="2x2"), "slow_first": _SlowFirst()},
            b,
            ["p"] * 4,
            meta,
        ).scores
        for b in batches
    ]
    slow = _SlowFirst()
    with AsyncRewardRunner(
        {"colour": PanelColourAgreementReward(layout="2x2"), "slow_first": slow}
    ) as runner:
        futures = [runner.submit(b, ["p"] * 4, meta) for b in batches]
        results = [f.result().scores for f in futures]
    for got, want in zip(results, sync):
        assert list(got) == ["colour", "slow_first"]
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    assert slow.max_active == 1  # one reward is never called concurrently with itself


def test_rewards_overlap_the_callers_work():
    reward = KnownCostReward(0.02)  # 4 images -> 80 ms per batch, awaited (GIL free)
    batches = _batches(4)
    t0 = time.perf_counter()
    with AsyncRewardRunner({"known_cost": reward}) as runner:
        futures = []
        for b in batches:
            futures.append(runner.submit(b, ["p"] * 4, [{}] * 4))
            time.sleep(0.1)  # "sampling" the next batch
        waited = time.perf_counter()
        results = [f.result() for f in futures]
        waited = time.perf_counter() - waited
    total = time.perf_counter() - t0
    assert waited < 0.05  # every batch was scored while the next was sampled
    assert total < 4 * 0.1 + 4 * 0.08 * 0.75  # far less than sampling + scoring in sequence
    assert all(r.seconds >= 0.08 for r in results)
    expected = PanelColourAgreementReward(layout="2x2")(batches[0], ["p"] * 4, [{}] * 4)
    np.testing.assert_array_equal(results[0].scores["known_cost"], expected)


def test_reward_exceptions_surface_in_the_caller_and_nan_passes_through():
    batches = _batches(3)
    with AsyncRewardRunner({"failing": _Failing(fail_on=2)}) as runner:
        futures = [runner.submit(b, ["p"] * 4, [{}] * 4) for b in batches]
        first = futures[0].result().scores["failing"]
        assert np.isnan(first[0]) and (first[1:] == 1.0).all()
        with pytest.raises(RuntimeError, match="reward model crashed") as info:
            futures[1].result()
        assert "raised by the reward 'failing'" in "\n".join(info.value.__notes__)
        with pytest.raises(RuntimeError, match="reward model crashed"):
            runner.raise_if_failed()
    with pytest.raises(RuntimeError, match="AsyncRewardRunner is closed"):
        runner.submit(batches[0], ["p"] * 4, [{}] * 4)
    with pytest.raises(ValueError, match=r"reward 'bad' returned shape \(3,\); expected \(4,\)"):
        compute_rewards({"bad": lambda i, p, m: np.ones(3)}, batches[0], ["p"] * 4, [{}] * 4)


def test_acall_reward_runs_plain_callables_in_a_thread():
    from paco_grpo.rewards import acall_reward

    main = threading.get_ident()
    seen = []

    def reward(images, prompts, metadata):
        seen.append(threading.get_ident())
        return np.zeros(len(images))

    out = asyncio.run(acall_reward(reward, [1, 2], ["a", "b"], [{}, {}]))
    assert out.tolist() == [0.0, 0.0] and seen and seen[0] != main


# ---------------------------------------------------------------------------- devices
class _DeviceProbe(BaseReward):
    """A reward holding a "model": records, inside its call, the device it was given, the
    devices of the tensors it received and of its inputs once moved to its device, and the
    thread it ran in."""

    name = "device_probe"

    def __init__(self, *, device: str | torch.device | None = None) -> None:
        super().__init__()
        self.device = resolve_device(device)
        self.calls: list[dict] = []

    def score(self, images, prompts, metadata) -> np.ndarray:
        self.calls.append(
            {
                "device": self.device,
                "received": {img.device for img in images},
                "moved": {img.to(self.device).device for img in images},
                "thread": threading.current_thread().name,
            }
        )
        return np.array([float(img.mean()) for img in images])


@pytest.fixture
def probe_registered(monkeypatch):
    """``device_probe`` in the registry for this test only."""
    monkeypatch.setitem(REWARDS, "device_probe", _DeviceProbe)


def test_rewards_get_the_process_device_through_build_rewards_and_the_runner(probe_registered):
    cpu = torch.device("cpu")
    rewards = build_rewards(
        {"device_probe": 1.0, "panel_colour_agreement": 1.0},  # the colour reward takes none
        {"panel_colour_agreement": {"layout": "2x2"}},
        device=cpu,
    )
    batches = _batches(2)
    with AsyncRewardRunner(rewards, device=cpu) as runner:
        results = [runner.submit(b, ["p"] * 4, [{}] * 4).result() for b in batches]
    probe = rewards["device_probe"]
    assert len(probe.calls) == 2
    for call in probe.calls:
        assert call["device"] == cpu
        assert call["received"] == {cpu} and call["moved"] == {cpu}
        assert call["thread"].startswith("paco-grpo-reward_")  # the runner's worker thread
    np.testing.assert_array_equal(
        results[0].scores["panel_colour_agreement"],
        PanelColourAgreementReward(layout="2x2")(batches[0], ["p"] * 4, [{}] * 4),
    )


def test_a_device_in_reward_kwargs_wins_over_the_process_device(probe_registered):
    # construction only: a CUDA device object needs no GPU until a tensor goes there
    rewards = build_rewards(
        {"device_probe": 1.0}, {"device_probe": {"device": "cpu"}}, device="cuda:1"
    )
    assert rewards["device_probe"].device == torch.device("cpu")
    default = build_rewards({"device_probe": 1.0}, device="cuda:1")["device_probe"]
    assert default.device == torch.device("cuda", 1)


def test_the_runner_sets_the_current_cuda_device_only_for_a_cuda_device(monkeypatch):
    # The real torch.cuda.set_device runs on GPU machines only (there the tests run on a
    # CUDA device too); here CUDA is faked and set_device recorded, so the decision and
    # the threads that make it are checked on CPU.
    assert thread_cuda_device(None) is None
    assert thread_cuda_device(torch.device("cpu")) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert thread_cuda_device(torch.device("cuda", 3)) is None  # no CUDA: nothing to set

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(
        torch.cuda, "set_device", lambda d: calls.append((threading.current_thread().name, d))
    )
    assert thread_cuda_device(torch.device("cuda", 3)) == torch.device("cuda", 3)
    ran_in = []

    def reward(images, prompts, metadata):  # a plain callable: runs in a worker thread
        ran_in.append(threading.current_thread().name)
        return np.zeros(len(images))

    with AsyncRewardRunner({"r": reward}, device=torch.device("cpu")) as runner:
        runner.submit([0], ["p"], [{}]).result()
    assert calls == [] and ran_in  # a CPU device sets nothing

    with AsyncRewardRunner({"r": reward}, device="cuda:3") as runner:
        assert runner.device == torch.device("cuda", 3)
        runner.submit([0], ["p"], [{}]).result()
    cuda3 = torch.device("cuda", 3)
    assert ("paco-grpo-rewards", cuda3) in calls  # the loop thread
    assert (ran_in[-1], cuda3) in calls  # the worker thread the reward ran in
    assert all(d == cuda3 for _, d in calls)

    with pytest.raises(ValueError, match=r"device='cuda:7' is not a GPU of this process \(4"):
        AsyncRewardRunner({"r": reward}, device="cuda:7")


# ---------------------------------------------------------------------------- trainer
@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from paco_grpo.grpo_config import GRPOConfig
    from paco_grpo.grpo_trainer import GRPOTrainer
    from paco_grpo.testing.flux import build_tiny_flux

    root = tmp_path_factory.mktemp("async-trainer")
    flux = build_tiny_flux(root / "flux", seed=0)
    config = GRPOConfig.from_yaml(
        "recipes/grpo_tiny_cpu.yaml",
        {
            "model_name_or_path": str(flux),
            "output_dir": str(root / "out"),
            "report_to": [],
            "prompts_per_epoch": 2,
            "num_generations": 4,
            "sample_batch_size": 2,
            "per_device_train_batch_size": 8,
            "num_iterations": 1,
            "num_sample_images": 0,
            "rewards": {"panel_colour_agreement": 1.0, "known_cost": 0.5, "failing": 0.0},
        },
    )
    rewards = {
        "panel_colour_agreement": PanelColourAgreementReward(layout="2x2"),
        "known_cost": KnownCostReward(0.005),
        "failing": _Failing(fail_on=-1),
    }
    return GRPOTrainer(config, rewards=rewards)


def test_trainer_async_rewards_equal_sync_and_log_the_wait(trainer):
    trainer.config.async_rewards = False
    first = trainer.sample_epoch(0)
    samples_sync, sync, ids_sync, timings_sync = (
        first.samples,
        first.rewards,
        first.group_ids,
        first.timings,
    )
    trainer.config.async_rewards = True
    second = trainer.sample_epoch(0)
    samples_async, asynchronous, ids_async, timings_async = (
        second.samples,
        second.rewards,
        second.group_ids,
        second.timings,
    )
    assert ids_sync == ids_async and len(sync["known_cost"]) == 8
    for name in sync:
        np.testing.assert_array_equal(asynchronous[name], sync[name])
    torch.testing.assert_close(samples_async[3]["latents"], samples_sync[3]["latents"])
    assert timings_sync["reward_wait"] >= 0.9 * timings_sync["reward_compute"] > 0
    assert timings_async["reward_wait"] < timings_async["reward_compute"]

    metrics = trainer.run_epoch(0)
    assert 0 <= metrics["time/reward_share"] < 1
    assert metrics["time/reward"] == metrics["time/reward_wait"]
    assert metrics["time/step"] >= metrics["time/sampling"] + metrics["time/training"]
    assert metrics["reward/failing/num_nan"] == 4  # item 0 of each of the 4 batches
    assert metrics["reward/known_cost/num_nan"] == 0
    assert np.isfinite(metrics["train/loss"])


def test_trainer_reraises_a_reward_exception(trainer):
    trainer.rewards["failing"].calls, trainer.rewards["failing"].fail_on = 0, 2
    trainer.config.async_rewards = True
    with pytest.raises(RuntimeError, match="reward model crashed"):
        trainer.run_epoch(1)
    trainer.rewards["failing"].fail_on = -1


def test_async_rewards_config_validation(tmp_path):
    from paco_grpo.grpo_config import GRPOConfig

    base = {"model_name_or_path": "m", "prompt_file": "p.txt", "rewards": {"clip_t": 1.0}}
    assert GRPOConfig(**base).async_rewards is True
    with pytest.raises(ValueError, match="async_rewards must be true or false; got 'yes'"):
        GRPOConfig(**base, async_rewards="yes")
    with pytest.raises(ValueError, match="reward_kwargs values must be mappings"):
        GRPOConfig(**base, reward_kwargs={"clip_t": "laion"})


def test_overlap_benchmark_runs_and_scores_identically(tmp_path, capsys):
    import json

    from benchmarks.grpo_reward_overlap import main

    out = tmp_path / "overlap.json"
    code = main(
        ["--prompts", "2", "--group-size", "2", "--batch-size", "1", "--steps", "2"]
        + ["--resolution", "32", "--seconds-per-item", "0.01", "--repeats", "1", "--json", str(out)]
    )
    result = json.loads(out.read_text())
    assert code == 0 and result["scores_identical"] and result["batches"] == 4
    for mode in ("sync", "async"):
        assert 0 <= result["rows"][mode]["reward_share"] < 1
    # synchronous scoring waits for every batch's known cost (4 images x 10 ms)
    assert result["rows"]["sync"]["reward_wait_s"] >= 0.04
    assert "reward share: sync" in capsys.readouterr().out
    with pytest.raises(ValueError, match="seconds_per_item must be >= 0"):
        KnownCostReward(-1.0)
