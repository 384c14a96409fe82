import random, time, torch, sys
from data_pipeline.synthetic import SyntheticWorld
from paco_reward.testing.standin import DescribeCollator, description_loss
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration
torch.set_num_threads(1)
src = sys.argv[1]; px = int(sys.argv[2])
model = Qwen2_5_VLForConditionalGeneration.from_pretrained(src)
proc = AutoProcessor.from_pretrained(src)
col = DescribeCollator(proc, "Describe the image.", px)
world = SyntheticWorld(); rng = random.Random(0)
b = col([world.describe_example(rng) for _ in range(32)])
print({k: tuple(v.shape) for k, v in b.items()})
vis = model.model.visual
def t(f, n=4):
    f(); s = time.process_time()
    for _ in range(n): f()
    return (time.process_time() - s) / n
pv, g = b["pixel_values"], b["image_grid_thw"]
print("vision fwd", round(t(lambda: vis(pv, grid_thw=g)), 3))
print("vision fwd+bwd", round(t(lambda: vis(pv, grid_thw=g).pooler_output.sum().backward() if hasattr(vis(pv, grid_thw=g), 'pooler_output') else vis(pv, grid_thw=g)[0].sum().backward()), 3))
print("full fwd+bwd", round(t(lambda: description_loss(model, b).backward()), 3))
