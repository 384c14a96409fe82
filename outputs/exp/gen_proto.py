"""Prototype: pretrain a tiny FLUX (2x VAE + transformer) on the world's 2x2 grids of 32-px panels."""
import random, sys, time, json
import numpy as np, torch
from PIL import Image
from diffusers import FluxPipeline
from data_pipeline.synthetic import SyntheticWorld, CHOICES
from data_pipeline.world_oracle import read_panel, grid_consistency, prompt_alignment
from paco_reward.grids import split_grid
from paco_grpo.testing.flux import tiny_flux_components
from paco_grpo.pipeline import FlowGRPOSampler

torch.set_num_threads(1)
import transformers; transformers.logging.set_verbosity_error()
out = sys.argv[1]; vae_steps = int(sys.argv[2]); steps = int(sys.argv[3])
kw = dict(a.split("=") for a in sys.argv[4:])
hidden_heads = int(kw.get("heads", 2)); layers = int(kw.get("layers", 2)); lr = float(kw.get("lr", 1e-3))
torch.manual_seed(0)
P = 32
world = SyntheticWorld(seed=0, panel_size=P, pose=False, lighting=False)
prompts = world.make_prompts(int(kw.get("prompts", 1200)))
heldout = world.make_prompts(48, start=50000)
words = sorted({w.strip(".,:") for r in prompts for w in r["prompt"].split()} | {str(v) for vs in CHOICES.values() for v in vs})
comps = tiny_flux_components(0, vae_channels=tuple(map(int, kw.get("vae", "8,16,32").split(","))), words=words, in_channels=int(kw.get("inch", 32)), num_layers=layers, num_single_layers=layers,
    attention_head_dim=32, num_attention_heads=hidden_heads, joint_attention_dim=64, pooled_projection_dim=32, axes_dims_rope=(8, 12, 12))
pipe = FluxPipeline(**comps)
print("transformer params", sum(p.numel() for p in pipe.transformer.parameters()), "vae", sum(p.numel() for p in pipe.vae.parameters()))
G = 4
t0 = time.time()
grids = [(r, g) for r in prompts for g in range(G)]
imgs = torch.stack([torch.from_numpy(np.asarray(world.render_grid(r, g))).permute(2, 0, 1) for r, g in grids]).float() / 127.5 - 1
print("rendered", imgs.shape, time.time() - t0)
# VAE
vae = pipe.vae; opt = torch.optim.AdamW(vae.parameters(), lr=2e-3)
t0 = time.time()
for step in range(vae_steps):
    x = imgs[torch.randint(len(imgs), (16,))]
    post = vae.encode(x).latent_dist
    rec = vae.decode(post.sample()).sample
    loss = (rec - x).abs().mean() + 1e-6 * post.kl().mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 100 == 0: print("vae", step, round(loss.item(), 4), round(time.time() - t0, 1), flush=True)
vae.eval()
def oracle(images, recs):
    ok = {k: 0 for k in list(CHOICES) + ["step"]}; n = bad = 0
    for im, (r, g) in zip(images, recs):
        truth = world.panel_specs(r, g)
        for got, want in zip(split_grid(im, 2, 2), truth):
            n += 1
            try: s = read_panel(got)
            except ValueError: bad += 1; continue
            for k in ok: ok[k] += getattr(s, k) == getattr(want, k)
    return {k: round(v / n, 3) for k, v in ok.items()}, bad
def to_pil(t): return [Image.fromarray(((x.clamp(-1, 1) + 1) * 127.5).round().byte().permute(1, 2, 0).numpy()) for x in t]
with torch.no_grad():
    idx = list(range(0, len(imgs), len(imgs) // 100))[:100]
    rec = vae.decode(vae.encode(imgs[idx]).latent_dist.mode()).sample
    print("vae recon oracle", oracle(to_pil(rec), [grids[i] for i in idx]), flush=True)
    lat = torch.cat([vae.encode(imgs[i:i + 256]).latent_dist.mode() for i in range(0, len(imgs), 256)])
shift, scale = lat.mean().item(), 1 / lat.std().item()
vae.register_to_config(shift_factor=shift, scaling_factor=scale)
lat = (lat - shift) * scale
packed = FluxPipeline._pack_latents(lat, len(lat), lat.shape[1], lat.shape[2], lat.shape[3])
img_ids = pipe._prepare_latent_image_ids(1, lat.shape[2] // 2, lat.shape[3] // 2, "cpu", torch.float32)
sampler = FlowGRPOSampler(pipe, max_sequence_length=int(kw.get("maxlen", 64)))
with torch.no_grad():
    cond = sampler.encode_prompts([r["prompt"] for r in prompts])
print("text tokens", cond.prompt_embeds.shape, "nonpad", (pipe.tokenizer_2([prompts[0]["prompt"]])["input_ids"].__len__()))
tr = pipe.transformer; tr.train()
opt = torch.optim.AdamW(tr.parameters(), lr=lr, weight_decay=0.0)
B = int(kw.get("batch", 32))
t0 = time.time()
for step in range(steps + 1):
    i = torch.randint(len(packed), (B,))
    x0 = packed[i]; pi = i // G
    noise = torch.randn_like(x0)
    t = torch.sigmoid(torch.randn(B))
    xt = (1 - t[:, None, None]) * x0 + t[:, None, None] * noise
    with torch.enable_grad():
        v = tr(hidden_states=xt, timestep=t, guidance=torch.full((B,), 3.5), pooled_projections=cond.pooled_prompt_embeds[pi],
               encoder_hidden_states=cond.prompt_embeds[pi], txt_ids=cond.text_ids, img_ids=img_ids, return_dict=False)[0]
        loss = ((v - (noise - x0)) ** 2).mean()
    for g in opt.param_groups: g["lr"] = lr * min(1, (step + 1) / 100)
    opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(tr.parameters(), 1.0); opt.step()
    if step % 100 == 0: print("fm", step, round(loss.item(), 4), round(time.time() - t0, 1), flush=True)
    if step and step % int(kw.get("eval", 1000)) == 0:
        tr.eval()
        with torch.no_grad():
            o = sampler([r["prompt"] for r in heldout], height=64, width=64, num_steps=20, noise_steps=[], generator=torch.Generator().manual_seed(0))
        ims = to_pil(o.images * 2 - 1)
        acc, bad = oracle(ims, [(r, 0) for r in heldout])
        cons = []; align = []
        for im, r in zip(ims, heldout):
            try:
                specs = [read_panel(p) for p in split_grid(im, 2, 2)]
                cons.append(grid_consistency(specs)); align.append(prompt_alignment(specs, r["synthetic"]["attributes"]))
            except ValueError: pass
        print("EVAL", step, acc, "unread", bad, "consistency", round(np.mean(cons), 3), "align", round(np.mean(align), 3), flush=True)
        sheet = Image.new("RGB", (64 * 8, 64 * 6))
        for k, im in enumerate(ims): sheet.paste(im, ((k % 8) * 64, (k // 8) * 64))
        sheet.resize((64 * 8 * 2, 64 * 6 * 2), Image.NEAREST).save(f"{out}_{step}.png")
        tr.train()
pipe.save_pretrained(out)
