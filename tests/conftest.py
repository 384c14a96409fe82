"""Shared fixtures: tiny models are built once per test session, offline."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

# Tests never reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# One intra-op thread, in the test processes and in the processes they start: the tiny models
# run as fast on one thread as on two, and a second thread spins on the core the suites beside
# this one need (test_train_learning: 85 s on one thread, 87 s on two at 1.8 times the CPU).
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# tests/vllm_peer needs vLLM, which lives in a venv of its own: `make test` runs that folder
# with .venv-vllm's python beside the main run's quick tests; the main run leaves it out.
collect_ignore = [] if importlib.util.find_spec("vllm") is not None else ["vllm_peer"]

ROOT = Path(__file__).resolve().parents[1]
T2IS_FILE = ROOT / "tests" / "data" / "t2is_train_metadata.jsonl"
# What the distribution installs: its packages (setup.cfg's packages.find); the benchmarks
# and the demo run from a checkout.
DISTRIBUTED = ("paco_reward", "paco_grpo", "data_pipeline")


@pytest.fixture(scope="session")
def t2is_path() -> Path:
    """The 150 real T2IS prompts (layouts, panel texts, criteria) of the released PaCo-RL."""
    return T2IS_FILE


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> Path:
    """The paco-rl wheel as ``pip`` builds it (not editable), from a copy of the sources so
    that the checkout gets no build folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in DISTRIBUTED:
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = tmp / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = out.glob("paco_rl-*.whl")
    return wheel


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Qwen2.5-VL evaluator folder. Its weights are initialised with a wide
    spread so scores differ clearly between pairs (a test comparing two scoring paths
    must not pass just because every score is 0.5)."""
    from paco_reward.testing import build_tiny_qwen2_5_vl

    return build_tiny_qwen2_5_vl(
        tmp_path_factory.mktemp("tiny-qwen") / "model",
        seed=0,
        text_config={"initializer_range": 0.3},
        vision_config={"initializer_range": 0.3},
    )


@pytest.fixture(scope="session")
def two_revision_hub(tmp_path_factory, tiny_model_dir):
    """A Hugging Face cache holding the repository ``acme/tiny-evaluator`` at two revisions:
    ``main`` (``tiny_model_dir``) and ``v1`` (another tiny evaluator: other weights, so a
    score says which revision loaded). Returns ``(cache, repo_id, {revision: folder})``; a
    test reads it offline (``HF_HUB_OFFLINE=1``), as a user's machine would with nothing to
    download."""
    from paco_reward.testing import build_tiny_qwen2_5_vl
    from paco_reward.testing.hub_cache import install_in_hub_cache

    root = tmp_path_factory.mktemp("hub")
    folders = {
        "main": tiny_model_dir,
        "v1": build_tiny_qwen2_5_vl(root / "v1", seed=1, text_config={"initializer_range": 0.3}),
    }
    for revision, folder in folders.items():
        install_in_hub_cache(folder, "acme/tiny-evaluator", root / "cache", revision)
    return root / "cache", "acme/tiny-evaluator", folders


@pytest.fixture(scope="session")
def tiny_qwen3_vl_dir(tmp_path_factory):
    """A tiny random Qwen3-VL evaluator folder (DeepStack, 32-pixel vision tokens, no default
    system turn), with the same wide weight spread as ``tiny_model_dir``."""
    from paco_reward.testing import build_tiny_qwen3_vl

    return build_tiny_qwen3_vl(
        tmp_path_factory.mktemp("tiny-qwen3-vl") / "model",
        seed=0,
        text_config={"initializer_range": 0.3},
        vision_config={"initializer_range": 0.3},
    )


@pytest.fixture(scope="session")
def tiny_gemma3_dir(tmp_path_factory):
    """A tiny random Gemma-3 judge folder (a family other than Qwen-VL: fixed-size images,
    256-token image blocks in the real model, 4 here), with a wide weight spread (the image
    projection too) so scores differ clearly between pairs."""
    from paco_reward.testing import build_tiny_gemma3

    return build_tiny_gemma3(
        tmp_path_factory.mktemp("tiny-gemma3") / "model",
        seed=0,
        initializer_range=0.3,
        text_config={"initializer_range": 0.3},
    )


@pytest.fixture(scope="session")
def tiny_glm4v_dir(tmp_path_factory):
    """A tiny random GLM-4V judge folder: Qwen-VL's image processing, a vision tower the
    Qwen-VL scorer does not know (so ``ProcessorBackend`` scores it)."""
    from paco_reward.testing import build_tiny_glm4v

    return build_tiny_glm4v(tmp_path_factory.mktemp("tiny-glm4v") / "model", seed=0)


# Model family -> the fixture of its tiny evaluator folder.
FAMILY_FIXTURES = {"qwen2_5_vl": "tiny_model_dir", "qwen3_vl": "tiny_qwen3_vl_dir"}


@pytest.fixture(params=sorted(FAMILY_FIXTURES))
def family_dir(request):
    """The tiny evaluator folder of each Qwen-VL family the library supports (parametrised)."""
    return request.getfixturevalue(FAMILY_FIXTURES[request.param])


@pytest.fixture(scope="session")
def tiny_reward(tiny_model_dir):
    from paco_reward import PacoReward

    return PacoReward.from_pretrained(tiny_model_dir)


@pytest.fixture
def random_images():
    """Factory: ``random_images(n, size=(64, 64), seed=0)`` -> list of RGB PIL images."""

    def make(n: int, size: tuple[int, int] = (64, 64), seed: int = 0) -> list[Image.Image]:
        rng = np.random.default_rng(seed)
        return [
            Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
            for _ in range(n)
        ]

    return make
