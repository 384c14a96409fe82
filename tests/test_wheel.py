"""The package a user installs: ``python -m build`` makes a wheel and an sdist that
``twine check`` passes, and the wheel, installed into a fresh venv, scores a pair with a tiny
model built there (the shipped architecture files come with it)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Run in the fresh venv: the installed copy is the one imported, and it scores.
SCORE = """
import sys
from pathlib import Path
import numpy as np
from PIL import Image
import paco_reward
from paco_reward import PacoReward
from paco_reward.architectures import model_config
from paco_reward.testing import build_tiny_model

assert Path(paco_reward.__file__).is_relative_to(sys.prefix), paco_reward.__file__
assert model_config("X-GenGroup/PaCo-Reward-7B")["hidden_size"] == 3584
rm = PacoReward.from_pretrained(build_tiny_model(Path(sys.argv[1]) / "tiny", seed=0), device="cpu")
rng = np.random.default_rng(0)
a, b = (Image.fromarray(rng.integers(0, 255, (56, 56, 3), dtype=np.uint8)) for _ in range(2))
score = float(rm.score(a, b, "a red fox"))
assert 0.0 < score < 1.0, score
print(score)
"""


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_wheel_and_sdist_pass_twine_and_the_wheel_scores_in_a_fresh_venv(tmp_path):
    dist = tmp_path / "dist"
    # the sdist, then the wheel from it (the checkout gets no build/); --no-isolation: this
    # venv's setuptools, no download
    _run([sys.executable, "-m", "build", "--no-isolation",
          "--outdir", str(dist), str(ROOT)], cwd=tmp_path)  # fmt: skip
    (wheel,) = dist.glob("paco_rl-*.whl")
    (sdist,) = dist.glob("paco_rl-*.tar.gz")
    _run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)])
    names = zipfile.ZipFile(wheel).namelist()
    assert "paco_grpo/architectures/flux1_transformer.json" in names
    assert "paco_reward/architectures/qwen2_5_vl_7b.json" in names
    assert any(n.endswith("licenses/LICENSE") or n.endswith("/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "demo/", "outputs/")) for n in names)

    # A fresh venv that sees this venv's dependencies (a path line, so this venv's editable
    # install of paco-rl is not on it) and gets paco-rl from the wheel alone.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())  # fmt: skip
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "--quiet", str(wheel)])  # fmt: skip
    out = _run([str(python), "-c", SCORE, str(tmp_path)], cwd=tmp_path)
    assert 0.0 < float(out.stdout.strip().splitlines()[-1]) < 1.0
