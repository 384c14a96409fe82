"""Offline fixtures of the benchmarks, for tests, benchmarks and docs examples.

:func:`write_tiny_t2is_bench` writes a few-KB T2IS-Bench in the benchmark's own layout, with
the cases that exercise the released code's quirks: 2 to 8 images, an absent dimension, a
case without criteria, a case without images, a missing image and a file that is not a
sub-image.

    >>> import tempfile, pathlib
    >>> bench, images = write_tiny_t2is_bench(pathlib.Path(tempfile.mkdtemp()))
    >>> sorted(p.name for p in bench.iterdir())
    ['T2IS-Bench.json', 'prompt_alignment.json', 'prompt_consistency.json']
"""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

__all__ = ["T2IS_CASES", "T2IS_LAYOUTS", "write_t2is_bench_from_metadata", "write_t2is_prompts", "write_tiny_t2is_bench"]

# case -> (output_image_count, images present, consistency criteria {dim: {title: text}})
T2IS_CASES = {
    "0001_0001": (4, [0, 1, 2, 3], {"Identity": {"face": "The woman has the same face in every image.",
                                                 "hair": "Her red hair is the same length."},
                                    "Style": {"light": "The lighting style is the same."},
                                    "Logic": {"order": "The scenes follow one day in order."}}),
    "0002_0001": (2, [0, 1], {"Identity": {"cat": "The cat is the same cat."},
                              "Style": {"ink": "Both are ink drawings. "},  # a trailing space, as real ones have
                              "Logic": {"pose": "The poses differ as asked."}}),
    "0006_0001": (3, [0, 1], {"Identity": {"logo": "The logo keeps its shape."},  # image 2 missing,
                              "Style": {"flat": "Both are flat vector art."}}),   # Logic absent
    "0011_0001": (2, [0, 1], {}),  # no criteria entry: skipped
    "0016_0001": (2, [], {"Logic": {"grow": "The plant grows from left to right."}}),  # no images
    "0021_0001": (8, list(range(8)), {"Style": {"chalk": "Every panel is a chalk sketch."},
                                      "Logic": {"evo": "Each stage follows the previous one."}}),
}
_COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (220, 220, 40), (40, 220, 220),
           (220, 40, 220), (120, 120, 120), (250, 250, 250)]  # fmt: skip


def _alignment_texts(case_id: str, k: int) -> dict[str, list[str]]:
    return {"Entity": [f"a subject number {k}", "a background"],
            "Attribute": [f"a red colour in panel {k}"],
            "Relation": ["the subject stands in front of the background"]}  # fmt: skip


def write_tiny_t2is_bench(root: Path) -> tuple[Path, Path]:
    """Write the benchmark's three files under ``root/bench`` and the images under
    ``root/images``; return both folders."""
    bench, images = root / "bench", root / "images"
    bench.mkdir(parents=True)
    images.mkdir(parents=True)
    meta = {c: {"task_name_case_id": f"task_{c}", "output_image_count": n} for c, (n, _, _) in T2IS_CASES.items()}
    consistency = {c: {d: [v] for d, v in crit.items()} for c, (_, _, crit) in T2IS_CASES.items() if crit}
    alignment = {c: {str(k + 1): _alignment_texts(c, k) for k in range(n)} for c, (n, _, _) in T2IS_CASES.items()}
    (bench / "T2IS-Bench.json").write_text(json.dumps(meta, indent=1))
    (bench / "prompt_consistency.json").write_text(json.dumps(consistency, indent=1))
    (bench / "prompt_alignment.json").write_text(json.dumps(alignment, indent=1))
    for c, (_, present, _) in T2IS_CASES.items():
        for k in present:
            colour = _COLOURS[(k + int(c[:4])) % len(_COLOURS)]
            image = Image.new("RGB", (16, 16), colour)
            image.paste((255 - colour[0], 40, 40), (0, 0, 4 + 2 * k, 8))  # each panel differs
            image.save(images / f"{c}_{k:04d}.png")
    Image.new("RGB", (32, 16), (9, 9, 9)).save(images / "0001_0001_merge.png")  # not a sub-image
    return bench, images


# case -> layout of its grid prompt (output_image_count is rows x cols), for the generate stage
T2IS_LAYOUTS = {"0001_0001": "2x2", "0002_0001": "1x2", "0006_0001": "1x3"}


def write_t2is_prompts(path: Path, layouts: dict[str, str] = T2IS_LAYOUTS) -> Path:
    """PaCo-RL's metadata lines (``original_idx``, grid ``prompt``, ``height`` / ``width`` with
    512-px panels, ``layout``) for ``layouts``' cases; returns ``path``."""
    lines = []
    for case_id, layout in layouts.items():
        rows, cols = map(int, layout.split("x"))
        prompt = (f"{rows * cols}-PANEL images with a {layout} grid layout of a red cat. "
                  + " ".join(f"PANEL-{k + 1}: the cat in scene {k + 1}." for k in range(rows * cols)))  # fmt: skip
        lines.append(json.dumps({"idx": case_id[-4:], "original_idx": case_id, "prompt": prompt,
                                 "height": 512 * rows, "width": 512 * cols, "layout": layout}))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def write_t2is_bench_from_metadata(root: Path, metadata: str | Path, limit: int, size: int = 64) -> tuple[Path, Path]:
    """A T2IS-Bench of real cases: the first ``limit`` records of a PaCo-RL metadata file
    (``original_idx``, ``layout``, ``criteria``: the benchmark's own criteria, 6 to 12 per
    case) in the benchmark's three files, with a synthetic ``size``-px image per sub-image;
    return the folders as :func:`write_tiny_t2is_bench` does."""
    bench, images = root / "bench", root / "images"
    bench.mkdir(parents=True)
    images.mkdir(parents=True)
    records = [json.loads(line) for line in Path(metadata).read_text().splitlines() if line.strip()][:limit]
    meta, consistency, alignment = {}, {}, {}
    for r, record in enumerate(records):
        case = record["original_idx"]
        rows, cols = map(int, record["layout"].split("x"))
        meta[case] = {"task_name_case_id": case, "output_image_count": rows * cols}
        consistency[case] = {d: [v] for d, v in record["criteria"].items() if v}
        alignment[case] = {str(k + 1): _alignment_texts(case, k) for k in range(rows * cols)}
        for k in range(rows * cols):
            colour = _COLOURS[(k + r) % len(_COLOURS)]
            image = Image.new("RGB", (size, size), colour)
            image.paste((255 - colour[0], 40, 40), (0, 0, size // 4 + 3 * k, size // 2))
            image.save(images / f"{case}_{k:04d}.png")
    (bench / "T2IS-Bench.json").write_text(json.dumps(meta, indent=1))
    (bench / "prompt_consistency.json").write_text(json.dumps(consistency, indent=1))
    (bench / "prompt_alignment.json").write_text(json.dumps(alignment, indent=1))
    return bench, images
