"""End-to-end runs: the synthetic world through every stage (tests, demo, ``paco-data demo``).

>>> stats = run_synthetic("/tmp/paco-syn", n_prompts=6)   # doctest: +SKIP
>>> stats["pairs"]["total"] > 0                           # doctest: +SKIP
True
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

from data_pipeline.export import ExportConfig, export_dataset, export_hf, pair_messages
from data_pipeline.generate import ingest_grids, read_panels
from data_pipeline.instances import PairingConfig, build_instances, read_instances
from data_pipeline.pairs import LabelRule, build_pairs, read_pairs
from data_pipeline.prompts import prepare_prompts, read_prompts
from data_pipeline.rankings import ingest_rankings
from data_pipeline.reasons import (
    REASONS_FILE,
    TemplateReasoner,
    annotate_reasons,
    attribute_comparison,
)
from data_pipeline.stats import write_stats
from data_pipeline.storage import DataPipelineError, stable_id, write_json, write_jsonl
from data_pipeline.synthetic import (
    SimulatedAnnotators,
    SyntheticWorld,
    attribute_describer,
    pair_truth,
)
from paco_reward.errors import ConfigError, PathNotFoundError

logger = logging.getLogger(__name__)

SYNTHETIC_FILE = "synthetic.json"


@dataclass
class SyntheticConfig:
    """Size and noise of a synthetic dataset."""

    n_prompts: int = field(default=12, metadata={"help": "Number of synthetic prompts."})
    grids_per_prompt: int = field(default=4, metadata={"help": "Grids ('seeds') per prompt."})
    layouts: list[str] = field(
        default_factory=lambda: ["2x2"], metadata={"help": "Grid layouts, cycled over prompts."}
    )
    panel_size: int = field(default=64, metadata={"help": "Panel side in pixels."})
    annotators: int = field(default=3, metadata={"help": "Simulated annotators per instance."})
    noise: float = field(default=0.08, metadata={"help": "Annotator score noise (std)."})
    none_consistent_below: float | None = field(
        default=SimulatedAnnotators.none_consistent_below,
        metadata={
            "help": "An annotator says no candidate matches the reference when the best scores "
            "below this (null: never); such instances give no consistent pair."
        },
    )
    grid_drift: float = field(
        default=SyntheticWorld.grid_drift,
        metadata={"help": "Probability that a grid draws a different character/style."},
    )
    panel_break: float = field(
        default=SyntheticWorld.panel_break,
        metadata={"help": "Probability that a panel breaks 2-3 attributes."},
    )
    pose: bool = field(
        default=SyntheticWorld.pose,
        metadata={"help": "Vary the character's place and size per panel."},
    )
    lighting: bool = field(
        default=SyntheticWorld.lighting,
        metadata={"help": "Light each panel at its own shade of the palette."},
    )
    seed: int = field(default=0, metadata={"help": "World and annotator seed."})

    def __post_init__(self) -> None:
        if self.n_prompts < 1 or self.grids_per_prompt < 2:
            raise ConfigError(
                f"need n_prompts >= 1 and grids_per_prompt >= 2; got {self.n_prompts}, "
                f"{self.grids_per_prompt}."
            )

    def world(self) -> SyntheticWorld:
        return SyntheticWorld(
            seed=self.seed,
            panel_size=self.panel_size,
            grid_drift=self.grid_drift,
            panel_break=self.panel_break,
            pose=self.pose,
            lighting=self.lighting,
        )

    def layout_tuples(self) -> list[tuple[int, int]]:
        from paco_reward.grids import parse_layout

        return [parse_layout(layout) for layout in self.layouts]


def make_synthetic_inputs(
    work_dir: str | Path, config: SyntheticConfig | None = None, overwrite: bool = False
) -> dict:
    """Write synthetic *inputs* as a user would have them: ``inputs/prompts.jsonl`` (T2IS
    format) and ``inputs/grids/<id>/<seed>.png``; remember the world in ``synthetic.json``.

    A work folder made for another world (its ``synthetic.json`` differs) is refused with
    :class:`~paco_reward.errors.OutputDirInUseError`: its grids, instances and pairs would mix
    with this world's. ``overwrite=True`` empties it first; the same world resumes."""
    from paco_reward.output_dirs import check_output_dir

    config = config or SyntheticConfig()
    work_dir = Path(work_dir)
    saved = work_dir / SYNTHETIC_FILE
    check_output_dir(
        work_dir,
        json.loads(json.dumps(asdict(config))),  # as synthetic.json holds it (lists, not tuples)
        markers=[SYNTHETIC_FILE],
        outputs=["*"],  # the folder is the pipeline's: every stage's files
        saved_config=json.loads(saved.read_text()) if saved.is_file() else None,
        overwrite=overwrite,
        what="synthetic pipeline",
    )
    world = config.world()
    records = world.make_prompts(config.n_prompts, config.layout_tuples())
    write_jsonl(work_dir / "inputs" / "prompts.jsonl", records)
    world.write_grids(records, work_dir / "inputs" / "grids", config.grids_per_prompt)
    write_json(work_dir / SYNTHETIC_FILE, asdict(config))
    return {
        "prompts": work_dir / "inputs" / "prompts.jsonl",
        "grids": work_dir / "inputs" / "grids",
    }


def load_synthetic_config(work_dir: str | Path) -> SyntheticConfig | None:
    """The synthetic world of a work folder, if it was made by :func:`make_synthetic_inputs`."""
    path = Path(work_dir) / SYNTHETIC_FILE
    return SyntheticConfig(**json.loads(path.read_text())) if path.is_file() else None


def simulate_rankings(work_dir: str | Path, out: str | Path | None = None) -> Path:
    """SYNTHETIC: rank every instance of ``work_dir`` with simulated annotators; writes
    ``inputs/rankings.jsonl`` in the format of human rankings."""
    work_dir = Path(work_dir)
    config = load_synthetic_config(work_dir)
    if config is None:
        raise PathNotFoundError(
            f"{work_dir / SYNTHETIC_FILE} not found: simulated rankings need a synthetic work "
            "folder (run `paco-data synthetic` first)."
        )
    annotators = SimulatedAnnotators(
        n=config.annotators,
        noise=config.noise,
        seed=config.seed,
        none_consistent_below=config.none_consistent_below,
    )
    instances = list(read_instances(work_dir).values())
    records = annotators.annotate(instances, config.world(), read_prompts(work_dir))
    out = Path(out) if out is not None else work_dir / "inputs" / "rankings.jsonl"
    write_jsonl(out, records)
    return out


def synthetic_teacher(work_dir: str | Path) -> TemplateReasoner:
    """The offline template reasoner, naming attributes when the folder is synthetic."""
    config = load_synthetic_config(work_dir)
    if config is None:
        return TemplateReasoner()
    return TemplateReasoner(attribute_describer(config.world(), read_prompts(work_dir)))


def _pairs_reasons_export(
    work_dir: Path, rule: LabelRule | None, teacher, export: ExportConfig | None
) -> tuple[Path, dict]:
    """The tail of a simulated run, once rankings are in: pairs (by default keeping whole
    tie groups and asking a quarter with the ``rank`` template), template reasons by
    ``teacher``, the export and its statistics."""
    build_pairs(work_dir, rule or LabelRule(ties="all", template_mix={"rank": 0.25}))
    annotate_reasons(
        read_pairs(work_dir),
        teacher,
        work_dir / REASONS_FILE,
        image_root=work_dir,
        load_images=False,
        progress=False,
    )
    export_dir = export_dataset(work_dir, work_dir / "export", export)
    return export_dir, write_stats(work_dir, export_dir)


def run_synthetic(
    work_dir: str | Path,
    config: SyntheticConfig | None = None,
    pairing: PairingConfig | None = None,
    rule: LabelRule | None = None,
    export: ExportConfig | None = None,
    overwrite: bool = False,
) -> dict:
    """Every stage on the synthetic world; returns the statistics (also in ``stats.json``).

    Each stage is resumable, so calling this again on the same folder redoes only
    cheap, deterministic bookkeeping and asks no reason twice. A folder made for another
    world is refused unless ``overwrite`` (:func:`make_synthetic_inputs`). When the export holds
    prompts out, their ground-truth pairs go to ``export/truth`` (:func:`export_truth_pairs`).

    The default label rule keeps whole tie groups (``LabelRule(ties="all")``): the
    simulated annotators tie candidates that look alike, and dropping ties would drop
    most consistent pairs (several panels of a grid often match the reference exactly).
    It also asks a quarter of the pairs with ConsistencyRank's theme-free ``rank``
    template (``template_mix``), so an evaluator trained on the export has been asked the
    question the ConsistencyRank benchmark asks.
    """
    work_dir = Path(work_dir)
    inputs = make_synthetic_inputs(work_dir, config, overwrite)
    prepare_prompts(inputs["prompts"], work_dir, source="synthetic")
    ingest_grids(inputs["grids"], work_dir)
    build_instances(work_dir, pairing)
    ingest_rankings(work_dir, simulate_rankings(work_dir))
    export_dir, stats = _pairs_reasons_export(work_dir, rule, synthetic_teacher(work_dir), export)
    stats["synthetic_truth"] = truth_stats(work_dir)
    if json.loads((export_dir / "export_info.json").read_text())["test_prompts"]:
        from datasets import load_from_disk

        truth_dir = export_truth_pairs(work_dir, export_dir)
        stats["synthetic_truth"]["held_out_truth_pairs"] = len(
            load_from_disk(str(truth_dir / "hf"))["test"]
        )
    write_json(work_dir / "stats.json", stats)
    return stats


def run_oracle_annotated(
    work_dir: str | Path,
    prompts_path: str | Path,
    grids_dir: str | Path,
    annotators: SimulatedAnnotators | None = None,
    pairing: PairingConfig | None = None,
    rule: LabelRule | None = None,
    export: ExportConfig | None = None,
) -> dict:
    """Every stage on grids that a generator of the synthetic world drew for its prompts
    (``prompts_path``: world prompt records; ``grids_dir``: ``<id>/<seed>.png``), as the
    paper builds its data from generated images: the simulated annotators rank what the
    world's oracle reads in each panel (:class:`data_pipeline.world_oracle.OracleReadings`),
    and the template reasons name it. Instances with a panel the oracle cannot read are
    left unranked, so they make no pair. Returns the statistics (also in ``stats.json``).
    """
    from data_pipeline.world_oracle import OracleReadings

    work_dir = Path(work_dir)
    prepare_prompts(prompts_path, work_dir, source="synthetic")
    ingest_grids(grids_dir, work_dir)
    build_instances(work_dir, pairing)
    prompts = read_prompts(work_dir)
    readings = OracleReadings(work_dir)
    instances = [i for i in read_instances(work_dir).values() if readings.readable(i, prompts)]
    rankings = work_dir / "inputs" / "rankings.jsonl"
    write_jsonl(
        rankings, (annotators or SimulatedAnnotators()).annotate(instances, readings, prompts)
    )
    ingest_rankings(work_dir, rankings)
    teacher = TemplateReasoner(attribute_describer(readings, prompts))
    _, stats = _pairs_reasons_export(work_dir, rule, teacher, export)
    stats["oracle_readable_instances"] = len(instances)
    write_json(work_dir / "stats.json", stats)
    return stats


def truth_stats(work_dir: str | Path) -> dict:
    """SYNTHETIC: how clean the simulated annotators' labels are. Mean ground-truth
    similarity of consistent and inconsistent pairs, and ``label_ceiling``: the accuracy of
    the best threshold on ground-truth similarity against the labels (what a perfect
    judge of the two images could reach, since labels are relative to each ranking)."""
    config = load_synthetic_config(work_dir)
    if config is None:
        return {}
    world, prompts = config.world(), read_prompts(work_dir)
    scored = [
        (s, p["label"])
        for p in read_pairs(work_dir)
        if (s := pair_truth(p, world, prompts)) is not None
    ]
    out = {}
    for label, name in ((1, "consistent"), (0, "inconsistent")):
        sims = [s for s, y in scored if y == label]
        out[f"mean_similarity_{name}"] = sum(sims) / len(sims) if sims else None
    if scored:
        out["label_ceiling"] = max(
            sum((s >= t) == bool(y) for s, y in scored) / len(scored)
            for t in {s for s, _ in scored}
        )
    return out


def truth_pairs(
    work_dir: str | Path,
    prompt_ids: set[str] | None = None,
    min_difference: int = 2,
    seed: int = 0,
) -> list[dict]:
    """SYNTHETIC: panel pairs labelled by ground truth instead of by annotators, for
    measuring what an evaluator learned without the annotators' noise.

    Every two panels of different grids of a prompt form a pair: consistent (1) when they
    agree on every identity and style attribute, inconsistent (0) when they differ in at
    least ``min_difference`` of them; pairs in between are left out (too close to call).
    The larger class is subsampled (seeded) to the size of the smaller, and the order of
    the two panels is shuffled. Rows follow the exported pair schema (image paths,
    template reasons).

    Args:
        work_dir: a folder made by :func:`run_synthetic` (or the synthetic stages).
        prompt_ids: only these prompts (e.g. the held-out split); default all.
        min_difference: how many attributes an inconsistent pair differs in at least.
        seed: seed of the subsampling and of the panel order.
    """
    import random

    work_dir = Path(work_dir)
    config = load_synthetic_config(work_dir)
    if config is None:
        raise PathNotFoundError(
            f"{work_dir / SYNTHETIC_FILE} not found: ground-truth pairs need a synthetic work "
            "folder (run `paco-data synthetic` first)."
        )
    prompts = read_prompts(work_dir)
    describe = attribute_describer(config.world(), prompts)
    by_prompt: dict[str, list[dict]] = {}
    for panel in read_panels(work_dir):
        if prompt_ids is None or panel["prompt_id"] in prompt_ids:
            by_prompt.setdefault(panel["prompt_id"], []).append(panel)
    rng = random.Random(seed)
    classes: dict[int, list[dict]] = {0: [], 1: []}
    for prompt_id, panels in sorted(by_prompt.items()):
        record = prompts[prompt_id]
        prompt = record.get("theme") or ""
        for i, a in enumerate(panels):
            for b in panels[i + 1 :]:
                if a["grid"] == b["grid"]:
                    continue
                if rng.random() < 0.5:
                    a, b = b, a
                pair = {
                    "prompt_id": prompt_id,
                    "panel_a": f"{a['grid']}:{a['pos']}",
                    "panel_b": f"{b['grid']}:{b['pos']}",
                }
                attrs_a, attrs_b = describe(pair)
                differences = sum(attrs_a[k] != attrs_b[k] for k in attrs_a)
                if 0 < differences < min_difference:
                    continue
                label = int(differences == 0)
                reasons = attribute_comparison(attrs_a, attrs_b)
                classes[label].append(
                    {
                        "pair_id": stable_id("truth", prompt_id, a["path"], b["path"]),
                        "prompt_id": prompt_id,
                        "image_a": str(work_dir / a["path"]),
                        "image_b": str(work_dir / b["path"]),
                        "template": "consistency",
                        "prompt": prompt,
                        "label": label,
                        "reasons": reasons,
                        "messages": pair_messages("consistency", prompt, label, reasons),
                        "category": record.get("category", ""),
                        "source": "synthetic-truth",
                    }
                )
    size = min(len(classes[0]), len(classes[1]))
    rows = rng.sample(classes[0], size) + rng.sample(classes[1], size)
    rng.shuffle(rows)
    return rows


def export_truth_pairs(work_dir: str | Path, export_dir: str | Path | None = None) -> Path:
    """SYNTHETIC: :func:`truth_pairs` of an export's held-out prompts, written as a pair
    dataset with one ``test`` split to ``<export_dir>/truth/hf`` and ``.../parquet``
    (``export_dir`` defaults to ``<work_dir>/export``); returns ``<export_dir>/truth``.

    Raises:
        DataPipelineError: the export has no held-out prompt, or they give no pair.
    """
    work_dir = Path(work_dir)
    export_dir = Path(export_dir) if export_dir is not None else work_dir / "export"
    info = json.loads((export_dir / "export_info.json").read_text())
    rows = truth_pairs(work_dir, set(info["test_prompts"]))
    if not rows:
        raise DataPipelineError(
            f"no ground-truth pairs from the held-out prompts of {export_dir} "
            f"({len(info['test_prompts'])} prompts); export with a test_fraction > 0."
        )
    out_dir = export_dir / "truth"
    out_dir.mkdir(parents=True, exist_ok=True)
    export_hf({"test": rows}, out_dir)
    return out_dir
