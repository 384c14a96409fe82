"""What a training script does before the trainer trains: build or find the model, load it
with its processor, say which layers LoRA adapts, load the pair datasets, and put them
together into a :class:`~paco_reward.training.sft_trainer.PacoSFTTrainer`.

``paco-reward train`` (and the demo) call :func:`build_trainer`, as trl's example scripts
load model and data and hand them to ``SFTTrainer``.

    >>> trainer = build_trainer(PacoSFTConfig(output_dir="out", dataset_path="pairs/",
    ...                                       model_name_or_path="Qwen/Qwen2.5-VL-7B-Instruct"))  # doctest: +SKIP
    >>> trainer.train()                                                               # doctest: +SKIP
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from paco_reward.errors import ConfigError, PathNotFoundError
from paco_reward.hub import HUB_KWARGS
from paco_reward.modeling import load_evaluator, merger_module_names, vision_tower
from paco_reward.training.sft_config import (
    LM_LINEAR_LAYERS,
    TOY_DATASET,
    VISION_LINEAR_LAYERS,
    PacoSFTConfig,
)

logger = logging.getLogger(__name__)

__all__ = [
    "build_trainer",
    "load_model_and_processor",
    "load_pair_dataset_dict",
    "load_pair_datasets",
    "lora_config",
    "model_init_kwargs",
]


def build_or_locate_model(args: PacoSFTConfig) -> str:
    """The model folder to load; builds the from-scratch tiny model when ``tiny_model``."""
    if not args.model_name_or_path:
        raise ConfigError(
            "model_name_or_path is not set; give a Qwen-VL-family folder or hub id (e.g. "
            "Qwen/Qwen2.5-VL-7B-Instruct, Qwen/Qwen3-VL-8B-Instruct)."
        )
    path = Path(args.model_name_or_path)
    if args.tiny_model and not (path / "config.json").is_file():
        from paco_reward.testing.qwen import TINY_VISION_TOWERS, build_tiny_model

        side = args.image_max_pixels or 28 * 28
        logger.info("Building a from-scratch tiny Qwen2.5-VL at %s", path)
        build_tiny_model(
            path,
            seed=args.seed,
            min_pixels=args.image_min_pixels or side,
            max_pixels=side,
            vision_config=TINY_VISION_TOWERS[args.tiny_vision],
        )
    return str(args.model_name_or_path)


def lora_target_regex(args: PacoSFTConfig) -> str:
    """Regex (peft full-match) of the linear layers that get LoRA: the language model's
    ``lora_target_modules``, plus the vision tower's linear layers when it is not frozen
    (Qwen2.5-VL's and Qwen3-VL's names alike: each family matches its own)."""
    unknown = sorted(set(args.lora_target_modules) - set(LM_LINEAR_LAYERS))
    if unknown:
        raise ConfigError(
            f"lora_target_modules {unknown} are not linear layers of the language model; "
            f"choose from {list(LM_LINEAR_LAYERS)}."
        )
    names = "|".join(args.lora_target_modules)
    pattern = rf".*language_model\.layers\.\d+\.(self_attn|mlp)\.({names})"
    if not args.freeze_vision_tower:
        pattern += rf"|.*visual\.blocks\.\d+\.(attn|mlp)\.({'|'.join(VISION_LINEAR_LAYERS)})"
    return pattern


def lora_config(args: PacoSFTConfig, model=None):
    """The ``peft.LoraConfig`` of ``args`` (``None`` for full fine-tuning).

    Args:
        args: the SFT config.
        model: the loaded model. With ``freeze_merger: false`` its merger modules are trained
            and saved with the adapter: ``merger``, and Qwen3-VL's DeepStack mergers, which
            only the model can list (without a model: ``merger`` alone).
    """
    if not args.use_lora:
        return None
    from peft import LoraConfig

    mergers = merger_module_names(vision_tower(model)) if model is not None else ["merger"]
    return LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=lora_target_regex(args),
        modules_to_save=None if args.freeze_merger else mergers,
        task_type="CAUSAL_LM",
    )


def model_init_kwargs(args: PacoSFTConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keyword arguments of the model's ``from_pretrained`` (``model_init_kwargs``, the
    dtype, attention kernel and ``trust_remote_code``) and of the processor's (the hub ones
    among them, so model and processor come from the same revision).

    ``device_map`` is dropped when several processes train: each holds its own copy, which
    the trainer places on the process's device.

    Example:
        >>> cfg = PacoSFTConfig(output_dir="out", model_init_kwargs={"revision": "v1", "low_cpu_mem_usage": True})
        >>> model_init_kwargs(cfg)[1]
        {'revision': 'v1'}
    """
    kwargs = dict(args.model_init_kwargs or {})
    if "device_map" in kwargs and args.world_size > 1:
        logger.warning(
            "model_init_kwargs.device_map=%r is ignored: %d processes train, each on its own "
            "device. Remove device_map from the recipe to silence this.",
            kwargs.pop("device_map"),
            args.world_size,
        )
    if args.trust_remote_code:
        kwargs["trust_remote_code"] = True
    hub = {name: kwargs[name] for name in HUB_KWARGS if name in kwargs}
    kwargs["dtype"] = args.torch_dtype
    if args.attn_implementation:
        kwargs["attn_implementation"] = args.attn_implementation
    return kwargs, hub


def load_model_and_processor(args: PacoSFTConfig):
    """Load the Qwen-VL-family model (the class its config names: Qwen2.5-VL, Qwen3-VL, ...)
    and its processor, as the scorer loads them (:mod:`paco_reward.modeling`: strictly, a
    missing or unexpected weight raises). With LoRA every weight is frozen (the trainer adds
    the adapter from :func:`lora_config`); without, the vision tower and its mergers are
    frozen as configured. The loading arguments are :func:`model_init_kwargs`'.

    Returns:
        ``(model, processor)``.

    Raises:
        UnsupportedModelError / YesNoTokenError: the model cannot be a PaCo evaluator (before
            the weights load).
        WeightsMismatchError: the checkpoint's weights do not fit its class.
    """
    path = build_or_locate_model(args)
    lora_target_regex(args)  # an unknown target fails before the weights load
    kwargs, hub = model_init_kwargs(args)
    model, processor = load_evaluator(path, processor_kwargs=hub, **kwargs)
    visual = vision_tower(model)
    if args.use_lora:
        model.requires_grad_(False)
    else:
        model.requires_grad_(True)
        visual.requires_grad_(not args.freeze_vision_tower)
        for name in merger_module_names(visual):
            visual.get_submodule(name).requires_grad_(not args.freeze_merger)
    return model, processor


def load_pair_datasets(args: PacoSFTConfig):
    """``(train, eval)`` datasets from ``dataset_path`` (the pair schema) or the toy generator."""
    if not args.dataset_path:
        raise ConfigError(
            f"dataset_path is not set; give a pair dataset folder or {TOY_DATASET!r}."
        )
    if args.dataset_path == TOY_DATASET:
        from paco_reward.training.toy import colour_pair_splits

        splits = colour_pair_splits(args.toy_train_size, args.toy_test_size, seed=args.seed)
    else:
        splits = load_pair_dataset_dict(args.dataset_path)
    if args.train_split not in splits:
        raise ConfigError(
            f"train_split {args.train_split!r} not in {args.dataset_path!r} (has {list(splits)})."
        )
    train = splits[args.train_split]
    if args.max_train_samples is not None:
        train = train.select(range(min(args.max_train_samples, len(train))))
    evaluation = None
    if args.eval_split:
        if args.eval_split not in splits:
            raise ConfigError(
                f"eval_split {args.eval_split!r} not in {args.dataset_path!r} (has {list(splits)}); "
                "set eval_split to one of them or to ''."
            )
        evaluation = splits[args.eval_split]
        if args.max_eval_samples is not None:
            evaluation = evaluation.select(range(min(args.max_eval_samples, len(evaluation))))
    return train, evaluation


def load_pair_dataset_dict(path: str | Path):
    """Load an exported pair dataset: a ``save_to_disk`` folder, a folder holding ``hf/``,
    or one holding ``parquet/<split>.parquet``."""
    import datasets

    path = Path(path)
    for candidate in (path, path / "hf"):
        if (candidate / "dataset_dict.json").is_file():
            return datasets.load_from_disk(str(candidate))
    parquet = path / "parquet"
    if parquet.is_dir() and any(parquet.glob("*.parquet")):
        files = {p.stem: str(p) for p in sorted(parquet.glob("*.parquet"))}
        splits = datasets.load_dataset("parquet", data_files=files)
        return splits.cast_column("image_a", datasets.Image()).cast_column(
            "image_b", datasets.Image()
        )
    raise PathNotFoundError(
        f"No pair dataset at {str(path)!r}: expected a DatasetDict saved with save_to_disk "
        "(dataset_dict.json), or hf/ or parquet/ inside it."
    )


def build_trainer(args: PacoSFTConfig, *, callbacks=None):
    """Load model, processor and data as ``args`` says and return the trainer over them."""
    from paco_reward.training.sft_trainer import PacoSFTTrainer

    train, evaluation = load_pair_datasets(args)
    model, processor = load_model_and_processor(args)
    return PacoSFTTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=processor,
        peft_config=lora_config(args, model),
        callbacks=callbacks,
    )
