"""Append identity-initialised text layers to a stand-in: usage deepen.py SRC DST N_EXTRA [where=end|interleave]
New layers: fresh init, o_proj and down_proj zeroed -> the model computes exactly what SRC computes."""
import sys, shutil, torch
from pathlib import Path
from transformers import Qwen2_5_VLForConditionalGeneration, AutoConfig
src, dst, extra = sys.argv[1], sys.argv[2], int(sys.argv[3])
where = sys.argv[4] if len(sys.argv) > 4 else "end"
torch.manual_seed(0)
old = Qwen2_5_VLForConditionalGeneration.from_pretrained(src, dtype=torch.float32)
cfg = AutoConfig.from_pretrained(src)
n = cfg.text_config.num_hidden_layers
cfg.text_config.num_hidden_layers = n + extra
cfg.text_config.layer_types = ["full_attention"] * (n + extra)
new = Qwen2_5_VLForConditionalGeneration._from_config(cfg, dtype=torch.float32)
sd = old.state_dict()
# map old layer i -> new index
if where == "end":
    mapping = {i: i for i in range(n)}
else:  # old layers at even positions, new at odd
    mapping = {i: 2 * i for i in range(n)}
newsd = {}
for k, v in sd.items():
    if ".layers." in k and "language_model" in k:
        pre, rest = k.split(".layers.", 1)
        i, tail = rest.split(".", 1)
        newsd[f"{pre}.layers.{mapping[int(i)]}.{tail}"] = v
    else:
        newsd[k] = v
missing, unexpected = new.load_state_dict(newsd, strict=False)
assert not unexpected, unexpected
fresh = sorted({int(k.split(".layers.")[1].split(".")[0]) for k in missing if "language_model" in k})
print("fresh layers", fresh, "missing non-layer", [k for k in missing if ".layers." not in k])
with torch.no_grad():
    for i in fresh:
        layer = new.model.language_model.layers[i]
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
new.save_pretrained(dst)
for f in Path(src).iterdir():
    if f.suffix in (".json", ".jinja") and f.name not in ("config.json", "generation_config.json", "standin.json"):
        shutil.copy(f, Path(dst) / f.name)
# check equality of logits on a dummy text input
ids = torch.randint(20, 200, (1, 12))
with torch.no_grad():
    a = old(input_ids=ids).logits; b = new(input_ids=ids).logits
print("max logit diff", (a - b).abs().max().item())
