"""T2IS-Bench consistency stage: the released script against ``paco-eval t2is judge``, side
by side on the same tiny judge and fixture, with equal numbers checked.

The released ``T2IS_Eval/test_prompt_consistency.py`` (github.com/chengyou-jia/T2IS at
a40b858, from a checkout ``--reference`` names: never part of this repository) calls
``generate`` once per pair per criterion and decodes both images every time; the harness
prepares each image once per case and scores all of a case's (pair, criterion) requests in
one batched call. Both runs include loading the judge. The released code runs with run-time
patches that touch no arithmetic (the tiny judge's Yes/No ids for the hard-coded 9454/2753,
its model path linked in a temporary working folder, ``cuda`` kept on the CPU without a
GPU); the per-case numbers must agree to 1e-6 or the run fails.

    python -m benchmarks.t2is_speed --reference ~/src/T2IS             # a clone (or its .git)
    python -m benchmarks.t2is_speed --reference ~/src/T2IS --real_cases 8     # real criteria
    python -m benchmarks.t2is_speed --reference ~/src/T2IS --max_pixels 3136 --tolerance 1e-3
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paco_reward.command_line import Command, config_field, run_cli

PROG = "python -m benchmarks.t2is_speed"
COMMIT = "a40b858"
CONSISTENCY_SCRIPT = "T2IS_Eval/test_prompt_consistency.py"
ALIGNMENT_SCRIPT = "T2IS_Eval/vqa_alignment.py"


@dataclass
class T2ISSpeedArguments:
    """T2IS-Bench consistency stage: the released script vs paco-eval, same tiny judge."""

    reference: str = config_field("", help="A checkout of github.com/chengyou-jia/T2IS (work tree or git dir).")
    max_pixels: int = config_field(504 * 504, help="The tiny judge's pixel budget (504x504 keeps the "
                                   "released resize as the model's input).")  # fmt: skip
    batch_size: int = config_field(8, help="Pairs per forward of the harness's judge.")
    seed: int = config_field(3, help="Seed of the tiny judge's weights.")
    real_cases: int = config_field(0, help="Use the first N real cases of recipes/data/t2is_train_metadata.jsonl "
                                   "(their own 6 to 12 criteria, 2x2: 36 to 72 scores a case) instead of "
                                   "the quirks fixture (4 cases, 85 scores).")  # fmt: skip
    repeats: int = config_field(3, help="Runs of each side, interleaved; the best of each is compared.")
    tolerance: float = config_field(1e-6, help="Largest per-case difference allowed (a budget under "
                                    "504x504 makes each side's image processor resize again: PIL against "
                                    "torchvision, ~1e-4).")  # fmt: skip
    threads: int = config_field(1, help="torch threads of both sides (one process; a busy CPU with "
                                "more threads than free cores slows the many small released calls most).")  # fmt: skip
    output: str | None = config_field(None, help="Write the figures as JSON here.")


def released_source(checkout: str | Path, path: str) -> str:
    """The text of ``path`` at :data:`COMMIT` in a T2IS checkout (a work tree or its git
    directory), or the file itself in a plain copy of that commit's files."""
    checkout = Path(checkout).expanduser()
    git_dir = checkout / ".git" if (checkout / ".git").exists() else checkout
    run = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{COMMIT}:{path}"],
                         capture_output=True, text=True)  # fmt: skip
    if run.returncode == 0:
        return run.stdout
    return (checkout / path).read_text()


def released_module(source: str, name: str, patches: dict[str, str] | None = None) -> types.ModuleType:
    """Execute a released script as a module, after textual ``patches`` (each must apply)."""
    for old, new in (patches or {}).items():
        if old not in source:
            raise RuntimeError(f"the released {name} no longer holds {old!r}")
        source = source.replace(old, new)
    module = types.ModuleType(name)
    exec(compile(source, f"<released {name}>", "exec"), module.__dict__)
    return module


@contextlib.contextmanager
def released_environment(judge_dir: Path, work: Path):
    """The released script's expectations met without editing it: ``./Qwen/Qwen2.5-VL-7B-Instruct``
    is the judge (a link in ``work``, the working folder), and ``inputs.to("cuda")`` stays on
    the CPU when there is no GPU."""
    import os

    import torch
    from transformers import BatchFeature

    (work / "Qwen").mkdir(parents=True, exist_ok=True)
    link = work / "Qwen" / "Qwen2.5-VL-7B-Instruct"
    if not link.exists():
        link.symlink_to(Path(judge_dir).resolve())
    cwd, to = os.getcwd(), BatchFeature.to
    os.chdir(work)
    if not torch.cuda.is_available():
        BatchFeature.to = lambda self, device, *a, **k: to(self, "cpu" if device == "cuda" else device, *a, **k)
    try:
        yield
    finally:
        os.chdir(cwd)
        BatchFeature.to = to


def run_released_consistency(checkout: str | Path, bench: Path, images: Path, judge_dir: Path,
                             work: Path) -> dict[str, Any]:  # fmt: skip
    """The released ``evaluate_prompt_consistency`` on the fixture with the tiny judge; its
    results dict."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(judge_dir)
    yes, no = tokenizer.convert_tokens_to_ids("Yes"), tokenizer.convert_tokens_to_ids("No")
    module = released_module(released_source(checkout, CONSISTENCY_SCRIPT), "test_prompt_consistency",
                             {"logits[0][0][2753]": f"logits[0][0][{no}]",
                              "logits[0][0][9454]": f"logits[0][0][{yes}]"})  # fmt: skip
    with released_environment(judge_dir, work), contextlib.redirect_stdout(io.StringIO()):
        return module.evaluate_prompt_consistency(
            str(bench / "T2IS-Bench.json"), str(bench / "prompt_consistency.json"), str(images),
            ".png", str(work / "released.json"))  # fmt: skip


def build_judge(folder: Path, seed: int, max_pixels: int) -> Path:
    """The tiny float32 Qwen2.5-VL judge both sides load."""
    from paco_reward.testing import build_tiny_qwen2_5_vl

    return build_tiny_qwen2_5_vl(folder, seed=seed, max_pixels=max_pixels,
                                 text_config={"initializer_range": 0.3},
                                 vision_config={"initializer_range": 0.3})  # fmt: skip


def run(args: T2ISSpeedArguments) -> int:
    import torch

    from paco_eval.t2is.benchmark import T2ISConfig
    from paco_eval.t2is.report import case_consistency
    from paco_eval.t2is.stages import run_judge
    from paco_eval.testing import write_t2is_bench_from_metadata, write_tiny_t2is_bench
    from paco_reward.errors import ConfigError

    torch.set_num_threads(args.threads)
    if not args.reference:
        raise ConfigError("--reference: give a checkout of github.com/chengyou-jia/T2IS (git clone it).")
    root = Path(tempfile.mkdtemp(prefix="t2is-speed-"))
    if args.real_cases:
        metadata = Path(__file__).resolve().parents[1] / "recipes" / "data" / "t2is_train_metadata.jsonl"
        bench, images = write_t2is_bench_from_metadata(root / "fixture", metadata, args.real_cases)
    else:
        bench, images = write_tiny_t2is_bench(root / "fixture")
    judge = build_judge(root / "judge", args.seed, args.max_pixels)

    released_times, ours_times = [], []
    for k in range(args.repeats):  # interleaved, so a change of load hits both sides
        start = time.perf_counter()
        released = run_released_consistency(args.reference, bench, images, judge, root / f"released{k}")
        released_times.append(time.perf_counter() - start)
        config = T2ISConfig(data=str(bench), images_dir=str(images), output_dir=str(root / f"ours{k}"),
                            mode="reference", consistency_judges=[f"qwen={judge}"], alignment="",
                            aesthetics="", batch_size=args.batch_size)  # fmt: skip
        start = time.perf_counter()
        run_judge(config)
        ours_times.append(time.perf_counter() - start)
    released_s, ours_s = min(released_times), min(ours_times)

    rows = [json.loads(x) for x in (root / "ours0" / "consistency-qwen.jsonl").read_text().splitlines()[1:]]
    ours = {r["key"]: case_consistency(r, "reference") for r in rows}
    worst = max(abs(ours[c][d] - v) for c, r in released["case_results"].items()
                for d, v in r["dimension_averages"].items())  # fmt: skip
    calls = sum(len(p) for r in rows for dim in r["dimensions"].values() for p in dim["pair_scores"])
    figures = {"released_s": released_s, "paco_eval_s": ours_s, "speedup": released_s / ours_s,
               "judge_calls": calls, "max_abs_difference": worst, "max_pixels": args.max_pixels,
               "batch_size": args.batch_size, "threads": args.threads, "released_runs_s": released_times, "paco_eval_runs_s": ours_times}  # fmt: skip
    print(f"consistency stage on {len(rows)} cases ({calls} pair x criterion scores), tiny judge at "
          f"max_pixels={args.max_pixels}, {args.threads} thread(s), best of {args.repeats}: released {released_s:.2f} s, paco-eval {ours_s:.2f} s, "
          f"{released_s / ours_s:.1f}x; largest difference {worst:.2e}")  # fmt: skip
    if args.output:
        Path(args.output).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if worst <= args.tolerance else 1


def main(argv: list[str] | None = None) -> int:
    command = Command("t2is_speed", T2ISSpeedArguments, run, __doc__.splitlines()[0])
    return run_cli(PROG, __doc__.splitlines()[0], [command], argv)


if __name__ == "__main__":
    raise SystemExit(main())
