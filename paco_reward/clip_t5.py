"""CLIP-FlanT5, the model behind VQAScore (``zhiqiulin/clip-flant5-xxl``), on transformers'
``CLIPVisionModel`` and ``T5ForConditionalGeneration``.

The published checkpoint was trained and saved by t2v-metrics' ``CLIPT5ForConditionalGeneration``
(a LLaVA-1.5 recipe on FlanT5): a T5 whose encoder reads the CLIP patch features of one image,
spliced in where the prompt has its image placeholder. Only what transformers lacks is
written here, with the reference's module names, so a state dict saved by its class loads into
this one unchanged:

- ``vision_tower.vision_tower``: a ``CLIPVisionModel``; the features are the hidden states of
  layer ``mm_vision_select_layer`` (-2: the second to last) without the class token
  (``mm_vision_select_feature="patch"``);
- ``mm_projector``: ``mlp{N}x_gelu`` (``Linear, GELU, Linear, ...`` as ``nn.Sequential``:
  ``mm_projector.0`` / ``mm_projector.2``), ``linear`` or ``identity``;
- ``embed_tokens``: the reference's second name for T5's shared embedding.

The checkpoint's ``config.json`` names the vision tower only by ``mm_vision_tower``
(``openai/clip-vit-large-patch14-336``); :func:`load_clip_t5` resolves that tower's config
(and its weights when the checkpoint has none), as the reference builds the tower from it.

    >>> from paco_reward.clip_t5 import load_clip_t5
    >>> model, image_processor = load_clip_t5("zhiqiulin/clip-flant5-xxl")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import (
    AutoConfig,
    CLIPVisionConfig,
    CLIPVisionModel,
    T5Config,
    T5ForConditionalGeneration,
)

from paco_reward.errors import UnsupportedModelError
from paco_reward.hub import check_source

__all__ = [
    "CLIPT5Config",
    "CLIPT5ForConditionalGeneration",
    "CLIPVisionTower",
    "IMAGE_PLACEHOLDER_ID",
    "build_projector",
    "is_clip_t5_config",
    "load_clip_t5",
]

logger = logging.getLogger(__name__)

# The id that marks the image's place in ``input_ids`` (LLaVA's IMAGE_TOKEN_INDEX): never a
# vocabulary id, replaced by the image's projected patch features before the encoder.
IMAGE_PLACEHOLDER_ID = -200


@strict
class CLIPT5Config(T5Config):
    """A T5 configuration plus the vision fields of the reference's ``clip_t5`` configs.

    ``vision_config`` is not in the published ``config.json``: :func:`load_clip_t5` fills it
    from ``mm_vision_tower`` (the architecture files shipped in ``paco_reward.architectures``
    carry it written out, for a plan on the meta device).
    """

    model_type = "clip_t5"

    mm_vision_tower: str = "openai/clip-vit-large-patch14-336"
    mm_hidden_size: int = 1024
    mm_projector_type: str = "mlp2x_gelu"
    mm_vision_select_layer: int = -2
    mm_vision_select_feature: str = "patch"
    vision_config: dict | None = None


def build_projector(config: CLIPT5Config) -> nn.Module:
    """The vision-to-T5 projector ``config.mm_projector_type`` names, as the reference builds
    it: ``linear``, ``mlp{N}x_gelu`` (N linear layers with a GELU between each two) or
    ``identity``.

    Raises:
        UnsupportedModelError: another projector type.

    Example:
        >>> config = CLIPT5Config(d_model=8, mm_hidden_size=4, num_heads=2, d_kv=4)
        >>> build_projector(config)
        Sequential(
          (0): Linear(in_features=4, out_features=8, bias=True)
          (1): GELU(approximate='none')
          (2): Linear(in_features=8, out_features=8, bias=True)
        )
    """
    kind = config.mm_projector_type
    if kind == "linear":
        return nn.Linear(config.mm_hidden_size, config.d_model)
    if kind == "identity":
        return nn.Identity()
    match = re.fullmatch(r"mlp(\d+)x_gelu", kind)
    if not match:
        raise UnsupportedModelError(
            f"mm_projector_type {kind!r} is not one of CLIP-FlanT5's: 'linear', "
            "'mlp<N>x_gelu' (the published checkpoints' 'mlp2x_gelu'), 'identity'."
        )
    layers: list[nn.Module] = [nn.Linear(config.mm_hidden_size, config.d_model)]
    for _ in range(1, int(match.group(1))):
        layers += [nn.GELU(), nn.Linear(config.d_model, config.d_model)]
    return nn.Sequential(*layers)


class _VisionModelHolder(nn.Module):
    """Holds a ``CLIPVisionModel`` as ``vision_model``: the reference's transformers 4.x
    ``CLIPVisionModel`` kept its transformer there, so its weights are named
    ``vision_tower.vision_tower.vision_model.*``."""

    def __init__(self, vision_config: CLIPVisionConfig):
        super().__init__()
        self.vision_model = CLIPVisionModel(vision_config)


class CLIPVisionTower(nn.Module):
    """A ``CLIPVisionModel`` (``self.vision_tower.vision_model``, under the reference's names)
    and the choice of its features: the hidden states of ``select_layer``, without the class
    token for ``"patch"`` (with it for ``"cls_patch"``)."""

    def __init__(self, vision_config: CLIPVisionConfig, select_layer: int, select_feature: str):
        super().__init__()
        if select_feature not in ("patch", "cls_patch"):
            raise UnsupportedModelError(
                f"mm_vision_select_feature {select_feature!r} is not 'patch' or 'cls_patch'."
            )
        self.vision_tower = _VisionModelHolder(vision_config)
        self.select_layer = select_layer
        self.select_feature = select_feature

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Patch features ``[n, patches, mm_hidden_size]`` of ``pixel_values``, run in the
        tower's dtype and returned in ``pixel_values``' (as the reference does)."""
        model = self.vision_tower.vision_model
        out = model(pixel_values.to(model.dtype), output_hidden_states=True)
        features = out.hidden_states[self.select_layer]
        if self.select_feature == "patch":
            features = features[:, 1:]
        return features.to(pixel_values.dtype)


class CLIPT5ForConditionalGeneration(T5ForConditionalGeneration):
    """T5 with a CLIP vision tower whose projected patch features replace the image
    placeholder (:data:`IMAGE_PLACEHOLDER_ID`) of each row of ``input_ids``.

    Example:
        >>> logits = model(input_ids=ids, attention_mask=mask, pixel_values=pixels,
        ...                decoder_input_ids=decoder_ids).logits  # doctest: +SKIP
    """

    config_class = CLIPT5Config
    # The reference's ``self.embed_tokens = self.encoder.embed_tokens`` puts the shared
    # embedding in its checkpoints a fourth time, as ``embed_tokens.weight``: the same tensor
    # as ``shared.weight``, which loads it.
    _keys_to_ignore_on_load_unexpected = [
        *T5ForConditionalGeneration._keys_to_ignore_on_load_unexpected,
        r"^embed_tokens\.weight$",
    ]
    _no_split_modules = ["T5Block", "CLIPEncoderLayer"]

    def __init__(self, config: CLIPT5Config):
        if not config.scale_decoder_outputs:
            # FlanT5 (``tie_word_embeddings: false``) has a head of its own, as the reference
            # builds it: not tied to the embedding (transformers 5's T5 ties it by default).
            object.__setattr__(self, "_tied_weights_keys", {
                k: v for k, v in self._tied_weights_keys.items() if k != "lm_head.weight"
            })  # fmt: skip
        super().__init__(config)
        if config.vision_config is None:
            raise UnsupportedModelError(
                f"CLIPT5Config has no vision_config: load the model with "
                f"paco_reward.clip_t5.load_clip_t5, which reads it from mm_vision_tower "
                f"({config.mm_vision_tower!r})."
            )
        self.vision_tower = CLIPVisionTower(
            CLIPVisionConfig(**config.vision_config),
            config.mm_vision_select_layer,
            config.mm_vision_select_feature,
        )
        self.mm_projector = build_projector(config)
        self.post_init()

    def encode_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Projected patch features ``[n, patches, d_model]`` of ``pixel_values``."""
        return self.mm_projector(self.vision_tower(pixel_values))

    def splice_images(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        image_features: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder's ``inputs_embeds`` and ``attention_mask`` of right-padded ``input_ids``
        in which each row holds one :data:`IMAGE_PLACEHOLDER_ID`: its token embeddings with
        that row's ``image_features`` (``[rows, patches, d_model]``, or ``[1, ...]`` for one
        image shared by every row) in the placeholder's place, the mask kept true there.

        Raises:
            UnsupportedModelError: a row without exactly one image placeholder.
        """
        rows = input_ids.shape[0]
        counts = (input_ids == IMAGE_PLACEHOLDER_ID).sum(dim=1)
        if not bool((counts == 1).all()):
            raise UnsupportedModelError(
                f"each prompt must hold exactly one image placeholder; got {counts.tolist()}."
            )
        features = image_features.expand(rows, -1, -1)
        embeds = self.shared(input_ids.clamp_min(0))
        at = int((input_ids[0] == IMAGE_PLACEHOLDER_ID).nonzero()[0, 0])
        if bool((input_ids[:, at] == IMAGE_PLACEHOLDER_ID).all()):  # one place for all rows
            inputs_embeds = torch.cat(
                [embeds[:, :at], features.to(embeds.dtype), embeds[:, at + 1 :]], dim=1
            )
            patches = torch.ones(
                rows, features.shape[1], dtype=attention_mask.dtype, device=attention_mask.device
            )
            mask = torch.cat([attention_mask[:, :at], patches, attention_mask[:, at + 1 :]], 1)
            return inputs_embeds, mask
        # Rows whose placeholders differ in place: each row spliced, then right-padded.
        spliced, masks = [], []
        for r in range(rows):
            i = int((input_ids[r] == IMAGE_PLACEHOLDER_ID).nonzero()[0, 0])
            spliced.append(torch.cat([embeds[r, :i], features[r].to(embeds.dtype), embeds[r, i + 1 :]]))
            patches = attention_mask.new_ones(features.shape[1])
            masks.append(torch.cat([attention_mask[r, :i], patches, attention_mask[r, i + 1 :]]))
        return torch.stack(spliced), torch.stack(masks)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        image_features: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Any,
    ):
        """T5's forward; with ``pixel_values`` (or their :meth:`encode_images` features) the
        image placeholder of each row of ``input_ids`` becomes the image's features first."""
        if inputs_embeds is None and (pixel_values is not None or image_features is not None):
            if image_features is None:
                image_features = self.encode_images(pixel_values)
            if attention_mask is None:
                attention_mask = torch.ones_like(input_ids)
            inputs_embeds, attention_mask = self.splice_images(
                input_ids, attention_mask, image_features
            )
            input_ids = None
        return super().forward(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
        )


AutoConfig.register("clip_t5", CLIPT5Config, exist_ok=True)


# ---------------------------------------------------------------------- loading
def is_clip_t5_config(config: dict[str, Any]) -> bool:
    """Whether a ``config.json`` (as a dict) is CLIP-FlanT5's: model type ``clip_t5``, a vision
    tower named."""
    return config.get("model_type") == "clip_t5" and bool(config.get("mm_vision_tower"))


def load_clip_t5(
    path_or_id: str | Path,
    *,
    vision_tower: str | Path | None = None,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str | None = None,
    **hub: Any,
):
    """The CLIP-FlanT5 model of ``path_or_id`` (cast whole to ``dtype``, as the reference's
    ``model.to(dtype=torch.bfloat16)`` does, T5's float32 ``wo`` included) and the CLIP image
    processor of its vision tower.

    Args:
        path_or_id: a CLIP-FlanT5 folder or hub id (``zhiqiulin/clip-flant5-xxl``).
        vision_tower: where the vision tower's config, image processor and (for a checkpoint
            without them) weights come from; default the config's ``mm_vision_tower``.
        dtype: the weights' dtype.
        device: where the model goes (default: stays on the CPU).
        **hub: ``revision``, ``cache_dir``, ``token``, ``local_files_only`` for the model.

    Raises:
        PathNotFoundError: ``path_or_id`` is neither a folder nor a hub id.
        UnsupportedModelError: its config is not CLIP-FlanT5's.
        WeightsMismatchError: a weight of the checkpoint does not fit the model.
    """
    from transformers import PretrainedConfig
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    source = check_source(path_or_id)
    config_dict, _ = PretrainedConfig.get_config_dict(source, **hub)
    if not is_clip_t5_config(config_dict):
        raise UnsupportedModelError(
            f"{source!r} is not a CLIP-FlanT5 model: its config.json has model_type "
            f"{config_dict.get('model_type')!r} and mm_vision_tower "
            f"{config_dict.get('mm_vision_tower')!r} (CLIP-FlanT5's: 'clip_t5' and a CLIP "
            "vision tower). Give a CLIP-FlanT5 checkpoint such as zhiqiulin/clip-flant5-xxl."
        )
    tower = str(vision_tower or config_dict["mm_vision_tower"])
    tower_hub = {k: v for k, v in hub.items() if k != "revision"}  # the model's revision only
    config = CLIPT5Config.from_pretrained(source, **hub)
    if config.vision_config is None:
        config.vision_config = CLIPVisionConfig.from_pretrained(tower, **tower_hub).to_dict()
    model, info = CLIPT5ForConditionalGeneration.from_pretrained(
        source, config=config, dtype=dtype, output_loading_info=True, **hub
    )
    missing = sorted(info.get("missing_keys") or ())
    tower_missing = [k for k in missing if k.startswith("vision_tower.")]
    if tower_missing:  # a checkpoint without its tower: the reference's from mm_vision_tower
        tower_model = CLIPVisionModel.from_pretrained(tower, dtype=dtype, **tower_hub)
        model.vision_tower.vision_tower.vision_model.load_state_dict(tower_model.state_dict())
        info["missing_keys"] = [k for k in missing if not k.startswith("vision_tower.")]
    from paco_reward.modeling import check_loading_info

    check_loading_info(info, source, CLIPT5ForConditionalGeneration)
    model.to(dtype=dtype)
    if device is not None:
        model.to(device)
    image_processor = CLIPImageProcessorPil.from_pretrained(tower, **tower_hub)
    return model.eval().requires_grad_(False), image_processor

