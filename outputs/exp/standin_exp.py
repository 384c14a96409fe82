"""usage: python outputs/exp/standin_exp.py OUT '{StandInConfig kwargs}'"""
import json, logging, random, sys, time
import torch
from data_pipeline.synthetic import SyntheticWorld, describe_panel
from paco_reward.testing.standin import StandInConfig, pretrain_describer

torch.set_num_threads(1)
from paco_reward.testing import qwen as _q
_q.TINY_VISION_TOWERS["wide112"] = dict(_q.TINY_VISION_TOWERS["wide"], window_size=112)
_q.TINY_VISION_TOWERS["x96"] = {"hidden_size": 96, "intermediate_size": 192, "num_heads": 4, "depth": 3, "fullatt_block_indexes": [2]}
_q.TINY_VISION_TOWERS["x128d4"] = {"hidden_size": 128, "intermediate_size": 256, "num_heads": 4, "depth": 4, "fullatt_block_indexes": [3]}
logging.basicConfig(level=logging.INFO)
out = sys.argv[1]
kw = eval(sys.argv[2]) if len(sys.argv) > 2 else {}
wkw = eval(sys.argv[3]) if len(sys.argv) > 3 else {}
world = SyntheticWorld(seed=0, **wkw)

def make_example(rng):
    spec = world.random_spec(rng)
    return world.render_panel(spec, seed=rng.getrandbits(32)), describe_panel(spec)

t = time.process_time(); w = time.perf_counter()
pretrain_describer(out, make_example, StandInConfig(**kw), data_id=repr(wkw), progress=False)
info = json.load(open(out + "/standin.json"))
print("CPU", round(time.process_time() - t), "wall", round(time.perf_counter() - w))
print(json.dumps({k: info[k] for k in ("train_seconds", "final_loss", "readout_accuracy")}))
print("losses", [round(x, 3) for x in info["loss_every_25_steps"]])
