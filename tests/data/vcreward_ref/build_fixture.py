"""Builds this fixture (run from the repository root: python tests/data/vcreward_ref/build_fixture.py).

results_21.jsonl: a judge's results in the released ``eval_vc`` schema over all 21 tasks (two
or three pairs each), winners "Image A", "Image B", "image a", "A", "Tie" and missing (null);
results_3.jsonl: the same for three tasks (the released calc_vc_reward crashes on it);
pairs/: metadata.jsonl + PNGs in the pre-release layout, 3 tasks x 2 pairs, for the judges.
"""

import json
from pathlib import Path

from PIL import Image

HERE = Path(__file__).resolve().parent
TASKS = [
    "subject_addition",
    "subject_removal",
    "subject_replace",
    "size_adjustment",
    "color_alteration",
    "material_modification",
    "portrait_beautification",
    "motion_change",
    "relation_change",
    "text_editing",
    "in_image_text_translation",
    "chart_editing",
    "background_change",
    "style_transfer",
    "tone_transfer",
    "enhancement",
    "camera_motion",
    "line2image",
    "character_reference",
    "object_reference",
    "style_reference",
]
WINNERS = ["Image A", "Image B", "image a", "A", "Tie", None, "Image B", "image b", "equal"]


def main() -> None:
    lines, n = [], 0
    for t, task in enumerate(TASKS):
        for j in range(2 + t % 2):
            gt = "Image A" if (t + j) % 2 == 0 else "Image B"
            # every task keeps a row the API pipeline's filter does not drop
            winner = gt if j == 0 else WINNERS[n % len(WINNERS)]
            lines.append(
                {"key": f"{task}_pair_{j:06d}", "results": {"gt_winner": gt, "winner": winner}}
            )
            n += 1
    (HERE / "results_21.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    three = [x for x in lines if x["key"].split("_pair_")[0] in TASKS[:3]]
    (HERE / "results_3.jsonl").write_text("".join(json.dumps(x) + "\n" for x in three))

    pairs = HERE / "pairs"
    (pairs / "images").mkdir(parents=True, exist_ok=True)
    meta = []
    for t, task in enumerate(["color_alteration", "background_change", "subject_removal"]):
        for j in range(2):
            key = f"{task}_pair_{j:06d}"
            names = {}
            for role, colour in (
                ("src", (200, 30 * t, 40)),
                ("a", (190, 30 * t, 50 + j)),
                ("b", (20, 220 - 30 * t, 90 * j)),
            ):
                name = f"images/{key}_{role}.png"
                Image.new("RGB", (24, 24), colour).save(pairs / name)
                names[role] = name
            meta.append(
                {
                    "key": key,
                    "task": task,
                    "instruction": f"change the {task} ({j})",
                    "source_image": names["src"],
                    "edited_images": [names["a"], names["b"]],
                    "winner": "Image A" if j == 0 else "Image B",
                }
            )
    (pairs / "metadata.jsonl").write_text("".join(json.dumps(x) + "\n" for x in meta))


if __name__ == "__main__":
    main()
