"""Pretrain the world editor from a generator and have the oracle judge 96 held-out edits.

PYTHONPATH=. python outputs/exp/editor_probe.py GENERATOR OUT [EditorConfig field=value ...]
"""
import sys, time, json, torch
torch.set_num_threads(1)
from pathlib import Path
from demo.world_editor import *
gen = sys.argv[1]; out = sys.argv[2]
kw = dict(a.split("=") for a in sys.argv[3:])
kw = {k: (float(v) if "." in v or "e-" in v else int(v)) for k, v in kw.items()}
ec = EditorConfig(**kw)
t = time.time()
path = pretrain_world_editor(out, gen, ec)
info = json.loads(Path(out, "world_editor.json").read_text())
print("train s", round(time.time() - t), "loss", [round(x, 3) for x in info["loss_every_25_steps"][::10]])
from diffusers import FluxKontextPipeline
pipe = FluxKontextPipeline.from_pretrained(path)
world = editor_world(gen)
recs = make_edits(world, 96, start=HELD_OUT_START)
ims = sample_edits(pipe, recs, world, 0)
j = judge_edits(ims, recs); print("editor", {k: v for k, v in j.items() if k != "per_item"})
pairs = [render_edit(world, r) for r in recs]
from demo.stage_generator import sample_sheet
sample_sheet([[s for s, _ in pairs][:12], ims[:12], [t for _, t in pairs][:12]], scale=3).save(out + "_sheet.png")
