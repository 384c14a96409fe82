"""The evaluator's model, whatever its Qwen-VL family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, ...).

Every load of the evaluator goes through here: the scorer (:class:`~paco_reward.local_backend.LocalBackend`,
and so ``paco-reward serve``), the SFT trainer's :func:`~paco_reward.training.loading.load_model_and_processor`
and :func:`~paco_reward.training.merge.merge_lora`. The class comes from the checkpoint's
config, through transformers' ``AutoModelForImageTextToText``; the image budget, patch and
merge sizes come from the checkpoint's processor. Loading is checked, before and after the
weights are read:

* before: the config is an image-text-to-text model (:class:`~paco_reward.errors.UnsupportedModelError`
  for a text-only one), the processor has Qwen-VL's dynamic-resolution image processing
  (patch and merge sizes, an image placeholder token) and the tokenizer single-token "Yes"
  and "No" (:class:`~paco_reward.errors.YesNoTokenError`);
* after: every weight of the class was in the checkpoint and every weight of the checkpoint
  was used (:class:`~paco_reward.errors.WeightsMismatchError`). transformers only logs a
  mismatch and initialises the missing weights at random; a scorer built on that would score
  with a random model.

The vision reuse of the scorer (each distinct image through the vision tower once) keeps, per
image, everything the family's ``get_image_features`` returns for the language model: the
merged embeddings and, for Qwen3-VL, the DeepStack features of some vision blocks.

    >>> model, processor = load_evaluator("Qwen/Qwen3-VL-8B-Instruct", dtype="auto")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paco_reward.errors import UnsupportedModelError, WeightsMismatchError
from paco_reward.hub import HUB_KWARGS, check_source

logger = logging.getLogger(__name__)

__all__ = [
    "ImageFeatures",
    "check_loading_info",
    "check_processor",
    "check_vision_language_config",
    "image_features",
    "join_image_features",
    "load_adapter",
    "load_evaluator",
    "load_evaluator_processor",
    "load_vision_language_model",
    "merger_module_names",
    "vision_tower",
]

# At most this many weight names in a message (the error object holds them all).
_SHOWN = 8
# What the chat template, the collator and the vision reuse read from a processor.
_IMAGE_PROCESSOR_ATTRIBUTES = ("patch_size", "merge_size", "size")


def _names(keys: Sequence[str]) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:_SHOWN])
    return f"{shown}, ... ({len(keys)} in all)" if len(keys) > _SHOWN else shown


# ---------------------------------------------------------------------- checks
def check_vision_language_config(config, source: str | Path) -> None:
    """Raise :class:`UnsupportedModelError` unless ``config`` (a transformers config) is an
    image-text-to-text model, the kind ``AutoModelForImageTextToText`` loads.

    Example:
        >>> from transformers import Qwen2Config
        >>> check_vision_language_config(Qwen2Config(), "org/text-only")
        Traceback (most recent call last):
        ...
        paco_reward.errors.UnsupportedModelError: 'org/text-only' is a 'qwen2' model ...
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    model_type = getattr(config, "model_type", None)
    remote = "AutoModelForImageTextToText" in (getattr(config, "auto_map", None) or {})
    if model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES or remote:
        return
    architectures = getattr(config, "architectures", None) or ["?"]
    raise UnsupportedModelError(
        f"{str(source)!r} is a {model_type!r} model ({', '.join(architectures)}) with no image "
        "input: it is not an image-text-to-text model. A PaCo evaluator is a vision-language "
        "model that transformers' AutoModelForImageTextToText loads, with Qwen-VL image "
        "processing (Qwen2.5-VL, Qwen3-VL, ...); pass such a folder or hub id."
    )


def check_processor(processor, source: str | Path = "the model") -> None:
    """Raise unless ``processor`` can feed the evaluator: an image processor of Qwen-VL's kind
    (``patch_size``, ``merge_size`` and a ``size`` pixel budget), an image placeholder token,
    and a tokenizer with single-token "Yes" and "No".

    Raises:
        UnsupportedModelError: naming the missing piece.
        YesNoTokenError: the tokenizer has no single-token "Yes"/"No".
    """
    from paco_reward.yes_no import YesNoTokens

    name = f"{str(source)!r} ({type(processor).__name__})"
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None or getattr(processor, "tokenizer", None) is None:
        raise UnsupportedModelError(
            f"{name} has no image processor, so the model takes no image input: a PaCo "
            "evaluator needs a vision-language model whose AutoProcessor holds an image "
            "processor and a tokenizer (Qwen2.5-VL, Qwen3-VL, ...)."
        )
    missing = [a for a in _IMAGE_PROCESSOR_ATTRIBUTES if getattr(image_processor, a, None) is None]
    if missing:
        raise UnsupportedModelError(
            f"{name}: its image processor {type(image_processor).__name__} has no {missing}. "
            "The evaluator resizes images and counts vision tokens as Qwen-VL's dynamic-"
            "resolution processors do (patch_size x merge_size pixels per token, a size pixel "
            "budget); use a Qwen-VL-family model (Qwen2.5-VL, Qwen3-VL, ...)."
        )
    if getattr(processor, "image_token_id", None) is None:
        raise UnsupportedModelError(
            f"{name} has no image_token_id: the evaluator expands one image placeholder token "
            "per image, as Qwen-VL processors do."
        )
    YesNoTokens.from_tokenizer(processor.tokenizer)


# What to check when a model checkpoint does not fit its class.
_MODEL_HINT = (
    "Its weights are not those of the architecture its config.json names: check the config's "
    "model_type and architectures (a checkpoint of one Qwen-VL family with the config of "
    "another loads into the wrong class), or re-export the checkpoint."
)


def check_loading_info(
    info: Mapping[str, Any], source: str | Path, model_class: type, hint: str = _MODEL_HINT
) -> None:
    """Raise :class:`WeightsMismatchError` when ``info`` (the ``loading_info`` of a
    ``from_pretrained(..., output_loading_info=True)``) lists a missing, unexpected or
    mismatched weight, naming them; ``hint`` says what to check.

    Example:
        >>> check_loading_info({"missing_keys": {"lm_head.weight"}}, "ckpt/", object)
        Traceback (most recent call last):
        ...
        paco_reward.errors.WeightsMismatchError: 'ckpt/' does not fit object: missing ...
    """
    missing = sorted(info.get("missing_keys") or ())
    unexpected = sorted(info.get("unexpected_keys") or ())
    mismatched = sorted(
        str(k[0] if isinstance(k, tuple) else k) for k in info.get("mismatched_keys") or ()
    )
    if not (missing or unexpected or mismatched):
        return
    parts = []
    if missing:
        parts.append(f"missing (would be initialised at random) {_names(missing)}")
    if unexpected:
        parts.append(f"unexpected (would be dropped) {_names(unexpected)}")
    if mismatched:
        parts.append(f"of another shape {_names(mismatched)}")
    raise WeightsMismatchError(
        f"{str(source)!r} does not fit {model_class.__name__}: {'; '.join(parts)}. {hint}",
        source=str(source),
        missing=missing,
        unexpected=unexpected,
        mismatched=mismatched,
    )


# ---------------------------------------------------------------------- loading
def load_vision_language_model(path_or_id: str | Path, model_class: type | None = None, **kwargs):
    """The model of ``path_or_id``, in the class its config names (``AutoModelForImageTextToText``,
    or ``model_class`` when given), checked strictly.

    Args:
        path_or_id: model folder or hub id.
        model_class: load through this class instead of the auto class (e.g. the class of a
            model being trained, to reload its checkpoint).
        **kwargs: ``from_pretrained`` arguments (``dtype``, ``device_map``, hub arguments, ...).

    Raises:
        UnsupportedModelError: the config is not an image-text-to-text model (checked before
            any weight is read).
        WeightsMismatchError: a weight is missing, unexpected or of another shape.

    Example:
        >>> model = load_vision_language_model("X-GenGroup/PaCo-Reward-7B", dtype="bfloat16")  # doctest: +SKIP
    """
    from transformers import AutoConfig, AutoModelForImageTextToText

    source = str(path_or_id)
    hub = {k: v for k, v in kwargs.items() if k in HUB_KWARGS}
    check_vision_language_config(AutoConfig.from_pretrained(source, **hub), source)
    loader = model_class or AutoModelForImageTextToText
    model, info = loader.from_pretrained(source, output_loading_info=True, **kwargs)
    check_loading_info(info, source, type(model))
    return model


def load_evaluator(
    path_or_id: str | Path,
    *,
    processor_source: str | Path | None = None,
    processor_kwargs: Mapping[str, Any] | None = None,
    **model_kwargs,
):
    """The evaluator's model and processor, checked in the order that fails cheapest: the
    config (image input), then the processor (Qwen-VL image processing, single-token
    "Yes"/"No"), before any weight is read; then the weights, strictly.

    Args:
        path_or_id: model folder or hub id.
        processor_source: where the processor comes from (default: ``path_or_id``; a LoRA
            training output holds its own copy).
        processor_kwargs: ``AutoProcessor.from_pretrained`` arguments (the hub ones).
        **model_kwargs: the model's ``from_pretrained`` arguments.

    Returns:
        ``(model, processor)``.

    Raises:
        UnsupportedModelError, YesNoTokenError: the model cannot be a PaCo evaluator.
        WeightsMismatchError: a weight is missing, unexpected or of another shape.

    Example:
        >>> model, processor = load_evaluator("Qwen/Qwen3-VL-8B-Instruct", dtype="auto")  # doctest: +SKIP
    """
    from transformers import AutoConfig

    source = check_source(path_or_id)
    hub = {k: v for k, v in model_kwargs.items() if k in HUB_KWARGS}
    check_vision_language_config(AutoConfig.from_pretrained(source, **hub), source)
    processor = load_evaluator_processor(processor_source or path_or_id, **(processor_kwargs or {}))
    return load_vision_language_model(path_or_id, **model_kwargs), processor


def load_evaluator_processor(path_or_id: str | Path, **kwargs):
    """``AutoProcessor.from_pretrained(path_or_id, **kwargs)``, checked by :func:`check_processor`.

    Example:
        >>> processor = load_evaluator_processor("Qwen/Qwen3-VL-8B-Instruct")  # doctest: +SKIP
    """
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(path_or_id), **kwargs)
    check_processor(processor, path_or_id)
    return processor


def load_adapter(model, adapter: str | Path, **kwargs):
    """``model`` with the PEFT adapter ``adapter`` applied (frozen, for inference), checked
    strictly. ``peft.PeftModel.from_pretrained`` loads it (key conversions, device maps and
    all), but only warns about adapter weights it did not find and ignores adapter weights
    that match no layer, which leaves the adapter partly at its initialisation. So the
    adapter's weights are then set once more through ``load_adapter``, which reports both
    (the same values again: nothing changes but the check).

    Args:
        model: the base model.
        adapter: adapter folder or hub id.
        **kwargs: adapter loading arguments (:data:`paco_reward.hub.ADAPTER_KWARGS`).

    Raises:
        WeightsMismatchError: an adapter weight is missing or unexpected.

    Example:
        >>> model = load_adapter(load_vision_language_model("Qwen/Qwen2.5-VL-7B-Instruct"),
        ...                      "X-GenGroup/PaCo-Reward-7B-Lora")  # doctest: +SKIP
    """
    from peft import PeftModel

    source = check_source(adapter, "adapter")
    key_mapping = getattr(model, "_checkpoint_conversion_mapping", None) or {}
    with warnings.catch_warnings():
        # The check below names the missing adapter weights in an error instead.
        warnings.filterwarnings("ignore", message="Found missing adapter keys")
        peft_model = PeftModel.from_pretrained(model, source, **kwargs)
    result = peft_model.load_adapter(
        source, adapter_name="default", key_mapping=key_mapping, **kwargs
    )
    info = {"missing_keys": result.missing_keys, "unexpected_keys": result.unexpected_keys}
    base_name = peft_model.peft_config["default"].base_model_name_or_path
    hint = (
        "The adapter's layers are not this base model's: load it on the base it was trained "
        f"on (its adapter_config.json names {base_name!r})."
    )
    check_loading_info(info, source, type(peft_model.get_base_model()), hint)
    return peft_model.eval()


# ---------------------------------------------------------------------- modules
def vision_tower(model):
    """The vision tower of a loaded Qwen-VL-family model (``model.model.visual``), through a
    PEFT wrapper too.

    Raises:
        UnsupportedModelError: the model has none under that name.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", None)
    visual = getattr(inner, "visual", None)
    if visual is None:
        raise UnsupportedModelError(
            f"{type(base).__name__} has no vision tower at model.visual, where the Qwen-VL "
            "families keep it; freezing and LoRA of the vision tower need it."
        )
    return visual


def merger_module_names(visual) -> list[str]:
    """Names (relative to the vision tower) of the modules that project vision features into
    the language model: ``merger``, and Qwen3-VL's DeepStack mergers
    (``deepstack_merger_list.<i>``).

    Example:
        >>> merger_module_names(vision_tower(model))  # doctest: +SKIP
        ['merger', 'deepstack_merger_list.0', 'deepstack_merger_list.1', 'deepstack_merger_list.2']
    """
    names = ["merger"]
    deepstack = getattr(visual, "deepstack_merger_list", None)
    if deepstack is not None:
        names += [f"deepstack_merger_list.{i}" for i in range(len(deepstack))]
    return names


# ---------------------------------------------------------------------- vision reuse
# Fields of a vision output that the language model does not read.
_NOT_FOR_THE_LANGUAGE_MODEL = ("last_hidden_state", "hidden_states", "attentions")


@dataclass(frozen=True)
class ImageFeatures:
    """One image's vision-tower output as the language model reads it: ``fields`` maps each
    field of the family's ``get_image_features`` output (``pooler_output``: the merged
    embeddings; Qwen3-VL's ``deepstack_features``: one tensor per DeepStack block) to this
    image's part; ``output_class`` is that output's class."""

    fields: dict[str, Any]
    output_class: type


def image_features(vision_output) -> list[ImageFeatures]:
    """Split a ``get_image_features`` output of several images into one :class:`ImageFeatures`
    per image. A field that is a tuple of per-image tensors is split by image; one that is a
    list of such tuples (one per DeepStack block) is split by image in every entry."""
    import torch

    per_image = [{"pooler_output": e} for e in vision_output.pooler_output]
    for name, value in vision_output.items():
        if name == "pooler_output" or name in _NOT_FOR_THE_LANGUAGE_MODEL:
            continue
        by_image = isinstance(value, (list, tuple)) and bool(value)
        by_block = by_image and not isinstance(value[0], torch.Tensor)
        parts = value if by_block else [value]
        if not by_image or any(len(part) != len(per_image) for part in parts):
            raise UnsupportedModelError(
                f"{type(vision_output).__name__}.{name} is not split by image ({len(per_image)} "
                "images); the vision reuse knows per-image tuples and lists of them."
            )
        for k, fields in enumerate(per_image):
            fields[name] = [entry[k] for entry in value] if by_block else value[k]
    return [ImageFeatures(fields, type(vision_output)) for fields in per_image]


def join_image_features(features: Sequence[ImageFeatures]):
    """The ``get_image_features`` output of ``features`` (images in this order), the
    ``mm_encoder_outputs["image"]`` a model's forward takes instead of ``pixel_values``."""
    first = features[0]
    joined: dict[str, Any] = {}
    for name, value in first.fields.items():
        if isinstance(value, list):
            joined[name] = [tuple(f.fields[name][i] for f in features) for i in range(len(value))]
        else:
            joined[name] = tuple(f.fields[name] for f in features)
    return first.output_class(**joined)
