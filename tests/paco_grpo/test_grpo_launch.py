"""Every real-size GRPO recipe launches as its first comment says, on CPU.

Each recipe in ``recipes/`` that names an accelerate config is launched with that config's
process count (``accelerate launch --config_file``, gloo, ``ACCELERATE_USE_CPU=1``) and
its batch arithmetic unchanged: prompts per epoch, generations, sampling and training
batch sizes, accumulation, passes, the steps that are trained. Only the models (tiny, built
here), the data of the editing recipes (their parquet is the user's), resolutions, rewards
(cheap ones: the recipe's evaluators would score 4,032 pairs per epoch; the OCR recipe keeps
its ``ocr`` reward, read by the tiny GOT-OCR 2.0), precision (fp32:
bf16 on a CPU only slows this test; ``test_bf16.py`` checks bf16), the text length of the
tiny encoders, the number of denoising steps around the trained ones and the test set's
size are overridden. One epoch, then the last checkpoint is resumed in the same processes.
Recipes that name the same accelerate config run one after the other in one launch, since
starting eight processes costs more than a tiny recipe's epoch.

Checked per launch: one job of N processes (the start-up line says so), every rank drew a
distinct share of the epoch's images and all of them together are the epoch, the
advantages each rank trained on equal those computed in one process from the gathered
rewards, at least one optimizer step, a checkpoint that resumes to the same LoRA.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.pipelines import PIPELINE_SPECS, get_pipeline_spec
from tests.paco_grpo.launch_probe import gathered_advantages, read_ranks

PROBE = str(Path(__file__).with_name("launch_probe.py"))
FAST = {
    "num_train_epochs": 1,
    "dtype": "float32",
    "bf16": False,
    "report_to": "none",
    "num_sample_images": 0,
}
COLOUR = {"rewards": {"panel_colour_agreement": 1.0}}


def launch_config(recipe: str) -> tuple[Path, int]:
    """The accelerate config a recipe's comments name, and its process count."""
    text = Path(recipe).read_text()
    found = re.search(r"recipes/accelerate/[\w.]+\.yaml", text)
    assert found, f"{recipe} names no accelerate config in its comments"
    config = Path(found.group(0))
    return config, int(yaml.safe_load(config.read_text())["num_processes"])


@pytest.fixture(scope="module")
def models(tiny_pipeline_dir, tmp_path_factory):
    """Pipeline name -> its tiny model folder, and ``clip`` -> a tiny CLIP."""
    from paco_reward.testing.clip import build_tiny_clip
    from paco_reward.testing.got_ocr2 import build_tiny_got_ocr2

    root = tmp_path_factory.mktemp("launch-models")
    return {
        **{name: tiny_pipeline_dir(name) for name in PIPELINE_SPECS},
        "clip": build_tiny_clip(root / "clip"),
        "ocr": build_tiny_got_ocr2(root / "ocr"),
    }


def _overrides(recipe: str, models: dict, tiny: dict) -> dict:
    recipe_cfg = GRPOConfig.from_yaml(recipe)
    pipeline = recipe_cfg.pipeline
    _, nproc = launch_config(recipe)
    resolution = tiny[pipeline].resolution  # the tiny VAE's sides
    out = {
        **FAST,
        "model_name_or_path": str(models[pipeline]),
        "max_sequence_length": tiny[pipeline].max_sequence_length,
        # Fewer denoising steps, the recipe's trained noise steps kept: the distribution does
        # not depend on them, and sampling 672 images at 10 steps is most of a run's compute.
        "train.num_steps": max(recipe_cfg.train.noise_steps) + 2,
        "test.num_steps": 2,
        "test.num_prompts": nproc,  # one test prompt per process still gathers across them
    }
    if not get_pipeline_spec(pipeline).edits:  # text-to-image sets
        rewards, kwargs = {"panel_colour_agreement": 1.0, "clip_t": 1.0}, {}
        if "ocr" in recipe_cfg.rewards:  # the OCR task keeps its reward, read by the tiny GOT-OCR
            rewards = {"ocr": 1.0, "clip_t": 1.0}
            kwargs = {"ocr": {"model": str(models["ocr"]), "dtype": "float32", "max_new_tokens": 2}}
        return {
            **out,
            "train.resolution": resolution,
            "test.resolution": resolution,
            "rewards": rewards,
            "reward_kwargs": {**kwargs, "clip_t": {"model": str(models["clip"])}},
        }
    return {
        **out,
        **COLOUR,
        "reward_kwargs": {"panel_colour_agreement": {"layout": "2x2"}},
        "prompt_file": GRPOConfig.from_yaml(tiny[pipeline].recipe).prompt_file,  # its toy data
        "train.resolution": resolution,
        "test.resolution": resolution,
    }


def _flags(overrides: dict) -> list[str]:
    return [
        x
        for k, v in overrides.items()
        for x in (f"--{k}", v if isinstance(v, str) else json.dumps(v))
    ]


def _launch(config: Path, nproc: int, runs: dict[str, dict], out: Path) -> dict[str, tuple]:
    """Every recipe of ``runs`` (recipe -> overrides) trained and resumed, one after the other,
    in one ``accelerate launch`` of ``config``: ``{recipe: (per-rank records, its stdout)}``."""
    argv = []
    for index, (recipe, overrides) in enumerate(runs.items()):
        argv += [*(["--next"] if index else []), "train", recipe,
                 "--output_dir", str(out / f"run{index}"), *_flags(overrides)]  # fmt: skip
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.getcwd()}  # fmt: skip
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
           PROBE, str(out / "probe"), *argv]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    stdouts = re.split(r"^launch_probe: run \d+\n", proc.stdout, flags=re.M)[1:]
    assert len(stdouts) == len(runs), proc.stdout[-2000:]
    return {
        recipe: (read_ranks(out / "probe", i, nproc), stdouts[i], out / f"run{i}")
        for i, recipe in enumerate(runs)
    }


# Recipes whose launch is another recipe's: they differ from it only in what this test
# replaces (the rewards and their arguments, in training and evaluation) and GARDO's options
# (run on N processes by test_grpo_distributed and test_gardo_trainer), so launching them
# too would prove nothing new; test_recipes_that_share_a_launch_differ_only_in_rewards checks it.
SAME_LAUNCH = {
    "recipes/grpo_flux_t2is_cross_judge.yaml": "recipes/grpo_flux_t2is.yaml",
    "recipes/grpo_flux_t2is_gardo.yaml": "recipes/grpo_flux_t2is.yaml",
}
GARDO_FIELDS = ("feature_model", "diversity_advantage", "kl_reference", "reference_reset_kl",
                "reference_reset_epochs", "kl_gate_rewards", "kl_gate_kappa", "beta")  # fmt: skip
GRPO_RECIPES = sorted(
    str(p)
    for p in Path("recipes").glob("grpo_*.yaml")
    if "recipes/accelerate/" in p.read_text() and str(p) not in SAME_LAUNCH
)


@pytest.fixture(scope="module")
def launched(models, tiny, tmp_path_factory) -> dict[str, tuple]:
    """Every real-size recipe launched: one ``accelerate launch`` per accelerate config, its
    recipes trained one after the other in the same processes (start-up is most of a tiny
    launch's time)."""
    by_config: dict[tuple[Path, int], dict[str, dict]] = {}
    for recipe in GRPO_RECIPES:
        by_config.setdefault(launch_config(recipe), {})[recipe] = _overrides(recipe, models, tiny)
    results = {}
    for (config, nproc), runs in by_config.items():
        results.update(_launch(config, nproc, runs, tmp_path_factory.mktemp(config.stem)))
    return results


def test_every_registered_pipeline_has_a_real_size_recipe_that_names_a_launch():
    assert {GRPOConfig.from_yaml(r).pipeline for r in GRPO_RECIPES} == set(PIPELINE_SPECS)
    assert "grpo_flux_ocr.yaml" in {Path(r).name for r in GRPO_RECIPES}  # a second FLUX.1 task


def _launch_shape(recipe: str) -> tuple:
    """A recipe's accelerate config and fields, less those this test replaces."""
    data = yaml.safe_load(Path(recipe).read_text())
    for key in ("rewards", "reward_kwargs", "output_dir", *GARDO_FIELDS):
        data.pop(key, None)
    data["test"] = {
        k: v for k, v in (data.get("test") or {}).items() if k not in ("rewards", "reward_kwargs")
    }
    return launch_config(recipe), data


def test_recipes_that_share_a_launch_differ_only_in_rewards():
    for recipe, same in SAME_LAUNCH.items():
        assert _launch_shape(recipe) == _launch_shape(same), recipe
        cfg = GRPOConfig.from_yaml(recipe)
        assert cfg.separate_test_rewards() or cfg.kl_gate_rewards  # a recipe of its own


@pytest.mark.slow
@pytest.mark.parametrize("recipe", GRPO_RECIPES)
def test_recipe_launches_on_its_process_count(recipe, models, tiny, launched):
    config, nproc = launch_config(recipe)
    cfg = GRPOConfig.from_yaml(recipe, _overrides(recipe, models, tiny))
    ranks, stdout, run_dir = launched[recipe]

    # one job: the main process's start-up line names N processes (training, then resuming)
    images = cfg.prompts_per_epoch * cfg.num_generations
    assert stdout.count(f"paco-grpo: {nproc} process(es); {images} images per epoch") == 2
    assert stdout.count("paco-grpo: ") == 2
    # and the memory plan of that launch, before the weights load, printed by the main process
    assert stdout.count(f"on {nproc} process(es)\n") == 2
    assert stdout.count("| **per process** |") == 2
    assert [r["rank"] for r in ranks] == list(range(nproc))

    # every rank drew its own share of the epoch's images; together, the whole epoch
    (epoch,) = {r["epochs"][0]["epoch"] for r in ranks}
    assert epoch == 0
    slots = [r["epochs"][0]["slots"] for r in ranks]
    assert all(len(s) == images // nproc for s in slots)
    assert sorted(s for share in slots for s in share) == list(range(images))

    # the advantages each rank trained on are those of the gathered groups, in one process
    trained, expected = gathered_advantages(cfg, ranks)
    np.testing.assert_allclose(trained, expected, rtol=0, atol=1e-12)
    assert np.abs(trained).max() > 0  # the rewards told the images apart
    # groups spread over processes exactly as the epoch's list was dealt
    keys = ranks[0]["group_keys"]
    items = [i for r in ranks for i in r["epochs"][0]["items"]]
    assert len({keys[i] for i in items}) <= cfg.prompts_per_epoch

    # at least one optimizer step, as the epoch shape says; a checkpoint that resumes
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = ranks[0]["optimizer_steps_per_epoch"]
    assert steps >= 1 and rows[-1]["train/optimizer_steps"] == steps
    for r in ranks:
        assert r["resumed_epoch"] == 1
        assert r["lora_resumed"] == r["lora_trained"]
    assert len({r["lora_trained"] for r in ranks}) == 1  # one model, kept in sync


@pytest.mark.slow
def test_ranks_that_accelerate_runs_alone_are_refused(models, tmp_path):
    """torchrun's ranks on a CPU without ACCELERATE_USE_CPU are one-process jobs each:
    the trainer refuses them before anything loads, and nothing is written."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    env.pop("ACCELERATE_USE_CPU", None)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "-m", "paco_grpo.cli", "train", "recipes/grpo_tiny_cpu.yaml",
           "--model_name_or_path", str(models["flux"]), "--output_dir", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert proc.stderr.count("The launcher started WORLD_SIZE=2 processes") == 2
    assert "ACCELERATE_USE_CPU=1" in proc.stderr
    assert not out.exists()
