"""The README's quickstart: every code block marked ``<!-- runnable -->`` runs as written, in
order, in one fresh folder (with the repository's ``recipes/``), as a user would paste them.

The hub ids the blocks name resolve offline to tiny models installed under those very names
in a Hugging Face cache of the test's own, so ``PacoReward.from_pretrained("X-GenGroup/...")``
goes through the same hub resolution as on a user's machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
RUNNABLE = re.compile(r"<!-- runnable -->\n```(python|bash)\n(.*?)```", re.DOTALL)
# Hub ids the quickstart names, and the tiny stand-in each resolves to here.
TINY_MODELS = ("X-GenGroup/PaCo-Reward-7B",)


def runnable_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, code)`` of each block marked runnable, in order."""
    return RUNNABLE.findall(text)


def write_images(folder: Path) -> None:
    """The images the blocks name: two panels of one red circle and a 2x2 grid of four."""
    from PIL import ImageDraw

    def panel(colour: str, size: int = 64) -> Image.Image:
        image = Image.new("RGB", (size, size), "white")
        ImageDraw.Draw(image).ellipse((12, 12, size - 12, size - 12), fill=colour)
        return image

    panel("red").save(folder / "panel_1.png")
    panel("darkred").save(folder / "panel_2.png")
    grid = Image.new("RGB", (128, 128))
    for i, colour in enumerate(("red", "darkred", "red", "blue")):
        grid.paste(panel(colour), ((i % 2) * 64, (i // 2) * 64))
    grid.save(folder / "grid.png")


def test_the_marker_finds_the_quickstart():
    blocks = runnable_blocks((ROOT / "README.md").read_text())
    # The README's promise: scoring, the dataset, training, GRPO and the plan run as written.
    assert len(blocks) >= 5, blocks
    assert {language for language, _ in blocks} == {"python", "bash"}
    code = "\n".join(c for _, c in blocks)
    for command in ("from_pretrained", "paco-data", "paco-reward train", "paco-grpo train",
                    "paco-grpo plan"):  # fmt: skip
        assert command in code, command


@pytest.mark.slow
def test_runnable_readme_blocks_run_as_written(tmp_path):
    from paco_reward.testing import build_tiny_qwen2_5_vl
    from paco_reward.testing.hub_cache import install_in_hub_cache

    hub = tmp_path / "hub"
    for repo_id in TINY_MODELS:
        build_tiny_qwen2_5_vl(tmp_path / "tiny" / repo_id, seed=0)
        install_in_hub_cache(tmp_path / "tiny" / repo_id, repo_id, hub)
    work = tmp_path / "work"
    work.mkdir()
    (work / "recipes").symlink_to(ROOT / "recipes")
    write_images(work)
    env = {
        **os.environ,
        "HF_HUB_CACHE": str(hub),
        "HF_HUB_OFFLINE": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }
    for language, code in runnable_blocks((ROOT / "README.md").read_text()):
        command = (
            [sys.executable, "-c", code]
            if language == "python"
            else ["bash", "-euo", "pipefail", "-c", code]
        )
        done = subprocess.run(
            command, cwd=work, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, (
            f"README block failed:\n{code}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
