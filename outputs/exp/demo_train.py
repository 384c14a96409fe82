"""usage: demo_train.py OUT DATA_EXPORT BASE SEED [key=yaml ...]: the demo's train stage
(sft_recipe + train_distributed + compare on truth and annotator pairs) with recipe overrides."""
import sys, time, json, yaml, torch
from pathlib import Path
torch.set_num_threads(1)
from demo.stage_train import sft_recipe, train_distributed, compare
from paco_reward import PacoReward
from paco_reward.baselines import CLIPImageScorer
from paco_reward.testing.clip import build_tiny_clip
from paco_reward.training.loading import load_pair_dataset_dict
out, data, base, seed, *over = sys.argv[1:]
out = Path(out); seed = int(seed)
kw = dict(o.split("=", 1) for o in over)
kw = {k: yaml.safe_load(v) for k, v in kw.items()}
kw.setdefault("disable_tqdm", True)
r = sft_recipe(out, Path(base), Path(data), seed, **kw)
t = time.perf_counter()
train_distributed(r, Path(str(out) + ".yaml"))
wall = time.perf_counter() - t
rm = PacoReward.from_pretrained(out)
clip = CLIPImageScorer(build_tiny_clip(Path(str(out) + "-clip"), seed=seed))
res = {}
kinds = [("annot", load_pair_dataset_dict(data)["test"])]
if (Path(data) / "truth").is_dir():
    kinds.insert(0, ("truth", load_pair_dataset_dict(Path(data) / "truth")["test"]))
for kind, rows in kinds:
    res[kind] = {x["method"].split(" ")[0] + ("" if "PaCo" not in x["method"] else "-paco"): (round(x["accuracy"], 3), round(x["roc_auc"], 3)) for x in compare(rm, rows, clip)}
print("RESULT", out.name, f"train_wall {wall:.0f}", json.dumps(res))
