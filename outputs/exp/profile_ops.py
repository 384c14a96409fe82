import random, time, torch, sys
from data_pipeline.synthetic import SyntheticWorld, describe_panel
from paco_reward.testing.standin import DescribeCollator
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration
from torch.profiler import profile, ProfilerActivity
torch.set_num_threads(1)
src = "outputs/exp/standin_b"
model = Qwen2_5_VLForConditionalGeneration.from_pretrained(src, dtype=torch.float32)
proc = AutoProcessor.from_pretrained(src)
col = DescribeCollator(proc, "Describe the image.", 56*56)
world = SyntheticWorld()
rng = random.Random(0)
def ex(rng):
    s = world.random_spec(rng); return world.render_panel(s, seed=rng.getrandbits(32)), describe_panel(s)
b = col([ex(rng) for _ in range(32)])
for _ in range(2):
    model(**b, use_cache=False).loss.backward()
with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
    for _ in range(3):
        model(**b, use_cache=False).loss.backward()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22))
