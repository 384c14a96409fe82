"""The ranking store behind ``paco-data annotate`` and the pipeline stages that read it:
stored rankings are merged with the ranking files of the last merge, on read, with no
conversion; the config and the command line; the page's files in the built wheel."""

from __future__ import annotations

import json
import logging
import zipfile

import pytest

from data_pipeline.storage import DataPipelineError
from paco_reward.errors import ConfigError
from tests.annotate.conftest import make_work


def store_ranking(work, annotator, instance, groups):
    from data_pipeline.annotate import AnnotationStore

    ids = [f"{c['grid']}_{c['pos']}" for c in instance["candidates"]]
    return AnnotationStore(work).submit(
        annotator, instance["instance_id"], [[ids[i] for i in g] for g in groups]
    )


def test_pairs_merge_the_store_with_the_ranking_files_of_the_last_merge(tmp_path):
    from data_pipeline.instances import read_instances
    from data_pipeline.pairs import build_pairs, read_pairs
    from data_pipeline.pipeline import simulate_rankings
    from data_pipeline.rankings import ingest_rankings, merge_is_stale, read_merged

    work = make_work(tmp_path, n_prompts=2)
    simulated = simulate_rankings(work)  # 3 simulated annotators per instance
    ingest_rankings(work, simulated)
    before = read_merged(work)
    instances = list(read_instances(work).values())
    assert not merge_is_stale(work)

    store_ranking(work, "alice", instances[0], [[3], [2], [1], [0]])
    store_ranking(work, "alice", instances[1], [[0], [1, 2], [3]])
    assert merge_is_stale(work)
    build_pairs(work)  # `paco-data pairs`: no other step in between
    assert not merge_is_stale(work)
    after = read_merged(work)
    agreement = json.loads((work / "agreement.json").read_text())
    assert agreement["sources"] == [str(simulated.resolve())]
    assert agreement["annotators"] == 4
    for instance in instances[:2]:
        assert after[instance["instance_id"]]["n_annotators"] == 4
    untouched = {i["instance_id"] for i in instances[2:]}
    assert {k: v for k, v in after.items() if k in untouched} == {
        k: v for k, v in before.items() if k in untouched
    }
    assert {p["instance_id"] for p in read_pairs(work)} <= set(after)


def test_store_alone_then_pairs_with_the_cli(tmp_path, capsys):
    from data_pipeline.cli import main

    work = make_work(tmp_path, n_prompts=1)
    assert main(["rankings", str(work)]) == 1
    assert "paco-data annotate" in capsys.readouterr().err
    instances = [json.loads(x) for x in (work / "instances.jsonl").read_text().splitlines()]
    store_ranking(work, "alice", instances[0], [[2], [0, 1], [3]])
    assert main(["pairs", str(work)]) == 0
    pairs = [json.loads(x) for x in (work / "pairs.jsonl").read_text().splitlines()]
    # Best candidate 2 -> Yes, worst candidate 3 -> No, with the reference as image_a.
    c = instances[0]["candidates"]
    assert sorted((p["image_b"], p["label"]) for p in pairs) == sorted(
        [(c[2]["path"], 1), (c[3]["path"], 0)]
    )
    assert main(["rankings", str(work)]) == 0
    assert json.loads((work / "agreement.json").read_text())["instances_ranked"] == 1


def test_stored_record_is_what_paco_data_rankings_accepts(tmp_path):
    from data_pipeline.instances import read_instances
    from data_pipeline.rankings import load_rankings

    work = make_work(tmp_path, n_prompts=1)
    instances = read_instances(work)
    record = store_ranking(work, "alice", next(iter(instances.values())), [[1], [0, 3], [2]])
    assert set(record) == {"instance_id", "annotator", "ranking", "time"}
    # The store is a valid ranking file for `paco-data rankings WORK FILE` as well.
    loaded = load_rankings(work / "annotations.jsonl", instances)
    assert loaded[0]["ranking"] == [[1], [0, 3], [2]] and loaded[0]["annotator"] == "alice"


def test_old_merge_without_sources_is_not_silently_replaced(tmp_path):
    from data_pipeline.rankings import read_merged

    work = make_work(tmp_path, n_prompts=1)
    (work / "rankings.jsonl").write_text("")
    (work / "agreement.json").write_text("{}")
    with open(work / "annotations.jsonl", "w") as handle:
        instance = json.loads((work / "instances.jsonl").read_text().splitlines()[0])
        handle.write(
            json.dumps(
                {"instance_id": instance["instance_id"], "annotator": "a", "ranking": [0, 1, 2, 3]}
            )
            + "\n"
        )
    with pytest.raises(DataPipelineError, match="re-run `paco-data rankings"):
        read_merged(work)


# ---------------------------------------------------------------------- config and CLI
def test_config_checks(tmp_path, caplog):
    from data_pipeline.annotate import AnnotateConfig

    with pytest.raises(ConfigError, match="port"):
        AnnotateConfig(tmp_path, port=70000)
    with pytest.raises(ConfigError, match="annotator name"):
        AnnotateConfig(tmp_path, annotator="al ice")
    with pytest.raises(ConfigError, match="at least 8"):
        AnnotateConfig(tmp_path, key="short")
    with pytest.raises(ConfigError, match="log_level"):
        AnnotateConfig(tmp_path, log_level="loud")
    for seconds in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="request_timeout must be a positive number"):
            AnnotateConfig(tmp_path, request_timeout=seconds)
    assert AnnotateConfig(tmp_path, annotator="bo.b-1").url() == (
        "http://127.0.0.1:8765/?annotator=bo.b-1"
    )
    with caplog.at_level(logging.WARNING):
        AnnotateConfig(tmp_path, host="0.0.0.0", key_env="")
    assert "without a shared key" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        AnnotateConfig(tmp_path, host="0.0.0.0", key="long-enough-key")
    assert caplog.text == ""


def test_cli_options_are_the_config_fields(tmp_path, capsys, monkeypatch):
    from data_pipeline.annotate import AnnotateConfig
    from data_pipeline.cli import main
    from paco_reward.command_line import parse_config

    monkeypatch.delenv("PACO_ANNOTATE_KEY", raising=False)
    config = parse_config(AnnotateConfig, [str(tmp_path), "--annotator", "alice", "--port", "9001"])
    assert config == AnnotateConfig(tmp_path, annotator="alice", port=9001)
    assert config.host == "127.0.0.1"  # AnnotateConfig's default
    with pytest.raises(SystemExit) as help_:
        main(["annotate", "--help"])
    assert help_.value.code == 0
    text = capsys.readouterr().out
    for option in ("--annotator", "--host", "--port", "--key", "--key-env", "--request-timeout",
                   "--log-level"):  # fmt: skip
        assert option in text
    assert AnnotateConfig.__dataclass_fields__["host"].metadata["help"][:40] in " ".join(
        text.split()
    )
    # a bad value is one line naming it (exit 1), before anything is served
    assert main(["annotate", str(tmp_path), "--annotator", "no spaces"]) == 1
    assert capsys.readouterr().err.startswith("paco-data: error: annotator name 'no spaces'")


def test_wheel_ships_the_page(built_wheel):
    """An installed (not editable) package serves the page: the static files are package data."""
    wheel = built_wheel
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("index.html", "app.js", "style.css"):
        assert f"data_pipeline/annotate/static/{name}" in names
