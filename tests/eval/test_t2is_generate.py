"""``paco-eval t2is generate``: a tiny FLUX draws fixture cases (2x2, 1x2, 1x3) on two CPU
processes, is re-run after losing and corrupting files (only those are written again, with the
same pixels from one process), refuses other settings, and its images are judged and reported;
plus the pieces (grid sizes, seeds, prompts, LoRA folders, the manifest) and bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from paco_eval.cli import main
from paco_eval.errors import GenerationSettingsError, ImageCountError, UnknownItemError
from paco_eval.generation import check_manifest, readable_image, resolve_lora
from paco_eval.t2is.benchmark import T2ISConfig
from paco_eval.t2is.generate import case_seed, grid_shape, load_prompts, run_generate
from paco_eval.testing import T2IS_LAYOUTS, write_t2is_prompts, write_tiny_t2is_bench
from paco_reward.errors import ConfigError, InputError, PathNotFoundError

CASES = ",".join(T2IS_LAYOUTS)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("t2is-gen")
    bench, _ = write_tiny_t2is_bench(root)
    return bench, write_t2is_prompts(root / "prompts.jsonl")


def _gen_flags(bench, prompts, images, flux, *extra) -> list[str]:
    return ["--data", str(bench), "--prompts", str(prompts), "--images_dir", str(images),
            "--model_name_or_path", str(flux), "--cases", CASES, "--resolution", "64",
            "--num_inference_steps", "2", "--max_sequence_length", "32", "--device", "cpu", *extra]  # fmt: skip


def _launch(nproc: int, flags: list[str]) -> list[tuple[int, int, int]]:
    """Run the stage on ``nproc`` CPU processes; each process's (index, cases drawn, done)."""
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node", str(nproc)] if nproc > 1 else [sys.executable]  # fmt: skip
    cmd = [*launcher, "-m", "paco_eval", "t2is", "generate", *flags]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = re.findall(r"\[(\d+)/\d+\]: drew (\d+) cases \(\d+ images\), (\d+) already done", proc.stdout)
    assert len(found) == nproc, proc.stdout
    return sorted((int(i), int(d), int(k)) for i, d, k in found)


def _state(images: Path) -> dict[str, tuple[int, np.ndarray]]:
    return {p.name: (p.stat().st_mtime_ns, np.asarray(Image.open(p))) for p in sorted(images.glob("*.png"))}


@pytest.mark.slow
def test_two_processes_resume_without_redrawing_then_judge_and_report(inputs, tiny_model_dir, tmp_path,
                                                                      capsys, monkeypatch):
    from paco_grpo.testing.flux import build_tiny_flux
    from paco_reward.testing.aesthetics import build_tiny_aesthetic_predictor
    from paco_reward.testing.clip_t5 import build_tiny_clip_t5

    bench, prompts = inputs
    flux = build_tiny_flux(tmp_path / "flux", seed=0)
    images = tmp_path / "images"
    flags = _gen_flags(bench, prompts, images, flux)

    # each case drawn once: process r takes the cases r::2 of the three
    assert _launch(2, flags) == [(0, 2, 0), (1, 1, 0)]
    first = _state(images)
    assert sorted(first) == sorted(f"{c}_{k:04d}.png" for c, lay in T2IS_LAYOUTS.items()
                                   for k in range(int(lay[0]) * int(lay[2])))  # fmt: skip
    # 64-px 2x2 grid, 1x2 and 1x3 at 32-px panels: every sub-image is 32x32, and they differ
    assert {a.shape for _, a in first.values()} == {(32, 32, 3)}
    assert not np.array_equal(first["0001_0001_0000.png"][1], first["0001_0001_0001.png"][1])
    manifest = json.loads((images / "generation.json").read_text())
    assert manifest["pipeline"] == "flux" and manifest["guidance_scale"] == 3.5 and manifest["resolution"] == 64

    # killed half-way, as it were: one case lost, one sub-image corrupt; one process re-runs
    # (in this process, one thread as the launched ones, so the float sums are the same)
    for k in range(2):
        (images / f"0002_0001_{k:04d}.png").unlink()
    (images / "0006_0001_0001.png").write_bytes(b"not a png")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["t2is", "generate", *flags]) == 0
    finally:
        torch.set_num_threads(threads)
    assert "drew 2 cases (5 images), 1 already done" in capsys.readouterr().out
    second = _state(images)
    rewritten = {n for n in first if second[n][0] != first[n][0]}
    assert rewritten == {"0002_0001_0000.png", "0002_0001_0001.png", "0006_0001_0001.png"}
    # the same pixels as the two-process run drew (seeded per case, not per process)
    assert all(np.array_equal(second[n][1], first[n][1]) for n in first)
    # complete: nothing to draw and no model loaded
    monkeypatch.setattr("paco_eval.t2is.generate.load_pipeline", lambda *a, **k: pytest.fail("loaded"))
    assert main(["t2is", "generate", *flags]) == 0
    assert "drew 0 cases (0 images), 3 already done" in capsys.readouterr().out

    # judged and reported as images made elsewhere are
    clip, head = build_tiny_aesthetic_predictor(tmp_path / "aesthetic")
    clip_t5 = build_tiny_clip_t5(tmp_path / "clip_t5")
    out = tmp_path / "eval"
    judge = ["--data", str(bench), "--images_dir", str(images), "--output_dir", str(out), "--cases", CASES,
             "--consistency_judges", f"tiny={tiny_model_dir}", "--alignment", str(clip_t5),
             "--alignment_tokenizer", str(clip_t5), "--alignment_dtype", "float32",
             "--aesthetics", str(clip), "--aesthetics_head", str(head), "--strict"]  # fmt: skip
    assert main(["t2is", "judge", *judge]) == 0
    assert main(["t2is", "report", *judge]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["coverage"]["images_found"] == report["coverage"]["images_expected"] == 9
    assert report["coverage"]["missing_images"] == {}
    assert all(0 < report["table"][c] < 1 for c in ("Aesthetics", "PA-Entity", "VC-Identity", "VC-Style"))
    assert report["protocol"]["generation"]["model_name_or_path"] == str(flux)


def test_other_settings_into_the_same_folder_are_refused(inputs, tmp_path, capsys):
    bench, prompts = inputs
    images = tmp_path / "images"
    config = T2ISConfig(data=str(bench), prompts=str(prompts), images_dir=str(images), cases="0002_0001",
                        resolution=64, model_name_or_path="unused")  # fmt: skip
    images.mkdir()
    for k in range(2):  # the case is complete: the stage checks, skips it and loads nothing
        Image.new("RGB", (8, 8)).save(images / f"0002_0001_{k:04d}.png")
    assert run_generate(config) == 0
    assert "drew 0 cases (0 images), 1 already done" in capsys.readouterr().out
    config.seed, config.gen_dtype = 7, None
    with pytest.raises(GenerationSettingsError, match=r"seed: 0.*seed: 7") as err:
        run_generate(config)
    assert err.value.differ == ["seed"] and isinstance(err.value, InputError)
    flags = ["--data", str(bench), "--prompts", str(prompts), "--images_dir", str(images),
             "--cases", "0002_0001", "--resolution", "64", "--model_name_or_path", "unused", "--lora", "x"]  # fmt: skip
    assert main(["t2is", "generate", *flags]) == 1
    assert "lora" in capsys.readouterr().err


def test_bad_inputs_are_named_before_any_model_loads(inputs, tmp_path):
    bench, prompts = inputs
    base = {"data": str(bench), "prompts": str(prompts), "images_dir": str(tmp_path / "i"),
            "cases": CASES, "model_name_or_path": "unused"}  # fmt: skip
    with pytest.raises(PathNotFoundError, match="test_metadata.jsonl"):
        run_generate(T2ISConfig(**base | {"prompts": ""}))
    with pytest.raises(UnknownItemError, match="0021_0001"):
        run_generate(T2ISConfig(**base | {"cases": "0021_0001"}))
    wrong = write_t2is_prompts(tmp_path / "wrong.jsonl", {"0002_0001": "1x3"})
    with pytest.raises(ImageCountError, match=r"0002_0001.*1x3.*asks for 2"):
        run_generate(T2ISConfig(**base | {"prompts": str(wrong), "cases": "0002_0001"}))
    with pytest.raises(ConfigError, match="grid_size"):
        run_generate(T2ISConfig(**base | {"grid_size": "wide"}))
    with pytest.raises(ConfigError, match="resolution"):
        run_generate(T2ISConfig(**base | {"resolution": 100}))
    with pytest.raises(ConfigError, match="flux_kontext.*text-to-image"):
        run_generate(T2ISConfig(**base | {"pipeline": "flux_kontext"}))
    with pytest.raises(ConfigError, match="images_dir"):
        run_generate(T2ISConfig(**base | {"images_dir": ""}))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"original_idx": "0002_0001", "prompt": "a"}\n{"prompt": "b"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2"):
        load_prompts(bad)
    assert not (tmp_path / "i").exists()  # nothing written for a refused run


def test_grid_sizes_seeds_lora_folders_and_the_manifest(tmp_path):
    # the metadata's 512-px panels at 1024; scaled to the resolution in multiples of 16
    assert grid_shape(2, 2, 1024, 1024, 1024) == (1024, 1024)
    assert grid_shape(1, 5, 512, 2560, 1024) == (512, 2560)
    assert grid_shape(2, 4, 1024, 2048, 512) == (512, 1024)
    assert grid_shape(1, 3, None, None, 64) == (32, 96)
    assert grid_shape(1, 3, 512, 1536, 1024, "square") == (1024, 1024)
    assert case_seed(0, "0006_0012") == 60012 and case_seed(5, "0006_0012") == 60017
    assert case_seed(0, "custom") == case_seed(0, "custom") != case_seed(0, "other")
    # a checkpoint folder, a run's output_dir (its latest checkpoint), a file, a hub id
    run = tmp_path / "run"
    for n in (1, 3, 10):
        (run / "checkpoints" / f"checkpoint-{n}").mkdir(parents=True)
        (run / "checkpoints" / f"checkpoint-{n}" / "pytorch_lora_weights.safetensors").write_bytes(b"x")
    latest = str(run / "checkpoints" / "checkpoint-10")
    assert resolve_lora(str(run)) == latest and resolve_lora(latest) == latest
    assert resolve_lora("X-GenGroup/PaCo-FLUX.1-dev-Lora") == "X-GenGroup/PaCo-FLUX.1-dev-Lora"
    assert resolve_lora(None) is None
    with pytest.raises(PathNotFoundError, match="pytorch_lora_weights"):
        resolve_lora(str(tmp_path))
    # the manifest: versions are recorded but not compared; a corrupt image is not done
    check_manifest(tmp_path / "m", {"seed": 0}, info={"paco-rl": "1"})
    check_manifest(tmp_path / "m", {"seed": 0}, info={"paco-rl": "2"})
    assert json.loads((tmp_path / "m" / "generation.json").read_text())["written_with"] == {"paco-rl": "1"}
    (tmp_path / "m" / "a.png").write_bytes(b"\x89PNG broken")
    assert not readable_image(tmp_path / "m" / "a.png") and not readable_image(tmp_path / "m" / "b.png")


def test_the_shipped_recipe_is_the_papers_setting_and_flags_override_it(inputs, tmp_path, monkeypatch):
    import paco_eval.t2is.benchmark as benchmark

    seen = []

    def spy(config) -> int:
        seen.append(config)
        return 0

    monkeypatch.setitem(benchmark.BENCHMARK.stages, "generate", spy)
    assert main(["t2is", "generate", "recipes/eval/t2is_flux_dev.yaml", "--prompts", "p.jsonl"]) == 0
    assert main(["t2is", "generate", "--seed", "3"]) == 0  # the recipe is optional
    paper, plain = seen
    assert (paper.pipeline, paper.model_name_or_path, paper.resolution, paper.guidance_scale,
            paper.num_inference_steps, paper.prompts) == ("flux", "black-forest-labs/FLUX.1-dev", 1024, 3.5, 20, "p.jsonl")  # fmt: skip
    assert plain.seed == 3 and plain.resolution == 1024 and plain.gen_dtype is None
    bad = tmp_path / "bad.yaml"
    bad.write_text("guidance_scael: 3.5\n")
    assert main(["t2is", "generate", str(bad)]) == 1
