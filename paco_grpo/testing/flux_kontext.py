"""Tiny, randomly initialised FLUX.1-Kontext-shaped pipelines built offline.

FLUX.1-Kontext-dev has the components of FLUX.1-dev (the same ``FluxTransformer2DModel``
with guidance embedding, VAE, CLIP + T5 text encoders, scheduler); what differs is the
pipeline: the reference image's packed VAE latents are appended to the image tokens, with
position ids whose first axis is 1. :func:`build_tiny_flux_kontext` therefore writes the
tiny FLUX components of :func:`paco_grpo.testing.flux.tiny_flux_components` as a
``FluxKontextPipeline`` folder, loadable the way ``black-forest-labs/FLUX.1-Kontext-dev`` is::

    >>> from diffusers import FluxKontextPipeline
    >>> path = build_tiny_flux_kontext("/tmp/tiny-kontext")      # doctest: +SKIP
    >>> pipe = FluxKontextPipeline.from_pretrained(path)         # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paco_grpo.testing.cases import ParityCase, TinyCase

__all__ = ["TEST_CASES", "build_tiny_flux_kontext", "write_tiny_edit_prompts"]


TEST_CASES = {
    "flux_kontext": TinyCase(
        "recipes/grpo_kontext_tiny_cpu.yaml",
        ParityCase(("make the sky pink",), (48, 80), 2.5,
                   {"guidance_scale": 2.5, "max_sequence_length": 32, "max_area": 48 * 80,
                    "_auto_resize": False},
                   {"max_sequence_length": 32}, references=((80, 48),)),
    ),
}  # fmt: skip
"""How the shared tests run the tiny FLUX.1-Kontext (:class:`~paco_grpo.testing.cases.TinyCase`)."""


def build_tiny_flux_kontext(
    output_dir: str | Path, seed: int = 0, **transformer_overrides: Any
) -> Path:
    """Write a randomly initialised tiny ``FluxKontextPipeline`` to ``output_dir``.

    Args:
        output_dir: folder to create (an ordinary diffusers pipeline folder).
        seed: seed of the random weights; the same seed gives the same model.
        **transformer_overrides: ``FluxTransformer2DModel`` config fields (e.g. ``num_layers=2``).

    Returns:
        The folder, loadable with ``FluxKontextPipeline.from_pretrained``.

    Example:
        >>> path = build_tiny_flux_kontext("/tmp/tiny-kontext", seed=0)   # doctest: +SKIP
    """
    from diffusers import FluxKontextPipeline

    from paco_grpo.testing.flux import tiny_flux_components

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    pipe = FluxKontextPipeline(
        **tiny_flux_components(seed, **transformer_overrides),
        image_encoder=None,
        feature_extractor=None,
    )
    pipe.save_pretrained(output_dir)
    return output_dir


def write_tiny_edit_prompts(path: str | Path, seed: int = 0, references: int = 1) -> Path:
    """Write a small (prompt, image) parquet for the tiny editing recipes and tests.

    Four rows: two instructions, each applied to two source images of different aspect
    ratio (square 48x48 and wide 96x48, random colour blocks), under the same prompt id, so
    a trainer must group by (prompt id, image hash). Images are PNG bytes in a
    ``{"bytes", "path"}`` struct, as ``datasets`` writes them. With ``references=2`` each
    row's ``image`` is a list, the source then a second reference (square for the first
    instruction, tall 48x96 for the second: one batch of edits of one source size holds
    references of two sizes), as multi-reference editors (Qwen-Image-Edit-Plus) take them.

    Example:
        >>> write_tiny_edit_prompts("/tmp/tiny_edit_prompts.parquet")   # doctest: +SKIP
    """
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    rng = np.random.default_rng(seed)

    def png(width: int, height: int) -> dict:
        blocks = rng.integers(0, 256, (height // 16, width // 16, 3), dtype=np.uint8)
        pixels = np.kron(blocks, np.ones((16, 16, 1), dtype=np.uint8))
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="PNG")
        return {"bytes": buffer.getvalue(), "path": None}

    sources = [png(48, 48), png(96, 48)]
    seconds = [png(48, 48), png(48, 96)]  # one per instruction
    prompts = ["make every quadrant the same colour", "paint it in one flat colour"]
    rows = [
        {
            "id": str(k),
            "prompt": prompt,
            "image": source if references == 1 else [source, *[seconds[k]] * (references - 1)],
        }
        for k, prompt in enumerate(prompts)
        for source in sources
    ]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path
