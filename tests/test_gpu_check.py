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
import torch
from PIL import Image

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
# Scoring rows scaled down: 4 pairs (or 1 s) a repeat; the GRPO row 2 grids of 32 px panels.
SCORING_FLAGS = ("--min_pairs", "4", "--min_seconds", "1", "--grids", "2", "--panel", "32",
                 "--grpo_batch_size", "4")  # fmt: skip
STAGES = {"preprocess", "vision", "llm"}
# SFT recipe -> (evaluator class, shrunk LoRA rank, tokens per image: the pixel budget / 16
# filled by 336 px images of 28 px tokens)
SFT_RECIPES = {
    "recipes/paco_reward_7b_lora.yaml": ("Qwen2_5_VLForConditionalGeneration", 2, 144),
}
ANSWER_TOKENS = 256  # the planner's answer length (paco_reward.training.planning)
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
                     *SCORING_FLAGS, "--train_steps", "2", "--recipe", *RECIPES,
                     "--reward_architectures", *REWARDS, "--sft_recipe", *SFT_RECIPES)  # fmt: skip


@pytest.mark.slow
def test_scoring_rows(check):
    results, stdout = check
    assert [s["architecture"] for s in results["scoring"]] == list(REWARDS)
    for scoring in results["scoring"]:
        layers, tokens = REWARDS[scoring["architecture"]]
        rows = [r for r in scoring["rows"] if r["engine"] == "transformers"]
        pairs = [r for r in rows if r["workload"] == "pairs"]
        (grpo,) = [r for r in rows if r["workload"] == "grpo"]
        assert [r["batch_size"] for r in pairs] == BATCH_SIZES
        for row in rows:
            low, high = row["pairs_per_s_iqr"]
            assert 0 < low <= row["pairs_per_s"] <= high and math.isfinite(high)
            assert row["repeats"] == 2 and row["pairs_per_repeat"] >= min(4, row["pairs_per_call"])
            assert set(row["stage_ms_per_pair"]) == STAGES
            assert all(ms > 0 for ms in row["stage_ms_per_pair"].values()), row
            assert row["syncs_per_call"] is None  # counted on a GPU only
            assert row["peak_memory_bytes"] is None  # not measured on a CPU, not faked
            assert row["tflop_per_pair"] > 0 and row["bf16_peak_tflops"] == 989.4
            assert row["fraction_of_bf16_peak"] == pytest.approx(
                row["pairs_per_s"] * row["tflop_per_pair"] / 989.4
            )
        for row in pairs:
            assert len(row["scores"]) == row["batch_size"]
            assert all(0 < s < 1 for s in row["scores"])
        # the GRPO reward: 2 grids of 6 panel pairs a call, one reward a grid
        assert grpo["pairs_per_call"] == 12 and grpo["grids_per_call"] == 2
        assert grpo["grids_per_s"] == pytest.approx(grpo["pairs_per_s"] / 6)
        assert len(grpo["scores"]) == 2 and all(0 < s < 1 for s in grpo["scores"])
        scores = [s for r in pairs for s in r["scores"]]
        assert len(set(scores)) > 1, scores  # a model that reads its inputs
        assert scoring["layers"] == layers
        assert scoring["image_tokens_per_image"] == tokens
        assert scoring["attention"] == {"vision": "sdpa", "text": "sdpa"}
        assert scoring["image_processor"] == "Qwen2VLImageProcessor"
        assert scoring["torch"] == torch.__version__ and "cudnn" in scoring
    scoring = results["scoring"][0]  # vLLM: the Qwen2.5-VL evaluator's
    assert all(r["engine"] == "transformers" for r in results["scoring"][1]["rows"])
    if importlib.util.find_spec("vllm") is None:
        assert {"engine": "vllm", "status": "not installed"} in scoring["rows"]
    else:  # .venv-vllm: the same pairs through backend="vllm", float32 on the CPU
        vllm_rows = [r for r in scoring["rows"] if r["engine"] == "vllm"]
        assert [r["batch_size"] for r in vllm_rows] == BATCH_SIZES, scoring["rows"]
        assert all(r["max_abs_diff_vs_transformers"] < 1e-4 for r in vllm_rows)
    assert "| transformers | pairs | 1 |" in stdout and "| transformers | pairs | 2 |" in stdout
    assert "| transformers | grpo | 4 |" in stdout
    assert "qwen3_vl_8b" in stdout


def test_flops_of_a_scored_pair_are_what_torch_counts(tmp_path):
    """ScoringFlops against torch's own FLOP counter on the scaled evaluator (eager attention,
    whose matmuls the counter sees): the vision tower of two 504 px images with the real
    window structure, and the language model on one pair's prompt."""
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks.scoring_flops import ScoringFlops

    model, processor, _ = build_reward_model(0.0625, torch.device("cpu"), torch.float32,
                                             vision_blocks=8)  # fmt: skip
    model.set_attn_implementation("eager")
    flops = ScoringFlops.of(model)
    image = Image.new("RGB", (504, 504), (40, 90, 200))
    inputs = processor.image_processor(images=[image, image], return_tensors="pt")
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"])
    grids = [tuple(g) for g in inputs["image_grid_thw"].tolist()]
    assert flops.vision(grids) == pytest.approx(counter.get_total_flops(), rel=0.01)

    tokens = 300
    embeds = torch.zeros(1, tokens, model.config.text_config.hidden_size)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        model(inputs_embeds=embeds, logits_to_keep=1)
    # the counter charges causal attention for the full square; ScoringFlops for the half
    width, layers = flops.attention_width, flops.text_layers
    full_square = flops.language(tokens) + 4 * width * layers * tokens * (tokens - 1) / 2
    assert full_square == pytest.approx(counter.get_total_flops(), rel=0.01)


def test_flops_of_the_7b_pair_are_the_issues():
    """PaCo-Reward-7B's shape on the meta device: a pair of 504 px images (2 x 1,296 patches)
    with a 722-token prompt is 12.95 TFLOP (language model 9.53, vision tower 3.42)."""
    import transformers

    from benchmarks.gpu_check import REWARD_MODEL
    from benchmarks.scoring_flops import ScoringFlops

    config = model_config(REWARD_MODEL)
    with torch.device("meta"):
        model = transformers.Qwen2_5_VLForConditionalGeneration._from_config(
            transformers.AutoConfig.for_model(**config)
        )
    flops = ScoringFlops.of(model)
    assert flops.language(722) / 1e12 == pytest.approx(9.53, abs=0.01)
    assert flops.vision([(1, 36, 36)] * 2) / 1e12 == pytest.approx(3.42, abs=0.01)


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
def test_sft_step(check):
    """The evaluator's LoRA SFT step as the recipe sets it, through the trainer's own loop,
    timed, next to the planner's figure for the same launch."""
    results, stdout = check
    assert [r["recipe"] for r in results["sft"]] == list(SFT_RECIPES)
    for row in results["sft"]:
        architecture, rank, image_tokens = SFT_RECIPES[row["recipe"]]
        assert row["architecture"] == architecture, row.get("error")
        assert (row["lora_r"], row["lora_alpha"]) == (rank, 2 * rank)  # the recipe's, scaled
        assert row["lora_target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj",
                                              "gate_proj", "up_proj", "down_proj"]  # fmt: skip
        assert 0 < row["lora_parameters"] < row["parameters"]
        assert row["batch_size"] == 8 and row["gradient_checkpointing"] is True
        assert row["image_max_pixels"] == 2_097_152 // 16
        tokens = row["tokens"]
        assert tokens["image"] == image_tokens and tokens["answer"] == ANSWER_TOKENS
        assert tokens["per_pair"] == tokens["prompt"] + 2 * image_tokens + ANSWER_TOKENS
        assert len(row["step_seconds"]) == 2 and row["seconds_per_step"] > 0
        q1, q3 = row["seconds_per_step_iqr"]
        assert min(row["step_seconds"]) <= q1 <= row["seconds_per_step"] <= q3
        assert len(row["losses"]) == 3 and all(map(math.isfinite, row["losses"]))
        assert row["lora_changed"] and row["lora_b_max_abs_change"] > 0
        planned = row["planned"]["components"]
        assert planned["activations"] > 0 and planned["LoRA parameters"] > 0
        assert row["planned"]["total_bytes"] == sum(planned.values())
        assert row["peak_memory_bytes"] is None and row["measured_over_planned"] is None
    assert "| paco_reward_7b_lora.yaml |" in stdout and "| planned component |" in stdout


@pytest.mark.slow
def test_bf16_as_on_the_gpu(tmp_path):
    """The GPU's arithmetic on the CPU: bf16 weights, the recipe's bf16 autocast."""
    results, _ = run_check(tmp_path / "bf16.json", "--dtype", "bfloat16", "--batch_sizes", "2",
                           "--repeats", "1", "--train_steps", "1", "--no_vllm")  # fmt: skip
    (scoring,), (training,), (sft,) = results["scoring"], results["training"], results["sft"]
    assert scoring["dtype"] == "bfloat16" and all(0 < s < 1 for s in scoring["rows"][0]["scores"])
    assert training["pipeline"] == "flux"
    assert (training["dtype"], training["mixed_precision"]) == ("bfloat16", "bf16")
    assert math.isfinite(training["loss"]) and training["lora_b_max_abs_change"] > 0
    assert sft["recipe"].endswith("paco_reward_7b_lora.yaml")  # the default
    assert (sft["dtype"], sft["mixed_precision"]) == ("bfloat16", "bf16")
    assert sft["lora_changed"] and all(map(math.isfinite, sft["losses"]))


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
