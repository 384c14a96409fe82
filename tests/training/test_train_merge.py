"""LoRA training output → merge → PacoReward: merged scores == base + adapter scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from paco_reward import PacoReward
from paco_reward.errors import PathNotFoundError
from paco_reward.training import PacoSFTConfig
from paco_reward.training.cli import run_training
from paco_reward.training.merge import merge_lora
from paco_reward.training.toy import colour_pairs


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("lora") / "run"
    cfg = PacoSFTConfig(
        output_dir=str(out),
        model_name_or_path=str(tiny_model_dir),
        dataset_path="toy-colour-pairs",
        toy_train_size=16,
        toy_test_size=8,
        per_device_train_batch_size=4,
        learning_rate=5e-2,
        max_steps=2,
        lora_r=4,
        lora_alpha=8,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        save_merged=True,
    )
    metrics = run_training(cfg)
    return out, metrics


def test_training_output_folder(lora_run):
    out, metrics = lora_run
    assert (out / "adapter_config.json").is_file()
    assert (out / "tokenizer_config.json").is_file()
    assert (out / "metrics.jsonl").is_file() and (out / "loss_curve.png").is_file()
    card = (out / "README.md").read_text()
    assert "## Recipe" in card and "first_token_weight: 0.1" in card
    assert f"| eval_roc_auc | {metrics['eval_roc_auc']:.4g} |" in card
    assert (out / "merged" / "model.safetensors").is_file()
    assert (out / "merged" / "processor_config.json").is_file()


def test_merged_scores_equal_base_plus_adapter(lora_run, tiny_model_dir, tmp_path):
    out, _ = lora_run
    merged_dir = merge_lora(tiny_model_dir, out, tmp_path / "merged")
    ds = colour_pairs(6, seed=11)
    pairs = [(row["image_a"], row["image_b"], None) for row in ds]
    with_adapter = PacoReward.from_pretrained(tiny_model_dir, adapter=out, template="rank")
    merged = PacoReward.from_pretrained(merged_dir, template="rank")
    base = PacoReward.from_pretrained(tiny_model_dir, template="rank")
    a, m, b = (rm.score_pairs(pairs) for rm in (with_adapter, merged, base))
    np.testing.assert_allclose(m, a, atol=1e-4)
    assert np.abs(a - b).max() > 1e-3  # the adapter really changed the scorer
    assert (merged_dir / "README.md").read_text().startswith("---")


def test_merge_rejects_a_folder_without_adapter(tmp_path, tiny_model_dir):
    with pytest.raises(PathNotFoundError, match="is not a PEFT adapter folder"):
        merge_lora(tiny_model_dir, tiny_model_dir, tmp_path / "x")


def test_save_merged_merges_into_the_revision_it_trained_on(tmp_path, tiny_model_dir, monkeypatch):
    """``model_init_kwargs`` names a revision of a hub repository whose main holds other
    weights: the adapter trains on that revision, and ``save_merged`` merges it there."""
    import huggingface_hub

    from paco_reward.testing import build_tiny_model
    from paco_reward.testing.hub_cache import install_in_hub_cache

    # Offline: the repository is only in the test's cache (peft would otherwise ask the hub
    # whether its config exists when it saves the adapter).
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    v1 = build_tiny_model(tmp_path / "v1", seed=1, text_config={"initializer_range": 0.3})
    for revision, folder in (("main", tiny_model_dir), ("v1", v1)):
        install_in_hub_cache(folder, "acme/tiny-evaluator", tmp_path / "hub", revision)
    out = tmp_path / "run"
    hub = {"revision": "v1", "cache_dir": str(tmp_path / "hub"), "local_files_only": True}
    run_training(
        PacoSFTConfig(
            output_dir=str(out), model_name_or_path="acme/tiny-evaluator",
            model_init_kwargs=hub, dataset_path="toy-colour-pairs", toy_train_size=8,
            toy_test_size=4, per_device_train_batch_size=4, max_steps=1, lora_r=4,
            save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
            save_merged=True,
        )
    )  # fmt: skip
    merged = load_file(out / "merged" / "model.safetensors")
    trained_on, main = (
        load_file(v1 / "model.safetensors"),
        load_file(tiny_model_dir / "model.safetensors"),
    )
    untouched = [k for k in merged if "embed_tokens" in k or k.endswith("norm.weight")]
    assert untouched
    for key in untouched:  # weights LoRA does not adapt: the revision's own
        torch.testing.assert_close(merged[key], trained_on[key], rtol=0, atol=0)
    assert any(not torch.equal(merged[k], main[k]) for k in untouched)
