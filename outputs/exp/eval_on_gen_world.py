"""Probe: does the demo's trained evaluator judge the generator world's 32-px panels? args: MODEL [N]"""
import random, sys, numpy as np, torch
from paco_reward.training.metrics import roc_auc as _auc
roc_auc_score = lambda t, s: _auc(np.asarray(s), np.asarray(t))
from paco_reward import PacoReward
from data_pipeline.synthetic import SyntheticWorld, panel_similarity, render_panel
from data_pipeline.world_oracle import read_panel
from paco_reward.grids import split_grid
torch.set_num_threads(1)
rm = PacoReward.from_pretrained(sys.argv[1])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 150
for size, pose, light in ((32, False, False), (64, False, False), (64, True, True)):
    w = SyntheticWorld(seed=3, panel_size=size, pose=pose, lighting=light)
    recs = w.make_prompts(n)
    pairs, truth = [], []
    for i, r in enumerate(recs):
        g = w.render_grid(r, 0); ps = split_grid(g, 2, 2); specs = w.panel_specs(r, 0)
        pairs.append((ps[0], ps[1])); truth.append(panel_similarity(specs[0], specs[1]) == 1)
    for prompt in ("a cartoon character in 4 images, one more pip per image", None):
        reqs = [(a, b, prompt or recs[i]["prompt"].split("[TOP]")[0]) for i, (a, b) in enumerate(pairs)]
        s = np.asarray(rm.score_pairs(reqs))
        t = np.asarray(truth)
        print(size, pose, light, "theme" if prompt else "global", "AUC", round(roc_auc_score(t, s), 3), "acc", round(((s > .5) == t).mean(), 3), "pos", t.mean().round(2), flush=True)
