"""Aesthetic scorers: a protocol a benchmark's aesthetics column takes, and one predictor
from the field.

Neither T2IS-Bench nor PaCo-RL publishes the model behind their "Aesthetics" column, so no
built-in predictor is the paper's. The one shipped here is the LAION "improved aesthetic
predictor" (``sac+logos+ava1-l14-linearMSE``, christophschuhmann/improved-aesthetic-predictor):
the aesthetic reward of DDPO (as TRL's DDPO example loads it), Flow-GRPO
(``flow_grpo/aesthetic_scorer.py``) and GARDO, so its numbers compare with those papers'. The
score of an image is the head's rating on AVA's 1-10 scale, divided by 10 and kept in
[0, 1]: T2IS-Bench's column lies in 0.41-0.57, the scale of this predictor's typical 4-6.

    >>> scorer = LaionAestheticPredictor.from_pretrained()        # doctest: +SKIP
    >>> scorer.score(["a.png", "b.png"])                          # doctest: +SKIP
    array([0.55..., 0.47...])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from paco_reward.errors import InputError, PathNotFoundError, WeightsMismatchError
from paco_reward.images import ImageInput

__all__ = [
    "AestheticScorer",
    "LAION_HEAD",
    "LaionAestheticPredictor",
    "aesthetic_components",
    "aesthetic_head",
]

logger = logging.getLogger(__name__)

# The head as TRL's DDPO example downloads it (hub repo, file): the released
# sac+logos+ava1-l14-linearMSE.pth. Its CLIP is OpenAI's ViT-L/14 at 224 px.
LAION_HEAD = ("trl-lib/ddpo-aesthetic-predictor", "aesthetic-model.pth")
LAION_CLIP = "openai/clip-vit-large-patch14"
NOT_THE_PAPERS = (
    "not the paper's (unpublished) model: T2IS-Bench and PaCo-RL do not say which predictor "
    "their Aesthetics column used"
)


@runtime_checkable
class AestheticScorer(Protocol):
    """What a benchmark's aesthetics column takes: ``score(images)`` -> float64 in [0, 1],
    one per image, and ``describe()`` for the report's protocol."""

    name: str

    def score(self, images: Sequence[ImageInput]) -> np.ndarray: ...

    def describe(self) -> dict: ...


def aesthetic_head(embedding_size: int = 768):
    """The predictor's MLP, with its published layer indices (``layers.0`` ... ``layers.7``):
    five linear layers, dropout between the first four, no activation.

    Example:
        >>> [name for name, _ in aesthetic_head().state_dict().items()][:2]
        ['layers.0.weight', 'layers.0.bias']
    """
    from torch import nn

    class AestheticHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.Sequential(
                nn.Linear(embedding_size, 1024), nn.Dropout(0.2), nn.Linear(1024, 128),
                nn.Dropout(0.2), nn.Linear(128, 64), nn.Dropout(0.1), nn.Linear(64, 16),
                nn.Linear(16, 1),
            )  # fmt: skip

        def forward(self, embedding):
            return self.layers(embedding)

    return AestheticHead()


def _load_head(path: Path):
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: pickle, zip or torch errors
        raise WeightsMismatchError(
            f"{str(path)!r} is not an aesthetic predictor head ({type(err).__name__}: {err}); "
            f"give the released sac+logos+ava1-l14-linearMSE.pth ({LAION_HEAD[0]}: {LAION_HEAD[1]}).",
            source=str(path),
        ) from None
    if not isinstance(state, dict) or "layers.0.weight" not in state:
        raise WeightsMismatchError(
            f"{str(path)!r} holds no aesthetic head (no 'layers.0.weight'); give the released "
            f"sac+logos+ava1-l14-linearMSE.pth.",
            source=str(path),
        )
    head = aesthetic_head(state["layers.0.weight"].shape[1])
    missing, unexpected = head.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise WeightsMismatchError(
            f"{str(path)!r} does not fit the aesthetic head: missing {sorted(missing)}, "
            f"unexpected {sorted(unexpected)}.",
            source=str(path),
            missing=missing,
            unexpected=unexpected,
        )
    return head.eval()


class LaionAestheticPredictor:
    """The LAION improved aesthetic predictor: a CLIP image embedding (L2-normalised) into
    its MLP head; :meth:`score` is the rating / 10 in [0, 1] (:meth:`ratings` the 1-10 one).

    Args:
        clip: a :class:`~paco_reward.baselines.CLIPImageScorer` (its embeddings: one path
            for CLIP image embeddings in the library).
        head: the MLP (:func:`aesthetic_head`) with the released weights.
        head_source: where the head came from, for :meth:`describe`.

    Attributes:
        name: ``"laion-aesthetic"``.
    """

    name = "laion-aesthetic"

    def __init__(self, clip, head, *, head_source: str = "", clip_source: str = "") -> None:
        self.clip = clip
        self.head = head
        self.head_source = head_source
        self.clip_source = clip_source

    @classmethod
    def from_pretrained(
        cls,
        clip: str | Path = LAION_CLIP,
        head: str | Path | tuple[str, str] | list[str] = LAION_HEAD,
        *,
        device=None,
        batch_size: int = 16,
        **hub: Any,
    ) -> LaionAestheticPredictor:
        """Load the CLIP (folder or hub id) and the head (a local ``.pth`` or a ``(hub repo,
        file)`` pair, downloaded through the hub cache).

        Raises:
            PathNotFoundError: ``head`` names no file.
            WeightsMismatchError: the head file is not the predictor's.
        """
        from paco_reward.baselines import CLIPImageScorer

        if isinstance(head, (tuple, list)):  # a YAML recipe gives the pair as a list
            from huggingface_hub import hf_hub_download

            head_path = Path(hf_hub_download(head[0], head[1], **hub))
            head_source = f"{head[0]}:{head[1]}"
        else:
            head_path, head_source = Path(head), str(head)
            if not head_path.is_file():
                raise PathNotFoundError(
                    f"No aesthetic head file at {head_source!r}; give the released "
                    f"sac+logos+ava1-l14-linearMSE.pth or the hub pair {LAION_HEAD}."
                )
        module = _load_head(head_path)
        from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

        scorer = CLIPImageScorer(clip, device=device, batch_size=batch_size)
        # PIL's bicubic resize, as the released predictor's (transformers 4) CLIPProcessor
        # resized: torchvision's differs by ~1e-4 in the rating.
        scorer.processor = CLIPImageProcessorPil.from_pretrained(clip, **hub)
        module.to(scorer.device)
        return cls(scorer, module, head_source=head_source, clip_source=str(clip))

    def ratings(self, images: Sequence[ImageInput]) -> np.ndarray:
        """The head's ratings (AVA's 1-10 scale), float64, one per image."""
        import torch

        if isinstance(images, (str, Path)):
            raise InputError(f"score() takes a list of images; got one {type(images).__name__}.")
        if len(images) == 0:
            return np.zeros(0, dtype=np.float64)
        embedding = self.clip.embed(images)
        with torch.inference_mode():
            x = torch.as_tensor(embedding, dtype=torch.float32, device=self.clip.device)
            return self.head(x).squeeze(-1).double().cpu().numpy()

    def score(self, images: Sequence[ImageInput]) -> np.ndarray:
        """Ratings / 10, kept in [0, 1], float64, one per image.

        Raises:
            InvalidImageError: an image is missing, corrupt or not an image (named).
        """
        return np.clip(self.ratings(images) / 10.0, 0.0, 1.0)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": "LAION improved aesthetic predictor (sac+logos+ava1-l14-linearMSE)",
            "clip": self.clip_source,
            "head": self.head_source,
            "formula": "MLP(L2-normalised CLIP image embedding) / 10, clipped to [0, 1]",
            "dtype": str(self.clip.dtype).removeprefix("torch."),
            "note": NOT_THE_PAPERS,
        }


def aesthetic_components(clip: str | Path = LAION_CLIP, dtype: str = "float32"):
    """What a process holding the aesthetic predictor holds, as plan components: the CLIP
    (its folder's ``config.json`` or the shipped architecture of OpenAI's ViT-L/14, built on
    the meta device; the text tower is loaded too) and the head (0.9 M).

    Example:
        >>> [round(c.parameters / 1e6, 1) for c in aesthetic_components()]
        [427.6, 0.9]
    """
    import torch

    from paco_reward.architectures import build_empty, count_parameters, model_config
    from paco_reward.planning import Component

    params = count_parameters(build_empty(model_config(clip), getattr(torch, dtype)))
    head = sum(p.numel() for p in aesthetic_head().parameters())
    return [
        Component(f"aesthetic CLIP {Path(str(clip)).name}", params, dtype, kind="reward",
                  note="exact: meta-device build of the architecture"),  # fmt: skip
        Component("aesthetic head", head, "float32", kind="reward", note="the released MLP"),
    ]
