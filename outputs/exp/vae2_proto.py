"""Probe: how cheap can the generator's 2x VAE be? args: STEPS CH1 CH2 BATCH"""
import sys, time, numpy as np, torch
from PIL import Image
from data_pipeline.synthetic import SyntheticWorld, CHOICES
from data_pipeline.world_oracle import read_panel
from paco_reward.grids import split_grid
from paco_grpo.testing.flux import tiny_flux_components
torch.set_num_threads(1); torch.manual_seed(0)
steps, chans, B = int(sys.argv[1]), tuple(map(int, sys.argv[2].split(","))), int(sys.argv[3])
world = SyntheticWorld(seed=0, panel_size=32, pose=False, lighting=False)
prompts = world.make_prompts(600)
grids = [(r, g) for r in prompts for g in range(4)]
imgs = torch.stack([torch.from_numpy(np.array(world.render_grid(r, g))).permute(2, 0, 1) for r, g in grids]).float() / 127.5 - 1
vae = tiny_flux_components(0, vae_channels=chans, in_channels=int(sys.argv[5]) if len(sys.argv) > 5 else 16)["vae"]
print("params", sum(p.numel() for p in vae.parameters()))
opt = torch.optim.AdamW(vae.parameters(), lr=float(sys.argv[4]))
def oracle(images, recs):
    ok = {k: 0 for k in list(CHOICES) + ["step"]}; n = bad = 0
    for im, (r, g) in zip(images, recs):
        for got, want in zip(split_grid(im, 2, 2), world.panel_specs(r, g)):
            n += 1
            try: s = read_panel(got)
            except ValueError: bad += 1; continue
            for k in ok: ok[k] += getattr(s, k) == getattr(want, k)
    return {k: round(v / n, 3) for k, v in ok.items()}, bad
t0 = time.time()
for step in range(steps + 1):
    x = imgs[torch.randint(len(imgs), (B,))]
    post = vae.encode(x).latent_dist
    loss = (vae.decode(post.sample()).sample - x).abs().mean() + 1e-6 * post.kl().mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 100 == 0:
        with torch.no_grad():
            idx = list(range(0, len(imgs), 48))
            rec = vae.decode(vae.encode(imgs[idx]).latent_dist.mode()).sample
            pil = [Image.fromarray(((t.clamp(-1, 1) + 1) * 127.5).round().byte().permute(1, 2, 0).numpy()) for t in rec]
        print(step, round(loss.item(), 4), round(time.time() - t0, 1), oracle(pil, [grids[i] for i in idx]), flush=True)
