"""usage: diag_truth.py MODEL DATA_EXPORT: mean P(yes) on truth test pairs, by differing attribute."""
import sys, collections, numpy as np, torch
torch.set_num_threads(1)
from paco_reward import PacoReward
from paco_reward.training.loading import load_pair_dataset_dict
rows = load_pair_dataset_dict(sys.argv[2] + "/truth")["test"]
rm = PacoReward.from_pretrained(sys.argv[1])
s = np.array(rm.score_pairs([(r["image_a"], r["image_b"], r["prompt"] or None) for r in rows], template=rows[0]["template"]))
by = collections.defaultdict(list)
for r, sc in zip(rows, s):
    diffs = [c.strip().split()[0].lower() for c in r["reasons"].rstrip(".").split(";") if " different" in c]
    if r["label"] == 1: by["(none)"].append(sc)
    for d in diffs: by[d].append(sc)
print(sys.argv[1], set(rows["template"]), "  ".join(f"{k}:{np.mean(v):.3f}(n{len(v)})" for k, v in sorted(by.items())))
