"""The documentation site (mkdocs.yml, docs/) builds with ``--strict``: no broken link or
anchor, every public name on an API page with a docstring (docs/hooks.py), the command-line
reference generated from the commands' dataclasses. The builds write to tmp_path only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
MISSING = "paco_reward.YesNoTokens"  # left out of the broken copy's API page


def start_build(config: Path, site: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config)]
    return subprocess.Popen(
        [*command, "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def broken_copy(folder: Path) -> Path:
    """A copy of the site whose scoring API page lacks :data:`MISSING`; its config. The copy
    leaves mkdocstrings out: the check reads the pages' ``:::`` lines, rendering them would
    only cost time."""
    docs = folder / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    page = docs / "api" / "paco_reward.md"
    text = page.read_text()
    assert f"::: {MISSING}\n" in text
    page.write_text(text.replace(f"::: {MISSING}\n", ""))
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs), hooks=[str(ROOT / "docs" / "hooks.py")], plugins=["search"])
    (folder / "mkdocs.yml").write_text(yaml.safe_dump(config))
    return folder / "mkdocs.yml"


def checkout_entries() -> set[str]:
    return {p.name for p in ROOT.iterdir()} | {p.name for p in (ROOT / "docs").iterdir()}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Both builds side by side (each spends most of its time importing torch and co.):
    name -> (exit status, output); and the site folder."""
    tmp = tmp_path_factory.mktemp("docs")
    before = checkout_entries()
    processes = {
        "site": start_build(ROOT / "mkdocs.yml", tmp / "site"),
        "broken": start_build(broken_copy(tmp / "broken"), tmp / "broken-site"),
    }
    results = {}
    for name, process in processes.items():
        output, _ = process.communicate(timeout=600)
        results[name] = (process.returncode, output)
    assert checkout_entries() == before  # nothing written into the checkout
    return results, tmp / "site"


def test_site_builds_strictly(builds):
    results, site = builds
    status, output = results["site"]
    assert status == 0, output
    cli = (site / "cli" / "index.html").read_text()
    for text in ("paco-data annotate", "--train.resolution", "--first_token_weight", "--stages"):
        assert text in cli, text
    api = (site / "api" / "paco_reward" / "index.html").read_text()
    assert "score_pairs" in api and "Pairwise consistency evaluator" in api


def test_public_name_missing_from_the_api_pages_fails_the_build(builds):
    results, _ = builds
    status, output = results["broken"]
    assert status != 0, output
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    assert warnings, output
    assert all(f"{MISSING} is on no API page" in line for line in warnings), output
