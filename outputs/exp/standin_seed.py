"""usage: standin_seed.py SEED: the demo's stand-in (demo.stage_standin.standin_model) for a seed, cached."""
import sys, torch
torch.set_num_threads(1)
from data_pipeline.synthetic import SyntheticWorld
from demo.stage_standin import standin_model
from paco_reward.testing.standin import read_standin_info
seed = int(sys.argv[1])
path = standin_model(seed, SyntheticWorld(seed=seed), progress=False)
info = read_standin_info(path)
print("STANDIN", seed, path, round(info["train_seconds"]), info["readout_accuracy"])
