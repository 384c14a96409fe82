"""A tiny CLIP that knows the world: the CLIP-T reward and the CLIP-I baseline of the RL
experiments. Not PaCo.

The paper's CLIP-T is a CLIP trained on the web; a randomly initialised tiny CLIP aligns
nothing. :func:`pretrain_world_clip` stands in for that pretraining: single panels of the
generator's world (:func:`demo.world_generator.generator_world`, every attribute drawn
uniformly) and their texts, trained with CLIP's own contrastive loss. A panel's text is
what :class:`paco_grpo.rewards.CLIPTextReward` compares it with when it reads a world
prompt with ``global_description=True``: the prompt's global description, then the
panel's own description (cut from a formatted prompt by the same
:func:`paco_reward.grids.split_panel_prompts`), so the reward reads the texts the model
learned from. Cached per machine like the stand-in.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from demo.cached_folder import build_once, cache_key

INFO_FILE = "world_clip.json"
PROCEDURE_VERSION = 2


@dataclass(frozen=True)
class WorldClipConfig:
    """How the world's CLIP is trained (every field is part of the cache key)."""

    panel_size: int = 32
    steps: int = 1000
    batch_size: int = 64
    learning_rate: float = 2e-3
    seed: int = 0

    def key(self) -> str:
        from data_pipeline.synthetic import WORLD_VERSION

        return cache_key(
            {"config": asdict(self), "procedure": PROCEDURE_VERSION, "world": WORLD_VERSION}
        )


def panel_text(spec, layout: tuple[int, int] = (2, 2)) -> str:
    """The text a world prompt gives the panel ``spec`` shows: the global description of its
    attributes, then the description of its position (``spec.step``)."""
    from data_pipeline.synthetic import global_description, panel_description
    from paco_reward.grids import format_grid_prompt, split_panel_prompts

    rows, cols = layout
    panels = [panel_description(k) for k in range(rows * cols)]
    prompt = format_grid_prompt(global_description(spec.as_dict()), panels, rows, cols)
    global_text, panel_texts = split_panel_prompts(prompt)
    return f"{global_text} {panel_texts[spec.step]}"


def world_example(world, rng: random.Random):
    """A random panel of ``world`` (attributes uniform, position in a 2x2 grid) and its text."""
    spec = world.random_spec(rng, steps=4)
    return world.render_panel(spec, seed=rng.getrandbits(32)), panel_text(spec)


def pretrain_world_clip(
    output_dir: str | Path, config: WorldClipConfig | None = None, progress: bool = True
) -> Path:
    """Train (or reuse) the world's CLIP; returns ``output_dir``, a ``CLIPModel`` /
    ``CLIPProcessor`` folder (reused as is when it holds a finished run of ``config``)."""
    config = config or WorldClipConfig()
    return build_once(
        output_dir, INFO_FILE, config.key(), lambda work: _train_clip(work, config, progress)
    )


def _train_clip(work: Path, config: WorldClipConfig, progress: bool) -> dict:
    """Train the world's CLIP into ``work``; returns its info (see :func:`pretrain_world_clip`)."""
    import torch
    from tqdm.auto import tqdm
    from transformers import CLIPModel, CLIPProcessor

    from demo.world_generator import GeneratorConfig, generator_world
    from paco_reward.testing.clip import build_tiny_clip

    world = generator_world(GeneratorConfig(panel_size=config.panel_size, seed=config.seed))
    corpus_rng = random.Random(f"clip-corpus-{config.seed}")
    corpus = [world_example(world, corpus_rng)[1] for _ in range(200)]
    build_tiny_clip(work, seed=config.seed, image_size=config.panel_size, corpus=corpus)
    model = CLIPModel.from_pretrained(work)
    processor = CLIPProcessor.from_pretrained(work)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    rng = random.Random(f"clip-train-{config.seed}")
    losses = []
    start = time.perf_counter()
    model.train()
    for step in tqdm(range(config.steps), desc="world CLIP", disable=not progress):
        images, texts = zip(*(world_example(world, rng) for _ in range(config.batch_size)))
        inputs = processor(text=list(texts), images=list(images), return_tensors="pt", padding=True)
        loss = model(**inputs, return_loss=True).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 25 == 0:
            losses.append(loss.item())
    model.eval()
    model.save_pretrained(work)
    return {
        "config": asdict(config),
        "train_seconds": time.perf_counter() - start,
        "loss_every_25_steps": losses,
    }


def save_image_tower(clip: str | Path, output_dir: str | Path) -> Path:
    """The world CLIP's image tower as a feature model of its own (``CLIPVisionModel`` and
    its image processor in ``output_dir``), for the trainer's ``feature_model``: what DINOv3
    is to GARDO, at the world's scale. Returns ``output_dir``."""
    from transformers import CLIPImageProcessor, CLIPVisionModel

    output_dir = Path(output_dir)
    CLIPVisionModel.from_pretrained(clip).save_pretrained(output_dir)
    CLIPImageProcessor.from_pretrained(clip).save_pretrained(output_dir)
    return output_dir
