"""Pretrain (and cache) the demo's world generator for SEED, as the generator stage does. args: SEED"""
import sys, torch
torch.set_num_threads(1)
from demo.context import cache_dir
from demo.world_generator import GeneratorConfig, pretrain_world_generator
c = GeneratorConfig(seed=int(sys.argv[1]))
print(pretrain_world_generator(cache_dir() / "generator" / c.key(), c))
