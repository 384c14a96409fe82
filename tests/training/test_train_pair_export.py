"""The trainer consumes the data pipeline's export (PAIR_SCHEMA) from hf/ and parquet/."""

from __future__ import annotations

import pytest

from paco_reward.training.collator import IGNORE_INDEX, PacoSFTCollator
from paco_reward.training.loading import load_pair_dataset_dict


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    from data_pipeline.pipeline import SyntheticConfig, run_synthetic

    work = tmp_path_factory.mktemp("synthetic")
    run_synthetic(work, SyntheticConfig(n_prompts=4, grids_per_prompt=2, layouts=["2x2"], seed=0))
    return work / "export"


def test_export_loads_from_hf_and_parquet_alike(export_dir):
    from_hf = load_pair_dataset_dict(export_dir)
    from_parquet = load_pair_dataset_dict(export_dir / "parquet" / "..")  # parent holding both
    assert set(from_hf) == set(from_parquet) and "train" in from_hf
    rows = {r["pair_id"]: r for r in from_hf["train"]}
    assert len(rows) == len(from_hf["train"])

    import shutil

    only_parquet = export_dir.parent / "only_parquet"
    shutil.copytree(export_dir / "parquet", only_parquet / "parquet")
    parquet = load_pair_dataset_dict(only_parquet)
    assert sorted(parquet["train"]["pair_id"]) == sorted(rows)
    assert parquet["train"][0]["image_a"].mode == "RGB"


def test_export_rows_collate_with_the_scorers_prompt(export_dir, tiny_reward):
    backend = tiny_reward.backend
    train = load_pair_dataset_dict(export_dir)["train"]
    rows = [train[i] for i in range(min(4, len(train)))]
    collator = PacoSFTCollator(backend.processor)
    batch = collator(rows)
    for i, row in enumerate(rows):
        text = backend.processor.apply_chat_template(row["messages"], tokenize=False)
        assert text.startswith(
            backend.processor.apply_chat_template(
                row["messages"][:1], tokenize=False, add_generation_prompt=True
            )
        )
        supervised = batch["labels"][i][batch["labels"][i] != IGNORE_INDEX].tolist()
        answer = row["messages"][1]["content"][0]["text"]
        assert collator.tokenizer.decode(supervised) == answer + "<|im_end|>"
