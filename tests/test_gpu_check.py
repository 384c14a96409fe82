"""``benchmarks.gpu_check`` at ``--scale`` on the CPU: the same code the one GPU run takes
(real architectures shrunk, random weights, the library's scoring and GRPO step), checked
for what it measures, so a broken path fails here and not on the lent GPU."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gpu_check import (
    _split,
    build_reward_model,
    shrink_qwen2_5_vl,
    shrink_qwen3_vl,
    shrink_transformer,
)
from paco_grpo.architectures import pipeline_configs
from paco_reward.architectures import model_config

ROOT = Path(__file__).resolve().parents[1]
SCALE = 0.0625
BATCH_SIZES = [1, 2]
# recipe -> (pipeline, micro-batch, shrunk layers, transformer calls per step, text tokens)
RECIPES = {
    "recipes/grpo_flux_t2is.yaml": ("flux", 4, {"double": 1, "single": 2}, 1, 32),
    "recipes/grpo_sd35_t2is.yaml": ("sd3", 4, {"double": 2}, 2, 77 + 16),  # CFG 4.5
    "recipes/grpo_qwen_image_t2is.yaml": ("qwen_image", 2, {"double": 4}, 2, 32),  # true CFG 4
    "recipes/grpo_flux2_klein_t2is.yaml": ("flux2_klein", 4, {"double": 1, "single": 1}, 1, 32),
}
# architecture -> (shrunk layers, tokens per 64 px image: Qwen2.5-VL's 56 px are 2 x 2 merged
# tokens of 28 px; Qwen3-VL's budget upsizes to 256 px, 8 x 8 merged tokens of 32 px)
REWARDS = {
    "qwen2_5_vl_7b": ({"text": 2, "vision": 2}, 4),
    "qwen3_vl_8b": ({"text": 2, "vision": 2}, 64),
}
# the generators' real transformers this check shrinks -> their pipeline
GENERATORS = {
    "black-forest-labs/FLUX.1-dev": "flux",
    "stabilityai/stable-diffusion-3.5-large": "sd3",
    "Qwen/Qwen-Image": "qwen_image",
    "black-forest-labs/FLUX.2-klein-4B": "flux2_klein",
}


def run_check(out: Path, *flags: str) -> tuple[dict, str]:
    """The JSON results and the printed tables of a scaled run on the CPU, as a user runs it."""
    cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--scale", str(SCALE), "--device",
           "cpu", "--resolution", "64", "--json", str(out), *flags]  # fmt: skip
    # One thread: on these tiny matrices threads contend on a shared machine rather than help.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text()), proc.stdout


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> tuple[dict, str]:
    """Every text-to-image recipe and both evaluator architectures in one run."""
    out = tmp_path_factory.mktemp("gpu-check") / "gpu_check.json"
    return run_check(out, "--batch_sizes", *map(str, BATCH_SIZES), "--repeats", "2",
                     "--train_steps", "2", "--recipe", *RECIPES,
                     "--reward_architectures", *REWARDS)  # fmt: skip


@pytest.mark.slow
def test_scoring_rows(check):
    results, stdout = check
    assert [s["architecture"] for s in results["scoring"]] == list(REWARDS)
    for scoring in results["scoring"]:
        layers, tokens = REWARDS[scoring["architecture"]]
        rows = [r for r in scoring["rows"] if r["engine"] == "transformers"]
        assert [r["batch_size"] for r in rows] == BATCH_SIZES
        for row in rows:
            assert math.isfinite(row["pairs_per_s"]) and row["pairs_per_s"] > 0
            assert len(row["scores"]) == row["batch_size"]
            assert all(0 < s < 1 for s in row["scores"])
            assert row["peak_memory_bytes"] is None  # not measured on a CPU, not faked
        scores = [s for r in rows for s in r["scores"]]
        assert len(set(scores)) > 1, scores  # a model that reads its inputs
        assert scoring["layers"] == layers
        assert scoring["image_tokens_per_image"] == tokens
    scoring = results["scoring"][0]  # vLLM: the Qwen2.5-VL evaluator's
    assert all(r["engine"] == "transformers" for r in results["scoring"][1]["rows"])
    if importlib.util.find_spec("vllm") is None:
        assert {"engine": "vllm", "status": "not installed"} in scoring["rows"]
    else:  # .venv-vllm: the same pairs through backend="vllm", float32 on the CPU
        vllm_rows = [r for r in scoring["rows"] if r["engine"] == "vllm"]
        assert [r["batch_size"] for r in vllm_rows] == BATCH_SIZES, scoring["rows"]
        assert all(r["max_abs_diff_vs_transformers"] < 1e-4 for r in vllm_rows)
    assert "| transformers | 1 |" in stdout and "| transformers | 2 |" in stdout
    assert "qwen3_vl_8b" in stdout


@pytest.mark.slow
def test_training_step(check):
    results, stdout = check
    assert [t["recipe"] for t in results["training"]] == list(RECIPES)
    for training in results["training"]:
        pipeline, batch, layers, calls, text = RECIPES[training["recipe"]]
        assert training["pipeline"] == pipeline, training.get("error")
        assert training["batch_size"] == batch  # the recipe's per_device_train_batch_size
        assert training["layers"] == layers
        assert training["transformer_calls"] == calls
        assert training["image_tokens"] == 16  # 64 px: 8 x 8 latents, 2 x 2 patches
        assert training["text_tokens"] == text
        assert training["gradient_checkpointing"] is True
        assert math.isfinite(training["loss"]) and all(map(math.isfinite, training["losses"]))
        grad_norm = training["warm_up"]["grad_norm"]
        assert math.isfinite(grad_norm) and grad_norm > 0
        # LoRA B starts at zero and weight decay alone keeps it there: the gradient moved it
        assert training["lora_changed"] and training["lora_b_max_abs_change"] > 0
        assert 0 < training["lora_parameters"] < training["parameters"]
        assert training["seconds_per_step"] > 0 and training["peak_memory_bytes"] is None
        assert training["measured_over_predicted"] is None
        assert f"| {pipeline} |" in stdout
    # each recipe's own LoRA targets: Qwen-Image's include its MLPs
    qwen = results["training"][2]
    assert "img_mlp.net.2" in qwen["lora_target_modules"]


@pytest.mark.slow
def test_prediction_next_to_measurement(check):
    results, _ = check
    for training in results["training"]:
        predicted = training["predicted"]
        assert "components" in predicted, predicted
        assert predicted["components"]["activations"] > 0
        assert predicted["total_bytes"] == sum(predicted["components"].values()) > 0
        # the static parts are the built model's own
        components = predicted["components"]
        assert components["adam_states"] == 2 * components["lora"]
        assert components["lora"] == 4 * training["lora_parameters"]


@pytest.mark.slow
def test_bf16_as_on_the_gpu(tmp_path):
    """The GPU's arithmetic on the CPU: bf16 weights, the recipe's bf16 autocast."""
    results, _ = run_check(tmp_path / "bf16.json", "--dtype", "bfloat16", "--batch_sizes", "2",
                           "--repeats", "1", "--train_steps", "1", "--no_vllm")  # fmt: skip
    (scoring,), (training,) = results["scoring"], results["training"]  # the defaults
    assert scoring["dtype"] == "bfloat16" and all(0 < s < 1 for s in scoring["rows"][0]["scores"])
    assert training["pipeline"] == "flux"
    assert (training["dtype"], training["mixed_precision"]) == ("bfloat16", "bf16")
    assert math.isfinite(training["loss"]) and training["lora_b_max_abs_change"] > 0


@pytest.mark.parametrize("scale", [1.0, 0.5, 0.25, 0.0625, 0.01])
def test_shrunk_architectures_keep_their_constraints(scale):
    qwen = shrink_qwen2_5_vl(model_config("X-GenGroup/PaCo-Reward-7B"), scale)
    head_dim = qwen["hidden_size"] // qwen["num_attention_heads"]
    assert qwen["hidden_size"] == qwen["num_attention_heads"] * head_dim
    assert qwen["num_attention_heads"] % qwen["num_key_value_heads"] == 0
    assert sum(qwen["rope_scaling"]["mrope_section"]) == head_dim // 2
    vision = qwen["vision_config"]
    assert vision["hidden_size"] % vision["num_heads"] == 0
    assert (vision["hidden_size"] // vision["num_heads"]) % 4 == 0  # 2-D rotary halves
    assert vision["out_hidden_size"] == qwen["hidden_size"]
    assert all(0 <= i < vision["depth"] for i in vision["fullatt_block_indexes"])
    qwen3 = shrink_qwen3_vl(model_config("Qwen/Qwen3-VL-8B-Instruct"), scale)
    text, vision = qwen3["text_config"], qwen3["vision_config"]
    assert text["hidden_size"] == text["num_attention_heads"] * text["head_dim"]
    assert text["num_attention_heads"] % text["num_key_value_heads"] == 0
    assert sum(text["rope_scaling"]["mrope_section"]) == text["head_dim"] // 2
    assert (vision["hidden_size"] // vision["num_heads"]) % 4 == 0
    assert vision["out_hidden_size"] == text["hidden_size"]
    assert all(0 <= i < vision["depth"] for i in vision["deepstack_visual_indexes"])
    for name in GENERATORS:
        real = pipeline_configs(name)["transformer"]
        small = shrink_transformer(real, scale)
        inner = small["num_attention_heads"] * small["attention_head_dim"]
        if "axes_dims_rope" in real:  # SD3 has no RoPE
            assert sum(small["axes_dims_rope"]) == small["attention_head_dim"]
            assert all(d > 0 and d % 2 == 0 for d in small["axes_dims_rope"])
        if "caption_projection_dim" in real:
            assert small["caption_projection_dim"] == inner
        assert small["in_channels"] == real["in_channels"]  # the data's
        if scale == 1.0:  # the GPU run builds exactly the shipped architectures
            assert small == real
    if scale == 1.0:
        assert qwen == model_config("X-GenGroup/PaCo-Reward-7B")
        assert qwen3 == model_config("Qwen/Qwen3-VL-8B-Instruct")


@pytest.mark.parametrize("name", GENERATORS)
def test_shrunk_transformers_build_and_run(name):
    """On the meta device, as the planner runs them: the shapes agree."""
    import torch

    from paco_grpo.planning import _forward
    from paco_reward.architectures import build_empty

    config = shrink_transformer(pipeline_configs(name)["transformer"], SCALE)
    model = build_empty(config)
    out = _forward(model, GENERATORS[name], config, 2, 16, 8, 0, torch.float32)()
    assert out.shape[0] == 2 and out.device.type == "meta"


def test_shrunk_qwen3_vl_builds_and_scores():
    import torch

    model, processor, config = build_reward_model(SCALE, torch.device("cpu"), torch.float32,
                                                  "qwen3_vl_8b")  # fmt: skip
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert model.config.text_config.rope_parameters["mrope_section"] == [6, 5, 5]
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "a"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    image = torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8)
    inputs = processor(text=[prompt], images=[image], return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape[:2] == inputs["input_ids"].shape and torch.isfinite(logits).all()


def test_split_keeps_the_sum():
    assert _split([16, 24, 24], 16) == [4, 6, 6]
    assert _split([16, 56, 56], 32, multiple=2) == [4, 14, 14]
    assert _split([24, 20, 20], 16) == [6, 5, 5]  # Qwen3-VL's interleaved M-RoPE
