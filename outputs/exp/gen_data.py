"""Prototype: the PaCo pair dataset built from the WORLD GENERATOR's own grids, annotated by simulated
annotators who see the oracle's reading of each generated panel (the paper builds PaCo data from generated images).
args: GENERATOR WORK N_PROMPTS SEED"""
import json, sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)
from diffusers import FluxPipeline
from data_pipeline.export import ExportConfig, export_dataset
from data_pipeline.generate import ingest_grids
from data_pipeline.instances import build_instances, read_instances
from data_pipeline.pairs import LabelRule, build_pairs, read_pairs
from data_pipeline.prompts import prepare_prompts, read_prompts
from data_pipeline.rankings import ingest_rankings
from data_pipeline.reasons import TemplateReasoner, annotate_reasons
from data_pipeline.pipeline import REASONS_FILE
from data_pipeline.storage import write_jsonl, save_image_atomic
from data_pipeline.synthetic import SimulatedAnnotators, attribute_describer
from data_pipeline.world_oracle import read_panel
from paco_reward.grids import split_grid
from PIL import Image
from demo.world_generator import GeneratorConfig, generator_world, sample_grids

gen, work, n, seed = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
G = 4
world = generator_world(GeneratorConfig())
records = world.make_prompts(n, start=400_000)
pipe = FluxPipeline.from_pretrained(gen)
t = time.time()
grid_dir = work / "inputs" / "grids"
for g in range(G):
    for i in range(0, n, 32):
        for r, im in zip(records[i:i + 32], sample_grids(pipe, records[i:i + 32], seed=seed * 1000 + g * 100 + i)):
            save_image_atomic(im, grid_dir / r["idx"] / f"{g}.png")
print("sampled", round(time.time() - t), flush=True)
write_jsonl(work / "inputs" / "prompts.jsonl", records)

class OracleWorld:
    """panel_specs = the oracle's reading of the generated grid (None where unreadable)."""
    def __init__(self): self.cache = {}
    def panel_specs(self, record, grid):
        key = (record["idx"], int(grid))
        if key not in self.cache:
            im = Image.open(grid_dir / record["idx"] / f"{int(grid)}.png").convert("RGB")
            specs = []
            for p in split_grid(im, 2, 2):
                try: specs.append(read_panel(p))
                except ValueError: specs.append(None)
            self.cache[key] = specs
        return self.cache[key]

oracle = OracleWorld()
prepare_prompts(work / "inputs" / "prompts.jsonl", work, source="synthetic")
ingest_grids(grid_dir, work)
build_instances(work, None)
prompts = read_prompts(work)
instances = [i for i in read_instances(work).values()
             if all(oracle.panel_specs(prompts[i["prompt_id"]], int(p["grid"]))[p["pos"]] is not None for p in [i["reference"], *i["candidates"]])]
print("instances readable", len(instances), "of", len(read_instances(work)))
rankings = SimulatedAnnotators(seed=seed).annotate(instances, oracle, prompts)
write_jsonl(work / "inputs" / "rankings.jsonl", rankings)
ingest_rankings(work, work / "inputs" / "rankings.jsonl")
build_pairs(work, LabelRule(ties="all", template_mix={"rank": 0.25}))
annotate_reasons(read_pairs(work), TemplateReasoner(attribute_describer(oracle, prompts)), work / REASONS_FILE,
                 image_root=work, load_images=False, progress=False)
export = export_dataset(work, work / "export", ExportConfig(test_fraction=0.125, seed=seed, balance_train_labels=True))
print("export", export, json.loads((export / "export_info.json").read_text()).get("rows"))
