"""One seed of the demo's evaluator route, at a smaller scale: the synthetic world's pair
dataset -> stand-in pretraining -> PaCo SFT (one process) -> the train stage's comparison
with pixel similarity and tiny CLIP-I on held-out ground-truth pairs. The same functions
the demo's data, standin and train stages call, with fewer prompts and steps.

usage: python tests/demo/evaluator_run.py OUT_DIR SEED PROMPTS STANDIN_STEPS SFT_STEPS PIXELS
(writes OUT_DIR/result.json; test_demo_evaluator.py runs two seeds side by side)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(
    out: Path, seed: int, prompts: int, standin_steps: int, sft_steps: int, pixels: int
) -> dict:
    from demo.context import make_reproducible

    make_reproducible(seed, threads=1)
    from data_pipeline.export import ExportConfig
    from data_pipeline.pipeline import SyntheticConfig, run_synthetic
    from demo.stage_standin import standin_model, world_of
    from demo.stage_train import compare, sft_recipe
    from paco_reward import PacoReward
    from paco_reward.baselines import CLIPImageScorer
    from paco_reward.testing.clip import build_tiny_clip
    from paco_reward.training import PacoSFTConfig, run_training
    from paco_reward.training.loading import load_pair_dataset_dict

    start = time.perf_counter()
    work = out / "data"
    run_synthetic(
        work,
        SyntheticConfig(n_prompts=prompts, seed=seed),
        export=ExportConfig(test_fraction=0.25, seed=seed, balance_train_labels=True),
    )
    export = work / "export"
    base = standin_model(
        seed, world_of(export), steps=standin_steps, image_pixels=pixels, progress=False
    )
    recipe = sft_recipe(
        out / "evaluator", base, export, seed, steps=sft_steps, eval_strategy="no",
        per_device_train_batch_size=16, disable_tqdm=True,
        image_min_pixels=pixels, image_max_pixels=pixels,
    )  # fmt: skip
    run_training(PacoSFTConfig(**recipe))
    truth = load_pair_dataset_dict(export / "truth")["test"]
    clip = CLIPImageScorer(build_tiny_clip(out / "tiny-clip", seed=seed))
    rows = compare(PacoReward.from_pretrained(out / "evaluator"), truth, clip)
    result = {
        "seed": seed,
        "pairs": len(truth),
        "seconds": time.perf_counter() - start,
        **{r["method"]: {"accuracy": r["accuracy"], "roc_auc": r["roc_auc"]} for r in rows},
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    out_dir, *numbers = sys.argv[1:7]
    print(json.dumps(main(Path(out_dir), *map(int, numbers))))
