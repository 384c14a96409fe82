"""Merge a LoRA adapter into its base model and save a plain Hugging Face folder.

The base loads as the class its config names (any Qwen-VL family: Qwen2.5-VL, Qwen3-VL,
...) and, like the adapter, strictly (:mod:`paco_reward.modeling`). The result (config,
safetensors weights, tokenizer, processor, chat template) loads with
``PacoReward.from_pretrained(out)``, ``AutoModelForImageTextToText.from_pretrained`` and
vLLM, like a released merged checkpoint.

    >>> merge_lora("Qwen/Qwen2.5-VL-7B-Instruct", "runs/lora", "runs/merged")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from paco_reward.errors import PathNotFoundError

logger = logging.getLogger(__name__)


def merge_lora(
    base: str | Path,
    adapter: str | Path,
    output_dir: str | Path,
    dtype: torch.dtype | str | None = None,
    model_card: str | None = None,
    **hub: Any,
) -> Path:
    """Load ``base`` + ``adapter``, merge the LoRA weights in, save to ``output_dir``.

    Args:
        base: base model folder or hub id (Qwen2.5-VL, Qwen3-VL, ...).
        adapter: PEFT adapter folder (as written by :class:`PacoSFTTrainer`).
        output_dir: where the merged model and its processor files go.
        dtype: weight dtype of the saved model (default: the base model's config dtype,
            float32 if none).
        model_card: README text to write next to the weights (default: a short card).
        **hub: where ``base``'s files come from (``revision``, ``cache_dir``, ``token``,
            ``local_files_only``, ``trust_remote_code``): those the adapter was trained on.

    Returns:
        ``output_dir``.

    Raises:
        TypeError: a name in ``hub`` that is not a hub argument.
        FileNotFoundError: if ``adapter`` has no ``adapter_config.json``.
        WeightsMismatchError: a weight of the base or the adapter is missing or unexpected.
    """
    from paco_reward.hub import hub_kwargs
    from paco_reward.modeling import load_adapter, load_evaluator

    hub = hub_kwargs(**hub)
    adapter, output_dir = Path(adapter), Path(output_dir)
    if not (adapter / "adapter_config.json").is_file():
        raise PathNotFoundError(
            f"{str(adapter)!r} is not a PEFT adapter folder (no adapter_config.json); pass the "
            "training output folder of a LoRA run."
        )
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    own_processor = (adapter / "tokenizer_config.json").is_file()  # a training output's copy
    model, processor = load_evaluator(
        base,
        processor_source=adapter if own_processor else base,
        processor_kwargs=None if own_processor else hub,
        dtype=dtype or "auto",
        **hub,
    )
    model = load_adapter(model, adapter).merge_and_unload()
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)
    processor.save_pretrained(output_dir)
    if model_card is None:
        from paco_reward.training.model_card import render_model_card

        card_file = adapter / "README.md"
        model_card = (
            card_file.read_text()
            if card_file.is_file()
            else render_model_card(
                base_model=str(base), adapter=str(adapter), merged=True, model_path=str(output_dir)
            )
        )
    (output_dir / "README.md").write_text(model_card)
    logger.info("Merged %s into %s -> %s", adapter, base, output_dir)
    return output_dir
