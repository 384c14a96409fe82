"""One editing RL run of experiment 5 outside the stage, with recipe overrides (session 9 probes).

PYTHONPATH=. python outputs/exp/edit_rl.py GENERATOR EDITOR EVALUATOR CLIP OUT SEED paco|clipt [key=json ...]
e.g. ... /tmp/exp/erl_a 0 paco learning_rate=0.003 num_train_epochs=40
GENERATOR, EDITOR, CLIP: the cached folders under ~/.cache/paco-rl (generator/, editor/,
world_clip/) after `python -m demo --output_dir D --seed 0 --stages generator world_evaluator
world_edit`; EVALUATOR: D/models/world-evaluator.
"""
import sys, json, torch
torch.set_num_threads(1)
from demo.world_editor import *
from demo.world_rl import run_world_grpo, paired_gain
import demo.stage_world_edit as st
gen, ed, ev, clip, out, seed, arm = sys.argv[1:8]
ov = {}
for a in sys.argv[8:]:
    k, v = a.split("="); ov[k] = json.loads(v)
world = editor_world(gen)
train = make_edits(world, st.TRAIN_EDITS, start=st.TRAIN_START); test = make_edits(world, st.HELD_OUT, start=HELD_OUT_START)
a = st.PACO_EDIT if arm == "paco" else st.CLIP_T_ONLY
rw = st.rewards_of(a, ev, clip)
run = run_world_grpo(ed, rw, dict.fromkeys(rw, 1.0), train, test, out, seed=int(seed), aggregator="log_tamed" if a.paco else "weighted_sum", overrides=ov, task=EditTask(world))
h = run["history"]
print("rewards first/last", {k: (round(h[0][k], 3), round(sum(r[k] for r in h[-5:]) / 5, 3)) for k in h[0] if k.startswith("reward/") and k.endswith("/mean")})
for k in ("changed", "kept", "success"):
    g = paired_gain(run["before"], run["after"], k)
    print(k, "%.3f -> %.3f  %+.3f [%+.3f, %+.3f]" % (run["before"][k], run["after"][k], g["mean"], g["low"], g["high"]))
print("seconds", run["seconds"])
