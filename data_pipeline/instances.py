"""Stage 3: ranking instances by sub-figure pairing.

An instance is a reference panel and a list of candidate panels from *other* grids
of the same prompt; annotators rank the candidates by consistency with the
reference. The default rule (``"other_grid"``) pairs every panel of grid A with
the panels of each grid B != A, which gives the paper's 48 instances per prompt
for 4 grids of 2x2 (4 grids x 3 other grids x 4 reference panels).

    >>> cfg = PairingConfig()
    >>> cfg.rule
    'other_grid'
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from data_pipeline.prompts import read_prompts
from data_pipeline.storage import read_jsonl, stable_id, write_json, write_jsonl
from paco_reward.errors import ConfigError

logger = logging.getLogger(__name__)

INSTANCES_FILE = "instances.jsonl"
RULES = ("other_grid", "all_other_grids", "same_position")


@dataclass
class PairingConfig:
    """How ranking instances are formed from the panels of one prompt."""

    rule: str = field(
        default="other_grid",
        metadata={
            "help": "Candidate rule. 'other_grid': for each reference panel of grid A and "
            "each grid B != A, the candidates are all panels of B (paper: 48 instances per "
            "prompt for 4 grids of 2x2). 'all_other_grids': one instance per reference "
            "panel with the panels of every other grid as candidates. 'same_position': one "
            "instance per reference panel with the same-position panels of other grids."
        },
    )
    min_candidates: int = field(
        default=2, metadata={"help": "Instances with fewer candidates are not written."}
    )
    max_candidates: int | None = field(
        default=None,
        metadata={"help": "If set, keep a seeded random subset of at most this many candidates."},
    )
    seed: int = field(default=0, metadata={"help": "Seed for candidate subsampling and order."})
    shuffle_candidates: bool = field(
        default=False,
        metadata={"help": "Shuffle each instance's candidate order (seeded), to hide position."},
    )

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ConfigError(f"rule must be one of {list(RULES)}; got {self.rule!r}.")
        if self.min_candidates < 2:
            raise ConfigError(
                f"min_candidates must be >= 2 (a ranking needs two candidates); got {self.min_candidates}."
            )
        if self.max_candidates is not None and self.max_candidates < self.min_candidates:
            raise ConfigError(
                f"max_candidates ({self.max_candidates}) must be >= min_candidates "
                f"({self.min_candidates}) or None."
            )


def _panel_ref(panel: dict) -> dict:
    return {"grid": panel["grid"], "pos": panel["pos"], "path": panel["path"]}


def make_instances(
    panels: list[dict], prompts: dict[str, dict] | None = None, config: PairingConfig | None = None
) -> list[dict]:
    """Ranking instances from a panel manifest (rows ``prompt_id``, ``grid``, ``pos``, ``path``).

    Returns records ``instance_id`` (stable: sha1 of prompt, reference and candidates),
    ``prompt_id``, ``reference``, ``candidates`` (each ``{grid, pos, path}``), ``rule``,
    ``theme``, ``category``.

    Example:
        >>> panels = [{"prompt_id": "p", "grid": str(g), "pos": k, "path": f"{g}_{k}.png"}
        ...           for g in range(4) for k in range(4)]
        >>> len(make_instances(panels))
        48
    """
    config = config or PairingConfig()
    prompts = prompts or {}
    by_prompt: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for p in panels:
        by_prompt[p["prompt_id"]][str(p["grid"])].append(p)
    instances: list[dict] = []
    for prompt_id, grids in by_prompt.items():
        for g in grids.values():
            g.sort(key=lambda p: p["pos"])
        record = prompts.get(prompt_id, {})
        for grid_a, panels_a in grids.items():
            for ref in panels_a:
                for candidates in _candidate_sets(config.rule, grid_a, ref, grids):
                    inst = _instance(prompt_id, ref, candidates, config, record)
                    if inst is not None:
                        instances.append(inst)
    logger.info(
        "instances: %d from %d prompts (rule=%s)", len(instances), len(by_prompt), config.rule
    )
    return instances


def _candidate_sets(rule: str, grid_a: str, ref: dict, grids: dict[str, list[dict]]):
    others = [g for g in grids if g != grid_a]
    if rule == "other_grid":
        for grid_b in others:
            yield grids[grid_b]
    elif rule == "all_other_grids":
        yield [p for g in others for p in grids[g]]
    else:  # same_position
        yield [p for g in others for p in grids[g] if p["pos"] == ref["pos"]]


def _instance(
    prompt_id: str, ref: dict, candidates: list[dict], config: PairingConfig, record: dict
) -> dict | None:
    candidates = list(candidates)
    key = stable_id(
        prompt_id, ref["grid"], ref["pos"], *(f"{c['grid']}:{c['pos']}" for c in candidates)
    )
    rng = random.Random(f"{config.seed}-{key}")
    if config.max_candidates is not None and len(candidates) > config.max_candidates:
        candidates = sorted(rng.sample(candidates, config.max_candidates), key=candidates.index)
    if config.shuffle_candidates:
        rng.shuffle(candidates)
    if len(candidates) < config.min_candidates:
        return None
    refs = [_panel_ref(c) for c in candidates]
    return {
        "instance_id": stable_id(
            prompt_id, ref["grid"], ref["pos"], *(f"{c['grid']}:{c['pos']}" for c in refs)
        ),
        "prompt_id": prompt_id,
        "reference": _panel_ref(ref),
        "candidates": refs,
        "rule": config.rule,
        "theme": record.get("theme", ""),
        "category": record.get("category", "uncategorised"),
        "source": record.get("source", "t2is"),
    }


def build_instances(work_dir: str | Path, config: PairingConfig | None = None) -> Path:
    """Stage 3: ``<work_dir>/panels.jsonl`` -> ``<work_dir>/instances.jsonl`` (atomic,
    deterministic, so re-running gives the same ids)."""
    # Imported here: stage 2's images (PIL, numpy) are not needed to read instances.
    from data_pipeline.generate import read_panels

    work_dir = Path(work_dir)
    instances = make_instances(read_panels(work_dir), read_prompts(work_dir), config)
    out = work_dir / INSTANCES_FILE
    write_jsonl(out, instances)
    write_json(work_dir / "instances.config.json", asdict(config or PairingConfig()))
    return out


def read_instances(work_dir: str | Path) -> dict[str, dict]:
    """Instances of a work folder by ``instance_id``."""
    return {r["instance_id"]: r for r in read_jsonl(Path(work_dir) / INSTANCES_FILE)}
