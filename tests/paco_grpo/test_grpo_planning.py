"""``paco-grpo plan``: the paper's recipe planned from FLUX.1-dev's real architecture, the
LoRA and optimizer figures against counts made here from the layers' shapes, the start-up
check (refuse a certain failure, warn on the estimate, never block on its own error), and
the activation estimate against memory measured at reduced width."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import torch

from benchmarks.plan_calibration import calibrate
from paco_grpo.architectures import pipeline_configs
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.planning import plan_grpo
from paco_reward import planning
from paco_reward.architectures import build_empty, count_parameters, model_config
from paco_reward.errors import ConfigError
from paco_reward.planning import GiB, PlanError, check_plan


def _lora_parameters(config: dict, targets: list[str], r: int) -> int:
    """r x (in + out) per adapted linear layer, read off the built layers."""
    model = build_empty(config)
    return sum(
        r * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and any(name.endswith(t) for t in targets)
    )


def test_the_paper_recipe_planned_on_eight_80_gb_gpus():
    cmd = [sys.executable, "-m", "paco_grpo.cli", "plan", "recipes/grpo_flux_t2is.yaml",
           "--num_processes", "8", "--gpu_memory_gb", "80", "--json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads(proc.stdout)
    parts = {c["name"]: c for c in plan["components"]}
    transformer = parts["transformer (FluxTransformer2DModel)"]
    assert transformer["parameters"] == pytest.approx(11.9e9, rel=0.01)
    assert transformer["bytes"] == 2 * transformer["parameters"]  # bfloat16
    assert parts["text_encoder_2 (T5EncoderModel)"]["parameters"] == pytest.approx(4.76e9, rel=0.01)

    cfg = GRPOConfig.from_yaml("recipes/grpo_flux_t2is.yaml")
    lora = _lora_parameters(
        pipeline_configs(cfg.model_name_or_path)["transformer"], cfg.lora_target_modules, 64
    )
    assert parts["LoRA parameters"]["parameters"] == lora
    assert parts["AdamW states"]["bytes"] == 2 * 4 * lora
    assert parts["EMA of the LoRA"]["bytes"] == 4 * lora  # use_ema: true
    assert {"reward consistency: X-GenGroup/PaCo-Reward-7B",
            "reward clip_t: laion/CLIP-ViT-H-14-laion2B-s32B-b79K"} <= set(parts)  # fmt: skip
    activations = [c for c in plan["components"] if c["kind"] == "activations"]
    assert len(activations) == 1 and activations[0]["bytes"] > 0

    assert plan["per_process_bytes"] == sum(c["bytes"] for c in plan["components"])
    assert plan["fits"] is (plan["per_process_bytes"] <= 80 * GiB)
    assert plan["processes"] == 8 and plan["images_per_process_per_epoch"] == 42 * 16 // 8
    assert plan["optimizer_steps_per_epoch"] == 1


def test_the_sd35_recipe_plans_from_the_real_architecture():
    """SD3.5 Large: its 8.1 B transformer, the LoRA on the recipe's targets (303 Linear
    layers: 8 projections in 38 joint blocks, the last without ``to_add_out``), CFG's two
    calls per backward, and the verdict the recipe's comment quotes."""
    cfg = GRPOConfig.from_yaml("recipes/grpo_sd35_t2is.yaml")
    assert cfg.pipeline == "sd3" and cfg.negative_prompt == ""
    config = pipeline_configs(cfg.model_name_or_path)["transformer"]
    model = build_empty(config)
    adapted = [
        name
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and any(name.endswith(t) for t in cfg.lora_target_modules)
    ]
    assert len(adapted) == 38 * 8 - 1 == 303
    assert all(any(n.endswith(t) for n in adapted) for t in cfg.lora_target_modules)

    plan = plan_grpo(cfg, num_processes=8, gpu_memory_gb=80)
    parts = {c.name: c for c in plan.components}
    transformer = parts["transformer (SD3Transformer2DModel)"]
    assert transformer.parameters == pytest.approx(8.1e9, rel=0.01)
    assert parts["text_encoder_3 (T5EncoderModel)"].parameters == pytest.approx(4.76e9, rel=0.01)
    lora = _lora_parameters(config, cfg.lora_target_modules, cfg.lora_r)
    assert parts["LoRA parameters"].parameters == lora
    (activations,) = [c for c in plan.components if c.kind == "activations"]
    assert "true CFG x2" in activations.name and activations.bytes > 0
    assert plan.fits is True
    verdict = f"{plan.per_process_bytes / GiB:.1f} GiB of"
    assert f"fits, {verdict}" in open("recipes/grpo_sd35_t2is.yaml").read()


def test_served_rewards_and_sharding_take_their_memory_away():
    cfg = GRPOConfig.from_yaml("recipes/grpo_flux_t2is.yaml")
    local = plan_grpo(cfg, num_processes=8)
    served = GRPOConfig.from_yaml(
        "recipes/grpo_flux_t2is.yaml",
        {"reward_kwargs": {"consistency": {"model": "PaCo-Reward-7B",
                                           "server_url": "http://127.0.0.1:8000/v1"},
                           "clip_t": {"model": "laion/CLIP-ViT-H-14-laion2B-s32B-b79K"}}},
    )  # fmt: skip
    served_plan = plan_grpo(served, num_processes=8)
    freed = local.per_process_bytes - served_plan.per_process_bytes
    assert freed == pytest.approx(8.29e9 * 2, rel=0.01)  # PaCo-Reward-7B in bfloat16
    sharded = plan_grpo(cfg, num_processes=8, sharded=True)
    (t_local,) = [c for c in local.components if c.name.startswith("transformer")]
    (t_sharded,) = [c for c in sharded.components if c.name.startswith("transformer")]
    assert t_sharded.bytes == pytest.approx(t_local.bytes / 8, abs=2)


def test_two_nodes_plan_a_judge_on_each_node():
    """``--num_machines``: the paper's recipe on 2 nodes x 7 processes, a process's memory as
    on one node; a loopback judge is one server per node on the node's reward GPU (8 GPUs a
    node), with its weights counted; a shared judge is one server for all; processes that do
    not split over the nodes are refused."""
    node_local = GRPOConfig.from_yaml(
        "recipes/grpo_flux_t2is.yaml",
        {"reward_kwargs.consistency.server_url": "http://127.0.0.1:8000/v1"},
    )
    one_node = plan_grpo(node_local, num_processes=7, gpu_memory_gb=80)
    plan = plan_grpo(node_local, num_processes=14, num_machines=2, gpu_memory_gb=80)
    assert plan.per_process_bytes == one_node.per_process_bytes
    facts = plan.facts
    assert (facts["processes"], facts["nodes"], facts["processes_per_node"]) == (14, 2, 7)
    assert (facts["gpus_per_node"], one_node.facts["gpus_per_node"]) == (8, 8)
    assert facts["images_per_process_per_epoch"] == 42 * 16 // 14
    assert "nodes" not in one_node.facts
    servers = facts["reward_servers"]
    assert servers.startswith("http://127.0.0.1:8000/v1 serves consistency")
    assert "node-local: one on each node's reward GPU (2 in all)" in servers
    assert "each called by its node's 7 process(es)" in servers
    judge = count_parameters(build_empty(model_config("X-GenGroup/PaCo-Reward-7B")))
    assert f"{judge / 1e9:.2f} B parameters, {2 * judge / GiB:.1f} GiB of bfloat16" in servers

    shared = GRPOConfig.from_yaml(
        "recipes/grpo_flux_t2is.yaml",
        {"reward_kwargs.consistency": {"model": "PaCo-Reward-7B", "server_url": "http://judge:8000/v1"}},
    )  # fmt: skip
    facts = plan_grpo(shared, num_processes=14, num_machines=2).facts
    assert "one server, called by all 14 process(es)" in facts["reward_servers"]
    assert "'PaCo-Reward-7B' is a served name" in facts["reward_servers"]  # no weights to count
    assert facts["gpus_per_node"] == 7
    with pytest.raises(ConfigError, match="num_processes 15 do not split over num_machines 2"):
        plan_grpo(node_local, num_processes=15, num_machines=2)


def test_the_qwen_image_recipe_fits_the_paper_layout_with_the_evaluator_served():
    """Qwen-Image T2IS on 7 training processes of 80 GB: true CFG doubles the activations, no
    reference image; PaCo-Reward served (as shipped) fits, in every process it cannot."""
    recipe = "recipes/grpo_qwen_image_t2is.yaml"
    plan = plan_grpo(GRPOConfig.from_yaml(recipe), num_processes=7, gpu_memory_gb=80)
    parts = {c.name: c for c in plan.components}
    transformer = parts["transformer (QwenImageTransformer2DModel)"]
    assert transformer.parameters == pytest.approx(20.4e9, rel=0.01)
    (activations,) = [c for c in plan.components if c.kind == "activations"]
    assert activations.name == "activations: 2 x 512^2, true CFG x2"
    assert plan.fits is True and plan.per_process_bytes / GiB == pytest.approx(68.3, abs=0.1)
    assert parts["reward consistency: PaCo-Reward-7B"].bytes == 0
    assert plan.per_process_bytes + 2 * 8.29e9 > 80 * GiB  # PaCo-Reward-7B (bf16) in-process


def test_the_ocr_recipe_plans_its_reader_in_every_process():
    """FLUX.1-dev trained at 256^2 with GOT-OCR 2.0 in each of 8 processes: the reader counted
    from its shipped architecture (561 M, bfloat16), and the verdict the recipe's comment quotes."""
    recipe = "recipes/grpo_flux_ocr.yaml"
    plan = plan_grpo(GRPOConfig.from_yaml(recipe), num_processes=8, gpu_memory_gb=80)
    parts = {c.name: c for c in plan.components}
    reader = parts["reward ocr: stepfun-ai/GOT-OCR-2.0-hf"]
    assert reader.parameters == pytest.approx(561e6, rel=0.01)
    assert reader.bytes == 2 * reader.parameters and reader.note == "in this process"
    (activations,) = [c for c in plan.components if c.kind == "activations"]
    assert activations.name == "activations: 6 x 256^2"
    assert plan.fits is True
    verdict = f"{plan.per_process_bytes / GiB:.1f} GiB of"
    assert f"fits, {verdict}" in open(recipe).read()

    # The prompt encodings: a micro-batch's copies on the GPU (T5's 512 x 4096 and CLIP's
    # pooled 768 per prompt, bfloat16), the cache of the 1,000 + 100 prompts in host memory.
    per_prompt = (512 * 4096 + 768) * 2
    (encodings,) = [c for c in plan.components if c.kind == "inputs"]
    assert encodings.name == "prompt encodings: 6 copied from the host"
    assert encodings.bytes == 6 * per_prompt
    host = plan.facts["prompt_encodings_in_host_memory"]
    assert host == (f"{per_prompt / 2**20:.1f} MiB a distinct prompt, pinned, in each process: "
                    f"{1100 * per_prompt / GiB:.1f} GiB for the 1,100 prompts of the prompt files")  # fmt: skip
    assert "4.3 GiB" in host and "prompt encodings in host memory: 4.0 MiB" in plan.table()


CROSS_JUDGE = "recipes/grpo_flux_t2is_cross_judge.yaml"


def test_the_cross_judge_recipe_counts_its_test_judge():
    """Trained on PaCo-Reward-7B, evaluated with Gemma-3-4B-IT: both served, neither costs a
    training process anything, CLIP-T (the same in both) is counted once, and the verdict is
    the one the recipe's comment quotes; the test judge in each process would be counted from
    Gemma-3-4B-IT's real architecture (4.30 B parameters in bfloat16)."""
    served = plan_grpo(GRPOConfig.from_yaml(CROSS_JUDGE), num_processes=7, gpu_memory_gb=80)
    parts = {c.name: c for c in served.components}
    assert parts["reward consistency: Paco-Reward-7B"].bytes == 0
    assert parts["test reward consistency: Gemma-3-4B-IT"].bytes == 0
    assert [name for name in parts if "clip_t" in name] == [
        "reward clip_t: laion/CLIP-ViT-H-14-laion2B-s32B-b79K"
    ]
    verdict = f"fits, {served.per_process_bytes / GiB:.1f} GiB of 80"
    assert served.fits is True and verdict in open(CROSS_JUDGE).read()

    judge = {"model": "google/gemma-3-4b-it", "template": "consistency"}
    clip_t = {"model": "laion/CLIP-ViT-H-14-laion2B-s32B-b79K", "long_text": "truncate"}
    overrides = {"test.reward_kwargs": {"consistency": judge, "clip_t": clip_t}}
    local = plan_grpo(GRPOConfig.from_yaml(CROSS_JUDGE, overrides), num_processes=7)
    gemma = {c.name: c for c in local.components}["test reward consistency: google/gemma-3-4b-it"]
    assert gemma.parameters == pytest.approx(4.30e9, rel=0.01)
    assert gemma.bytes == 2 * gemma.parameters  # bfloat16, the scorer's dtype on a GPU
    assert local.per_process_bytes - served.per_process_bytes == gemma.bytes


GARDO = "recipes/grpo_flux_t2is_gardo.yaml"


def test_the_gardo_recipe_counts_its_feature_model_and_reference_adapter():
    """GARDO's FLUX.1 recipe is the paper's plus the DINOv3 ViT-L/16 feature model (built from
    its shipped config, float32), the reference adapter (the LoRA's size, bfloat16) and the
    PickScore auxiliary; the verdict is the one its comment quotes."""
    gardo = plan_grpo(GRPOConfig.from_yaml(GARDO), num_processes=7, gpu_memory_gb=80)
    paper = plan_grpo(GRPOConfig.from_yaml("recipes/grpo_flux_t2is.yaml"), num_processes=7)
    parts = {c.name: c for c in gardo.components}
    dino = parts["feature model: facebook/dinov3-vitl16-pretrain-lvd1689m"]
    assert dino.parameters == count_parameters(build_empty(model_config(dino.name.split(": ")[1])))
    assert dino.parameters == pytest.approx(300e6, rel=0.02) and dino.bytes == 4 * dino.parameters
    lora = parts["LoRA parameters"].parameters
    reference = parts["reference adapter (GARDO)"]
    assert reference.parameters == lora and reference.bytes == 2 * lora
    pickscore = parts["reward pickscore: yuvalkirstain/PickScore_v1"]
    added = dino.bytes + reference.bytes + pickscore.bytes
    assert gardo.per_process_bytes - paper.per_process_bytes == added
    verdict = f"fits, {gardo.per_process_bytes / GiB:.1f} GiB of 80"
    assert gardo.fits is True and verdict in open(GARDO).read()
    sharded = plan_grpo(GRPOConfig.from_yaml(GARDO), num_processes=7, sharded=True)
    assert {c.name: c for c in sharded.components}["reference adapter (GARDO)"].parameters == (
        lora // 7
    )


def test_the_gardo_rows_are_what_the_trainer_builds(flux_dir, tmp_path):
    """The planned feature model and reference adapter against a bf16 trainer's own: the same
    parameter counts and bytes (the reference adapter stays in the model's dtype)."""
    from accelerate.state import AcceleratorState

    from paco_grpo.grpo_trainer import GRPOTrainer

    AcceleratorState._reset_state()  # a bf16 trainer after fp32 ones in this process
    from paco_grpo.policy import REFERENCE_ADAPTER, adapter_params
    from paco_grpo.testing.features import build_tiny_dinov3

    overrides = {
        "model_name_or_path": str(flux_dir), "output_dir": str(tmp_path), "report_to": [],
        "dtype": "bfloat16", "bf16": True, "beta": 0.01, "kl_reference": "adapter",
        "feature_model": str(build_tiny_dinov3(tmp_path / "dino")), "use_ema": False,
    }  # fmt: skip
    cfg = GRPOConfig.from_yaml("recipes/grpo_tiny_cpu.yaml", overrides)
    parts = {c.name: c for c in plan_grpo(cfg).components}
    trainer = GRPOTrainer(cfg)
    reference = adapter_params(trainer.accelerator.unwrap_model(trainer.model), REFERENCE_ADAPTER)
    planned = parts["reference adapter (GARDO)"]
    assert planned.parameters == sum(p.numel() for p in reference.values())
    assert planned.bytes == sum(p.numel() * p.element_size() for p in reference.values())
    features = trainer.rollout.features.model
    planned = parts[f"feature model: {cfg.feature_model}"]
    assert planned.parameters == sum(p.numel() for p in features.parameters())
    assert planned.bytes == sum(p.numel() * p.element_size() for p in features.parameters())
    AcceleratorState._reset_state()  # fp32 trainers after this one


def test_test_rewards_with_their_training_arguments_are_the_training_instances(flux_dir, tmp_path):
    """An evaluation reward whose arguments are its training ones is the training object
    (one model in memory); one with other arguments is built apart, as the plan counts it."""
    from paco_grpo.grpo_trainer import GRPOTrainer
    from paco_reward.testing.clip import build_tiny_clip

    clip_t = {"model": str(build_tiny_clip(tmp_path / "clip"))}
    cfg = GRPOConfig.from_yaml(
        "recipes/grpo_tiny_cpu.yaml",
        {
            "model_name_or_path": str(flux_dir),
            "output_dir": str(tmp_path / "run"),
            "report_to": [],
            "rewards": {"panel_colour_agreement": 1.0, "clip_t": 1.0},
            "reward_kwargs": {"clip_t": clip_t},
            "test.reward_kwargs": {"clip_t": clip_t, "panel_colour_agreement": {"layout": "2x2"}},
        },
    )
    assert cfg.separate_test_rewards() == {"panel_colour_agreement": {"layout": "2x2"}}
    trainer = GRPOTrainer(cfg)
    assert trainer.test_rewards["clip_t"] is trainer.rewards["clip_t"]
    colour = trainer.test_rewards["panel_colour_agreement"]
    assert colour is not trainer.rewards["panel_colour_agreement"] and colour.layout == "2x2"
    rows = [c.name for c in trainer.plan.components if c.kind == "reward"]
    assert rows == [f"reward clip_t: {clip_t['model']}"]  # the colour reward holds no model


def _tiny_config(flux_dir, out) -> GRPOConfig:
    return GRPOConfig.from_yaml(
        "recipes/grpo_tiny_cpu.yaml",
        {"model_name_or_path": str(flux_dir), "output_dir": str(out), "report_to": []},
    )


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    from paco_grpo.testing.flux import build_tiny_flux

    return build_tiny_flux(tmp_path_factory.mktemp("tiny-flux") / "flux", seed=0)


def test_start_up_refuses_a_certain_failure_before_anything_loads(flux_dir, tmp_path, monkeypatch):
    """A GPU smaller than the tiny model's weights: the trainer stops at its plan, before
    the rewards, the pipeline or the output folder exist; --skip_plan_check goes on."""
    from paco_grpo.grpo_trainer import GRPOTrainer

    monkeypatch.setattr(planning, "gpu_memory_bytes", lambda device=None: 1024)
    cfg = _tiny_config(flux_dir, tmp_path / "run")
    with pytest.raises(PlanError, match=r"cannot fit.*skip_plan_check"):
        GRPOTrainer(cfg)
    assert not (tmp_path / "run").exists()

    cfg = _tiny_config(flux_dir, tmp_path / "run")
    cfg.skip_plan_check = True
    trainer = GRPOTrainer(cfg)
    assert trainer.plan is not None and trainer.plan.certain_failure


def test_rewards_the_caller_built_are_listed_not_read_from_the_config(flux_dir, tmp_path, caplog):
    """``GRPOTrainer(config, rewards=...)`` (the demo's RL arms): the config's clip_i names
    no model, so the config alone plans its default (CLIP ViT-L/14, an architecture shipped
    for the aesthetic predictor); the caller's tiny CLIP is the reward that runs, and the
    plan says it is not counted."""
    from paco_grpo.grpo_trainer import GRPOTrainer
    from paco_grpo.rewards import CLIPImageReward
    from paco_reward.testing.clip import build_tiny_clip

    cfg = _tiny_config(flux_dir, tmp_path / "run")
    cfg.rewards = {"clip_i": 1.0}
    (default,) = [c for c in plan_grpo(cfg).components if c.kind == "reward"]
    assert default.bytes > 100e6  # what the config alone says: the ViT-L/14 default, counted
    clip = CLIPImageReward(build_tiny_clip(tmp_path / "clip"))
    with caplog.at_level(logging.WARNING, logger="paco_reward.planning"):
        trainer = GRPOTrainer(cfg, rewards={"clip_i": clip})
    assert "No memory plan" not in caplog.text
    (reward,) = [c for c in trainer.plan.components if c.kind == "reward"]
    assert reward.name == "reward clip_i" and reward.bytes == 0
    assert reward.note == "built by the caller: not counted"


def test_start_up_warns_when_only_the_estimate_exceeds(flux_dir, tmp_path, caplog, capsys):
    cfg = _tiny_config(flux_dir, tmp_path / "run")
    full = plan_grpo(cfg)
    between = (full.static_bytes + full.per_process_bytes) / 2 / GiB  # above the weights only
    with caplog.at_level(logging.WARNING, logger="paco_reward.planning"):
        plan = check_plan(lambda gb: plan_grpo(cfg, gpu_memory_gb=between), "cpu")
    assert plan.fits is False and not plan.certain_failure
    assert "may not fit" in caplog.text and "per_device_train_batch_size" in caplog.text
    assert "| **per process** |" in capsys.readouterr().out  # the table, printed


def test_a_plan_that_cannot_be_made_never_blocks(caplog):
    def broken(gpu_gb):
        raise ValueError("unknown architecture")

    with caplog.at_level(logging.WARNING, logger="paco_reward.planning"):
        assert check_plan(broken, "cpu") is None
    assert "No memory plan" in caplog.text and "unknown architecture" in caplog.text


def test_without_a_gpu_only_the_main_process_plans(capsys):
    """No GPU, no verdict: a CPU launch's other processes skip the plan (it would only import
    the real architecture's modules), the main one still prints its table."""
    made = []

    def make(gpu_gb):
        made.append(gpu_gb)
        return plan_grpo(GRPOConfig.from_yaml("recipes/grpo_flux_t2is.yaml"), num_processes=8)

    assert check_plan(make, "cpu", is_main_process=False) is None
    assert made == [] and capsys.readouterr().out == ""
    plan = check_plan(make, "cpu", is_main_process=True)
    assert made == [None] and plan.fits is None
    assert "| **per process** |" in capsys.readouterr().out


@pytest.mark.slow
def test_activation_estimate_within_10_percent_of_measured_peak():
    """FLUX's blocks at widths 128 and 256, two micro-batches and resolutions, with and
    without gradient checkpointing (benchmarks/plan_calibration.py prints this table)."""
    rows = calibrate()
    assert len(rows) == 4
    for row in rows:
        assert abs(row["error"]) < 0.10, row
    # checkpointing keeps a fraction, and a bigger micro-batch more
    off = [r["measured_mib"] for r in rows if not r["gradient_checkpointing"]]
    on = [r["measured_mib"] for r in rows if r["gradient_checkpointing"]]
    assert all(b < a / 2 for a, b in zip(off, on)) and off[1] > off[0]
