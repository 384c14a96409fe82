"""Probe a generator configuration: pretrain it (1 thread) and have the oracle judge it.

usage: PYTHONPATH=. python outputs/exp/gen_probe.py OUT [field=value ...]   (GeneratorConfig fields)
"""

import json
import sys
import time
from pathlib import Path

import torch
from diffusers import FluxPipeline
from PIL import Image

from demo.world_generator import (
    GeneratorConfig,
    held_out_prompts,
    pretrain_world_generator,
    sample_grids,
)
from demo.world_judge import judge_grids

torch.set_num_threads(1)
out = Path(sys.argv[1])
fields = {k: json.loads(v) for k, v in (a.split("=", 1) for a in sys.argv[2:])}
config = GeneratorConfig(**fields)
start = time.perf_counter()
path = pretrain_world_generator(out / config.key(), config, progress=False)
print(f"trained in {time.perf_counter() - start:.0f}s: {fields}")
pipe = FluxPipeline.from_pretrained(path)
records = held_out_prompts(config, 48)
full = sample_grids(pipe, records, seed=0)
half = [
    g.resize(full[0].size, Image.BILINEAR)
    for g in sample_grids(pipe, records, seed=0, size=records[0]["height"] // 2)
]
for name, grids in (("full", full), ("half", half)):
    j = judge_grids(grids, records)
    shows = {k: round(v, 3) for k, v in j["shows_prompt"].items()}
    print(
        name,
        "consistency",
        round(j["consistency"], 3),
        "alignment",
        round(j["alignment"], 3),
        shows,
    )
