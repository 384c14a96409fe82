"""Stages 7-8 on a full synthetic run: the exported DatasetDict (pair schema), parquet,
LLaMA-Factory files, the ConsistencyRank layout, statistics, and the contract with the
SFT trainer / scorer (same prompt tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from data_pipeline.export import ExportConfig, export_dataset, split_prompts
from data_pipeline.pairs import read_pairs
from data_pipeline.stats import format_table
from data_pipeline.storage import DataPipelineError
from paco_reward.errors import ConfigError, PathNotFoundError
from paco_reward.templates import build_messages, format_answer, render_instruction

COLUMNS = {
    "pair_id", "prompt_id", "image_a", "image_b", "template", "prompt", "label", "reasons",
    "messages", "category", "source",
}  # fmt: skip


@pytest.fixture(scope="module")
def exported(synthetic_run):
    from datasets import load_from_disk

    work, stats = synthetic_run
    return work, stats, load_from_disk(str(work / "export" / "hf"))


def test_dataset_dict_follows_the_pair_schema(exported):
    work, _, ds = exported
    assert set(ds) == {"train", "test"}
    assert set(ds["train"].column_names) == COLUMNS
    assert ds["train"].features["label"].dtype == "int32"
    assert type(ds["train"].features["image_a"]).__name__ == "Image"
    pairs = {p["pair_id"]: p for p in read_pairs(work)}
    assert len(ds["train"]) + len(ds["test"]) == len(pairs)
    for row in ds["train"].select(range(20)):
        pair = pairs[row["pair_id"]]
        assert row["label"] == pair["label"] and row["template"] == pair["template"]
        expected = build_messages(
            render_instruction(row["template"], row["prompt"] or None),
            answer=format_answer(bool(row["label"]), row["reasons"]),
        )
        user, assistant = row["messages"]
        assert [p["type"] for p in user["content"]] == ["image", "image", "text"]
        assert user["content"][2]["text"] == expected[0]["content"][2]["text"]
        assert assistant == {
            "role": "assistant",
            "content": [{"type": "text", "text": expected[1]["content"][0]["text"]}],
        }
        assert assistant["content"][0]["text"].startswith("Yes. " if row["label"] else "No. ")
        # Images are embedded and are the pair's panels, reference first.
        assert row["image_a"].tobytes() == _open(work / pair["image_a"]).tobytes()
        assert row["image_b"].tobytes() == _open(work / pair["image_b"]).tobytes()
        assert row["source"] == "synthetic" and row["category"] == pair["category"]


def _open(path):
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


def test_split_is_by_prompt_and_both_labels_present(exported):
    _, _, ds = exported
    train, test = set(ds["train"]["prompt_id"]), set(ds["test"]["prompt_id"])
    assert train and test and not train & test
    assert set(ds["train"]["label"]) == {0, 1}
    assert split_prompts(["a", "b", "c"], 0.5, 0) == split_prompts(["c", "b", "a"], 0.5, 0)
    assert len(split_prompts([str(i) for i in range(10)], 0.25)) == 3
    assert split_prompts(["only"], 0.5) == set()


def test_parquet_matches_hf(exported):
    from datasets import load_dataset

    work, _, ds = exported
    files = {s: str(work / "export" / "parquet" / f"{s}.parquet") for s in ("train", "test")}
    parquet = load_dataset("parquet", data_files=files)
    assert parquet["train"]["pair_id"] == ds["train"]["pair_id"]
    assert parquet["test"]["label"] == ds["test"]["label"]


def test_llamafactory_files(exported):
    work, _, ds = exported
    folder = work / "export" / "llamafactory"
    info = json.loads((folder / "dataset_info.json").read_text())
    assert info["paco_train"]["formatting"] == "sharegpt"
    records = json.loads((folder / info["paco_train"]["file_name"]).read_text())
    assert len(records) == len(ds["train"])
    first = records[0]
    assert first["messages"][0]["content"].startswith("<image><image>Given two subfigures")
    assert first["messages"][1]["content"] == ds["train"][0]["messages"][1]["content"][0]["text"]
    assert (
        all((folder / image).is_file() for image in first["images"]) and len(first["images"]) == 2
    )


def test_consistency_rank_layout(exported):
    work, _, ds = exported
    folder = work / "export" / "consistency_rank"
    items = [
        json.loads(line)
        for line in (folder / "consistency_full_rank.jsonl").read_text().splitlines()
    ]
    prompts = {
        json.loads(line)["idx"] for line in (folder / "prompt_data.jsonl").read_text().splitlines()
    }
    assert items and prompts == set(ds["test"]["prompt_id"])
    for item in items:
        assert set(item) >= {"folder", "ref_image", "comp_images", "rank_images"}
        assert item["folder"] in prompts
        # Tied candidates are collapsed to one, so 2 to 4 candidates remain.
        assert sorted(item["rank_images"]) == sorted(item["comp_images"])
        assert 2 <= len(item["comp_images"]) <= 4
        for name in [item["ref_image"], *item["comp_images"]]:
            assert (folder / "images" / item["folder"] / name).is_file()
            gen, pos = name[:-4].split("_")
            assert gen.isdigit() and pos.isdigit()


def test_stats(exported, capsys):
    work, stats, ds = exported
    assert stats["prompts"] == 6 and stats["grids"] == 24 and stats["panels"] == 96
    assert stats["instances"] == 6 * 48 and stats["instances_per_prompt"] == 48
    pairs = stats["pairs"]
    assert (
        pairs["consistent"] + pairs["inconsistent"]
        == pairs["total"]
        == len(ds["train"]) + len(ds["test"])
    )
    # Whole tie groups of equal-looking panels are consistent pairs, so Yes outnumbers No.
    assert 0.5 < pairs["consistent_fraction"] < 0.85
    assert (
        sum(v["consistent"] + v["inconsistent"] for v in pairs["by_category"].values())
        == pairs["total"]
    )
    assert 0.3 < stats["agreement"]["kendall_w_mean"] <= 1.0
    assert stats["reasons"]["missing"] == 0
    truth = stats["synthetic_truth"]
    assert truth["mean_similarity_consistent"] > truth["mean_similarity_inconsistent"] + 0.25
    # Annotators say when no candidate matches a broken reference, so (almost) no Yes pair
    # is two or more attributes apart: a judge of the two images agrees with the labels.
    assert 0.97 < truth["label_ceiling"] <= 1.0
    assert 0 < stats["agreement"]["instances_none_consistent"] < stats["instances"]
    assert truth["held_out_truth_pairs"] > 0
    table = format_table(stats)
    assert "pairs.consistent" in table and "agreement.kendall_w_mean" in table
    assert json.loads((work / "stats.json").read_text())["pairs"]["total"] == pairs["total"]


def test_export_requires_reasons(synthetic_run, tmp_path):
    import shutil

    work, _ = synthetic_run
    copy = tmp_path / "work"
    shutil.copytree(work, copy, ignore=shutil.ignore_patterns("export", "inputs"))
    lines = (copy / "reasons.jsonl").read_text().splitlines()
    (copy / "reasons.jsonl").write_text("\n".join(lines[:-3]) + "\n")
    with pytest.raises(DataPipelineError, match="3 of .* pairs have no reason"):
        export_dataset(
            copy, tmp_path / "out", ExportConfig(llamafactory=False, consistency_rank=False)
        )
    out = export_dataset(
        copy,
        tmp_path / "out",
        ExportConfig(require_reasons=False, llamafactory=False, consistency_rank=False),
    )
    info = json.loads((out / "export_info.json").read_text())
    assert sum(info["rows"].values()) == len(lines) - 3
    # No held-out prompts: only a train split (an empty split is not written).
    out = export_dataset(
        copy, tmp_path / "all", ExportConfig(test_fraction=0.0, require_reasons=False)
    )
    from datasets import load_from_disk

    ds = load_from_disk(str(out / "hf"))
    assert set(ds) == {"train"} and len(ds["train"]) == len(lines) - 3
    with pytest.raises(ConfigError, match="test_fraction must be in"):
        ExportConfig(test_fraction=1.0)


def test_rows_feed_the_trainer_with_the_scorer_prompt_tokens(exported, tiny_model_dir):
    """Rendering a row's messages with the model's processor gives, up to the assistant
    turn, exactly the tokens the scorer uses for the same instruction."""
    from transformers import AutoProcessor

    from paco_reward.local_backend import LocalBackend

    _, _, ds = exported
    processor = AutoProcessor.from_pretrained(str(tiny_model_dir))
    backend = LocalBackend.from_pretrained(tiny_model_dir, device="cpu")
    tokenizer = processor.tokenizer
    marker = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    for row in [ds["train"][0], ds["test"][0]]:
        text = processor.apply_chat_template(row["messages"], tokenize=False)
        ids = tokenizer.encode(text, add_special_tokens=False)
        cut = next(i for i in range(len(ids)) if ids[i : i + len(marker)] == marker) + len(marker)
        instruction = row["messages"][0]["content"][2]["text"]
        assert ids[:cut] == backend.prompt_ids(instruction)
        assert tokenizer.decode(ids[cut:]).startswith("Yes" if row["label"] else "No")
        assert text.count("<|image_pad|>") == 2


def test_leakage_probe(exported):
    from data_pipeline.probe import leakage_probe, roc_auc

    work, _, _ = exported
    report = leakage_probe(work / "export" / "hf")
    assert report["test_rows"] > 50
    # The label needs both images: the pair beats either image alone.
    assert report["pair_distance_auc"] > 0.65
    assert report["pair_features_auc"] > max(report["image_a_only_auc"], report["image_b_only_auc"])
    assert roc_auc(np.array([1, 0]), np.array([0.2, 0.9])) == 0.0
    assert np.isnan(roc_auc(np.array([1, 1]), np.array([0.2, 0.9])))


def test_truth_pairs_are_labelled_by_ground_truth(exported):
    """export/truth: held-out pairs labelled by the world's ground truth (identical vs >= 2
    attributes apart), balanced, in the pair schema, with reasons that compare attributes."""
    from datasets import load_from_disk

    from data_pipeline.pipeline import load_synthetic_config, truth_pairs
    from data_pipeline.prompts import read_prompts
    from data_pipeline.synthetic import panel_similarity

    work, stats, ds = exported
    truth = load_from_disk(str(work / "export" / "truth" / "hf"))["test"]
    assert set(truth.column_names) == COLUMNS
    assert len(truth) == stats["synthetic_truth"]["held_out_truth_pairs"] > 0
    assert sum(truth["label"]) * 2 == len(truth)
    assert set(truth["prompt_id"]) <= set(ds["test"]["prompt_id"])

    rows = truth_pairs(work, set(ds["test"]["prompt_id"]))
    assert [r["pair_id"] for r in rows] == truth["pair_id"]
    world, prompts = load_synthetic_config(work).world(), read_prompts(work)
    for row in rows:
        grid_a, pos_a = Path(row["image_a"]).stem.split("_")
        grid_b, pos_b = Path(row["image_b"]).stem.split("_")
        record = prompts[row["prompt_id"]]
        a = world.panel_specs(record, int(grid_a))[int(pos_a)]
        b = world.panel_specs(record, int(grid_b))[int(pos_b)]
        assert grid_a != grid_b
        similarity = panel_similarity(a, b)
        assert similarity == 1.0 if row["label"] else similarity <= 4 / 6
        assert ("different" in row["reasons"]) != bool(row["label"])


def test_truth_pairs_need_a_synthetic_folder(tmp_path):
    from data_pipeline.pipeline import truth_pairs

    with pytest.raises(PathNotFoundError, match="synthetic work folder"):
        truth_pairs(tmp_path)


def test_consistency_rank_ties_collapse_or_skip(synthetic_run, tmp_path):
    """A tied group stays as one candidate ('collapse'); 'skip' keeps only untied instances."""
    from data_pipeline.export import export_consistency_rank
    from data_pipeline.rankings import read_merged

    work, _ = synthetic_run
    merged = read_merged(work)
    prompt_ids = {json.loads(line)["prompt_id"] for line in (work / "panels.jsonl").open()}
    collapsed = export_consistency_rank(work, tmp_path / "c", prompt_ids, ties="collapse")
    skipped = export_consistency_rank(work, tmp_path / "s", prompt_ids, ties="skip")
    read = lambda folder: [  # noqa: E731
        json.loads(line) for line in (folder / "consistency_full_rank.jsonl").open()
    ]
    by_id = {item["instance_id"]: item for item in read(collapsed)}
    assert len(by_id) == sum(len(m["ranking"]) >= 2 for m in merged.values())
    for instance_id, item in by_id.items():
        assert len(item["comp_images"]) == len(merged[instance_id]["ranking"])
    untied = {i for i, m in merged.items() if all(len(g) == 1 for g in m["ranking"])}
    assert {item["instance_id"] for item in read(skipped)} == untied
    with pytest.raises(ConfigError, match="rank_ties"):
        ExportConfig(rank_ties="break")


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_llamafactory_export_is_the_same_bytes_from_any_path(synthetic_run, tmp_path):
    """Exported from two copies of the work folder at different paths: byte-identical JSON
    and image sets; images named by content; no split listed that has no data."""
    import hashlib
    import shutil

    work, _ = synthetic_run
    trees = []
    for place in ("first/copy", "second/elsewhere/copy"):
        copy = tmp_path / place
        shutil.copytree(work, copy, ignore=shutil.ignore_patterns("export"))
        out = export_dataset(copy, copy / "export", ExportConfig(consistency_rank=False))
        trees.append(_tree(out / "llamafactory"))
    assert trees[0] == trees[1]
    images = {k: v for k, v in trees[0].items() if k.startswith("images/")}
    assert images and all(Path(k).stem == hashlib.sha256(v).hexdigest() for k, v in images.items())
    info = json.loads(trees[0]["dataset_info.json"])
    assert sorted(info) == ["paco_test", "paco_train"]
    referenced = {
        image
        for entry in info.values()
        for record in json.loads(trees[0][entry["file_name"]])
        for image in record["images"]
    }
    assert referenced == set(images)  # every image is used, none is missing

    # Re-export the first copy with no held-out prompts: no test split listed, its file and
    # the images only it used are gone.
    first = tmp_path / "first/copy/export"
    export_dataset(first.parent, first, ExportConfig(test_fraction=0.0, consistency_rank=False))
    info = json.loads((first / "llamafactory" / "dataset_info.json").read_text())
    assert sorted(info) == ["paco_train"]
    assert not (first / "llamafactory" / "paco_test.json").exists()
    records = json.loads((first / "llamafactory" / "paco_train.json").read_text())
    used = {image for record in records for image in record["images"]}
    on_disk = {k for k in _tree(first / "llamafactory") if k.startswith("images/")}
    assert used == on_disk


def test_two_dataset_names_share_one_dataset_info(synthetic_run, tmp_path):
    import shutil

    work, _ = synthetic_run
    copy = tmp_path / "work"
    shutil.copytree(work, copy, ignore=shutil.ignore_patterns("export"))
    out = tmp_path / "export"
    export_dataset(copy, out, ExportConfig(consistency_rank=False, dataset_name="paco_a"))
    export_dataset(
        copy, out, ExportConfig(consistency_rank=False, dataset_name="paco_b", test_fraction=0.0)
    )
    folder = out / "llamafactory"
    info = json.loads((folder / "dataset_info.json").read_text())
    assert sorted(info) == ["paco_a_test", "paco_a_train", "paco_b_train"]
    for entry in info.values():
        for record in json.loads((folder / entry["file_name"]).read_text()):
            assert all((folder / image).is_file() for image in record["images"])
    with pytest.raises(ConfigError, match="dataset_name must be letters"):
        ExportConfig(dataset_name="../paco")


def test_llamafactory_recipe_names_what_the_export_holds(exported):
    """The documented LLaMA-Factory recipe: its datasets are the export's, its template is
    Qwen2.5-VL's, and LoRA and image budget are our SFT recipe's."""
    import yaml

    work, _, _ = exported
    lf = yaml.safe_load(Path("recipes/llamafactory/paco_reward_lora.yaml").read_text())
    ours = yaml.safe_load(Path("recipes/paco_reward_7b_lora.yaml").read_text())
    info = json.loads((work / "export" / "llamafactory" / "dataset_info.json").read_text())
    assert {lf["dataset"], lf["eval_dataset"]} <= set(info)
    assert lf["dataset_dir"].endswith("export/llamafactory") and lf["template"] == "qwen2_vl"
    assert (lf["lora_rank"], lf["lora_alpha"], lf["lora_dropout"]) == (
        ours["lora_r"],
        ours["lora_alpha"],
        ours["lora_dropout"],
    )
    assert lf["image_max_pixels"] == ours["image_max_pixels"]
    assert lf["model_name_or_path"] == ours["model_name_or_path"]
    assert (
        Path("recipes/llamafactory/paco_reward_lora.yaml")
        .read_text()
        .startswith("# llamafactory-cli train recipes/llamafactory/paco_reward_lora.yaml")
    )


def test_balanced_train_split_keeps_every_minority_pair_and_the_test_split(synthetic_run, tmp_path):
    from collections import Counter

    from datasets import load_from_disk

    work, _ = synthetic_run
    kw = dict(llamafactory=False, consistency_rank=False, seed=3)
    plain = load_from_disk(str(export_dataset(work, tmp_path / "plain", ExportConfig(**kw)) / "hf"))
    out = [
        load_from_disk(
            str(
                export_dataset(work, tmp_path / k, ExportConfig(balance_train_labels=True, **kw))
                / "hf"
            )
        )
        for k in ("a", "b")
    ]
    before, after = Counter(plain["train"]["label"]), Counter(out[0]["train"]["label"])
    assert before[0] != before[1]  # the synthetic export leans to one label
    assert after[0] == after[1] == min(before.values())
    minority = min(before, key=before.get)
    ids = set(out[0]["train"]["pair_id"])
    assert {
        p for p, y in zip(plain["train"]["pair_id"], plain["train"]["label"]) if y == minority
    } <= ids
    assert out[0]["test"]["pair_id"] == plain["test"]["pair_id"]
    assert out[0]["train"]["pair_id"] == out[1]["train"]["pair_id"]  # seeded
