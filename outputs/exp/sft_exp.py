"""usage: python outputs/exp/sft_exp.py DATA BASE OUT '{PacoSFTConfig overrides}'"""
import json, sys, time
import numpy as np
import torch
torch.set_num_threads(1)
from paco_reward import PacoReward
from paco_reward.training import PacoSFTConfig
from paco_reward.training.cli import run_training
from paco_reward.training.metrics import decision_metrics
from paco_reward.training.loading import load_pair_dataset_dict
from pathlib import Path

data, base, out = sys.argv[1:4]
kw = eval(sys.argv[4]) if len(sys.argv) > 4 else {}
common = dict(
    output_dir=out, model_name_or_path=base, tiny_model=True, use_lora=False,
    freeze_vision_tower=False, freeze_merger=False, learning_rate=1e-3,
    lr_scheduler_type="constant", per_device_train_batch_size=16, per_device_eval_batch_size=64,
    first_token_weight=0.5, logging_steps=50, eval_strategy="steps", eval_steps=250,
    save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True, seed=0,
    dataset_path=data, image_min_pixels=56 * 56, image_max_pixels=56 * 56,
    reasoning_warmup_steps=500, max_steps=1500, max_eval_samples=512,
)
common.update(kw)
cfg = PacoSFTConfig(**common)
t = time.process_time(); w = time.perf_counter()
metrics = run_training(cfg)
train_cpu, train_wall = time.process_time() - t, time.perf_counter() - w
rm = PacoReward.from_pretrained(out)
res = {"train_cpu": round(train_cpu), "train_wall": round(train_wall), "kw": kw}
truth = load_pair_dataset_dict(Path(data) / "truth")["test"]
import os
for name, rows in [("truth", truth), ("annot", load_pair_dataset_dict(os.environ.get("ANNOT_DATA", data))["test"])]:
    scores = np.full(len(rows), np.nan)
    for template in sorted(set(rows["template"])):
        idx = [i for i, tt in enumerate(rows["template"]) if tt == template]
        ch = rows.select(idx)
        scores[idx] = rm.score_pairs([(r["image_a"], r["image_b"], r["prompt"] or None) for r in ch], template=template)
    m = decision_metrics(scores, np.array(rows["label"]))
    res[name] = {k: round(float(m[k]), 3) for k in ("score_accuracy", "roc_auc", "p_yes_on_yes", "p_yes_on_no")}
res["evals"] = [(r["step"], round(r["eval_decision_accuracy"], 3), round(r["eval_roc_auc"], 3)) for r in map(json.loads, open(out + "/metrics.jsonl")) if "eval_decision_accuracy" in r]
print("RESULT", json.dumps(res))
