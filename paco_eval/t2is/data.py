"""T2IS-Bench's files, its cases, the selection of cases, and the images of a case.

The benchmark (hub dataset ``ChengyouJia/T2IS-Bench``) is three JSON files:
``T2IS-Bench.json`` (``{case_id: {task_name_case_id, output_image_count, ...}}``),
``prompt_consistency.json`` (``{case_id: {"Identity"|"Style"|"Logic": [{title: criterion}]}}``,
a dimension may be absent) and ``prompt_alignment.json`` (``{case_id: {sub_id: {"Entity"|
"Attribute"|"Relation": [texts]}}}``). A generator's images are one file per sub-image,
``<case_id>_<k:04d>.png`` with k from 0, in one folder.

Finding a case's images has two modes, as the harness does everywhere
(:mod:`paco_eval.harness`): ``reference`` keeps the released script's rule (every file that
starts with the case id and ends with the extension, indexed by the number after its last
``_``; a file whose suffix is not a number is skipped, whatever was found is used);
``default`` takes only ``<case_id>_<k:04d>.(png|jpg|jpeg)`` and reports what is missing.

    >>> bench = T2ISBench.from_dicts({"0001_0001": {"task_name_case_id": "multi_scenario_0001",
    ...     "output_image_count": 2}}, {"0001_0001": {"Style": [{"a": "Same style."}]}}, {})
    >>> bench.cases["0001_0001"].criteria, bench.cases["0001_0001"].category
    ({'Style': ['Same style.']}, 'Character Generation')
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from paco_eval.errors import ImageCountError, MissingImageError, UnknownItemError
from paco_reward.errors import ConfigError, InputError, PathNotFoundError

__all__ = [
    "ALIGNMENT_DIMENSIONS",
    "BENCHMARK_FILES",
    "CONSISTENCY_DIMENSIONS",
    "HUB_ID",
    "CaseImages",
    "T2ISBench",
    "T2ISCase",
    "find_case_images",
    "paco_split",
]

HUB_ID = "ChengyouJia/T2IS-Bench"
BENCHMARK_FILES = ("T2IS-Bench.json", "prompt_consistency.json", "prompt_alignment.json")
# The released consistency script visits the dimensions in this order (its JSON keeps it).
CONSISTENCY_DIMENSIONS = ("Style", "Identity", "Logic")
ALIGNMENT_DIMENSIONS = ("Entity", "Attribute", "Relation")
DEFAULT_EXTENSIONS = (".png", ".jpg", ".jpeg")


@cache
def _cases_file() -> dict[str, Any]:
    return json.loads((Path(__file__).with_name("cases.json")).read_text())


def paco_split(name: str) -> list[str]:
    """The T2IS-Bench case ids PaCo-RL trains (``"train"``, 150) or tests (``"test"``, 135)
    its GRPO on (its ``dataset/T2IS`` metadata at 08caac6; ``original_idx`` is the case id).

    Example:
        >>> len(paco_split("train")), len(paco_split("test"))
        (150, 135)
    """
    if name not in ("train", "test"):
        raise ConfigError(f"PaCo-RL's T2IS splits are 'train' and 'test'; got {name!r}.")
    return list(_cases_file()[f"paco_{name}"])


@dataclass(frozen=True)
class T2ISCase:
    """One case: its images' count, its consistency criteria and each sub-image's
    alignment texts.

    Args:
        case_id: ``TTTT_CCCC`` (task, case).
        task_name_case_id: the benchmark's own label of the case.
        output_image_count: how many sub-images the case asks for.
        criteria: dimension -> criterion texts, in the file's order (an absent dimension is
            not a key; the released code reads only the values of ``[{title: text}][0]``).
        alignment: one ``{dimension: texts}`` per sub-image, in the file's order (the
            released code names the k-th entry's image ``_{k:04d}``, whatever its key).
        category / task_name: from the case id's task prefix (None for an unknown prefix).
    """

    case_id: str
    task_name_case_id: str
    output_image_count: int
    criteria: dict[str, list[str]] = field(default_factory=dict)
    alignment: list[dict[str, list[str]]] = field(default_factory=list)
    category: str | None = None
    task_name: str | None = None


@dataclass
class T2ISBench:
    """The benchmark's cases, in the order of ``T2IS-Bench.json``.

    Example:
        >>> bench = T2ISBench.load("ChengyouJia/T2IS-Bench")   # doctest: +SKIP
        >>> len(bench.cases), len(bench.select("heldout"))     # doctest: +SKIP
        (596, 446)
    """

    cases: dict[str, T2ISCase]
    source: str = ""

    @classmethod
    def load(cls, source: str | os.PathLike, *, revision: str | None = None) -> T2ISBench:
        """Read the benchmark from a folder holding its three files, or download them by the
        hub dataset id (``ChengyouJia/T2IS-Bench``) through the ordinary hub cache.

        Raises:
            PathNotFoundError: a folder without one of the files (named), or a path that
                names no folder and is not a hub id.
        """
        folder = Path(source).expanduser()
        if not folder.is_dir():
            from paco_reward.hub import check_source

            check_source(str(source), what="T2IS-Bench data")
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(str(source), repo_type="dataset", revision=revision,
                                            allow_patterns=list(BENCHMARK_FILES)))  # fmt: skip
        texts = {}
        for name in BENCHMARK_FILES:
            path = folder / name
            if not path.is_file():
                raise PathNotFoundError(
                    f"{path} does not exist: a T2IS-Bench folder holds {list(BENCHMARK_FILES)} "
                    f"(hub dataset {HUB_ID}); pass that folder or the hub id as --data."
                )
            try:
                texts[name] = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as err:
                raise InputError(f"{path} is not valid JSON ({err}).") from None
        return cls.from_dicts(*(texts[n] for n in BENCHMARK_FILES), source=str(folder))

    @classmethod
    def from_dicts(
        cls,
        bench: Mapping[str, Any],
        consistency: Mapping[str, Any],
        alignment: Mapping[str, Any],
        source: str = "",
    ) -> T2ISBench:
        """Build from the three files' parsed contents."""
        tasks = _cases_file()["tasks"]
        cases = {}
        for case_id, meta in bench.items():
            if not isinstance(meta, Mapping) or "output_image_count" not in meta:
                raise InputError(f"T2IS-Bench.json case {case_id!r} has no output_image_count.")
            task = tasks.get(str(case_id).split("_")[0], {})
            cases[case_id] = T2ISCase(
                case_id=case_id,
                task_name_case_id=str(meta.get("task_name_case_id", case_id)),
                output_image_count=int(meta["output_image_count"]),
                criteria=_criteria(case_id, consistency.get(case_id) or {}),
                alignment=[_texts(case_id, v) for v in (alignment.get(case_id) or {}).values()],
                category=task.get("category"),
                task_name=task.get("task_name"),
            )
        return cls(cases, source)

    def categories(self) -> list[str]:
        return sorted({c.category for c in self.cases.values() if c.category})

    def select(self, spec: str = "all", exclude: Iterable[str] = ()) -> list[T2ISCase]:
        """The cases of a selection, in the benchmark's order.

        Args:
            spec: ``all``; ``heldout`` (all but the 150 PaCo-RL trains on, so a held-out
                figure can be reported beside the full one); ``paco_test`` (its 135 test
                cases); a category (``Story Generation``) or task name (``Comic Story``); or
                comma-separated case ids.
            exclude: case ids to leave out.

        Raises:
            UnknownItemError: a case id (in ``spec`` or ``exclude``) the benchmark does not
                have, or a name that is no category, task or preset.
        """
        exclude = set(exclude)
        unknown = sorted(exclude - set(self.cases))
        if unknown:
            raise UnknownItemError(f"--exclude names case ids T2IS-Bench does not have: {unknown}.")
        keep: Sequence[str]
        if spec == "all":
            keep = list(self.cases)
        elif spec == "heldout":
            train = set(paco_split("train"))
            keep = [c for c in self.cases if c not in train]
        elif spec == "paco_test":
            keep = [c for c in paco_split("test") if c in self.cases]
        elif any(spec in (c.category, c.task_name) for c in self.cases.values()):
            keep = [k for k, c in self.cases.items() if spec in (c.category, c.task_name)]
        else:
            ids = [s.strip() for s in spec.split(",") if s.strip()]
            missing = [i for i in ids if i not in self.cases]
            if missing:
                raise UnknownItemError(
                    f"--cases {spec!r}: {missing} is no case id, category or preset; use all, "
                    f"heldout, paco_test, a category ({self.categories()}), a task name, or "
                    "comma-separated case ids such as 0001_0001."
                )
            keep = ids
        return [self.cases[k] for k in keep if k not in exclude]


def _criteria(case_id: str, entry: Mapping[str, Any]) -> dict[str, list[str]]:
    out = {}
    for dim, value in entry.items():
        # the benchmark wraps each dimension's {title: text} in a one-element list; PaCo-RL's
        # copy does not
        if isinstance(value, list):
            value = value[0] if value else {}
        if not isinstance(value, Mapping):
            raise InputError(f"prompt_consistency.json case {case_id!r} {dim}: expected {{title: criterion}}.")
        out[dim] = [str(v) for v in value.values()]
    return out


def _texts(case_id: str, entry: Any) -> dict[str, list[str]]:
    if not isinstance(entry, Mapping):
        raise InputError(f"prompt_alignment.json case {case_id!r}: expected {{dimension: [texts]}}.")
    return {dim: [str(t) for t in entry.get(dim) or []] for dim in ALIGNMENT_DIMENSIONS if dim in entry}


@dataclass(frozen=True)
class CaseImages:
    """The images found for a case: ``paths`` in index order, their ``indices``, and what the
    case asks for that is not there (``missing``, default mode only)."""

    case_id: str
    paths: list[Path]
    indices: list[int]
    missing: list[int] = field(default_factory=list)

    def path_of(self, index: int) -> Path | None:
        return dict(zip(self.indices, self.paths)).get(index)


def list_images(images_dir: str | os.PathLike) -> list[str]:
    """The file names of the image folder (listed once per run)."""
    folder = Path(images_dir)
    if not folder.is_dir():
        raise PathNotFoundError(
            f"--images_dir {str(images_dir)!r} is not a folder; run the generate stage first or "
            "point it at a folder of <case_id>_<k:04d>.png files."
        )
    return sorted(os.listdir(folder))


def find_case_images(
    case: T2ISCase,
    images_dir: str | os.PathLike,
    names: Sequence[str],
    *,
    mode: str = "default",
    extension: str = ".png",
    strict: bool = False,
) -> CaseImages:
    """The images of ``case`` among the folder's file ``names``.

    ``reference`` mode: files that start with the case id and end with ``extension`` (taken
    as given, as the released script's ``image_pattern``: ``"png"`` without its dot matches no
    index and finds nothing), indexed by ``int`` of the text after the last ``_``.
    ``default`` mode: ``<case_id>_<k:04d>`` with a png/jpg/jpeg extension, k below the case's
    ``output_image_count``.

    Raises:
        ImageCountError: (default) an index at or above ``output_image_count`` (not a
            sub-image of this case), or images numbered from 1 (``_0000`` missing while the
            last index is ``output_image_count``).
        MissingImageError: (default, ``strict``) a sub-image that is not there.
    """
    folder = Path(images_dir)
    found: list[tuple[int, Path]] = []
    if mode == "reference":
        for name in names:
            if name.startswith(case.case_id) and name.endswith(extension):
                try:
                    found.append((int(name.split("_")[-1].replace(extension, "")), folder / name))
                except ValueError:
                    continue
        found.sort()
        return CaseImages(case.case_id, [p for _, p in found], [k for k, _ in found])
    pattern = re.compile(rf"^{re.escape(case.case_id)}_(\d{{4}})(\.png|\.jpe?g)$", re.IGNORECASE)
    for name in names:
        match = pattern.match(name)
        if match:
            found.append((int(match.group(1)), folder / name))
    found.sort()
    indices = [k for k, _ in found]
    if len(set(indices)) != len(indices):
        raise ImageCountError(f"case {case.case_id}: two files share an index in {folder} "
                              f"({[p.name for _, p in found]}); keep one per sub-image.")  # fmt: skip
    count = case.output_image_count
    if indices and 0 not in indices and max(indices) == count:
        raise ImageCountError(
            f"case {case.case_id}: its images are numbered from 1 ({found[0][1].name} ...); "
            f"T2IS-Bench numbers sub-images from 0 ({case.case_id}_0000.png .. "
            f"{case.case_id}_{count - 1:04d}.png). Rename them."
        )
    extra = [k for k in indices if k >= count]
    if extra:
        raise ImageCountError(
            f"case {case.case_id} has {count} sub-images but {folder} holds indices {extra} "
            f"({[p.name for k, p in found if k >= count]}); remove them or check the layout the "
            "images were cut with."
        )
    missing = [k for k in range(count) if k not in indices]
    if strict and missing:
        names_missing = [f"{case.case_id}_{k:04d}.png" for k in missing]
        raise MissingImageError(f"case {case.case_id}: {names_missing} not in {folder} (--strict).")
    return CaseImages(case.case_id, [p for _, p in found], indices, missing)
