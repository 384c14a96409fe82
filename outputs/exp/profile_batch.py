import random, time, torch, sys
from data_pipeline.synthetic import SyntheticWorld, describe_panel
from paco_reward.testing.standin import DescribeCollator
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration
torch.set_num_threads(1)
src = "outputs/exp/standin_b"
model = Qwen2_5_VLForConditionalGeneration.from_pretrained(src, dtype=torch.float32)
proc = AutoProcessor.from_pretrained(src)
col = DescribeCollator(proc, "Describe the image.", 56*56)
world = SyntheticWorld()
rng = random.Random(0)
def ex(rng):
    s = world.random_spec(rng); return world.render_panel(s, seed=rng.getrandbits(32)), describe_panel(s)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for bs in (32, 64, 128):
    cpu = {"data": 0, "step": 0}
    for it in range(4):
        t0 = time.process_time(); b = col([ex(rng) for _ in range(bs)]); t1 = time.process_time()
        loss = model(**b, use_cache=False).loss; loss.backward(); opt.step(); opt.zero_grad()
        t2 = time.process_time()
        if it: cpu["data"] += (t1 - t0) / 3; cpu["step"] += (t2 - t1) / 3
    print(bs, {k: round(v, 3) for k, v in cpu.items()})
