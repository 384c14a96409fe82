"""The package a user installs: ``python -m build`` makes a wheel and an sdist that
``twine check`` passes; the wheel holds the three packages and their data, nothing else (the
benchmarks and the demo run from a checkout); installed into a fresh venv, it scores a pair
with a tiny model built there (the shipped architecture files come with it)."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("paco_reward", "paco_grpo", "data_pipeline", "paco_eval")

# Run in the fresh venv: the installed copy is the one imported, and it scores.
SCORE = """
import sys
from pathlib import Path
import numpy as np
from PIL import Image
import paco_reward
from paco_reward import PacoReward
from paco_reward.architectures import model_config
from paco_reward.testing import build_tiny_qwen2_5_vl

assert Path(paco_reward.__file__).is_relative_to(sys.prefix), paco_reward.__file__
assert model_config("X-GenGroup/PaCo-Reward-7B")["hidden_size"] == 3584
rm = PacoReward.from_pretrained(build_tiny_qwen2_5_vl(Path(sys.argv[1]) / "tiny", seed=0), device="cpu")
rng = np.random.default_rng(0)
a, b = (Image.fromarray(rng.integers(0, 255, (56, 56, 3), dtype=np.uint8)) for _ in range(2))
score = float(rm.score(a, b, "a red fox"))
assert 0.0 < score < 1.0, score
print(score)
"""


def shipped_files() -> set[str]:
    """The files of the four packages in the checkout (git's list): their modules and their
    package data; a package's README is for the repository, not for the wheel."""
    tracked = subprocess.run(["git", "ls-files", "-z", *PACKAGES], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.split("\0")  # fmt: skip
    return {name for name in tracked if name and not name.endswith(".md")}


def check_wheel_contents(wheel: Path) -> None:
    """The wheel holds exactly the packages' tracked modules and data files, plus its
    ``.dist-info`` (at ``paco_reward.__version__``, with the four commands and the licence)."""
    import paco_reward

    names = set(zipfile.ZipFile(wheel).namelist())
    info = f"paco_rl-{paco_reward.__version__}.dist-info/"
    files = {n for n in names if not n.startswith(info)}
    expected = shipped_files()
    assert {"paco_reward/architectures/qwen2_5_vl_7b.json",
            "data_pipeline/annotate/static/app.js"} <= expected  # fmt: skip
    assert files - expected == set(), "in the wheel but not a package file of the checkout"
    assert expected - files == set(), "a package file of the checkout is missing from the wheel"
    zipped = zipfile.ZipFile(wheel)
    metadata = zipped.read(info + "METADATA").decode()
    assert re.search(rf"^Version: {re.escape(paco_reward.__version__)}$", metadata, re.M)
    entry_points = zipped.read(info + "entry_points.txt").decode()
    for command in ("paco-reward", "paco-grpo", "paco-data", "paco-eval"):
        assert f"{command} = " in entry_points, entry_points
    assert any(n.startswith(info) and n.endswith("/LICENSE") for n in names)


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
    check_wheel_contents(wheel)

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


def test_the_wheel_puts_no_upper_bound_on_transformers(built_wheel):
    """Only the grouped vision attention depends on transformers' release, and it falls back to
    transformers' own forward on an unchecked one: the distribution installs beside any
    transformers from 5.19 on."""
    from packaging.requirements import Requirement

    import paco_reward

    info = f"paco_rl-{paco_reward.__version__}.dist-info/METADATA"
    metadata = zipfile.ZipFile(built_wheel).read(info).decode()
    requirements = [Requirement(line.split(":", 1)[1]) for line in metadata.splitlines()
                    if line.startswith("Requires-Dist:")]  # fmt: skip
    (transformers,) = [r for r in requirements if r.name == "transformers" and not r.marker]
    assert {s.operator for s in transformers.specifier} == {">="}, transformers
    assert "5.24" in transformers.specifier and "5.19" in transformers.specifier
    assert "5.18" not in transformers.specifier
