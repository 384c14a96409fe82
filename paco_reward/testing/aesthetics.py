"""A tiny LAION-style aesthetic predictor built offline, for tests: a tiny CLIP whose image
embedding has the released head's 768 inputs, and a randomly initialised head saved as the
released ``sac+logos+ava1-l14-linearMSE.pth`` is (a torch state dict, ``layers.0`` ...
``layers.7``), its last bias at 5 so that ratings sit mid-scale as real ones do::

    >>> from paco_reward.testing.aesthetics import build_tiny_aesthetic_predictor
    >>> clip, head = build_tiny_aesthetic_predictor("/tmp/tiny-aesthetic")     # doctest: +SKIP
    >>> LaionAestheticPredictor.from_pretrained(clip, head)                     # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["HEAD_FILE", "build_tiny_aesthetic_predictor"]

HEAD_FILE = "sac+logos+ava1-l14-linearMSE.pth"


def build_tiny_aesthetic_predictor(output_dir: str | Path, seed: int = 0) -> tuple[Path, Path]:
    """Write ``output_dir/clip`` (a tiny CLIP, 768-wide image embedding) and
    ``output_dir/<HEAD_FILE>``; return both paths.

    Example:
        >>> clip, head = build_tiny_aesthetic_predictor("/tmp/tiny-aesthetic")   # doctest: +SKIP
    """
    import torch

    from paco_reward.aesthetics import aesthetic_head
    from paco_reward.testing.clip import build_tiny_clip

    output_dir = Path(output_dir)
    clip = build_tiny_clip(output_dir / "clip", seed=seed, projection_dim=768)
    torch.manual_seed(seed)
    head = aesthetic_head(768)
    with torch.no_grad():
        for layer in head.layers:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.mul_(4.0)  # wide enough that images get different ratings
        head.layers[7].bias.fill_(5.0)
    torch.save(head.state_dict(), output_dir / HEAD_FILE)
    return clip, output_dir / HEAD_FILE
