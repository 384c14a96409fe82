"""A generator is its own files (docs/grpo.md, "Add a model"): its model file under
``paco_grpo/pipelines/``, its tiny builder (with its test case), its recipes and its
architecture files. Everything else derives it from the registry: the package's imports and
``__all__``, the API page, the config's help, ``paco-grpo tiny-<name>``, the planner, the
tests' registration and the published sizes. Three checks: every module of the package is a
registered model file; Z-Image, the last model added, is named by no other file; and a
throwaway model file dropped into a copy of the package is picked up by all of them with no
other edit."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import paco_grpo.pipelines as pipelines
from paco_grpo.pipelines import PIPELINE_SPECS, get_pipeline_spec

ROOT = Path(__file__).resolve().parents[2]


def _module_file(module: str) -> str:
    return module.replace(".", "/") + ".py"


def test_every_module_of_the_package_is_a_registered_model_file():
    """The package imports every module it holds (each registers its specs) and exports each
    model file's classes; the API page's generated entries are exactly those classes."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(ROOT / "docs"))
    on_disk = {m.name for m in pkgutil.iter_modules(pipelines.__path__)}
    models = on_disk - set(pipelines.SHARED_MODULES)
    registered = {spec.sampler.__module__.rpartition(".")[2] for spec in PIPELINE_SPECS.values()}
    assert registered == models and set(pipelines.SHARED_MODULES) <= on_disk
    exported = {
        f"{getattr(pipelines, n).__module__}.{n}"
        for n in pipelines.__all__
        if getattr(getattr(pipelines, n), "__module__", "").rpartition(".")[2] in models
    }
    for spec in PIPELINE_SPECS.values():
        assert f"{spec.sampler.__module__}.{spec.sampler.__name__}" in exported
    generated = set(hooks.DIRECTIVE.findall(hooks.generator_directives()))
    assert generated == exported
    page = (ROOT / "docs" / "api" / "paco_grpo.md").read_text()
    assert hooks.GENERATORS_MARKER in page


def _family(spec) -> re.Pattern:
    """How prose names ``spec``'s model: its diffusers class's words, ``Pipeline`` left out
    (``QwenImageEditPipeline``: "Qwen-Image-Edit", "qwen_image_edit", "QwenImageEdit")."""
    words = re.findall(r"[A-Z][a-z]*|\d+", spec.diffusers_class.removesuffix("Pipeline"))
    return re.compile(r"\b" + r"[\s_.-]*".join(words), re.IGNORECASE)


@pytest.mark.parametrize("module", ["paco_grpo", "paco_grpo.grpo_trainer", "paco_grpo.pipelines"])
def test_the_summaries_name_every_generator_or_none(module):
    """The first paragraph of the package's, the trainer's and the generators' docstrings
    either names every registered generator or none (the registry lists them): a hand-kept
    list goes stale, as "fine-tuning of FLUX / Qwen-Image" and "a FLUX LoRA" did."""
    summary = importlib.import_module(module).__doc__.split("\n\n")[0]
    named = {name for name, spec in PIPELINE_SPECS.items() if _family(spec).search(summary)}
    assert named in (set(), set(PIPELINE_SPECS)), f"{module} names only {sorted(named)}"
    assert _family(get_pipeline_spec("flux")).search("a FLUX LoRA")  # the check reads prose
    assert _family(get_pipeline_spec("qwen_image")).search("FLUX / Qwen-Image")


def _git_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return [f for f in listed if (ROOT / f).is_file()]


def test_z_image_is_named_only_by_its_own_files():
    """Z-Image's names (its classes, tiny builder, hub id, recipe name and architecture file)
    appear in its model file, its tiny builder, its recipes, its architecture files and the
    guide's prose only: the imports, ``__all__``, the API page, the config's help, the tests'
    registration and the published sizes' test derive it (on the code before this check
    they named it in seven places)."""
    spec = get_pipeline_spec("z_image")
    module = sys.modules[spec.sampler.__module__]
    builder_module, builder = spec.tiny_builder.split(":")
    others = {f for s in PIPELINE_SPECS.values() if s is not spec
              for files in s.architectures.values() for f in files.values()}  # fmt: skip
    own_architectures = {f for files in spec.architectures.values() for f in files.values()}
    names = [n for n in module.__all__ if isinstance(getattr(module, n), type)]
    names += [builder, *spec.architectures, *(own_architectures - others)]
    names += [f'"{spec.name}"', f"'{spec.name}'", f"pipeline: {spec.name}"]
    own = {_module_file(spec.sampler.__module__), _module_file(builder_module),
           "paco_grpo/architectures/published_sizes.json",
           *(f"paco_grpo/architectures/{f}" for f in own_architectures)}  # fmt: skip
    prose = ("README.md", "CHANGELOG.md", str(Path(__file__).relative_to(ROOT)))  # and this test
    naming = {}
    for path in _git_files():
        if path.endswith((".png", ".jpg", ".parquet")):
            continue
        text = (ROOT / path).read_text(errors="replace")
        found = [n for n in names if n in text]
        if found:
            naming[path] = found
    elsewhere = {
        path: found
        for path, found in naming.items()
        if path not in own
        and not path.startswith("recipes/")
        and not (path.startswith("docs/") and path.endswith(".md") and "/api/" not in path)
        and path not in prose
    }
    assert not elsewhere, f"Z-Image is named outside its own files: {elsewhere}"
    assert _module_file(spec.sampler.__module__) in naming  # the check sees the names at all
    assert any(path.startswith("recipes/") for path in naming)


TOY = '''
"""A throwaway generator: Z-Image's sampler under another name and hub id, with its tiny
builder and test case in the same file."""
import dataclasses

from paco_grpo.pipelines import z_image  # (registers z_image, whose spec this one copies)
from paco_grpo.pipelines.registry import get_pipeline_spec, register_pipeline
from paco_grpo.testing.cases import ParityCase, TinyCase

__all__ = ["ToyGRPOSampler"]


class ToyGRPOSampler(z_image.ZImageGRPOSampler):
    """Z-Image's sampler, registered as ``toy``."""


def build_tiny_toy(output_dir, seed=0):
    from paco_grpo.testing.z_image import build_tiny_z_image

    return build_tiny_z_image(output_dir, seed=seed)


TEST_CASES = {"toy": TinyCase("recipes/grpo_zimage_tiny_cpu.yaml",
                              ParityCase(("a fox",), (32, 48), 4.0), max_sequence_length=64)}

spec = get_pipeline_spec("z_image")
register_pipeline(dataclasses.replace(
    spec, name="toy", sampler=ToyGRPOSampler, tiny_builder="paco_grpo.pipelines.toy:build_tiny_toy",
    architectures={"acme/Toy-1": spec.architectures["Tongyi-MAI/Z-Image-Turbo"]},
))
'''

PROBE = '''
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[2])  # the copy of the package first (before the checkout, -c's "")
import paco_grpo
sys.path.insert(0, "docs")
import hooks
from paco_grpo.architectures import pipeline_configs
from paco_grpo.cli import COMMANDS, main
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.planning import plan_grpo
from tests.paco_grpo.conftest import TINY

out = {"package": paco_grpo.__file__}
with contextlib.redirect_stdout(io.StringIO()) as help_text, contextlib.suppress(SystemExit):
    main(["train", "--help"])
out["help"] = " ".join(help_text.getvalue().split())
out["commands"] = [c.name for c in COMMANDS]
with contextlib.redirect_stdout(io.StringIO()) as built:
    main(["tiny-toy", sys.argv[1]])
out["built"] = built.getvalue().strip()
base = {"prompt_file": "recipes/data/ocr_train.txt", "layout": "1x1", "pipeline": "toy",
        "rewards": {"panel_colour_agreement": 1.0}, "train": {"resolution": 32},
        "per_device_train_batch_size": 2, "sample_batch_size": 2, "num_generations": 2,
        "prompts_per_epoch": 1, "max_sequence_length": 64}
cfg = GRPOConfig.from_dict({**base, "model_name_or_path": out["built"]})
out["lora_targets"] = cfg.lora_target_modules
out["plan"] = [c.name for c in plan_grpo(cfg, num_processes=1).components]
out["hub_components"] = sorted(pipeline_configs("acme/Toy-1"))
out["case"] = TINY["toy"].recipe
out["api"] = hooks.generator_directives()
print(json.dumps(out))
'''


@pytest.mark.slow  # a child process importing torch and diffusers, about 10 s
def test_a_throwaway_generator_is_picked_up_with_no_other_edit(tmp_path):
    """One file dropped into a copy of ``paco_grpo/pipelines/``: ``GRPOConfig`` accepts its
    name and takes its LoRA targets, ``--pipeline``'s help and the hub ids' help name it,
    ``paco-grpo tiny-toy`` builds its tiny model, the planner plans that model and resolves
    its hub id, the tests' registration finds its test case and the API page lists its
    sampler."""
    copy = tmp_path / "paco_grpo"
    shutil.copytree(ROOT / "paco_grpo", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "pipelines" / "toy.py").write_text(textwrap.dedent(TOY))
    env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "tiny-toy"), str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["package"] == str(copy / "__init__.py")  # the copy, with the toy in it
    assert "toy (ZImagePipeline)" in out["help"] and "acme/Toy-1" in out["help"]
    assert "tiny-toy" in out["commands"]
    assert Path(out["built"], "model_index.json").is_file()
    assert out["lora_targets"] == list(get_pipeline_spec("z_image").lora_target_modules)
    assert "transformer (ZImageTransformer2DModel)" in out["plan"]
    assert out["hub_components"] == sorted(
        get_pipeline_spec("z_image").architectures["Tongyi-MAI/Z-Image-Turbo"]
    )
    assert out["case"] == "recipes/grpo_zimage_tiny_cpu.yaml"
    assert "::: paco_grpo.pipelines.toy.ToyGRPOSampler" in out["api"].splitlines()
