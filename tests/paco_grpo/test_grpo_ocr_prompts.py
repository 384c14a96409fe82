"""The OCR task's prompts: the shipped files are what their documented command writes, every
prompt loads as the recipes load it and quotes one text, and no test text is a training one."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from paco_grpo import ocr_prompts
from paco_grpo.cli import main
from paco_grpo.data import load_prompts
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.ocr_prompts import TEMPLATES, generate_ocr_prompts, write_ocr_prompts
from paco_grpo.rewards.ocr_text import normalize_text, quoted_text

DATA = Path("recipes/data")
RECIPES = ("recipes/grpo_flux_ocr.yaml", "recipes/grpo_flux_ocr_tiny_cpu.yaml")


def _documented_command() -> list[str]:
    """The ``paco-grpo ocr-prompts ...`` line of the module's docstring, as argv."""
    (line,) = [x for x in ocr_prompts.__doc__.splitlines() if "paco-grpo ocr-prompts" in x]
    argv = shlex.split(line)
    assert argv[:3] == ["paco-grpo", "ocr-prompts", str(DATA)], argv
    return argv[1:]


def test_the_shipped_files_are_what_the_documented_command_writes(tmp_path, capsys):
    argv = _documented_command()
    assert main([argv[0], str(tmp_path), *argv[2:]]) == 0
    for name in ("ocr_train.txt", "ocr_test.txt"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name
    assert capsys.readouterr().out.split() == [str(tmp_path / "ocr_train.txt"),
                                                str(tmp_path / "ocr_test.txt")]  # fmt: skip
    other = tmp_path / "seed1"
    assert main([argv[0], str(other), *argv[2:], "--seed", "1"]) == 0
    assert (other / "ocr_train.txt").read_bytes() != (DATA / "ocr_train.txt").read_bytes()


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_prompt_loads_as_the_recipes_load_it_and_quotes_one_text(recipe):
    cfg = GRPOConfig.from_yaml(recipe)
    train = load_prompts(cfg.prompt_file, cfg.prompt_format, cfg.layout)
    test = load_prompts(cfg.test.prompt_file, cfg.prompt_format, cfg.layout)
    assert (len(train), len(test)) == (1000, 100)
    texts = {}
    for item in train + test:
        assert item.metadata == {"layout": "1x1"}  # one picture, no layout taken from the text
        assert item.prompt.count('"') == 2
        texts[item.prompt] = normalize_text(quoted_text(item.prompt))
    train_texts = {texts[i.prompt] for i in train}
    test_texts = {texts[i.prompt] for i in test}
    assert len(train_texts) == 1000 and len(test_texts) == 100  # every text once
    assert not train_texts & test_texts  # evaluation texts are never trained on
    templates = {t.split('"')[0] for t in TEMPLATES}
    assert {i.prompt.split('"')[0] for i in train} == templates  # every scene is used


def test_generation_is_seeded_and_checks_what_it_is_asked_for(monkeypatch, tmp_path):
    assert generate_ocr_prompts(50, seed=3) == generate_ocr_prompts(50, seed=3)
    assert generate_ocr_prompts(50, seed=3) != generate_ocr_prompts(50, seed=4)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="num_prompts must be a positive integer"):
            generate_ocr_prompts(bad)
    with pytest.raises(ValueError, match="num_train must be a positive integer; got 0"):
        write_ocr_prompts(tmp_path, num_train=0)
    with pytest.raises(ValueError, match="num_test must be a positive integer; got 0"):
        write_ocr_prompts(tmp_path, num_test=0)
    assert not any(tmp_path.iterdir())  # nothing written
    for name, words in [("ADJECTIVES", ("Red",)), ("NOUNS", ("Owl", "Fox")),
                        ("PLACES", ("Cafe",)), ("VERBS", ("Save",)), ("ANIMALS", ("Owls",)),
                        ("SLOGANS", ("Hello",))]:  # fmt: skip
        monkeypatch.setattr(ocr_prompts, name, words)
    with pytest.raises(ValueError, match=r"the word lists made only \d+ distinct texts"):
        generate_ocr_prompts(1000)  # "Owl No. 1" to "Fox No. 99" and a few more
