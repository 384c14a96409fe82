"""Stage 7: export the pairs for training and the held-out ranking benchmark.

Outputs under ``out_dir``:

- ``hf/``: a ``datasets.DatasetDict`` (``train``/``test``, split by prompt; a split
  with no rows, e.g. ``test_fraction=0``, is left out) with the
  columns of the pair schema (images embedded; ``messages`` rendered by
  :func:`paco_reward.templates.build_messages`, answer word first, then reasons);
- ``parquet/<split>.parquet``: the same rows as parquet;
- ``llamafactory/``: sharegpt JSON per split + ``dataset_info.json`` + ``images/``;
- ``consistency_rank/``: the ConsistencyRank layout of the test prompts' instances
  (``images/<folder>/<gen>_<pos>.png``, ``prompt_data.jsonl``,
  ``consistency_full_rank.jsonl`` with ``folder``, ``ref_image``, ``comp_images``,
  ``rank_images``).

    >>> split_prompts(["a", "b", "c", "d"], test_fraction=0.25, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from data_pipeline.instances import read_instances
from data_pipeline.pairs import read_pairs
from data_pipeline.prompts import read_prompts
from data_pipeline.rankings import read_merged
from data_pipeline.reasons import read_reasons
from data_pipeline.storage import (
    DataPipelineError,
    copy_atomic,
    stable_id,
    write_json,
    write_jsonl,
)
from paco_reward.atomic_io import atomic_write_bytes
from paco_reward.errors import ConfigError
from paco_reward.schema import PAIR_COLUMNS, pair_features
from paco_reward.templates import build_messages, format_answer, render_instruction

logger = logging.getLogger(__name__)


@dataclass
class ExportConfig:
    """How pairs are split and exported."""

    test_fraction: float = field(
        default=0.1,
        metadata={"help": "Fraction of prompts (not pairs) held out as the test split."},
    )
    seed: int = field(default=0, metadata={"help": "Seed of the prompt split."})
    require_reasons: bool = field(
        default=True,
        metadata={"help": "Fail if a pair has no reason; if False such pairs are skipped."},
    )
    llamafactory: bool = field(
        default=True, metadata={"help": "Also write LLaMA-Factory sharegpt JSON."}
    )
    dataset_name: str = field(
        default="paco",
        metadata={
            "help": "LLaMA-Factory dataset name: the splits are listed as <name>_train / "
            "<name>_test in dataset_info.json, next to other names already there."
        },
    )
    balance_train_labels: bool = field(
        default=False,
        metadata={
            "help": "Keep as many Yes as No pairs in the train split: the more frequent label "
            "is subsampled (seeded). Rankings whose ends tie give one label only, so exports "
            "lean to Yes; an evaluator trained on them leans to Yes at the 0.5 threshold."
        },
    )
    consistency_rank: bool = field(
        default=True,
        metadata={"help": "Also write the ConsistencyRank benchmark layout of the test prompts."},
    )
    rank_ties: str = field(
        default="collapse",
        metadata={
            "help": "ConsistencyRank needs a full order. 'collapse': a group of tied "
            "candidates (equally consistent to the annotators) is kept as one candidate, its "
            "first, and instances with fewer than two groups are skipped; 'skip': instances "
            "with any tie are skipped."
        },
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.test_fraction < 1.0:
            raise ConfigError(f"test_fraction must be in [0, 1); got {self.test_fraction}.")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.dataset_name):
            raise ConfigError(
                f"dataset_name must be letters, digits, '_', '.' or '-'; got {self.dataset_name!r}."
            )
        if self.rank_ties not in ("collapse", "skip"):
            raise ConfigError(f"rank_ties must be 'collapse' or 'skip'; got {self.rank_ties!r}.")


def split_prompts(prompt_ids: list[str], test_fraction: float, seed: int = 0) -> set[str]:
    """The held-out prompt ids: the ``ceil(fraction * n)`` prompts with the smallest seeded
    hash (stable when prompts are added), at least one and never all when ``n >= 2``."""
    ids = sorted(set(prompt_ids), key=lambda p: stable_id(seed, p))
    if test_fraction <= 0 or len(ids) < 2:
        return set()
    k = min(len(ids) - 1, max(1, math.ceil(test_fraction * len(ids))))
    return set(ids[:k])


def balance_labels(rows: list[dict], seed: int = 0) -> list[dict]:
    """``rows`` with the more frequent label subsampled to the other's count (a seeded
    choice, original order kept).

    >>> rows = [{"label": 1}, {"label": 1}, {"label": 1}, {"label": 0}]
    >>> [r["label"] for r in balance_labels(rows)]
    [1, 0]
    """
    by_label = [[i for i, r in enumerate(rows) if r["label"] == label] for label in (0, 1)]
    n = min(len(index) for index in by_label)
    rng = random.Random(f"balance-{seed}")
    keep = {i for index in by_label for i in (index if len(index) == n else rng.sample(index, n))}
    return [r for i, r in enumerate(rows) if i in keep]


def pair_messages(template: str, prompt: str, label: int, reasons: str) -> list[dict]:
    """The training messages of a pair, exactly as the schema requires."""
    return build_messages(
        render_instruction(template, prompt or None), answer=format_answer(bool(label), reasons)
    )


def _resolve(path: str, work_dir: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else work_dir / p


def build_rows(work_dir: Path, config: ExportConfig) -> list[dict]:
    pairs = read_pairs(work_dir)
    reasons = read_reasons(work_dir)
    rows, missing = [], []
    for pair in pairs:
        stored = reasons.get(pair["pair_id"])
        if stored is None or int(stored["label"]) != int(pair["label"]):
            missing.append(pair["pair_id"])
            continue
        rows.append(
            {
                "pair_id": pair["pair_id"],
                "prompt_id": pair["prompt_id"],
                "image_a": str(_resolve(pair["image_a"], work_dir)),
                "image_b": str(_resolve(pair["image_b"], work_dir)),
                "template": pair["template"],
                "prompt": pair["prompt"],
                "label": int(pair["label"]),
                "reasons": stored["reasons"],
                "messages": pair_messages(
                    pair["template"], pair["prompt"], pair["label"], stored["reasons"]
                ),
                "category": pair["category"],
                "source": pair["source"],
            }
        )
    if missing and config.require_reasons:
        raise DataPipelineError(
            f"{len(missing)} of {len(pairs)} pairs have no reason (e.g. {missing[:3]}); run "
            "`paco-data reasons` again, or export with require_reasons=False to skip them."
        )
    if missing:
        logger.warning("export: skipping %d pairs without a reason", len(missing))
    return rows


def _hf_row(r: dict) -> dict:
    out = {c: r[c] for c in PAIR_COLUMNS}
    for key in ("image_a", "image_b"):
        out[key] = {"bytes": Path(r[key]).read_bytes(), "path": None}
    out["messages"] = [
        {
            "role": m["role"],
            "content": [{"type": p["type"], "text": p.get("text")} for p in m["content"]],
        }
        for m in r["messages"]
    ]
    return out


def _generate_rows(rows: list[dict]):
    for r in rows:
        yield _hf_row(r)


def export_hf(splits: dict[str, list[dict]], out_dir: Path):
    """Write ``hf/`` (``save_to_disk``) and ``parquet/<split>.parquet``; return the DatasetDict.

    Rows are streamed into Arrow (``Dataset.from_generator``) so memory stays flat at any
    dataset size; the generator cache lives in a temporary folder that is removed, so a
    re-export always reads the current image files.
    """
    import tempfile

    from datasets import Dataset, DatasetDict

    cache = Path(tempfile.mkdtemp(dir=out_dir, prefix=".hf-cache-"))
    try:
        dataset = DatasetDict(
            {
                name: Dataset.from_generator(
                    _generate_rows,
                    features=pair_features(),
                    gen_kwargs={"rows": rows},
                    cache_dir=str(cache),
                    keep_in_memory=False,
                )
                for name, rows in splits.items()
                if rows  # an empty split cannot be saved and loaded back
            }
        )
        tmp = out_dir / "hf.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        dataset.save_to_disk(str(tmp))
        shutil.rmtree(out_dir / "hf", ignore_errors=True)
        tmp.rename(out_dir / "hf")
        dataset = DatasetDict.load_from_disk(str(out_dir / "hf"))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    (out_dir / "parquet").mkdir(parents=True, exist_ok=True)
    for name, ds in dataset.items():
        target = out_dir / "parquet" / f"{name}.parquet"
        ds.to_parquet(str(target.with_suffix(".parquet.tmp")))
        target.with_suffix(".parquet.tmp").replace(target)
    return dataset


def export_llamafactory(splits: dict[str, list[dict]], out_dir: Path, name: str = "paco") -> Path:
    """LLaMA-Factory sharegpt files under ``out_dir/llamafactory``.

    Writes ``<name>_<split>.json`` for each non-empty split (``messages`` with two
    ``<image>`` tags, ``images`` relative to the folder) and lists them in
    ``dataset_info.json``, keeping the entries of other dataset names already there, so
    several exports can share one ``dataset_dir``. Images are named by the SHA-256 of their
    bytes (``images/<hash>.<ext>``): an export is the same bytes from any path and on any
    machine, and an image shared by several pairs is stored once. Image files that no
    listed dataset references any more are removed.
    """
    folder = out_dir / "llamafactory"
    info_path = folder / "dataset_info.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    for split in ("train", "test"):  # this name's old entries go; the non-empty ones return
        info.pop(f"{name}_{split}", None)
        stale = folder / f"{name}_{split}.json"
        if not splits.get(split) and stale.is_file():
            stale.unlink()
    for split, rows in splits.items():
        if not rows:
            continue
        records = []
        for r in rows:
            images = []
            for key in ("image_a", "image_b"):
                data = Path(r[key]).read_bytes()
                rel = f"images/{hashlib.sha256(data).hexdigest()}{Path(r[key]).suffix.lower()}"
                if not (folder / rel).is_file():
                    atomic_write_bytes(folder / rel, data)
                images.append(rel)
            user, assistant = r["messages"]
            instruction = next(p["text"] for p in user["content"] if p["type"] == "text")
            records.append(
                {
                    "messages": [
                        {"role": "user", "content": "<image><image>" + instruction},
                        {"role": "assistant", "content": assistant["content"][0]["text"]},
                    ],
                    "images": images,
                }
            )
        file_name = f"{name}_{split}.json"
        write_json(folder / file_name, records)
        info[f"{name}_{split}"] = {
            "file_name": file_name,
            "formatting": "sharegpt",
            "columns": {"messages": "messages", "images": "images"},
            "tags": {
                "role_tag": "role",
                "content_tag": "content",
                "user_tag": "user",
                "assistant_tag": "assistant",
            },
        }
    write_json(info_path, dict(sorted(info.items())))
    _remove_unreferenced_images(folder, info)
    return folder


def _remove_unreferenced_images(folder: Path, info: dict) -> None:
    referenced = {
        image
        for entry in info.values()
        if (folder / entry["file_name"]).is_file()
        for record in json.loads((folder / entry["file_name"]).read_text())
        for image in record.get("images", [])
    }
    removed = 0
    for path in (folder / "images").rglob("*") if (folder / "images").is_dir() else []:
        if path.is_file() and path.relative_to(folder).as_posix() not in referenced:
            path.unlink()
            removed += 1
    for sub in sorted((folder / "images").rglob("*"), reverse=True) if removed else []:
        if sub.is_dir() and not any(sub.iterdir()):
            sub.rmdir()
    if removed:
        logger.info("llamafactory: removed %d image(s) no record references", removed)


def export_consistency_rank(
    work_dir: Path, out_dir: Path, prompt_ids: set[str], ties: str = "collapse"
) -> Path:
    """The ConsistencyRank layout of the ranked instances of ``prompt_ids`` (``ties``: see
    :attr:`ExportConfig.rank_ties`)."""
    folder = out_dir / "consistency_rank"
    prompts = read_prompts(work_dir)
    instances = read_instances(work_dir)
    merged = read_merged(work_dir)
    items = []
    used: set[str] = set()
    for instance_id, result in merged.items():
        inst = instances.get(instance_id)
        if inst is None or inst["prompt_id"] not in prompt_ids:
            continue
        groups = result["ranking"]
        if ties == "skip" and any(len(g) > 1 for g in groups):
            continue
        order = [min(g) for g in groups]
        if len(order) < 2:
            continue
        kept = sorted(order)
        names = []
        for panel in [inst["reference"], *(inst["candidates"][c] for c in kept)]:
            name = f"{panel['grid']}_{panel['pos']}.png"
            target = folder / "images" / inst["prompt_id"] / name
            if not target.is_file():
                copy_atomic(_resolve(panel["path"], work_dir), target)
            names.append(name)
        comp = names[1:]
        items.append(
            {
                "folder": inst["prompt_id"],
                "ref_image": names[0],
                "comp_images": comp,
                "rank_images": [comp[kept.index(c)] for c in order],
                "instance_id": instance_id,
            }
        )
        used.add(inst["prompt_id"])
    write_jsonl(folder / "consistency_full_rank.jsonl", items)
    write_jsonl(
        folder / "prompt_data.jsonl",
        [{**prompts[p], "idx": p} for p in sorted(used)],
    )
    logger.info("consistency_rank: %d instances of %d prompts -> %s", len(items), len(used), folder)
    return folder


def export_dataset(
    work_dir: str | Path, out_dir: str | Path | None = None, config: ExportConfig | None = None
) -> Path:
    """Stage 7: pairs + reasons -> ``hf/``, ``parquet/``, ``llamafactory/``,
    ``consistency_rank/`` under ``out_dir`` (default ``<work_dir>/export``).

    Returns:
        ``out_dir``. ``datasets.load_from_disk(out_dir / "hf")`` gives the DatasetDict.

    Raises:
        DataPipelineError: pairs without reasons (unless ``require_reasons=False``) or
            nothing to export.
    """
    config = config or ExportConfig()
    work_dir = Path(work_dir)
    out_dir = Path(out_dir) if out_dir is not None else work_dir / "export"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = build_rows(work_dir, config)
    if not rows:
        raise DataPipelineError(f"no pair with a reason in {work_dir}; nothing to export.")
    test_ids = split_prompts([r["prompt_id"] for r in rows], config.test_fraction, config.seed)
    splits = {
        "train": [r for r in rows if r["prompt_id"] not in test_ids],
        "test": [r for r in rows if r["prompt_id"] in test_ids],
    }
    if config.balance_train_labels:
        splits["train"] = balance_labels(splits["train"], config.seed)
    export_hf(splits, out_dir)
    if config.llamafactory:
        export_llamafactory(splits, out_dir, config.dataset_name)
    if config.consistency_rank:
        export_consistency_rank(work_dir, out_dir, test_ids, config.rank_ties)
    write_json(
        out_dir / "export_info.json",
        {
            "test_prompts": sorted(test_ids),
            "rows": {k: len(v) for k, v in splits.items()},
            "config": json.loads(json.dumps(config.__dict__)),
        },
    )
    logger.info("export: %s -> %s", {k: len(v) for k, v in splits.items()}, out_dir)
    return out_dir
