"""A tiny FLUX.1-Kontext that edits the world's panels: the editor of experiment 5. Not PaCo.

An edit changes one attribute of a world panel ("Make the character blue."): the colour, the
marking or the background's palette. Its ground truth is the source panel's spec with that
attribute replaced, drawn with the same seed (:func:`make_edits`, :func:`render_edit`).

:func:`pretrain_world_editor` stands in for FLUX.1-Kontext's pretraining: it starts from the
world generator (:mod:`demo.world_generator`: its VAE, text encoders and transformer, as
Kontext starts from FLUX.1's weights), writes the components as a ``FluxKontextPipeline``
and trains the transformer by rectified flow matching on (source, instruction, target)
triples: the target's noised tokens, followed by the source's tokens (position ids whose
first axis is 1), predict the velocity of the target tokens. The velocity is computed by
:class:`paco_grpo.pipelines.KontextGRPOSampler`, so training and sampling call the model
the same way.

The oracle judges an edit (:func:`judge_edits`): ``changed`` (the edited attribute shows the
asked value), ``kept`` (the share of the other attributes and the pips that still show the
source's values) and ``success`` (both at once).

    >>> path = pretrain_world_editor("/tmp/world-kontext", generator_path)      # doctest: +SKIP
    >>> world = editor_world(generator_path)                                      # doctest: +SKIP
    >>> edits = make_edits(world, 8, start=HELD_OUT_START)                         # doctest: +SKIP
    >>> pipe = FluxKontextPipeline.from_pretrained(path)                           # doctest: +SKIP
    >>> judge_edits(sample_edits(pipe, edits, world, seed=0), edits)               # doctest: +SKIP
    {'edits': 8, 'changed': 0.75, 'kept': 0.9, 'success': 0.62, ...}
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from demo.world_generator import (
    GeneratorConfig,
    encode_latents,
    flow_matching_update,
    generator_world,
    quiet_clip_truncation,
    read_generator_info,
    scheduled_lr,
    to_images,
    to_tensor,
)
from paco_reward.cached_folder import build_once, cache_key
from paco_reward.errors import InputError

INFO_FILE = "world_editor.json"
PROCEDURE_VERSION = 1
# Held-out edits are drawn from this index on (training edits start at 0).
HELD_OUT_START = 100_000
# The attributes an edit changes, and how an instruction asks for a value.
INSTRUCTIONS = {
    "colour": "Make the character {}.",
    "marking": "Give the character {} markings.",
    "palette": "Make the background {}-toned.",
}
# What the oracle reads in an edit (see judge_edit).
EDIT_SCORES = ("changed", "kept", "success")
# Embedded guidance of training and sampling (the generator's).
GUIDANCE = 3.5
# The editing RL recipe; a run sets model, prompts, output, rewards and seed on top.
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "grpo_world_edit_cpu.yaml"


@dataclass(frozen=True)
class EditorConfig:
    """How the world's editor is trained (every field is part of the cache key, with the
    generator's)."""

    edits: int = 3000
    steps: int = 1200
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup_steps: int = 50
    max_sequence_length: int = 24
    seed: int = 0

    def key(self, generator: str | Path) -> str:
        """Cache key of this configuration trained from the generator folder ``generator``
        (its own key: the generator's configuration, procedure and world)."""
        return cache_key(
            {
                "config": asdict(self),
                "generator": read_generator_info(generator)["key"],
                "procedure": PROCEDURE_VERSION,
            }
        )


def editor_world(generator: str | Path):
    """The world the generator at ``generator`` draws (its seed and panel size): the world
    of its editor's edits."""
    trained = read_generator_info(generator)["config"]
    return generator_world(GeneratorConfig(seed=trained["seed"], panel_size=trained["panel_size"]))


def make_edits(world, n: int, start: int = 0) -> list[dict]:
    """``n`` edit records of ``world``: ``id``, ``prompt`` (the instruction), ``attribute``,
    ``value``, ``source`` and ``target`` (spec dicts) and ``seed`` (the drawing's).

    Edit ``i`` is fixed by ``(world.seed, start + i)``; the attributes cycle over
    :data:`INSTRUCTIONS` and the asked value is never the source's."""
    from data_pipeline.synthetic import CHOICES, hash_seed

    records = []
    names = list(INSTRUCTIONS)
    for i in range(start, start + n):
        rng = random.Random(hash_seed("edit", world.seed, i))
        source = world.random_spec(rng)
        attribute = names[i % len(names)]
        value = rng.choice([v for v in CHOICES[attribute] if v != getattr(source, attribute)])
        records.append(
            {
                "id": f"edit{i}",
                "prompt": INSTRUCTIONS[attribute].format(value),
                "attribute": attribute,
                "value": value,
                "source": source.as_dict(),
                "target": replace(source, **{attribute: value}).as_dict(),
                "seed": hash_seed("edit drawing", world.seed, i),
            }
        )
    return records


def render_edit(world, record: dict) -> tuple[Image.Image, Image.Image]:
    """The record's source panel and its ground-truth edit (same drawing seed)."""
    from data_pipeline.synthetic import PanelSpec

    return tuple(
        world.render_panel(PanelSpec(**record[key]), seed=record["seed"])
        for key in ("source", "target")
    )


def edit_text(record: dict) -> str:
    """What the edited panel should show, in the words the world's CLIP learned."""
    from data_pipeline.synthetic import PanelSpec
    from demo.world_clip import panel_text

    return panel_text(PanelSpec(**record["target"]))


def write_edit_prompts(world, records: Sequence[dict], path: str | Path) -> Path:
    """Edit records as a (prompt, image) parquet for the GRPO trainer; each row carries
    ``panel_prompts`` (the edit's target text, for CLIP-T) and ``layout`` ``1x1``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for r in records:
        buffer = io.BytesIO()
        render_edit(world, r)[0].save(buffer, format="PNG")
        rows.append(
            {
                "id": r["id"],
                "prompt": r["prompt"],
                "image": {"bytes": buffer.getvalue(), "path": None},
                "panel_prompts": [edit_text(r)],
                "layout": "1x1",
            }
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def build_world_kontext(generator: str | Path):
    """A ``FluxKontextPipeline`` of the generator's components (Kontext starts from FLUX.1)."""
    from diffusers import FluxKontextPipeline, FluxPipeline

    components = FluxPipeline.from_pretrained(generator).components
    return FluxKontextPipeline(**{**components, "image_encoder": None, "feature_extractor": None})


def train_edits(
    sampler,
    sources: torch.Tensor,
    targets: torch.Tensor,
    prompts: Sequence[str],
    config: EditorConfig,
    progress: bool,
) -> list[float]:
    """Rectified flow matching of ``sampler.pipe.transformer`` on edits: ``targets`` given
    ``sources`` (pixels in [-1, 1]) and ``prompts``; returns the loss every 25 steps."""
    from tqdm.auto import tqdm

    from paco_grpo.pipelines import FluxConditioning

    pipe = sampler.pipe
    transformer = pipe.transformer
    target_latents = encode_latents(pipe, targets)
    source_latents = encode_latents(pipe, sources)
    side = targets.shape[-1]
    with torch.no_grad(), quiet_clip_truncation():
        texts = sampler.encode_prompts(list(dict.fromkeys(prompts)))  # (T5, pooled CLIP) each
    embeds, pooled = (torch.stack([text[k] for text in texts]) for k in (0, 1))
    text_row = {p: k for k, p in enumerate(dict.fromkeys(prompts))}
    rows_of = torch.tensor([text_row[p] for p in prompts])
    dtype = target_latents.dtype
    ids = torch.cat([sampler.latent_ids(side, side, "cpu", dtype),
                     sampler.reference_ids(side, side, "cpu", dtype)])  # fmt: skip

    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(transformer.parameters(), lr=config.learning_rate)
    losses = []
    transformer.train()
    for step in tqdm(range(config.steps), desc="editor flow matching", disable=not progress):
        rows = torch.randint(len(prompts), (config.batch_size,), generator=generator)
        x0 = target_latents[rows]
        noise = torch.randn(x0.shape, generator=generator)
        sigma = torch.sigmoid(torch.randn(config.batch_size, generator=generator))
        cond = FluxConditioning(
            prompt_embeds=embeds[rows_of[rows]],
            pooled_prompt_embeds=pooled[rows_of[rows]],
            text_ids=torch.zeros(embeds.shape[1], 3, dtype=embeds.dtype),
            img_ids=ids,
            image_latents=source_latents[rows],
        )
        noisy = (1 - sigma[:, None, None]) * x0 + sigma[:, None, None] * noise
        velocity = sampler.velocity(transformer, noisy, sigma * 1000, cond, GUIDANCE)
        loss = flow_matching_update(
            optimizer,
            velocity,
            noise,
            x0,
            scheduled_lr(step, config.learning_rate, config.warmup_steps),
        )
        if step % 25 == 0:
            losses.append(loss)
    transformer.eval()
    return losses


def pretrain_world_editor(
    output_dir: str | Path,
    generator: str | Path,
    config: EditorConfig | None = None,
    progress: bool = True,
) -> Path:
    """Train (or reuse) the world's editor from the generator at ``generator``.

    Args:
        output_dir: the pipeline folder; a finished run of the same configuration and
            generator is returned as is (an interrupted one leaves only
            ``<output_dir>.partial``).
        generator: the world generator's ``FluxPipeline`` folder
            (:func:`~demo.world_generator.pretrain_world_generator`).
        config: :class:`EditorConfig`.
        progress: show a progress bar.

    Returns:
        ``output_dir``, a ``FluxKontextPipeline`` folder.
    """
    config = config or EditorConfig()
    return build_once(
        output_dir,
        INFO_FILE,
        config.key(generator),
        lambda work: _train_editor(work, generator, config, progress),
    )


def _train_editor(work: Path, generator: str | Path, config: EditorConfig, progress: bool) -> dict:
    """Train the editor into ``work``; returns its info (see :func:`pretrain_world_editor`)."""
    from paco_grpo.pipelines import KontextGRPOSampler

    torch.manual_seed(config.seed)
    world = editor_world(generator)
    records = make_edits(world, config.edits)
    pairs = [render_edit(world, r) for r in records]
    sources = to_tensor([s for s, _ in pairs])
    targets = to_tensor([t for _, t in pairs])
    pipe = build_world_kontext(generator)
    sampler = KontextGRPOSampler(pipe, max_sequence_length=config.max_sequence_length)
    start = time.perf_counter()
    losses = train_edits(
        sampler, sources, targets, [r["prompt"] for r in records], config, progress
    )
    seconds = time.perf_counter() - start

    pipe.save_pretrained(work)
    return {
        "config": asdict(config),
        "generator": str(generator),
        "seconds": seconds,
        "loss_every_25_steps": losses,
    }


@torch.no_grad()
def sample_edits(
    pipe,
    records: Sequence[dict],
    world,
    seed: int,
    num_steps: int = 20,
    area: int | None = None,
    max_sequence_length: int = EditorConfig.max_sequence_length,
    transformer=None,
) -> list[Image.Image]:
    """One edit per record, sampled with the deterministic (ODE) path of
    :class:`~paco_grpo.pipelines.KontextGRPOSampler` (what ``FluxKontextPipeline`` draws
    for the same initial noise); ``area``: resize the sources to it (default their size);
    ``transformer``: a policy in training instead of the pipeline's."""
    from paco_grpo.pipelines import KontextGRPOSampler

    sampler = KontextGRPOSampler(pipe, max_sequence_length=max_sequence_length)
    with quiet_clip_truncation():
        out = sampler(
            [r["prompt"] for r in records],
            [render_edit(world, r)[0] for r in records],
            area=area,
            num_steps=num_steps,
            guidance_scale=GUIDANCE,
            noise_steps=[],
            generator=torch.Generator().manual_seed(seed),
            transformer=transformer,
        )
    return to_images(out.images)


def judge_edit(image: Image.Image, record: dict) -> dict:
    """``{"changed", "kept", "success", "unreadable"}`` of one edit (see the module doc)."""
    from data_pipeline.synthetic import ATTRIBUTES
    from data_pipeline.world_oracle import read_panel

    try:
        panel = read_panel(image)
    except ValueError:
        return {"changed": 0.0, "kept": 0.0, "success": 0.0, "unreadable": 1}
    attribute = record["attribute"]
    changed = getattr(panel, attribute) == record["value"]
    others = [a for a in (*ATTRIBUTES, "step") if a != attribute]
    kept = [getattr(panel, a) == record["source"][a] for a in others]
    return {
        "changed": float(changed),
        "kept": float(np.mean(kept)),
        "success": float(changed and all(kept)),
        "unreadable": 0,
    }


def judge_edits(images: Sequence[Image.Image], records: Sequence[dict]) -> dict:
    """Judge edits (``images[i]`` made for ``records[i]``).

    Returns:
        ``{"edits", "changed", "kept", "success", "unreadable"}`` (means, and the count of
        unreadable edits), ``"per_item"`` (every edit's scores, in order) and ``"by_attribute"``
        (``{attribute: {"changed", "kept", "success"}}``).
    """
    if len(images) != len(records) or not records:
        raise InputError(
            f"judge_edits needs one image per record; got {len(images)} images, "
            f"{len(records)} records."
        )
    judged = [judge_edit(im, r) for im, r in zip(images, records)]
    result: dict = {"edits": len(judged)}
    result.update({k: float(np.mean([j[k] for j in judged])) for k in EDIT_SCORES})
    result["unreadable"] = sum(j["unreadable"] for j in judged)
    result["per_item"] = [{k: j[k] for k in EDIT_SCORES} for j in judged]
    result["by_attribute"] = {
        attribute: {
            k: float(
                np.mean([j[k] for j, r in zip(judged, records) if r["attribute"] == attribute])
            )
            for k in EDIT_SCORES
        }
        for attribute in dict.fromkeys(r["attribute"] for r in records)
    }
    return result


@dataclass
class EditTask:
    """Editing RL on the world's editor, for :func:`demo.world_rl.run_world_grpo`: edit
    records become a (prompt, image) parquet, the recipe is ``grpo_world_edit_cpu.yaml``,
    and the oracle judges the edits drawn at the test resolution (:func:`judge_edits`)."""

    world: object
    recipe: Path = RECIPE

    def write_prompts(self, records: Sequence[dict], folder: Path) -> Path:
        """The trainer's prompt file of ``records``, written in ``folder``."""
        return write_edit_prompts(self.world, records, folder / "train_prompts.parquet")

    def judge(self, trainer, records: Sequence[dict], seed: int) -> dict:
        from demo.world_rl import JUDGE_STEPS

        images = sample_edits(
            trainer.sampler.pipe,
            records,
            self.world,
            seed,
            num_steps=JUDGE_STEPS,
            area=trainer.config.test.resolution**2,
            max_sequence_length=trainer.config.max_sequence_length,
            transformer=trainer.accelerator.unwrap_model(trainer.model),
        )
        return {**judge_edits(images, records), "images": images}
