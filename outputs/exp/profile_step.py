import random, time, torch
from data_pipeline.synthetic import SyntheticWorld, describe_panel
from paco_reward.testing.standin import DescribeCollator
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration
torch.set_num_threads(2)
src = "outputs/exp/standin_a"
model = Qwen2_5_VLForConditionalGeneration.from_pretrained(src, dtype=torch.float32)
proc = AutoProcessor.from_pretrained(src)
print(type(proc.image_processor))
col = DescribeCollator(proc, "Describe the image.", 56*56)
world = SyntheticWorld()
rng = random.Random(0)
def ex(rng):
    s = world.random_spec(rng); return world.render_panel(s, seed=rng.getrandbits(32)), describe_panel(s)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for it in range(3):
    t0 = time.process_time(); exs = [ex(rng) for _ in range(32)]
    t1 = time.process_time(); b = col(exs)
    t2 = time.process_time(); loss = model(**b, use_cache=False).loss
    t3 = time.process_time(); loss.backward(); opt.step(); opt.zero_grad()
    t4 = time.process_time()
    print(f"render {t1-t0:.3f} collate {t2-t1:.3f} fwd {t3-t2:.3f} bwd+opt {t4-t3:.3f}", b["input_ids"].shape, b["pixel_values"].shape)
from torch.profiler import profile, ProfilerActivity
exs = [ex(rng) for _ in range(32)]; b = col(exs)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    loss = model(**b, use_cache=False).loss
    loss.backward()
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
import cProfile, pstats
pr = cProfile.Profile(); pr.enable()
for _ in range(2):
    loss = model(**b, use_cache=False).loss; loss.backward()
pr.disable()
pstats.Stats(pr).sort_stats("cumulative").print_stats(30)
