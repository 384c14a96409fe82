"""Probe: train the world CLIP; how well does it rank the right text / tell panels apart? args: OUT STEPS"""
import random, sys, time, numpy as np, torch
torch.set_num_threads(1)
from demo.world_clip import WorldClipConfig, pretrain_world_clip, world_example, panel_text
from demo.world_generator import GeneratorConfig, generator_world
from data_pipeline.synthetic import ATTRIBUTES, CHOICES, PanelSpec
from transformers import CLIPModel, CLIPProcessor
out, steps = sys.argv[1], int(sys.argv[2])
t = time.time(); p = pretrain_world_clip(out, WorldClipConfig(steps=steps)); print("trained", time.time() - t)
m = CLIPModel.from_pretrained(p).eval(); proc = CLIPProcessor.from_pretrained(p)
world = generator_world(GeneratorConfig())
rng = random.Random(99)
print("tokens", len(proc.tokenizer(world_example(world, rng)[1])["input_ids"]))
# attribute probe: for each panel, does the true text beat the text with one attribute changed?
wins = {k: 0 for k in ATTRIBUTES}; n = 100
for i in range(n):
    spec = world.random_spec(rng, steps=4); img = world.render_panel(spec, seed=i)
    texts = [panel_text(spec)]
    for k in ATTRIBUTES:
        v = rng.choice([c for c in CHOICES[k] if c != getattr(spec, k)])
        texts.append(panel_text(PanelSpec(**{**spec.as_dict(), k: v})))
    with torch.no_grad():
        o = m(**proc(text=texts, images=[img], return_tensors="pt", padding=True))
    s = o.logits_per_image[0]
    for j, k in enumerate(ATTRIBUTES): wins[k] += bool(s[0] > s[j + 1])
print("true text beats one-attribute-off text:", {k: v / n for k, v in wins.items()})
