import random, sys, collections, torch
torch.set_num_threads(1)
from data_pipeline.synthetic import SyntheticWorld, panel_attributes, describe_panel
from paco_reward.testing.standin import DescribeCollator, IGNORE_INDEX
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration
src, px = sys.argv[1], int(sys.argv[2])
model = Qwen2_5_VLForConditionalGeneration.from_pretrained(src).eval()
proc = AutoProcessor.from_pretrained(src)
col = DescribeCollator(proc, "Describe the image.", px)
world = SyntheticWorld()
rng = random.Random(123)
specs, exs = [], []
for _ in range(300):
    s = world.random_spec(rng); specs.append(s)
    seed = rng.getrandbits(32); exs.append((world.render_panel(s, seed=seed), ""))
    s.__dict__  # noqa
sizes = []
gen = []
for i in range(0, 300, 50):
    b = col(exs[i:i+50]); w = int(b["labels"].ne(IGNORE_INDEX).float().argmax(-1).min())
    inp = {k: (v[:, :w] if k in ("input_ids","attention_mask","mm_token_type_ids") else v) for k, v in b.items() if k != "labels"}
    with torch.inference_mode():
        out = model.generate(**inp, max_new_tokens=48, do_sample=False)
    gen += proc.tokenizer.batch_decode(out[:, w:], skip_special_tokens=True)
conf = collections.defaultdict(collections.Counter)
for s, g in zip(specs, gen):
    clauses = [c.strip().split(" ", 1) for c in g.rstrip(".").split(",")]
    got = {c[0].lower(): c[1] if len(c) > 1 else "" for c in clauses}
    for k, v in panel_attributes(s).items():
        conf[k][(str(v), got.get(k, "?"))] += 1
for k in ("shape", "marking"):
    print(k, sorted(((a, b, n) for (a, b), n in conf[k].items() if a != b), key=lambda x: -x[2])[:10])
