import sys, collections, numpy as np, torch
torch.set_num_threads(1)
from paco_reward import PacoReward
from paco_reward.training.loading import load_pair_dataset_dict
rows = load_pair_dataset_dict(sys.argv[2])["test"]
rm = PacoReward.from_pretrained(sys.argv[1])
s = np.array(rm.score_pairs([(r["image_a"], r["image_b"], r["prompt"]) for r in rows], template="consistency"))
by = collections.defaultdict(list)
for r, sc in zip(rows, s):
    diffs = [c.strip().split()[0].lower() for c in r["reasons"].rstrip(".").split(";") if c.strip().split(",")[0].endswith("different") or c.strip().endswith("different")]
    if r["label"] == 1: by["(none)"].append(sc)
    for d in diffs: by[d].append(sc)
for k, v in sorted(by.items()): print(f"{k:10s} n={len(v):4d} meanP(yes)={np.mean(v):.3f}")
