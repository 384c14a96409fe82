"""Stage: build the PaCo pair dataset from the synthetic world (every pipeline stage,
offline), print its statistics, and hand the exported dataset to later stages.

Artifacts: ``pair_dataset_dir`` (the export folder with ``hf/`` and ``parquet/``) and
``consistency_rank_dir`` (the held-out ConsistencyRank layout).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from data_pipeline.export import ExportConfig
from data_pipeline.pipeline import SyntheticConfig, load_synthetic_config, run_synthetic
from data_pipeline.stats import stats_rows
from demo.context import DemoContext, print_table

# 288 prompts (4,608 panels), 36 held out: enough distinct characters that the tiny
# evaluator learns attributes instead of memorising panels; the test split, the
# ground-truth pairs and ConsistencyRank use unseen characters.
DATA_CONFIG = {"n_prompts": 288, "grids_per_prompt": 4, "layouts": ["2x2"]}


def run(ctx: DemoContext) -> None:
    work = ctx.path("data", "work")
    config = SyntheticConfig(**DATA_CONFIG, seed=ctx.seed)
    previous = load_synthetic_config(work)  # the same world resumes; another is made afresh
    stats = run_synthetic(
        work,
        config,
        export=ExportConfig(test_fraction=0.125, seed=ctx.seed, balance_train_labels=True),
        overwrite=previous is not None and previous != config,
    )

    keys = [
        "prompts", "grids", "panels", "instances", "instances_per_prompt",
        "agreement.kendall_w_mean", "agreement.pairwise_agreement",
        "agreement.instances_none_consistent",
        "pairs.total", "pairs.consistent", "pairs.inconsistent", "reasons.done",
        "export.rows.train", "export.rows.test", "export.consistency_rank_instances",
        "synthetic_truth.mean_similarity_consistent",
        "synthetic_truth.mean_similarity_inconsistent", "synthetic_truth.label_ceiling",
        "synthetic_truth.held_out_truth_pairs",
    ]  # fmt: skip
    values = dict((name, value) for name, value in stats_rows(stats))
    print_table(
        "Synthetic PaCo dataset (SYNTHETIC world, simulated annotators, template reasons)",
        ["statistic", "value"],
        [[k, values.get(k, "-")] for k in keys],
    )
    print_table(
        "Pairs per category",
        ["category", "consistent", "inconsistent"],
        [[c, v["consistent"], v["inconsistent"]] for c, v in stats["pairs"]["by_category"].items()],
    )
    oracle_check(work, config)
    annotate_hint(ctx, work)
    export = work / "export"
    ctx.artifacts["pair_dataset_dir"] = export
    ctx.artifacts["consistency_rank_dir"] = export / "consistency_rank"
    ctx.artifacts["label_ceiling"] = stats["synthetic_truth"]["label_ceiling"]
    assert (export / "hf" / "dataset_dict.json").is_file()
    assert stats["pairs"]["consistent"] > 0 and stats["pairs"]["inconsistent"] > 0


def oracle_check(work: Path, config: SyntheticConfig, grids: int = 48) -> None:
    """Print how well the world's oracle (the judge of generated grids, never a reward) reads
    this stage's grid images back."""
    from data_pipeline.world_oracle import read_back_grids

    check = read_back_grids(work, config.world(), limit=grids)
    print_table(
        f"World oracle (judge of generated grids, never a reward) on {check['grids']} grids of "
        f"this stage: {check['same_consistency']}/{check['grids']} grid consistencies equal "
        "to the truth",
        ["attribute", "read-out accuracy"],
        list(check["accuracy"].items()),
    )


def annotate_hint(ctx: DemoContext, work: Path) -> None:
    """Check that the annotation app serves this folder's instances (in-process, no port),
    then print the command that ranks them in a browser; human rankings join the simulated
    ones the next time `paco-data pairs` runs."""
    from fastapi.testclient import TestClient

    from data_pipeline.annotate import AnnotateConfig, create_app

    client = TestClient(create_app(AnnotateConfig(work, key_env="")), base_url="http://127.0.0.1")
    view = client.get("/api/next", params={"annotator": "you"}).json()["instance"]
    assert view is not None and len(view["candidates"]) >= 2
    script = Path(sys.executable).with_name("paco-data")
    command = f"{os.path.relpath(script) if script.is_file() else 'paco-data'} annotate {work}"
    print(
        f"\nRank the {view['total']} instances yourself (browser, keys 1-9 / drag): "
        f"{command} --annotator you\n  then open http://127.0.0.1:8765/"
    )
    ctx.artifacts["annotate_command"] = f"{command} --annotator you"
