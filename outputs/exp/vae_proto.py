"""usage: vae_proto.py STEPS LATENT_CHANNELS BLOCKS [WIDTH]: issue-16 feasibility probe. A tiny
diffusers AutoencoderKL (BLOCKS down blocks -> 2^(BLOCKS-1) x downsampling) trained on single
64-px panels of the world (L1 + 1e-6 KL), then the world oracle's read-out of its reconstructions."""
import sys, time, random, collections, numpy as np, torch
torch.set_num_threads(1)
from diffusers import AutoencoderKL
from PIL import Image
from data_pipeline.synthetic import SyntheticWorld, ATTRIBUTES
from data_pipeline.world_oracle import read_panel
steps, ch, blocks = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
width = int(sys.argv[4]) if len(sys.argv) > 4 else 32
torch.manual_seed(0)
vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * blocks,
    up_block_types=("UpDecoderBlock2D",) * blocks, block_out_channels=(width,) * blocks, layers_per_block=1,
    latent_channels=ch, norm_num_groups=8, sample_size=64, use_quant_conv=False, use_post_quant_conv=False,
    mid_block_add_attention=False)
print("params", sum(p.numel() for p in vae.parameters()))
w = SyntheticWorld(); rng = random.Random(0)
def batch(n, r):
    specs = [w.random_spec(r) for _ in range(n)]
    imgs = [w.render_panel(s, seed=r.getrandbits(32)) for s in specs]
    x = torch.tensor(np.stack([np.asarray(i) for i in imgs]), dtype=torch.float32).permute(0, 3, 1, 2) / 127.5 - 1
    return x, specs
opt = torch.optim.AdamW(vae.parameters(), lr=1e-3)
ev_x, ev_specs = batch(200, random.Random(123))
def evaluate():
    vae.eval()
    with torch.no_grad():
        rec = vae.decode(vae.encode(ev_x).latent_dist.mode()).sample
    vae.train()
    arr = ((rec.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
    hits = collections.Counter(); fail = 0
    for a, s in zip(arr, ev_specs):
        try:
            g = read_panel(a)
        except ValueError:
            fail += 1; continue
        for k in (*ATTRIBUTES, "step"):
            hits[k] += getattr(g, k) == getattr(s, k)
    Image.fromarray(np.concatenate([np.concatenate(list(((ev_x[:8].permute(0,2,3,1).numpy()+1)*127.5).astype(np.uint8)), 1), np.concatenate(list(arr[:8]), 1)], 0)).save(f"/tmp/exp/vae_{ch}_{blocks}.png")
    return {k: round(v / 200, 3) for k, v in hits.items()}, fail
t = time.perf_counter()
for step in range(1, steps + 1):
    x, _ = batch(16, rng)
    post = vae.encode(x).latent_dist
    rec = vae.decode(post.sample()).sample
    loss = (rec - x).abs().mean() + 1e-6 * post.kl().mean()
    loss.backward(); opt.step(); opt.zero_grad()
    if step % 250 == 0 or step == steps:
        print(step, f"{time.perf_counter() - t:.0f}s", f"loss {loss.item():.4f}", *evaluate(), flush=True)
