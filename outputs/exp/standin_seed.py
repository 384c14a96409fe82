"""usage: standin_seed.py SEED [STEPS]: the demo's stand-in (demo.stage_standin.standin_model) for a seed, cached."""
import sys, torch
torch.set_num_threads(1)
from data_pipeline.synthetic import SyntheticWorld
from demo.stage_standin import STEPS, standin_model
from paco_reward.testing.standin import read_standin_info
seed = int(sys.argv[1])
steps = int(sys.argv[2]) if len(sys.argv) > 2 else STEPS
path = standin_model(seed, SyntheticWorld(seed=seed), steps=steps, progress=False)
info = read_standin_info(path)
print("STANDIN", seed, steps, path, round(info["train_seconds"]), info["readout_accuracy"])
