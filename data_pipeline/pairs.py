"""Stage 5: rankings -> Yes/No pairs, and the editing-pair reader.

The default rule is the paper's: the merged top-1 candidate with the reference is a
consistent ("Yes") pair, the bottom-1 an inconsistent ("No") one, and a side whose
boundary is tied is dropped.

    >>> rule = LabelRule()
    >>> label_candidates([[2], [0, 1], [3]], rule)
    {2: 1, 3: 0}
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from data_pipeline.instances import read_instances
from data_pipeline.rankings import read_merged
from data_pipeline.storage import DataPipelineError, read_jsonl, stable_id, write_jsonl
from paco_reward.errors import ConfigError
from paco_reward.templates import TEMPLATES

logger = logging.getLogger(__name__)

PAIRS_FILE = "pairs.jsonl"
TIE_RULES = ("drop", "all", "first")


@dataclass
class LabelRule:
    """How a merged ranking becomes labelled pairs (reference, candidate)."""

    top_k: int = field(
        default=1, metadata={"help": "The k best candidates become consistent ('Yes') pairs."}
    )
    bottom_k: int = field(
        default=1, metadata={"help": "The k worst candidates become inconsistent ('No') pairs."}
    )
    ties: str = field(
        default="drop",
        metadata={
            "help": "When the k-th candidate is tied with the next: 'drop' that side (the "
            "paper discards ties), 'all' take the whole tie group, 'first' take the group's "
            "lowest candidate indices up to k (tied candidates are equally good examples)."
        },
    )
    template: str = field(
        default="consistency",
        metadata={"help": f"Instruction template of the pairs; one of {sorted(TEMPLATES)}."},
    )
    prompt_field: str = field(
        default="theme",
        metadata={"help": "Instance/prompt field that fills the template's {prompt} ('theme')."},
    )
    template_mix: dict[str, float] = field(
        default_factory=dict,
        metadata={
            "help": "Other task-aware templates and the fraction of pairs asked with each, e.g. "
            "{'rank': 0.25} (ConsistencyRank's theme-free question); each pair's template is "
            "drawn by a stable hash of the pair, the rest use `template`."
        },
    )

    def __post_init__(self) -> None:
        if self.top_k < 0 or self.bottom_k < 0 or self.top_k + self.bottom_k == 0:
            raise ConfigError(
                f"top_k and bottom_k must be >= 0 and not both 0; got top_k={self.top_k}, "
                f"bottom_k={self.bottom_k}."
            )
        if self.template not in TEMPLATES:
            raise ConfigError(
                f"template must be one of {sorted(TEMPLATES)}; got {self.template!r}."
            )
        if self.ties not in TIE_RULES:
            raise ConfigError(f"ties must be one of {TIE_RULES}; got {self.ties!r}.")
        unknown = sorted(set(self.template_mix) - set(TEMPLATES))
        if unknown:
            raise ConfigError(
                f"template_mix has unknown templates {unknown}; use {sorted(TEMPLATES)}."
            )
        fractions = list(self.template_mix.values())
        if any(not 0.0 <= f <= 1.0 for f in fractions) or sum(fractions) > 1.0:
            raise ConfigError(
                f"template_mix fractions must be in [0, 1] and sum to at most 1; got "
                f"{self.template_mix!r}."
            )

    def template_for(self, *key) -> str:
        """The template of the pair named by ``key``: one of ``template_mix`` for the
        stated fractions of pairs (stable hash of ``key``), else ``template``."""
        if not self.template_mix:
            return self.template
        u = int(stable_id("template", *key), 16) / 16**16
        for name, fraction in sorted(self.template_mix.items()):
            if u < fraction:
                return name
            u -= fraction
        return self.template


def _take(groups: list[list[int]], k: int, ties: str) -> list[int]:
    taken: list[int] = []
    for g in groups:
        if len(taken) >= k:
            break
        if len(taken) + len(g) > k:
            if ties == "drop":
                return taken
            if ties == "first":
                return taken + sorted(g)[: k - len(taken)]
        taken.extend(g)
    return taken


def label_candidates(groups: list[list[int]], rule: LabelRule) -> dict[int, int]:
    """Candidate index -> label (1 consistent, 0 inconsistent) for one merged ranking.

    A candidate that would be both (too few candidates, everything tied) gets no label.
    """
    top = _take(groups, rule.top_k, rule.ties) if rule.top_k else []
    bottom = _take(groups[::-1], rule.bottom_k, rule.ties) if rule.bottom_k else []
    both = set(top) & set(bottom)
    labels = {c: 1 for c in top if c not in both}
    labels.update({c: 0 for c in bottom if c not in both})
    return labels


def make_pair(
    prompt_id: str,
    image_a: str,
    image_b: str,
    label: int,
    template: str,
    prompt: str,
    category: str,
    source: str,
    **extra,
) -> dict:
    """A pair record with its stable ``pair_id`` (sha1 of prompt id, images, template)."""
    return {
        "pair_id": stable_id(prompt_id, image_a, image_b, template, prompt),
        "prompt_id": prompt_id,
        "image_a": image_a,
        "image_b": image_b,
        "template": template,
        "prompt": prompt if TEMPLATES[template].needs_prompt else "",
        "label": int(label),
        "category": category,
        "source": source,
        **extra,
    }


def rankings_to_pairs(
    instances: dict[str, dict], merged: dict[str, dict], rule: LabelRule | None = None
) -> list[dict]:
    """Labelled (reference, candidate) pairs from merged rankings, de-duplicated by ``pair_id``.
    An instance whose annotators said that no candidate matches the reference
    (``none_consistent``) gives its inconsistent pairs only.

    Example:
        >>> inst = {"i": {"instance_id": "i", "prompt_id": "p", "theme": "a fox",
        ...   "category": "c", "source": "t2is", "reference": {"path": "r.png"},
        ...   "candidates": [{"path": "a.png"}, {"path": "b.png"}, {"path": "c.png"}]}}
        >>> pairs = rankings_to_pairs(inst, {"i": {"ranking": [[1], [0], [2]]}})
        >>> [(p["image_b"], p["label"]) for p in pairs]
        [('b.png', 1), ('c.png', 0)]
    """
    rule = rule or LabelRule()
    pairs: dict[str, dict] = {}
    for instance_id, result in merged.items():
        if instance_id not in instances:
            raise DataPipelineError(f"merged ranking for unknown instance {instance_id!r}.")
        inst = instances[instance_id]
        prompt = inst.get(rule.prompt_field) or ""
        if TEMPLATES[rule.template].needs_prompt and not prompt.strip():
            raise DataPipelineError(
                f"instance {instance_id!r}: template {rule.template!r} needs a prompt but field "
                f"{rule.prompt_field!r} is empty; set LabelRule.prompt_field or use template='rank'."
            )
        labels = label_candidates(result["ranking"], rule)
        if result.get("none_consistent"):  # the best candidate is not consistent either
            labels = {c: label for c, label in labels.items() if label == 0}
        for cand, label in sorted(labels.items()):
            image_a, image_b = inst["reference"]["path"], inst["candidates"][cand]["path"]
            pair = make_pair(
                inst["prompt_id"],
                image_a,
                image_b,
                label,
                rule.template_for(inst["prompt_id"], image_a, image_b),
                prompt,
                inst.get("category", "uncategorised"),
                inst.get("source", "t2is"),
                instance_id=instance_id,
                panel_a=_panel_key(inst["reference"]),
                panel_b=_panel_key(inst["candidates"][cand]),
            )
            pairs.setdefault(pair["pair_id"], pair)
    return list(pairs.values())


def _panel_key(panel: dict) -> str:
    return f"{panel.get('grid', '')}:{panel.get('pos', '')}"


def _parse_label(value, where: str) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip().lower() in ("yes", "no", "true", "false", "1", "0"):
        return int(value.strip().lower() in ("yes", "true", "1"))
    raise DataPipelineError(f"{where}: label must be 1/0, true/false or 'Yes'/'No'; got {value!r}.")


def read_edit_pairs(
    path: str | Path, template: str = "edit_consistency", base_dir: str | Path | None = None
) -> list[dict]:
    """Editing pairs from JSONL: ``source`` (image path), ``edited`` (image path),
    ``instruction``, optional ``label`` (default 1 = verified consistent), ``id``, ``category``.

    Relative image paths are resolved against ``base_dir`` (default: the file's folder).

    Raises:
        DataPipelineError: a missing field or an image file that does not exist.
    """
    path = Path(path)
    base = Path(base_dir) if base_dir is not None else path.parent
    pairs = []
    for line, r in enumerate(read_jsonl(path), start=1):
        where = f"{path}:{line}"
        missing = [k for k in ("source", "edited", "instruction") if not r.get(k)]
        if missing:
            raise DataPipelineError(
                f"{where}: editing pair lacks {missing}; need source, edited, instruction."
            )
        images = []
        for key in ("source", "edited"):
            p = Path(r[key])
            p = p if p.is_absolute() else base / p
            if not p.is_file():
                raise DataPipelineError(f"{where}: {key} image {str(p)!r} does not exist.")
            images.append(str(p.resolve()))
        pairs.append(
            make_pair(
                str(r.get("id", r.get("prompt_id", f"edit{line}"))),
                images[0],
                images[1],
                _parse_label(r.get("label"), where),
                template,
                r["instruction"],
                r.get("category", "Editing"),
                "edit",
            )
        )
    return pairs


def build_pairs(
    work_dir: str | Path,
    rule: LabelRule | None = None,
    edit_pairs: str | Path | None = None,
) -> Path:
    """Stage 5: ``instances.jsonl`` + ``rankings.jsonl`` (+ editing pairs) -> ``pairs.jsonl``."""
    work_dir = Path(work_dir)
    pairs = rankings_to_pairs(read_instances(work_dir), read_merged(work_dir), rule)
    if edit_pairs is not None:
        pairs += read_edit_pairs(edit_pairs)
    write_jsonl(work_dir / PAIRS_FILE, pairs)
    n_yes = sum(p["label"] for p in pairs)
    logger.info("pairs: %d (%d consistent, %d inconsistent)", len(pairs), n_yes, len(pairs) - n_yes)
    return work_dir / PAIRS_FILE


def read_pairs(work_dir: str | Path) -> list[dict]:
    """Pairs of a work folder."""
    return read_jsonl(Path(work_dir) / PAIRS_FILE)
