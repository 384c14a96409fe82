"""``paco-eval t2is judge`` and ``report``: score a folder of sub-images, then tabulate.

The judge stage writes one results file per scorer under ``--output_dir``
(``consistency-<name>.jsonl`` per consistency judge, ``alignment.jsonl``,
``aesthetics.jsonl``), a row per case or image, appended as it is scored: a killed run
re-run scores only what is missing, and a file written for another image folder, judge or
selection is refused (:class:`~paco_eval.errors.StaleResultsError`). The report stage reads
them back into ``report.json`` and ``report.md``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paco_eval.errors import MissingImageError
from paco_eval.harness import (
    Report,
    ResultsStore,
    check_mode,
    file_fingerprint,
    fingerprint,
    library_versions,
    mean_or_none,
    write_report,
)
from paco_eval.judges import JudgeSpec, parse_judge
from paco_eval.t2is.alignment import score_alignment
from paco_eval.t2is.consistency import (
    CONSISTENCY_TEMPLATE,
    judge_case,
    prepare_image,
    prompt_sha256,
    released_size,
)
from paco_eval.t2is.data import (
    CaseImages,
    T2ISBench,
    T2ISCase,
    find_case_images,
    list_images,
    paco_split,
)
from paco_eval.t2is.report import (
    PAPER_ROWS,
    alignment_table,
    case_consistency,
    columns,
    consistency_table,
    table_row,
)
from paco_reward.errors import ConfigError

__all__ = ["NamedJudge", "parse_named_judge", "run_judge", "run_report"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NamedJudge:
    """A consistency judge's report name and its spec (:mod:`paco_eval.judges`): ``paco:`` a
    model folder or hub id scored in-process, or ``server:`` a served one."""

    name: str
    spec: JudgeSpec

    @property
    def source(self) -> str:
        return self.spec.text()


def parse_named_judge(text: str) -> NamedJudge:
    """Parse ``[NAME=]SPEC``; SPEC is a ``paco:``/``server:`` judge, or written without its
    kind (a folder or hub id is ``paco:``, ``http://host:port/v1@model`` is ``server:``).
    Without a name the judge is named after its model.

    Example:
        >>> parse_named_judge("qwen=Qwen/Qwen2.5-VL-7B-Instruct")
        NamedJudge(name='qwen', spec=JudgeSpec(kind='paco', target='Qwen/Qwen2.5-VL-7B-Instruct', model=None))
    """
    name, sep, rest = text.partition("=")
    if not sep or "/" in name or ":" in name:  # no name: the '=' (if any) is the spec's
        name, rest = "", text
    spec = parse_judge(rest, ("paco", "server"), flag="--consistency_judges", bare=("server", "paco"))
    name = name or Path(spec.model or spec.target.rstrip("/")).name
    if not all(ch.isalnum() or ch in "-_." for ch in name):
        raise ConfigError(f"--consistency_judges {text!r}: a judge's NAME is letters, digits, - _ . "
                          "(NAME=SPEC).")  # fmt: skip
    return NamedJudge(name, spec)


def _judges(config) -> list[NamedJudge]:
    specs = [parse_named_judge(t) for t in config.consistency_judges]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"--consistency_judges: two judges share a name ({names}).")
    return specs


def load_judge(judge: NamedJudge, config):
    """The :class:`~paco_reward.PacoReward` of a judge, scoring with the exact Yes/No tokens
    (the released softmax over the two logits)."""
    from paco_reward import PacoReward

    spec = judge.spec
    if spec.kind == "server":
        return PacoReward.from_server(spec.target, model=spec.model, exact_yes_no=True)
    return PacoReward.from_pretrained(spec.target, device=config.device, dtype=config.dtype,
                                      batch_size=config.batch_size, canonical_yes_no=False)  # fmt: skip


def _load_alignment(config, judges: list[NamedJudge], loaded: dict[str, Any]):
    if config.alignment.startswith("judge:"):
        from paco_reward.vqascore import JudgeVQAScore

        name = config.alignment.removeprefix("judge:")
        spec = next((s for s in judges if s.name == name), None)
        if spec is None:
            raise ConfigError(f"--alignment {config.alignment!r}: no consistency judge named {name!r}.")
        if name not in loaded:
            loaded[name] = load_judge(spec, config)
        return JudgeVQAScore(loaded[name].backend)
    from paco_reward.vqascore import VQAScore

    kwargs = {"tokenizer": config.alignment_tokenizer} if config.alignment_tokenizer else {}
    return VQAScore.from_pretrained(config.alignment, device=config.device,
                                    dtype=config.alignment_dtype, **kwargs)  # fmt: skip


def _load_aesthetics(config):
    from paco_reward.aesthetics import LaionAestheticPredictor

    if config.aesthetics_head:
        return LaionAestheticPredictor.from_pretrained(config.aesthetics, config.aesthetics_head,
                                                       device=config.device)  # fmt: skip
    return LaionAestheticPredictor.from_pretrained(config.aesthetics, device=config.device)


# ---------------------------------------------------------------------- inputs
@dataclass
class _Inputs:
    bench: T2ISBench
    cases: list[T2ISCase]
    images: dict[str, CaseImages]
    images_fingerprint: str


def _inputs(config) -> _Inputs:
    mode = check_mode(config.mode)
    bench = T2ISBench.load(config.data)
    cases = bench.select(config.cases, config.exclude)
    names = list_images(config.images_dir)
    images = {c.case_id: find_case_images(c, config.images_dir, names, mode=mode,
                                          extension=config.image_ext, strict=config.strict)
              for c in cases}  # fmt: skip
    paths = [p for found in images.values() for p in found.paths]
    return _Inputs(bench, cases, images, file_fingerprint(paths))


def _store(config, inputs: _Inputs, name: str, scorer: dict[str, Any]) -> ResultsStore:
    payload = {"images": inputs.images_fingerprint, "mode": config.mode, "resize": config.resize,
               "cases": [c.case_id for c in inputs.cases], "scorer": scorer}  # fmt: skip
    return ResultsStore(Path(config.output_dir) / f"{name}.jsonl", fingerprint=fingerprint(payload),
                        header={"scorer": scorer})  # fmt: skip


def _consistency_scorer(spec: NamedJudge) -> dict[str, Any]:
    return {"judge": spec.source, "prompt_sha256": prompt_sha256()}


def _alignment_texts(case: T2ISCase) -> list[tuple[int, dict[str, list[str]]]]:
    return list(enumerate(case.alignment))


# ---------------------------------------------------------------------- judge
def run_judge(config) -> int:
    """Score every selected case with each configured scorer (resumable). The models load
    one after another, each released before the next (``paco-eval t2is plan`` counts them
    so), but a judge the ``judge:NAME`` alignment reuses."""
    inputs = _inputs(config)
    judges = _judges(config)
    reused = config.alignment.removeprefix("judge:") if config.alignment.startswith("judge:") else None
    models = _Models()
    loaded: dict[str, Any] = {}
    for spec in judges:
        store = _store(config, inputs, f"consistency-{spec.name}", _consistency_scorer(spec))
        todo = [c for c in inputs.cases if c.case_id not in store and c.criteria
                and inputs.images[c.case_id].paths]  # fmt: skip
        if not todo:
            continue
        judge = models.load(load_judge, spec, config)
        start = time.perf_counter()
        for k, case in enumerate(todo):
            store.append(judge_case(judge, case, inputs.images[case.case_id], resize=config.resize))
            logger.info("consistency %s: case %s (%d/%d, %.1f s)", spec.name, case.case_id,
                        k + 1, len(todo), time.perf_counter() - start)  # fmt: skip
        if spec.name == reused:
            loaded[spec.name] = judge
        else:
            models.release(judge)
        del judge
    if config.alignment:
        _judge_images(config, inputs, "alignment", {"model": config.alignment}, models,
                      lambda: _load_alignment(config, judges, loaded), _alignment_row)  # fmt: skip
    for name in list(loaded):
        models.release(loaded.pop(name))
    if config.aesthetics:
        _judge_images(config, inputs, "aesthetics", _aesthetics_id(config), models,
                      lambda: _load_aesthetics(config), _aesthetics_row)  # fmt: skip
    return 0


class _Models:
    """Loads the judge stage's models one at a time: the memory of those released is
    reclaimed (a full garbage collection, CUDA's cache emptied) before the next one loads,
    and not after the last, where it would only cost time."""

    def __init__(self) -> None:
        self._released = False

    def load(self, loader, *args):
        if self._released:
            import gc

            import torch

            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self._released = False
        return loader(*args)

    def release(self, model: Any) -> None:
        close = getattr(model, "close", None)
        if close is not None:
            close()
        self._released = True


def _alignment_row(config, scorer, case: T2ISCase, k: int, path: Path) -> dict[str, Any]:
    image = prepare_image(path, None)
    return {"scores": score_alignment(scorer, image, case.alignment[k], mode=config.mode, key=path.name)}


def _aesthetics_row(config, scorer, case: T2ISCase, k: int, path: Path) -> dict[str, Any]:
    return {"score": float(scorer.score([prepare_image(path, None)])[0])}


def _aesthetics_id(config) -> dict[str, Any]:
    return {"model": config.aesthetics, "head": config.aesthetics_head}


def _image_items(config, inputs: _Inputs) -> list[tuple[T2ISCase, int, Path]]:
    """(case, k, path) of every sub-image with alignment texts that is in the folder (the
    released naming: the k-th entry of the case's prompt_alignment.json is ``_{k:04d}``)."""
    items = []
    for case in inputs.cases:
        found = inputs.images[case.case_id]
        for k, _ in _alignment_texts(case):
            if config.mode == "reference":
                path = Path(config.images_dir) / f"{case.case_id}_{k:04d}{config.image_ext}"
                path = path if path.is_file() else None
            else:
                path = found.path_of(k)
            if path is not None:
                items.append((case, k, path))
    return items


def _judge_images(config, inputs: _Inputs, name: str, scorer_id: dict, models: _Models, load, score) -> None:
    store = _store(config, inputs, name, scorer_id)
    todo = [(c, k, p) for c, k, p in _image_items(config, inputs) if f"{c.case_id}_{k:04d}" not in store]
    if not todo:
        return
    scorer = models.load(load)
    for case, k, path in todo:
        store.append({"key": f"{case.case_id}_{k:04d}", "case": case.case_id,
                      **score(config, scorer, case, k, path)})  # fmt: skip
    models.release(scorer)


# ---------------------------------------------------------------------- report
def run_report(config) -> int:
    """Write ``report.json`` and ``report.md`` from the results files."""
    inputs = _inputs(config)
    judges = _judges(config)
    mode = config.mode
    consistency_rows = {}
    for spec in judges:
        store = _store(config, inputs, f"consistency-{spec.name}", _consistency_scorer(spec))
        consistency_rows[spec.name] = store.rows()
    alignment_rows = _store(config, inputs, "alignment", {"model": config.alignment}).rows() if config.alignment else []
    aesthetic_rows = _store(config, inputs, "aesthetics", _aesthetics_id(config)).rows() if config.aesthetics else []
    if not any(consistency_rows.values()) and not alignment_rows and not aesthetic_rows:
        raise MissingImageError(f"{config.output_dir} holds no results for these inputs; run "
                                "`paco-eval t2is judge` first (with the same flags).")  # fmt: skip
    names = [s.name for s in judges]

    def row_for(case_ids: set[str]) -> dict[str, float | None]:
        vc = {n: consistency_table([r for r in rows if r["key"] in case_ids], mode)
              for n, rows in consistency_rows.items()}  # fmt: skip
        pa = alignment_table([r for r in alignment_rows if r["case"] in case_ids]) if config.alignment else None
        aes = mean_or_none(r["score"] for r in aesthetic_rows if r["case"] in case_ids)
        return table_row(names, vc, pa, aes)

    all_ids = {c.case_id for c in inputs.cases}
    groups = {}
    for category in sorted({c.category or "unknown" for c in inputs.cases}):
        groups[category] = row_for({c.case_id for c in inputs.cases if (c.category or "unknown") == category})
    items = {}
    for case in inputs.cases:
        found = inputs.images[case.case_id]
        item: dict[str, Any] = {"category": case.category, "images": f"{len(found.paths)}/{case.output_image_count}"}
        for n, rows in consistency_rows.items():
            row = next((r for r in rows if r["key"] == case.case_id), None)
            values = case_consistency(row, mode) if row else {}
            for dim, value in values.items():
                item[f"VC-{dim}" + ("" if n == names[0] else f" ({n})")] = value
        items[case.case_id] = item
    report = Report(
        benchmark="t2is",
        mode=mode,
        title="T2IS-Bench",
        columns=columns(names),
        table=row_for(all_ids),
        groups=groups,
        items=items,
        coverage=_coverage(config, inputs, consistency_rows, alignment_rows, aesthetic_rows),
        protocol=_protocol(config, judges),
        paper_rows=PAPER_ROWS,
        notes=_notes(config, names, inputs.cases),
    )
    json_path, md_path = write_report(report, config.output_dir)
    print(f"wrote {json_path} and {md_path}")
    return 0


def _coverage(config, inputs: _Inputs, consistency_rows, alignment_rows, aesthetic_rows) -> dict[str, Any]:
    expected = sum(c.output_image_count for c in inputs.cases)
    found = sum(len(inputs.images[c.case_id].paths) for c in inputs.cases)
    missing = {c.case_id: inputs.images[c.case_id].missing for c in inputs.cases
               if inputs.images[c.case_id].missing}  # fmt: skip
    per_dim = {dim: sum(1 for c in inputs.cases if c.criteria.get(dim)) for dim in ("Identity", "Style", "Logic")}
    return {
        "cases_selected": len(inputs.cases),
        "cases_without_criteria": [c.case_id for c in inputs.cases if not c.criteria],
        "cases_without_images": [c.case_id for c in inputs.cases if not inputs.images[c.case_id].paths],
        "images_expected": expected,
        "images_found": found,
        "missing_images": missing,
        "cases_with_criteria_per_dimension": per_dim,
        "consistency_cases_scored": {n: len(rows) for n, rows in consistency_rows.items()},
        "alignment_images_scored": len(alignment_rows),
        "alignment_empty_dimensions": sum(1 for r in alignment_rows for v in r["scores"].values() if v is None),
        "aesthetics_images_scored": len(aesthetic_rows),
    }


def _protocol(config, judges: list[NamedJudge]) -> dict[str, Any]:
    height, width = released_size(config.resize) if config.resize else (None, None)
    return {
        "reference": "chengyou-jia/T2IS@a40b858 T2IS_Eval",
        "consistency_judges": {s.name: s.source for s in judges},
        "consistency_prompt": CONSISTENCY_TEMPLATE,
        "consistency_prompt_sha256": prompt_sha256(),
        "consistency_score": "softmax over the first step's exact Yes/No logits",
        "resize": f"{config.resize} -> {height}x{width} (qwen_vl_utils smart_resize)" if config.resize else "none",
        "dtype": config.dtype or "the backend's default (bfloat16 on CUDA, float32 on CPU)",
        "alignment": config.alignment or "not scored",
        "aesthetics": config.aesthetics or "not scored",
        "cases": config.cases,
        "exclude": list(config.exclude),
        "versions": library_versions("qwen-vl-utils"),
        "generation": _generation_manifest(config.images_dir),
    }


def _generation_manifest(images_dir: str) -> dict[str, Any] | None:
    """What made the images, when the generate stage did (its ``generation.json``)."""
    import json

    from paco_eval.generation import MANIFEST

    path = Path(images_dir) / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except ValueError:
        return None  # the generate stage refuses it; the report only shows it


def _notes(config, names: list[str], cases: list[T2ISCase]) -> list[str]:
    notes = [
        "Avg = 0.2 x Aesthetics + 0.3 x mean(PA) + 0.5 x mean(VC of the first judge): a fit to the "
        "paper's Table 3 (the paper does not define it), not a published formula.",
    ]
    if config.aesthetics:
        notes.append("Aesthetics: the LAION aesthetic predictor (rating / 10); the model behind the "
                     "paper's column is not published, so this column is not the paper's.")  # fmt: skip
    else:
        notes.append("Aesthetics: not scored, so Avg is not either.")
    if config.alignment.startswith("judge:"):
        notes.append("PA: the VQAScore formula over a consistency judge, not the paper's CLIP-FlanT5.")
    trained = set(paco_split("train")) & {c.case_id for c in cases}
    if config.cases == "heldout":
        notes.append(f"Held-out preset: {len(cases)} cases, none of the 150 PaCo-RL trains its GRPO on.")
    elif trained:
        notes.append(f"{len(trained)} of these {len(cases)} cases are PaCo-RL's GRPO training prompts "
                     "(--cases heldout leaves them out).")  # fmt: skip
    if config.mode == "reference":
        notes.append("Reference mode: the released code's behaviour, quirks included (a case's missing "
                     "dimension counts 0.0 and the table averages values > 0).")
    if len(names) > 1:
        notes.append(f"VC columns per judge: {names[0]} unnamed, then {names[1:]}.")
    return notes
