"""Probe: pixel / tiny CLIP-I baselines on ground-truth pairs of a synthetic world variant.

usage: python outputs/exp/probe_world.py VARIANT [n_prompts]
"""

import random
import sys
import tempfile

import numpy as np

from data_pipeline import synthetic as syn
from paco_reward.baselines import CLIPImageScorer, PixelScorer
from paco_reward.testing.clip import build_tiny_clip
from paco_reward.training.metrics import roc_auc


def pairs_of(world, n_prompts, keys, min_diff=2, seed=0):
    prompts = world.make_prompts(n_prompts)
    rng = random.Random(seed)
    classes = {0: [], 1: []}
    for rec in prompts:
        panels = []
        for g in range(4):
            for k, spec in enumerate(world.panel_specs(rec, g)):
                panels.append((g, k, spec, syn.hash_seed(rec["idx"], g, k)))
        for i, a in enumerate(panels):
            for b in panels[i + 1 :]:
                if a[0] == b[0]:
                    continue
                d = sum(getattr(a[2], x) != getattr(b[2], x) for x in keys)
                if 0 < d < min_diff:
                    continue
                classes[int(d == 0)].append((a, b))
    n = min(len(classes[0]), len(classes[1]))
    rows = [(p, 0) for p in rng.sample(classes[0], n)] + [(p, 1) for p in rng.sample(classes[1], n)]
    return rows


def fitted_acc(scores, labels):
    # best threshold (optimistic: fitted on the same pairs)
    best = 0
    for t in np.unique(scores):
        best = max(best, ((scores >= t) == labels).mean())
    return best


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 36
    kw = eval(sys.argv[2]) if len(sys.argv) > 2 else {}
    keys = syn.IDENTITY + syn.STYLE
    if len(sys.argv) > 3:
        import render_v2
        render_v2.OPTS.update(eval(sys.argv[3]))
        syn.render_panel = render_v2.render
        if render_v2.OPTS["bg"] == "nuisance":
            keys = tuple(k for k in keys if k != "background")
        kw["_opts"] = render_v2.OPTS
    world = syn.SyntheticWorld(seed=0, **{k: v for k, v in kw.items() if k != "_opts"})
    rows = pairs_of(world, n, keys)
    cache = {}

    def img(p):
        key = (p[2], p[3])
        if key not in cache:
            cache[key] = world.render_panel(p[2], seed=p[3])
        return cache[key]

    pairs = [(img(a), img(b)) for (a, b), _ in rows]
    labels = np.array([y for _, y in rows])
    out = {"pairs": len(rows)}

    def l1_32(a, b):
        a = np.asarray(a.resize((32, 32)), np.float32) / 255
        b = np.asarray(b.resize((32, 32)), np.float32) / 255
        return -np.abs(a - b).mean()

    s = np.array([l1_32(a, b) for a, b in pairs])
    out["pixel32 auc/acc*"] = (round(roc_auc(s, labels), 3), round(fitted_acc(s, labels), 3))
    s = PixelScorer().score_pairs(pairs)
    out["PixelScorer64 auc/acc*"] = (round(roc_auc(s, labels), 3), round(fitted_acc(s, labels), 3))
    with tempfile.TemporaryDirectory() as d:
        for seed in (0, 1):
            clip = CLIPImageScorer(build_tiny_clip(d + f"/c{seed}", seed=seed))
            s = clip.score_pairs(pairs)
            out[f"tinyCLIP s{seed} auc/acc*"] = (
                round(roc_auc(s, labels), 3),
                round(fitted_acc(s, labels), 3),
            )
    print(kw, out)


if __name__ == "__main__":
    main()
