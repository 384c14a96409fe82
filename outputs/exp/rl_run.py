"""Experiment-1 probe through demo.world_rl. args: GENERATOR EVALUATOR CLIP OUT SEED [key=value overrides] [rewards=consistency,clip_t]"""
import json, sys, numpy as np, torch
torch.set_num_threads(1)
from demo.world_generator import GeneratorConfig, generator_world, held_out_prompts
from demo.world_rl import run_world_grpo, paired_gain
from paco_grpo.rewards import ConsistencyReward, CLIPTextReward, CLIPImageReward
gen, ev, clip, out, seed = sys.argv[1:6]
kv = dict(a.split("=", 1) for a in sys.argv[6:])
names = kv.pop("rewards", "consistency,clip_t").split(",")
agg = kv.pop("aggregator", "log_tamed")
ntest = int(kv.pop("n_test", 48)); ntrain = int(kv.pop("n_train", 32))
overrides = {k: json.loads(v) for k, v in kv.items()}
make = {"consistency": lambda: ConsistencyReward(ev), "clip_t": lambda: CLIPTextReward(clip, global_description=True, warn_long_text=False),
        "clip_i": lambda: CLIPImageReward(clip)}
rewards = {n: make[n]() for n in names}
world = generator_world(GeneratorConfig())
train = world.make_prompts(ntrain, start=200_000); test = held_out_prompts(GeneratorConfig(), ntest)
run = run_world_grpo(gen, rewards, {n: 1.0 for n in names}, train, test, out, seed=int(seed), aggregator=agg, overrides=overrides)
print("train seconds", round(run["seconds"]))
for row in run["history"]:
    print(row["epoch"], {n: round(row[f"reward/{n}/mean"], 3) for n in names}, round(row["time/epoch"], 1))
for key in ("consistency", "alignment"):
    g = paired_gain(run["before"], run["after"], key)
    print(f"{key}: {run['before'][key]:.3f} -> {run['after'][key]:.3f}  gain {g['mean']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]")
print("unreadable", run["before"]["unreadable_panels"], "->", run["after"]["unreadable_panels"])
print("shows before", {k: round(v, 2) for k, v in run["before"]["shows_prompt"].items()})
print("shows after ", {k: round(v, 2) for k, v in run["after"]["shows_prompt"].items()})
from demo.stage_generator import sample_sheet
sample_sheet([run["before"]["images"][:12], run["after"]["images"][:12]]).save(out + "/before_after.png")
