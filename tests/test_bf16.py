"""bf16 is checked, not assumed: the real recipes (``recipes/paco_reward_7b_lora.yaml``,
``recipes/grpo_*.yaml``) run in bf16, so the evaluator's scores, one SFT step and one GRPO step
are run here in bf16 on the tiny models and compared with fp32 or checked for what bf16 breaks
first (lost updates, NaNs, an on-policy ratio that is not 1)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.stats import kendalltau

from paco_reward import PacoReward

# Largest |bf16 - fp32| score allowed on the tiny evaluator. Measured: 0.053 on the pairs below;
# over 480 other pairs drawn the same way, at most 0.079 in score and 0.39 in log-odds (median
# 0.08). A score is sigmoid(log-odds) and the sigmoid's slope is at most 1/4, so a log-odds error
# under 0.4 keeps the score within 0.1. The tiny model is far from a trained one: its weights are
# drawn with std 0.3 (Qwen's is 0.02) so that scores spread, which makes attention logits large
# and amplifies bf16's 2**-9 rounding to a 2-3% relative error in the last hidden state. Rounding
# only the weights to bf16 and computing in fp32 already moves the scores by 0.01, and fp64 vs
# fp32 by 1e-6: the gap is the format's, not a cast of ours. A path that lost an image, a mask
# or a cast would move scores by their spread (std 0.19 here).
SCORE_TOLERANCE = 0.1
# Kendall's tau between the fp32 and bf16 scores must beat this. Measured: 0.87 here (0.78 to 0.92
# on other draws); unrelated scores of 24 pairs give tau = 0 +- 0.15, so 0.6 is 4 sd from them.
MIN_KENDALL_TAU = 0.6
THEMES = ("a red fox in four seasons", "the same knight, four battles", "a bowl of fruit")


def _varied_pairs(seed: int = 1, n: int = 24) -> list[tuple[Image.Image, Image.Image, str]]:
    """``n`` (image_a, image_b, theme) pairs over 12 images of three kinds (noise, flat
    colours, two-colour gradients), so the tiny evaluator's scores spread."""
    rng = np.random.default_rng(seed)
    noise = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for _ in range(4)]
    images = [Image.fromarray(pixels) for pixels in noise]
    for _ in range(4):
        images.append(Image.new("RGB", (64, 64), tuple(int(c) for c in rng.integers(0, 256, 3))))
    ramp = np.linspace(0.0, 1.0, 64)[None, :, None]
    for _ in range(4):
        start, end = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
        row = start * (1 - ramp) + end * ramp
        images.append(Image.fromarray(np.repeat(row, 64, axis=0).astype(np.uint8)))
    order = rng.permutation(len(images))
    return [
        (images[order[k % 12]], images[order[(k + 1 + k // 12) % 12]], THEMES[k % 3])
        for k in range(n)
    ]


@pytest.fixture
def fresh_accelerator_state():
    """accelerate keeps one ``AcceleratorState`` per process and refuses another precision, and
    GRPOTrainer does not reset it (transformers' TrainingArguments does): reset it around each
    bf16 test so that fp32 tests before and after them in this process still start."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state()
    yield
    AcceleratorState._reset_state()


@pytest.fixture
def one_thread():
    """The tiny FLUX runs fastest single-threaded (see tests/paco_grpo/conftest.py)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def test_bf16_scores_match_fp32_and_keep_the_ranking(tiny_model_dir):
    """The tiny evaluator loaded in bf16 and in fp32 scores 24 varied pairs: largest score
    difference 0.053 (measured; bound 0.1, see SCORE_TOLERANCE), Kendall tau 0.87, and the
    pairs bf16 swaps are all within 0.044 of each other in fp32."""
    pairs = _varied_pairs()
    fp32 = PacoReward.from_pretrained(tiny_model_dir, dtype=torch.float32).score_pairs(pairs)
    bf16 = PacoReward.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).score_pairs(pairs)
    assert np.isfinite(bf16).all() and ((bf16 >= 0) & (bf16 <= 1)).all()
    assert fp32.std() > 1.5 * SCORE_TOLERANCE, "scores barely spread: the ranking check is vacuous"
    largest = float(np.abs(bf16 - fp32).max())
    print(f"largest |bf16 - fp32| score difference over {len(pairs)} pairs: {largest:.4f}")
    assert largest < SCORE_TOLERANCE
    tau = kendalltau(fp32, bf16).statistic
    assert tau > MIN_KENDALL_TAU, tau
    # bf16 may swap near-ties, never two pairs that fp32 tells apart by more than the tolerance.
    swapped = [
        (i, j, fp32[i] - fp32[j])
        for i, j in itertools.combinations(range(len(pairs)), 2)
        if (fp32[i] - fp32[j]) * (bf16[i] - bf16[j]) < 0
    ]
    assert all(abs(gap) < SCORE_TOLERANCE for _, _, gap in swapped), swapped


def test_bf16_sft_steps_have_finite_losses_and_move_every_lora_weight(
    tmp_path, tiny_model_dir, fresh_accelerator_state
):
    """Two optimizer steps of the 7B recipe's set-up (bf16 weights, bf16 mixed precision, LoRA
    r32/a64 on every language-model linear, gradient checkpointing, lr 2e-4). Two, because
    LoRA's B starts at zero, so A gets no gradient on the first step. At lr 2e-4 an Adam step
    is about 2e-4 per weight, under half of bf16's spacing (4.9e-4) for LoRA-A weights above
    0.0625: every element moves only because the adapter is kept in fp32 (PEFT's default)."""
    from paco_reward.training import PacoSFTConfig, PacoSFTTrainer
    from paco_reward.training.callbacks import read_metrics
    from paco_reward.training.loading import load_model_and_processor, lora_config
    from paco_reward.training.toy import colour_pairs

    cfg = PacoSFTConfig(
        output_dir=str(tmp_path / "run"),
        model_name_or_path=str(tiny_model_dir),
        bf16=True,
        use_lora=True,
        lora_r=32,
        lora_alpha=64,
        lora_dropout=0.0,
        first_token_weight=0.1,
        gradient_checkpointing=True,
        learning_rate=2e-4,
        lr_scheduler_type="constant",
        per_device_train_batch_size=4,
        max_steps=2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        eval_split="",
    )
    model, processor = load_model_and_processor(cfg)
    assert model.dtype == torch.bfloat16  # dtype 'auto' follows bf16, as in the recipe
    trainer = PacoSFTTrainer(
        model=model,
        args=cfg,
        train_dataset=colour_pairs(8, seed=5, size=28),
        processing_class=processor,
        peft_config=lora_config(cfg),
    )
    params = dict(trainer.model.named_parameters())
    lora = {n for n, p in params.items() if p.requires_grad}
    assert lora and all("lora_" in n for n in lora)
    before = {n: p.detach().clone() for n, p in params.items()}
    trainer.train()
    losses = [r["loss"] for r in read_metrics(cfg.output_dir) if "loss" in r]
    assert len(losses) == 2 and np.isfinite(losses).all(), losses
    for name, param in params.items():
        if name in lora:
            moved = (param.detach() != before[name]).float().mean().item()
            assert moved == 1.0, f"{name}: only {moved:.0%} of its elements moved"
        else:
            assert param.dtype == torch.bfloat16 and torch.equal(param.detach(), before[name]), name


def test_bf16_grpo_steps_are_on_policy_finite_and_move_every_lora_weight(
    tmp_path, fresh_accelerator_state, one_thread
):
    """Two optimizer steps on the tiny FLUX with ``recipes/grpo_flux_t2is.yaml``'s precision
    (bf16 weights, bf16 mixed precision), learning rate (3e-4) and clip range (epsilon 1e-4).

    Before the first update the policy is the one that sampled, so the ratio must be exactly 1:
    bf16 rounding between sampling and re-scoring (a stored sample rounded after its log-prob
    was taken, a strided latent slice that nn.Linear rounds differently) moved it by 1e-3 here,
    ten times the clip range, and clipped 77% of the first update's terms."""
    from paco_grpo.grpo_config import GRPOConfig
    from paco_grpo.grpo_trainer import GRPOTrainer
    from paco_grpo.testing.flux import build_tiny_flux

    flux_dir = build_tiny_flux(tmp_path / "flux", seed=0)
    overrides = {
        "model_name_or_path": str(flux_dir),
        "output_dir": str(tmp_path / "out"),
        "report_to": [],
        "dtype": "bfloat16",
        "bf16": True,
        "learning_rate": 3e-4,
        "epsilon": 1e-4,
        "num_train_epochs": 1,
        "prompts_per_epoch": 2,
        "num_generations": 8,
        "sample_batch_size": 16,
        "per_device_train_batch_size": 16,
        "num_iterations": 2,
        "test.eval_epochs": 0,
        "num_sample_images": 0,
        "save_epochs": 0,
    }
    trainer = GRPOTrainer(GRPOConfig.from_yaml("recipes/grpo_tiny_cpu.yaml", overrides))
    frozen = [p for p in trainer.transformer.parameters() if not p.requires_grad]
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)
    before = [p.detach().clone() for p in trainer.params]
    row = trainer.run_epoch(0)
    for key in ("train/loss", "train/policy_loss", "train/ratio", "train/approx_kl"):
        assert np.isfinite(row[key]), (key, row[key])
    assert row["train/optimizer_steps"] == 2
    assert row["train/ratio_first_update_max_dev"] < 1e-6, row["train/ratio_first_update_max_dev"]
    # The adapter is kept in fp32 over the bf16 transformer; a bf16 one loses Adam's 3e-4 steps
    # to rounding (half of bf16's spacing is 4.9e-4 above 0.125), and only 21-45% of each
    # LoRA-A tensor moves. With fp32 and bf16 weights alike, an odd element of one tensor ends
    # the two steps where it started, hence 99%.
    for k, (old, new) in enumerate(zip(before, trainer.params)):
        moved = (new.detach() != old).float().mean().item()
        assert moved > 0.99, f"LoRA tensor {k} ({tuple(new.shape)}): only {moved:.1%} moved"
