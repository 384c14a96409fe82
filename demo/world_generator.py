"""A tiny FLUX that draws the synthetic world: the generator of the RL experiments. Not PaCo.

A real PaCo-GRPO run starts from FLUX.1-dev, which already draws; the tiny FLUX of this
demo starts from random weights. :func:`pretrain_world_generator` stands in for that
pretraining: on grids the world renders for its own T2IS-style prompts (2x2 grids of
32-px panels, a fixed pose and light, and the world's drifting and broken panels, so the
generator learns to be as inconsistent as the world's grids are), it trains

1. the VAE (diffusers' ``AutoencoderKL``, 4x down, 8 latent channels) to reconstruct the
   grids (L1 + a small KL term), then
2. the ``FluxTransformer2DModel`` by rectified flow matching on the VAE's latents
   (``x_t = (1 - s) x_0 + s e``, target ``e - x_0``, ``s`` logit-normal), conditioned
   through the pipeline's own frozen text encoders on the prompt (whole-word T5 pieces).

Both hold their learning rate, then decay it linearly to zero over the last ``decay`` share
of their steps.

Like FLUX.1-dev, it draws at more than one resolution: every ``low_resolution_every``-th
step of both trains on the same prompts' grids at ``low_panel_size`` (16-px panels), so that
RL can train at half the resolution it is judged at (resolution decoupling).

The result is an ordinary ``FluxPipeline`` folder: ``FluxPipeline.from_pretrained`` samples
from it and :class:`paco_grpo.pipelines.FluxGRPOSampler` (with it, the GRPO trainer) trains it
as it would FLUX.1-dev. The world's oracle (:mod:`data_pipeline.world_oracle`) judges its
grids (:func:`oracle_table`).

    >>> path = pretrain_world_generator("/tmp/world-flux", GeneratorConfig(steps=50))  # doctest: +SKIP
    >>> grids = sample_grids(FluxPipeline.from_pretrained(path), prompts, seed=0)        # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from demo.cached_folder import build_once, cache_key, read_info
from paco_reward.errors import PathNotFoundError

INFO_FILE = "world_generator.json"
# Bump when the training procedure changes, so that cached generators are retrained.
PROCEDURE_VERSION = 2
# Held-out prompts are drawn from this index on (training prompts start at 0).
HELD_OUT_START = 100_000


@dataclass(frozen=True)
class GeneratorConfig:
    """How the world's generator is pretrained (every field is part of the cache key)."""

    panel_size: int = 32
    # Also trained at this panel size (None: one resolution only), every k-th step.
    low_panel_size: int | None = 16
    low_resolution_every: int = 5
    prompts: int = 1200
    grids_per_prompt: int = 4
    vae_channels: tuple[int, ...] = (8, 16, 32)
    latent_channels: int = 8
    vae_steps: int = 1000
    vae_batch_size: int = 16
    vae_learning_rate: float = 2e-3
    layers: int = 2
    heads: int = 2
    steps: int = 3500
    batch_size: int = 32
    learning_rate: float = 3e-3
    warmup_steps: int = 100
    # Both trainings decay their learning rate linearly to zero over this share of their steps.
    decay: float = 0.3
    max_sequence_length: int = 64
    seed: int = 0

    def key(self) -> str:
        """Cache key of this configuration (and of the training procedure and world)."""
        from data_pipeline.synthetic import WORLD_VERSION

        return cache_key(
            {"config": asdict(self), "procedure": PROCEDURE_VERSION, "world": WORLD_VERSION}
        )


def generator_world(config: GeneratorConfig, panel_size: int | None = None):
    """The world the generator learns: the data stage's world at ``panel_size`` (default the
    config's), in one pose and one light (the nuisance the generator need not learn)."""
    from data_pipeline.synthetic import SyntheticWorld

    return SyntheticWorld(
        seed=config.seed,
        panel_size=panel_size or config.panel_size,
        pose=False,
        lighting=False,
    )


def panel_sizes(config: GeneratorConfig) -> tuple[int, ...]:
    """The panel sizes the generator trains at, its main one first."""
    low = config.low_panel_size
    return (config.panel_size,) if low is None else (config.panel_size, low)


def _size_at(step: int, config: GeneratorConfig) -> int:
    """The panel size a training step uses: every ``low_resolution_every``-th is low."""
    sizes = panel_sizes(config)
    low_step = step % config.low_resolution_every == config.low_resolution_every - 1
    return sizes[-1] if len(sizes) > 1 and low_step else sizes[0]


def held_out_prompts(config: GeneratorConfig, n: int) -> list[dict]:
    """``n`` prompt records of the generator's world that it was not trained on."""
    return generator_world(config).make_prompts(n, start=HELD_OUT_START)


def world_words(world) -> list[str]:
    """Every word of the world's prompts (one block of prompts uses every attribute value)."""
    from data_pipeline.synthetic import BLOCK

    words = {w.strip(".,") for r in world.make_prompts(BLOCK) for w in r["prompt"].split()}
    return sorted(words - {""})


def build_world_flux(config: GeneratorConfig, words: Sequence[str]):
    """The untrained tiny ``FluxPipeline`` of this configuration."""
    from diffusers import FluxPipeline

    from paco_grpo.testing.flux import tiny_flux_components

    head_dim = 32
    components = tiny_flux_components(
        config.seed,
        vae_channels=config.vae_channels,
        words=words,
        in_channels=4 * config.latent_channels,
        num_layers=config.layers,
        num_single_layers=config.layers,
        attention_head_dim=head_dim,
        num_attention_heads=config.heads,
        joint_attention_dim=64,
        pooled_projection_dim=32,
        axes_dims_rope=(8, 12, 12),
    )
    return FluxPipeline(**components)


def to_tensor(images: Sequence[Image.Image]) -> torch.Tensor:
    """PIL images -> ``(B, 3, H, W)`` in [-1, 1] (the VAE's range)."""
    arrays = np.stack([np.asarray(im.convert("RGB"), dtype=np.float32) for im in images])
    return torch.from_numpy(arrays).permute(0, 3, 1, 2) / 127.5 - 1.0


def to_images(tensor: torch.Tensor) -> list[Image.Image]:
    """``(B, 3, H, W)`` in [0, 1] -> PIL images."""
    arrays = (tensor.clamp(0, 1) * 255).round().byte().permute(0, 2, 3, 1).cpu().numpy()
    return [Image.fromarray(a) for a in arrays]


@contextmanager
def quiet_clip_truncation():
    """Silence the warnings that CLIP keeps only its first 77 tokens: the pooled CLIP
    embedding of a long grid prompt is its start, as in FLUX.1-dev."""
    import diffusers
    import transformers

    levels = transformers.logging.get_verbosity(), diffusers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    diffusers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(levels[0])
        diffusers.logging.set_verbosity(levels[1])


def scheduled_lr(
    step: int, learning_rate: float, warmup_steps: int, total_steps: int = 0, decay: float = 0.0
) -> float:
    """``learning_rate`` after a linear warm-up over the first ``warmup_steps`` steps, decayed
    linearly to zero over the last ``decay`` share of ``total_steps`` (warmup-stable-decay)."""
    decay_steps = int(decay * total_steps)
    remaining = (total_steps - step) / decay_steps if decay_steps else 1.0
    return learning_rate * min(1.0, (step + 1) / warmup_steps, remaining)


def train_vae(
    vae, images: dict[int, torch.Tensor], config: GeneratorConfig, progress: bool
) -> list[float]:
    """Fit the VAE to reconstruct ``images`` (per panel size); returns the loss every 25 steps."""
    from tqdm.auto import tqdm

    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(vae.parameters(), lr=config.vae_learning_rate)
    losses = []
    vae.train()
    for step in tqdm(range(config.vae_steps), desc="generator VAE", disable=not progress):
        for group in optimizer.param_groups:
            group["lr"] = scheduled_lr(
                step, config.vae_learning_rate, 1, config.vae_steps, config.decay
            )
        pool = images[_size_at(step, config)]
        batch = pool[torch.randint(len(pool), (config.vae_batch_size,), generator=generator)]
        posterior = vae.encode(batch).latent_dist
        reconstruction = vae.decode(posterior.sample(generator)).sample
        loss = (reconstruction - batch).abs().mean() + 1e-6 * posterior.kl().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 25 == 0:
            losses.append(loss.item())
    vae.eval()
    return losses


@torch.no_grad()
def encode_latents(pipe, images: torch.Tensor, normalize: bool = False) -> torch.Tensor:
    """Packed latents of ``images``, normalised by the VAE's ``shift_factor`` and
    ``scaling_factor``; ``normalize=True`` first sets those to the latents' mean and 1 / std,
    as FLUX's VAE config carries them."""
    vae = pipe.vae
    latents = torch.cat(
        [vae.encode(images[i : i + 256]).latent_dist.mode() for i in range(0, len(images), 256)]
    )
    if normalize:
        vae.register_to_config(
            shift_factor=latents.mean().item(), scaling_factor=1.0 / latents.std().item()
        )
    latents = (latents - vae.config.shift_factor) * vae.config.scaling_factor
    batch, channels, height, width = latents.shape
    return pipe._pack_latents(latents, batch, channels, height, width)


def flow_matching_update(optimizer, velocity, noise, x0, lr: float) -> float:
    """One rectified-flow-matching step: the squared error of ``velocity`` against the target
    ``noise - x0``, back-propagated and applied at ``lr`` with the gradient norm clipped to 1.
    Returns the loss."""
    loss = ((velocity - (noise - x0)) ** 2).mean()
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    return loss.item()


def train_flow(
    pipe,
    latents: dict[int, torch.Tensor],
    cond,
    prompt_of,
    config: GeneratorConfig,
    progress: bool,
) -> list[float]:
    """Rectified flow matching of the pipeline's transformer on packed ``latents`` (per panel
    size; ``prompt_of[i]`` = the row of ``cond`` that conditions latent ``i`` of each)."""
    from tqdm.auto import tqdm

    transformer = pipe.transformer
    img_ids = {}
    for size, packed in latents.items():
        side = int(packed.shape[1] ** 0.5)
        img_ids[size] = pipe._prepare_latent_image_ids(1, side, side, "cpu", packed.dtype)
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(
        transformer.parameters(), lr=config.learning_rate, weight_decay=0.0
    )
    losses = []
    transformer.train()
    for step in tqdm(range(config.steps), desc="generator flow matching", disable=not progress):
        size = _size_at(step, config)
        rows = torch.randint(len(prompt_of), (config.batch_size,), generator=generator)
        x0 = latents[size][rows]
        noise = torch.randn(x0.shape, generator=generator)
        sigma = torch.sigmoid(torch.randn(config.batch_size, generator=generator))[:, None, None]
        prompts = prompt_of[rows]
        velocity = transformer(
            hidden_states=(1 - sigma) * x0 + sigma * noise,
            timestep=sigma.flatten(),
            guidance=torch.full((config.batch_size,), 3.5),
            pooled_projections=cond.pooled_prompt_embeds[prompts],
            encoder_hidden_states=cond.prompt_embeds[prompts],
            txt_ids=cond.text_ids,
            img_ids=img_ids[size],
            return_dict=False,
        )[0]
        loss = flow_matching_update(
            optimizer,
            velocity,
            noise,
            x0,
            scheduled_lr(
                step, config.learning_rate, config.warmup_steps, config.steps, config.decay
            ),
        )
        if step % 25 == 0:
            losses.append(loss)
    transformer.eval()
    return losses


def pretrain_world_generator(
    output_dir: str | Path, config: GeneratorConfig | None = None, progress: bool = True
) -> Path:
    """Train (or reuse) the world's generator.

    Args:
        output_dir: the pipeline folder. If it holds a finished run of the same ``config``
            (``world_generator.json``), it is returned as is; an interrupted run leaves only
            ``<output_dir>.partial``, which the next call starts over.
        config: :class:`GeneratorConfig`.
        progress: show progress bars.

    Returns:
        ``output_dir``, a ``FluxPipeline`` folder.
    """
    config = config or GeneratorConfig()
    return build_once(
        output_dir, INFO_FILE, config.key(), lambda work: _train_generator(work, config, progress)
    )


def _train_generator(work: Path, config: GeneratorConfig, progress: bool) -> dict:
    """Train the generator into ``work``; returns its info (see
    :func:`pretrain_world_generator`)."""
    from paco_grpo.pipelines import FluxGRPOSampler

    torch.manual_seed(config.seed)
    world = generator_world(config)
    records = world.make_prompts(config.prompts)
    grids = [(r, g) for r in records for g in range(config.grids_per_prompt)]
    images = {}
    for size in panel_sizes(config):
        sized = generator_world(config, size)
        images[size] = to_tensor([sized.render_grid(r, g) for r, g in grids])
    pipe = build_world_flux(config, world_words(world))

    start = time.perf_counter()
    vae_losses = train_vae(pipe.vae, images, config, progress)
    vae_seconds = time.perf_counter() - start
    latents = {
        size: encode_latents(pipe, sized, normalize=size == config.panel_size)
        for size, sized in images.items()
    }
    sampler = FluxGRPOSampler(pipe, max_sequence_length=config.max_sequence_length)
    with torch.no_grad(), quiet_clip_truncation():
        # the text part (train_flow makes the image ids of each panel size)
        side = sampler.size_multiple
        cond = sampler.condition([r["prompt"] for r in records], side, side, 3.5)
    prompt_of = torch.arange(len(records)).repeat_interleave(config.grids_per_prompt)
    start = time.perf_counter()
    flow_losses = train_flow(pipe, latents, cond, prompt_of, config, progress)
    flow_seconds = time.perf_counter() - start

    pipe.save_pretrained(work)
    return {
        "config": asdict(config),
        "vae_seconds": vae_seconds,
        "flow_seconds": flow_seconds,
        "vae_loss_every_25_steps": vae_losses,
        "flow_loss_every_25_steps": flow_losses,
    }


def read_generator_info(path: str | Path) -> dict:
    """The training record a pretrained generator folder carries."""
    info = read_info(path, INFO_FILE)
    if info is None:
        raise PathNotFoundError(f"{path} is not a pretrained world generator (no {INFO_FILE}).")
    return info


@torch.no_grad()
def sample_grids(
    pipe,
    records: Sequence[dict],
    seed: int,
    num_steps: int = 20,
    size: int | None = None,
    max_sequence_length: int = GeneratorConfig.max_sequence_length,
    transformer=None,
) -> list[Image.Image]:
    """One grid per prompt record, sampled with the deterministic (ODE) path of
    :class:`~paco_grpo.pipelines.FluxGRPOSampler` (what ``FluxPipeline`` draws for the
    same initial noise); ``size`` is the grid's side in pixels (default the records'),
    ``transformer`` one to sample with instead of the pipeline's (a policy in training)."""
    from paco_grpo.pipelines import FluxGRPOSampler

    side = size or records[0]["height"]
    sampler = FluxGRPOSampler(pipe, max_sequence_length=max_sequence_length)
    with quiet_clip_truncation():
        out = sampler(
            [r["prompt"] for r in records],
            height=side,
            width=side,
            num_steps=num_steps,
            noise_steps=[],
            generator=torch.Generator().manual_seed(seed),
            transformer=transformer,
        )
    return to_images(out.images)
