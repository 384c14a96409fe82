import random, time, torch, sys
from data_pipeline.synthetic import SyntheticWorld, describe_panel
from paco_reward.testing.standin import DescribeCollator
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration
torch.set_num_threads(int(sys.argv[1]))
src = "outputs/exp/standin_a"
model = Qwen2_5_VLForConditionalGeneration.from_pretrained(src, dtype=torch.float32)
proc = AutoProcessor.from_pretrained(src)
col = DescribeCollator(proc, "Describe the image.", 56*56)
world = SyntheticWorld()
rng = random.Random(0)
def ex(rng):
    s = world.random_spec(rng); return world.render_panel(s, seed=rng.getrandbits(32)), describe_panel(s)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
b = col([ex(rng) for _ in range(32)])
for it in range(6):
    t0 = time.process_time(); w0 = time.perf_counter()
    loss = model(**b, use_cache=False).loss; loss.backward(); opt.step(); opt.zero_grad()
    if it >= 1: print(f"threads {sys.argv[1]} cpu {time.process_time()-t0:.3f} wall {time.perf_counter()-w0:.3f}")
