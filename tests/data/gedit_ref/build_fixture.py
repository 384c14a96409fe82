"""Builds this fixture (run from the repository root: python tests/data/gedit_ref/build_fixture.py).

rows.jsonl: 11 groups x 2 languages x 2 rows in the hub's columns; src/<key>.png the sources;
results/tiny/fullset/<task>/<lang>/<key>.png (+ _SRCIMG.png) an editor's results in the official
layout, one subject-remove edit left out on purpose; canned.json the judge's answers per
"<lang>/<key>|SC" and "<lang>/<key>|PQ", covering every branch of the released parser.
"""

import json
from pathlib import Path

from PIL import Image

HERE = Path(__file__).resolve().parent
GROUPS = [
    "background_change",
    "color_alter",
    "material_alter",
    "motion_change",
    "ps_human",
    "style_change",
    "subject-add",
    "subject-remove",
    "subject-replace",
    "text_change",
    "tone_transfer",
]

# (SC answer, PQ answer) per row, in order; the branches of mllm_output_to_dict and the quirks.
ANSWERS = [
    ('{"score": [8, 7], "reasoning": "good"}', '{"score": [9, 8], "reasoning": "fine"}'),
    (
        '||V^=^V||{"score": [5, 9], "reasoning": "ok"}||V^=^V||',
        '{"score" : [7, 6], "reasoning" : "x"}',
    ),
    ("[6, 0]", '{"score": [10, 9], "reasoning": "clean"}'),  # bare list
    ('{"score": [-1, 5], "reasoning": "neg"}', '{"score": [4, 6], "reasoning": "k"}'),
    (
        'Sure.\n```json\n{\n"score" : [3, 8],\n"reasoning" : "fenced"\n}\n```',
        '{"score": [8, 8], "reasoning": "b"}',
    ),
    ("{score: 7, reasoning: unquoted}", '{"score": [6, 7], "reasoning": "c"}'),  # fix_json path
    ('{"score": [7.5, 8], "reasoning": "float"}', '{"score": [9, 9], "reasoning": "d"}'),
    ("[11, 3]", '{"score": [5, 5], "reasoning": "e"}'),  # out of range
    ("I cannot judge this edit.", '{"score": [8, 6], "reasoning": "f"}'),  # no JSON: SC guessed 10
    ("No JSON from me.", "Nothing here either."),  # both guessed: 10, 1
    (
        '{"score": [9, 2], "reasoning": "g"}',
        '{"score": [6], "reasoning": "single"}',
    ),  # one PQ score
    ("[6, 4]", "no json"),  # SC re-asked on try 2 and guessed: 10 (not 4)
    ("{score: [5, 6], reasoning: broken}", '{"score": [7, 7], "reasoning": "h"}'),  # loops forever
    ('{"score": [10, 10], "reasoning": "l"}', '{"score": [3, 4], "reasoning": "m"}'),
    ('{"score": [2, 9], "reasoning": "j"}', ""),  # empty answer
    ('{"score": [4, 6], "reasoning": "a"}', "7"),  # bare number (PQ)
    ('{"score": ["7", "8"], "reasoning": "strings"}', '{"score": [8, 9], "reasoning": "i"}'),
]
# Answers that leave a row unscored under the released code (negative product, endless loop,
# string scores): such rows are kept out of the intersection, so every group has one there.
MISSING = {3, 12, 16}


def main() -> None:
    rows, canned = [], {}
    (HERE / "src").mkdir(exist_ok=True)
    n = 0
    for lang in ("en", "cn"):
        for gi, group in enumerate(GROUPS):
            # the intersection row of this group: its first row that scores under the released code
            ok = [
                (n + jj) % len(ANSWERS) not in MISSING
                and not (group == "subject-remove" and lang == "en" and jj == 0)
                for jj in (0, 1)
            ]
            inter_j = ok.index(True)
            for j in range(2):
                key = f"k{gi:02d}{j}{lang}".ljust(32, "0")
                sc, pq = ANSWERS[n % len(ANSWERS)]
                src = Image.new("RGB", (16, 16), (n * 9 % 256, 40, 200 - n))
                edit = Image.new("RGB", (12, 20), (20, n * 7 % 256, 255 - n * 3))
                src.save(HERE / "src" / f"{key}.png")
                out = HERE / "results" / "tiny" / "fullset" / group / lang
                out.mkdir(parents=True, exist_ok=True)
                src.save(out / f"{key}_SRCIMG.png")
                if not (group == "subject-remove" and lang == "en" and j == 0):  # a missing edit
                    edit.save(out / f"{key}.png")
                rows.append(
                    {
                        "task_type": group,
                        "key": key,
                        "instruction": f"Edit {n}: change the {group} ({lang})",
                        "instruction_language": lang,
                        "input_image": f"src/{key}.png",
                        "Intersection_exist": j == inter_j or n % 7 == 0,
                    }
                )
                canned[f"{lang}/{key}|SC"], canned[f"{lang}/{key}|PQ"] = sc, pq
                n += 1
    (HERE / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (HERE / "canned.json").write_text(json.dumps(canned, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
