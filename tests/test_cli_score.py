"""``paco-reward score`` / ``explain`` call the same API a Python user does."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from paco_reward.cli import main


def test_score_pair_set_and_grid(tiny_model_dir, tiny_reward, random_images, tmp_path, capsys):
    paths = []
    for k, image in enumerate(random_images(4, (56, 56), seed=20)):
        paths.append(str(tmp_path / f"p{k}.png"))
        image.save(paths[-1])
    assert main(["score", str(tiny_model_dir), paths[0], paths[1], "--prompt", "fox"]) == 0
    pair = json.loads(capsys.readouterr().out)
    assert pair["score"] == pytest.approx(tiny_reward.score(paths[0], paths[1], "fox"), abs=1e-6)

    assert main(["score", str(tiny_model_dir), *paths, "--prompt", "fox"]) == 0
    assert len(json.loads(capsys.readouterr().out)["pairs"]) == 6

    grid = Image.new("RGB", (112, 112))
    for k, p in enumerate(paths):
        grid.paste(Image.open(p), ((k % 2) * 56, (k // 2) * 56))
    grid.save(tmp_path / "grid.png")
    assert (
        main(
            [
                "score",
                str(tiny_model_dir),
                "--grid",
                str(tmp_path / "grid.png"),
                "--prompt",
                "a 2x2 fox",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["mean"] == pytest.approx(tiny_reward.score_grid(grid, "a 2x2 fox").mean, abs=1e-6)


def test_explain(tiny_model_dir, random_images, tmp_path, capsys):
    for k, image in enumerate(random_images(2, seed=21)):
        image.save(tmp_path / f"{k}.png")
    code = main(
        [
            "explain",
            str(tiny_model_dir),
            str(tmp_path / "0.png"),
            str(tmp_path / "1.png"),
            "--prompt",
            "fox",
            "--max-new-tokens",
            "5",
        ]
    )
    assert code == 0
    assert set(json.loads(capsys.readouterr().out)) == {"score", "answer", "reasons"}


def test_exit_codes_and_one_line_errors(tiny_model_dir, tmp_path, capsys):
    """0 done, 1 an error (one line naming the input, no traceback), 2 a usage error."""
    assert main(["score", str(tiny_model_dir), "only-one.png"]) == 1
    assert (
        capsys.readouterr().err == "paco-reward: error: give two or more images, or --grid GRID.\n"
    )
    missing = str(tmp_path / "missing.png")
    assert main(["score", str(tiny_model_dir), missing, missing, "--prompt", "fox"]) == 1
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert "pairs[0][0]: no image file" in line and "missing.png" in line
    assert "Traceback" not in err
    with pytest.raises(SystemExit) as usage:
        main(["score", str(tiny_model_dir), "a.png", "b.png", "--promt", "fox"])
    assert usage.value.code == 2
    assert "unrecognized arguments: --promt" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["/nope", "./nope", "~/nope", "runs/evaluator/final"])
def test_a_model_path_that_is_not_there_is_named_not_taken_for_a_hub_id(
    model, tmp_path, monkeypatch, capsys
):
    """``paco-reward score /nope ...`` said "Repo id must use alphanumeric chars" (the hub's
    validation of '/nope' as a repo id); it says that no model folder exists there."""
    monkeypatch.chdir(tmp_path)
    assert main(["score", model, "a.png", "b.png", "--prompt", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"paco-reward: error: No model folder exists at {model!r}")
    assert f"{model!r} is not a hub id either" in err
    assert "Repo id" not in err and "Traceback" not in err


def test_a_missing_model_or_adapter_folder_is_a_path_not_found_error(tiny_model_dir, tmp_path):
    from paco_reward import PacoReward, PathNotFoundError

    missing = str(tmp_path / "no-such-model")
    for backend in ("transformers", "vllm"):  # checked before vLLM is imported
        with pytest.raises(PathNotFoundError, match="No model folder exists at") as info:
            PacoReward.from_pretrained(missing, backend=backend)
        assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(PathNotFoundError, match=r"No adapter folder exists at '\./lora'"):
        PacoReward.from_pretrained(tiny_model_dir, adapter="./lora", device="cpu")
