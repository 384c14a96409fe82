"""Diagnostic: on generated grids, how do rewards correlate with the oracle's consistency? args: GENERATOR EVALUATOR CLIP N"""
import sys, numpy as np, torch
torch.set_num_threads(1)
from diffusers import FluxPipeline
from demo.world_generator import GeneratorConfig, generator_world, sample_grids, to_tensor
from demo.world_judge import judge_grids
from paco_grpo.rewards import ConsistencyReward, CLIPImageReward, CLIPTextReward
gen, ev, clip, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
pipe = FluxPipeline.from_pretrained(gen)
recs = generator_world(GeneratorConfig()).make_prompts(n, start=300_000)
ims = []
for i in range(0, n, 16):
    ims += sample_grids(pipe, recs[i:i+16], seed=i)
j = judge_grids(ims, recs)
oc = np.array([g["consistency"] for g in j["per_grid"]]); oa = np.array([g["alignment"] for g in j["per_grid"]])
meta = [{"layout": "2x2", "theme": r["theme"]} for r in recs]
prompts = [r["prompt"] for r in recs]
t = [torch.from_numpy(np.asarray(im)).permute(2, 0, 1).float() / 255 for im in ims]
for name, rw in (("paco theme", ConsistencyReward(ev)), ("paco global", None), ("clip_i", CLIPImageReward(clip)), ("clip_t", CLIPTextReward(clip, global_description=True, warn_long_text=False))):
    if rw is None:
        rw = ConsistencyReward(ev); m = [{"layout": "2x2"}] * n
    else:
        m = meta
    s = np.asarray(rw(t, prompts, m))
    print(f"{name:12s} mean {s.mean():.3f}  corr with oracle consistency {np.corrcoef(s, oc)[0,1]:+.3f}  with alignment {np.corrcoef(s, oa)[0,1]:+.3f}", flush=True)
print("oracle consistency mean", oc.mean().round(3), "std", oc.std().round(3))
