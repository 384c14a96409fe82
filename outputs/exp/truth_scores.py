"""Score the truth test pairs with a trained evaluator: acc@0.5, AUC, best-threshold acc (optimistic), P(yes) by differing attribute."""
import sys, collections, numpy as np, torch
torch.set_num_threads(1)
from paco_reward import PacoReward
from paco_reward.training.loading import load_pair_dataset_dict
from paco_reward.training.metrics import decision_metrics
rows = load_pair_dataset_dict("outputs/exp/data144_s0/export/truth")["test"]
rm = PacoReward.from_pretrained(sys.argv[1])
s = np.array(rm.score_pairs([(r["image_a"], r["image_b"], r["prompt"]) for r in rows], template="consistency"))
y = np.array(rows["label"])
m = decision_metrics(s, y)
best = max(((s >= t) == y).mean() for t in np.unique(s))
print("acc@.5 %.3f auc %.3f best-threshold acc %.3f (optimistic)" % (m["score_accuracy"], m["roc_auc"], best))
by = collections.defaultdict(list)
for r, sc in zip(rows, s):
    diffs = [c.strip().split()[0].lower() for c in r["reasons"].rstrip(".").split(";") if c.strip().split(",")[0].endswith("different") or c.strip().endswith("different")]
    if r["label"] == 1: by["(none)"].append(sc)
    for d in diffs: by[d].append(sc)
print("  ".join(f"{k}:{np.mean(v):.3f}" for k, v in sorted(by.items())))
