"""Tiny, randomly initialised Qwen-Image-Edit-shaped pipelines built offline.

:func:`build_tiny_qwen_image_edit` writes an ordinary diffusers folder with the five parts
of ``Qwen/Qwen-Image-Edit``: the tiny Qwen-Image components of
:func:`paco_grpo.testing.qwen_image.tiny_qwen_image_components` (transformer, VAE,
Qwen2.5-VL text encoder and tokenizer, scheduler config) and the ``Qwen2VLProcessor``
through which the text encoder sees the reference image. It loads with
``QwenImageEditPipeline.from_pretrained`` as the real model does (and
:func:`build_tiny_qwen_image_edit_plus` the same components as a ``QwenImageEditPlusPipeline``,
as ``Qwen/Qwen-Image-Edit-2509``)::

    >>> from diffusers import QwenImageEditPipeline
    >>> path = build_tiny_qwen_image_edit("/tmp/tiny-qwen-edit")    # doctest: +SKIP
    >>> pipe = QwenImageEditPipeline.from_pretrained(path)          # doctest: +SKIP

Shapes that differ from the real model on purpose: the VAE downsamples 32x (five
levels, no temporal downsampling) instead of 8x, so the 1024²-area reference that
``QwenImageEditPipeline`` always VAE-encodes is 32x32 latents and its mid-block
attention stays cheap on CPU; image sides are then multiples of 64. The transformer
has one block; the text encoder's hidden size (64) is the transformer's
``joint_attention_dim``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paco_grpo.testing.cases import ParityCase, TinyCase
from paco_grpo.testing.qwen_image import tiny_qwen_image_components

__all__ = [
    "TEST_CASES",
    "build_tiny_qwen_image_edit",
    "build_tiny_qwen_image_edit_plus",
    "tiny_qwen_image_edit_components",
]


TEST_CASES = {
    # diffusers resizes the reference to 1024^2 px area whatever the output size
    "qwen_image_edit": TinyCase(
        "recipes/grpo_qwen_image_edit_tiny_cpu.yaml",
        ParityCase(("make it red",), (128, 128), 4.0,
                   {"negative_prompt": " ", "true_cfg_scale": 4.0}, {"negative_prompt": " "},
                   references=((64, 64),), area=1024 * 1024),
        resolution=64,  # its tiny VAE downsamples 32x
    ),
    # one prompt (diffusers' limit); references at the VAE size, so that both resize them to
    # their ~384^2 px condition size from the same pixels
    "qwen_image_edit_plus": TinyCase(
        "recipes/grpo_qwen_image_edit_plus_tiny_cpu.yaml",
        ParityCase(("put the cat of picture 2 on the sofa of picture 1",), (128, 128), 4.0,
                   {"negative_prompt": " ", "true_cfg_scale": 4.0}, {"negative_prompt": " "},
                   references=((1024, 1024), (1024, 1024))),
        resolution=64,  # its tiny VAE downsamples 32x
    ),
}  # fmt: skip
"""How the shared tests run the tiny Qwen-Image-Edit models
(:class:`~paco_grpo.testing.cases.TinyCase`)."""


def tiny_qwen_image_edit_components(seed: int = 0, **transformer_overrides: Any) -> dict:
    """The components of a tiny Qwen-Image-Edit pipeline (``QwenImageEditPipeline`` kwargs):
    the tiny Qwen-Image's with a 32x VAE.

    ``transformer_overrides`` update the ``QwenImageTransformer2DModel`` config."""
    return tiny_qwen_image_components(seed, vae_levels=5, **transformer_overrides)


def build_tiny_qwen_image_edit(
    output_dir: str | Path, seed: int = 0, **transformer_overrides: Any
) -> Path:
    """Write a randomly initialised tiny ``QwenImageEditPipeline`` to ``output_dir``.

    Args:
        output_dir: folder to create (an ordinary diffusers pipeline folder).
        seed: seed of the random weights; the same seed gives the same model.
        **transformer_overrides: ``QwenImageTransformer2DModel`` config fields.

    Returns:
        The folder, loadable with ``QwenImageEditPipeline.from_pretrained``.

    Example:
        >>> path = build_tiny_qwen_image_edit("/tmp/tiny-qwen-edit", seed=0)   # doctest: +SKIP
    """
    from diffusers import QwenImageEditPipeline

    return _build(QwenImageEditPipeline, output_dir, seed, transformer_overrides)


def build_tiny_qwen_image_edit_plus(
    output_dir: str | Path, seed: int = 0, **transformer_overrides: Any
) -> Path:
    """Write a randomly initialised tiny ``QwenImageEditPlusPipeline`` (the several-reference
    editor of Qwen-Image-Edit-2509, which has the same components) to ``output_dir``; see
    :func:`build_tiny_qwen_image_edit`.

    Example:
        >>> path = build_tiny_qwen_image_edit_plus("/tmp/tiny-qwen-edit-plus")   # doctest: +SKIP
    """
    from diffusers import QwenImageEditPlusPipeline

    return _build(QwenImageEditPlusPipeline, output_dir, seed, transformer_overrides)


def _build(cls, output_dir: str | Path, seed: int, overrides: dict[str, Any]) -> Path:
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    cls(**tiny_qwen_image_edit_components(seed, **overrides)).save_pretrained(output_dir)
    return output_dir
