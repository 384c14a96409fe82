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

from data_pipeline.export import ExportConfig, export_dataset
from data_pipeline.generate import ingest_grids
from data_pipeline.instances import PairingConfig, build_instances, read_instances
from data_pipeline.pairs import LabelRule, build_pairs, read_pairs
from data_pipeline.prompts import prepare_prompts, read_prompts
from data_pipeline.rankings import ingest_rankings
from data_pipeline.reasons import REASONS_FILE, TemplateReasoner, annotate_reasons
from data_pipeline.stats import write_stats
from data_pipeline.storage import write_json, write_jsonl
from data_pipeline.synthetic import (
    SimulatedAnnotators,
    SyntheticWorld,
    attribute_describer,
    pair_truth,
)

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
    seed: int = field(default=0, metadata={"help": "World and annotator seed."})

    def __post_init__(self) -> None:
        if self.n_prompts < 1 or self.grids_per_prompt < 2:
            raise ValueError(
                f"need n_prompts >= 1 and grids_per_prompt >= 2; got {self.n_prompts}, "
                f"{self.grids_per_prompt}."
            )

    def world(self) -> SyntheticWorld:
        return SyntheticWorld(seed=self.seed, panel_size=self.panel_size)

    def layout_tuples(self) -> list[tuple[int, int]]:
        from data_pipeline.grids import parse_layout

        return [parse_layout(layout) for layout in self.layouts]


def make_synthetic_inputs(work_dir: str | Path, config: SyntheticConfig | None = None) -> dict:
    """Write synthetic *inputs* as a user would have them: ``inputs/prompts.jsonl`` (T2IS
    format) and ``inputs/grids/<id>/<seed>.png``; remember the world in ``synthetic.json``."""
    config = config or SyntheticConfig()
    work_dir = Path(work_dir)
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
        raise FileNotFoundError(
            f"{work_dir / SYNTHETIC_FILE} not found: simulated rankings need a synthetic work "
            "folder (run `paco-data synthetic` first)."
        )
    annotators = SimulatedAnnotators(n=config.annotators, noise=config.noise, seed=config.seed)
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


def run_synthetic(
    work_dir: str | Path,
    config: SyntheticConfig | None = None,
    pairing: PairingConfig | None = None,
    rule: LabelRule | None = None,
    export: ExportConfig | None = None,
) -> dict:
    """Every stage on the synthetic world; returns the statistics (also in ``stats.json``).

    Each stage is resumable, so calling this again on the same folder redoes only
    cheap, deterministic bookkeeping and asks no reason twice.
    """
    work_dir = Path(work_dir)
    inputs = make_synthetic_inputs(work_dir, config)
    prepare_prompts(inputs["prompts"], work_dir, source="synthetic")
    ingest_grids(inputs["grids"], work_dir)
    build_instances(work_dir, pairing)
    ingest_rankings(work_dir, simulate_rankings(work_dir))
    build_pairs(work_dir, rule)
    annotate_reasons(
        read_pairs(work_dir),
        synthetic_teacher(work_dir),
        work_dir / REASONS_FILE,
        image_root=work_dir,
        load_images=False,
        progress=False,
    )
    export_dataset(work_dir, work_dir / "export", export)
    stats = write_stats(work_dir, work_dir / "export")
    stats["synthetic_truth"] = truth_stats(work_dir)
    write_json(work_dir / "stats.json", stats)
    return stats


def truth_stats(work_dir: str | Path) -> dict:
    """SYNTHETIC: mean ground-truth similarity of consistent and inconsistent pairs (how
    clean the simulated annotators' labels are)."""
    config = load_synthetic_config(work_dir)
    if config is None:
        return {}
    world, prompts = config.world(), read_prompts(work_dir)
    out = {}
    for label, name in ((1, "consistent"), (0, "inconsistent")):
        sims = [
            s
            for p in read_pairs(work_dir)
            if p["label"] == label and (s := pair_truth(p, world, prompts)) is not None
        ]
        out[f"mean_similarity_{name}"] = sum(sims) / len(sims) if sims else None
    return out
