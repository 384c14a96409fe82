"""``paco-reward``: ``score`` / ``explain`` call the same API a Python user does; the
commands that load a model take the hub arguments (a pinned revision from a hub cache)."""

from __future__ import annotations

import json
import time

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from paco_reward import PacoReward
from paco_reward.cli import COMMANDS, ModelArguments, main


@pytest.fixture
def offline(monkeypatch):
    """No hub: a repository id resolves in a local cache or not at all."""
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


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


def test_tiny_builds_a_judge_under_its_name_and_the_sample_panels(tmp_path, capsys):
    """``paco-reward tiny``: what the README's first block scores, on a fresh clone."""
    from paco_reward.testing.samples import SAMPLE_PANELS

    assert main(["tiny", str(tmp_path / "tiny_judge"), "--panels", str(tmp_path)]) == 0
    assert all((tmp_path / name).is_file() for name in SAMPLE_PANELS)
    assert str(tmp_path / "tiny_judge") in capsys.readouterr().out
    with PacoReward.from_pretrained(tmp_path / "tiny_judge", device="cpu") as rm:
        assert 0 <= rm.score(tmp_path / "panel_1.png", tmp_path / "panel_2.png", "a fox") <= 1
        assert len(rm.score_grid(tmp_path / "grid.png", "a 2x2 grid of a fox").scores) == 6


@pytest.mark.parametrize("command", ["score", "explain"])
def test_a_missing_prompt_is_reported_before_the_model_loads(command, tmp_path, capsys):
    """It was "needs a non-empty prompt ... got None", after the model had loaded (minutes
    for a 7B judge): the model here does not exist, so only a check before loading names the
    prompt."""
    missing_model = str(tmp_path / "no-model-here")
    assert main([command, missing_model, "a.png", "b.png"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("paco-reward: error: --prompt is missing: the 'consistency' template")
    assert 'add --prompt "' in err and "None" not in err
    # a template without {prompt} takes none: the run goes on to the model (not found)
    assert main([command, missing_model, "a.png", "b.png", "--template", "rank"]) == 1
    assert "No model folder exists" in capsys.readouterr().err


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


def test_a_mistyped_local_folder_fails_at_once_naming_it(tmp_path, monkeypatch, capsys):
    """``runs/tiny_cpux`` is a valid hub id, so it went to the hub: 27 s of retries, then
    "could not connect" without the path. With a local ``runs/`` it is a local path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "tiny_cpu").mkdir(parents=True)
    start = time.perf_counter()
    assert main(["score", "runs/tiny_cpux", "a.png", "b.png", "--prompt", "x"]) == 1
    assert time.perf_counter() - start < 5
    err = capsys.readouterr().err
    assert err.startswith("paco-reward: error: No model folder exists at 'runs/tiny_cpux'")
    assert "(did you mean 'runs/tiny_cpu'?)" in err
    assert "'runs' is a folder here" in err


def test_a_missing_model_or_adapter_folder_is_a_path_not_found_error(tiny_model_dir, tmp_path):
    from paco_reward import PacoReward, PathNotFoundError

    missing = str(tmp_path / "no-such-model")
    for backend in ("transformers", "vllm"):  # checked before vLLM is imported
        with pytest.raises(PathNotFoundError, match="No model folder exists at") as info:
            PacoReward.from_pretrained(missing, backend=backend)
        assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(PathNotFoundError, match=r"No adapter folder exists at '\./lora'"):
        PacoReward.from_pretrained(tiny_model_dir, adapter="./lora", device="cpu")


def test_the_commands_that_load_a_model_share_its_arguments():
    """score, explain, merge and serve take one ModelArguments: the same hub flags."""
    loading = {
        c.name: c.resolve() for c in COMMANDS if c.name in ("score", "explain", "merge", "serve")
    }
    assert set(loading) == {"score", "explain", "merge", "serve"}
    for name, cls in loading.items():
        assert issubclass(cls, ModelArguments), name


def test_score_a_pinned_revision_offline_from_a_hub_cache(two_revision_hub, offline, random_images,
                                                          tmp_path, capsys):  # fmt: skip
    """``--revision v1 --cache_dir CACHE`` scores with that revision's weights (not main's),
    with nothing downloaded."""
    cache, repo, folders = two_revision_hub
    paths = []
    for k, image in enumerate(random_images(2, (56, 56), seed=22)):
        paths.append(str(tmp_path / f"{k}.png"))
        image.save(paths[-1])
    expected = {rev: PacoReward.from_pretrained(folder).score(*paths, "fox")
                for rev, folder in folders.items()}  # fmt: skip
    assert expected["v1"] != pytest.approx(expected["main"], abs=1e-4)
    for revision in ("v1", "main"):
        flags = ["--revision", revision, "--cache_dir", str(cache)]
        assert main(["score", repo, *paths, "--prompt", "fox", *flags]) == 0
        score = json.loads(capsys.readouterr().out)["score"]
        assert score == pytest.approx(expected[revision], abs=1e-6), revision


def test_merge_a_pinned_revision_offline_from_a_hub_cache(two_revision_hub, offline, tmp_path,
                                                          capsys):  # fmt: skip
    """``paco-reward merge REPO ADAPTER OUT --revision v1`` merges into v1's weights: the
    same folder as merging into v1's own folder."""
    from peft import LoraConfig, get_peft_model

    from paco_reward.modeling import load_vision_language_model

    cache, repo, folders = two_revision_hub
    torch.manual_seed(0)
    lora = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(load_vision_language_model(folders["v1"]), lora).save_pretrained(
        tmp_path / "adapter"
    )
    outputs = {}
    for name, source, flags in (("v1", repo, ["--revision", "v1", "--cache_dir", str(cache)]),
                                ("folder", str(folders["v1"]), []),
                                ("main", repo, ["--cache_dir", str(cache)])):  # fmt: skip
        out = tmp_path / name
        assert main(["merge", source, str(tmp_path / "adapter"), str(out), *flags]) == 0
        assert capsys.readouterr().out.strip() == str(out)
        outputs[name] = load_file(out / "model.safetensors")
    assert outputs["v1"].keys() == outputs["folder"].keys()
    for key, value in outputs["v1"].items():
        torch.testing.assert_close(value, outputs["folder"][key], rtol=0, atol=0)
    assert any(not torch.equal(outputs["v1"][k], outputs["main"][k]) for k in outputs["v1"])
