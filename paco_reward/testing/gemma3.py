"""Tiny, randomly initialised Gemma-3 judges built offline: a family other than Qwen-VL.

The PaCo-GRPO guide evaluates with Gemma-3-4B-IT (``Gemma3ForConditionalGeneration``) beside
the PaCo-Reward-7B it trains on. :func:`build_tiny_gemma3` writes an ordinary Hugging Face
folder of that class, loaded through the same ``from_pretrained`` path a user takes with
``google/gemma-3-4b-it``::

    >>> from paco_reward.testing import build_tiny_gemma3
    >>> from paco_reward import PacoReward
    >>> path = build_tiny_gemma3("/tmp/tiny-gemma3")   # doctest: +SKIP
    >>> rm = PacoReward.from_pretrained(path)          # doctest: +SKIP

What is Gemma-3's and not Qwen-VL's: a SigLIP vision tower on a fixed square (896 pixels in the
real model, 64 here) whose patches are average-pooled into a fixed number of image tokens
(256; 4 here), bidirectional attention among an image's tokens, sliding-window and global
attention layers, and Gemma's tokenizer and chat template (``<start_of_turn>``, an image
placeholder ``<start_of_image>`` that the processor expands to
``\\n\\n<start_of_image>`` + the image tokens + ``<end_of_image>\\n\\n``). The tokenizer is a
byte-fallback BPE trained on the fly in Gemma's pipeline (spaces as "▁", no pre-split), with
"Yes"/"No" and their variants single tokens and the newline runs ``\\n`` to ``\\n\\n\\n\\n`` single
tokens, as in the real vocabulary (vLLM's Gemma-3 processor looks them up). The weights are
saved under the published checkpoint's names (``vision_tower.vision_model.*``), which
transformers and vLLM both load. The text model has heads of 32, which vLLM's CPU kernels take.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from paco_reward.testing.qwen import tokenizer_corpus

# google/gemma-3-4b-it's chat template: an optional system turn folded into the first user
# turn, "model" for the assistant, one <start_of_image> per image part, text parts trimmed.
GEMMA3_CHAT_TEMPLATE = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

# Gemma's special tokens in the real vocabulary's order (pad, eos, bos, unk, mask first).
GEMMA_SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
CHAT_TOKENS = ["<start_of_turn>", "<end_of_turn>"]
IMAGE_TOKENS = {
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
    "image_token": "<image_soft_token>",
}
# Byte-fallback pieces for any character the tiny vocabulary lacks, as Gemma's has.
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
# Runs of newlines the image expansion writes; the real vocabulary has each as one token.
NEWLINE_RUNS = ["\n", "\n\n", "\n\n\n", "\n\n\n\n"]


def build_tiny_gemma3_tokenizer(vocab_size: int = 1024):
    """Train a byte-fallback BPE in Gemma's tokenizer pipeline, with Gemma's special, chat and
    image tokens and chat template (a ``GemmaTokenizer``)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import GemmaTokenizer

    bpe = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    bpe.normalizer = normalizers.Replace(" ", "▁")
    bpe.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    reserved = [*GEMMA_SPECIAL_TOKENS, *CHAT_TOKENS, *IMAGE_TOKENS.values(), *BYTE_TOKENS]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=1, special_tokens=reserved, show_progress=False
    )
    bpe.train_from_iterator(tokenizer_corpus() + ["user model"] * 200, trainer=trainer)
    trained = json.loads(bpe.to_str())["model"]
    vocab = dict(trained["vocab"])
    merges = [tuple(merge) for merge in trained["merges"]]
    # The corpus has no newline, so no merge mixes one with a letter; these come last.
    for run in NEWLINE_RUNS:
        vocab[run] = len(vocab)
    merges += [("\n", "\n"), ("\n\n", "\n"), ("\n\n", "\n\n")]
    tokenizer = GemmaTokenizer(
        vocab=vocab, merges=merges, add_bos_token=True, extra_special_tokens=IMAGE_TOKENS
    )
    tokenizer.add_special_tokens({"additional_special_tokens": CHAT_TOKENS})
    tokenizer.chat_template = GEMMA3_CHAT_TEMPLATE
    return tokenizer


def tiny_gemma3_config_dict(tokenizer, tokens_per_image: int = 4, **overrides: Any) -> dict:
    """The tiny Gemma-3 configuration: a 2-layer text model (one sliding-window layer of 16
    tokens, one global), heads of 32, and a 2-layer SigLIP tower on 64 x 64 images of 16-pixel
    patches pooled to ``tokens_per_image``; ``overrides`` update the text/vision/top level."""
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "query_pre_attn_scalar": 32,
        "sliding_window": 16,
        "layer_types": ["sliding_attention", "full_attention"],
        "max_position_embeddings": 4096,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    vision = {
        "model_type": "siglip_vision_model",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": 64,
        "patch_size": 16,
        "vision_use_head": False,
    }
    top = {
        "mm_tokens_per_image": tokens_per_image,
        "boi_token_index": tokenizer.boi_token_id,
        "eoi_token_index": tokenizer.eoi_token_id,
        "image_token_index": tokenizer.image_token_id,
    }
    text.update(overrides.pop("text_config", {}))
    vision.update(overrides.pop("vision_config", {}))
    top.update(overrides)
    return {"text_config": text, "vision_config": vision, **top}


def _save_with_published_names(model, output_dir: Path) -> None:
    """``model.save_pretrained``, then the vision tower's weights renamed to the published
    Gemma-3 checkpoints' ``vision_tower.vision_model.*`` (transformers 5.2x writes them without
    ``vision_model``, which vLLM's loader does not know; transformers loads either)."""
    from safetensors.torch import load_file, save_file

    model.save_pretrained(output_dir)
    file = output_dir / "model.safetensors"
    prefix, published = "vision_tower.", "vision_tower.vision_model."
    weights = {
        (published + name[len(prefix) :])
        if name.startswith(prefix) and not name.startswith(published)
        else name: tensor
        for name, tensor in load_file(file).items()
    }
    save_file(weights, file, metadata={"format": "pt"})


def build_tiny_gemma3(
    output_dir: str | Path,
    seed: int = 0,
    tokens_per_image: int = 4,
    **overrides: Any,
) -> Path:
    """Write a randomly initialised tiny Gemma-3 judge to ``output_dir``.

    Args:
        output_dir: folder to create (an ordinary Hugging Face model folder).
        seed: seed for the random weights; the same seed gives the same model.
        tokens_per_image: image tokens per image (a square: 4 pools the 4 x 4 patches 2 x 2).
        **overrides: ``text_config={...}``, ``vision_config={...}`` or top-level Gemma-3
            config fields; ``initializer_range`` also sets the spread of the image projection
            (which Gemma-3 initialises at zero, so images would not count).

    Returns:
        The folder, loadable with ``PacoReward.from_pretrained`` and with
        ``AutoModelForImageTextToText.from_pretrained`` / ``AutoProcessor.from_pretrained``.

    Example:
        >>> path = build_tiny_gemma3("/tmp/tiny-gemma3", seed=0)   # doctest: +SKIP
    """
    import torch
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessor,
        Gemma3Processor,
        GenerationConfig,
    )

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_gemma3_tokenizer()
    config = Gemma3Config(**tiny_gemma3_config_dict(tokenizer, tokens_per_image, **overrides))

    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config).to(torch.float32)
    with torch.no_grad():
        model.model.multi_modal_projector.mm_input_projection_weight.normal_(
            0.0, config.initializer_range
        )
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<end_of_turn>")],
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    _save_with_published_names(model, output_dir)

    side = config.vision_config.image_size
    image_processor = Gemma3ImageProcessor(
        size={"height": side, "width": side},
        resample=2,  # bilinear, as the real preprocessor_config.json
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    processor = Gemma3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=GEMMA3_CHAT_TEMPLATE,
        image_seq_length=tokens_per_image,
    )
    processor.save_pretrained(output_dir)
    return output_dir


def model_card_score(
    model, processor, image_a, image_b, instruction: str, image_attention: str = "bidirectional"
) -> float:
    """P("Yes") / (P("Yes") + P("No")) of the first answer token the way the Gemma-3 model
    card's transformers code gets there, independent of the library's scorers: the chat
    template applied to the messages with the images, one ``model(**inputs)``. The reference
    the scorers are tested against.

    Args:
        image_attention: ``"bidirectional"`` (Gemma-3's: an image's tokens see each other) or
            ``"causal"`` (no ``token_type_ids``: what an engine without prefix-LM attention
            computes, e.g. vLLM's CPU backend).

    Example:
        >>> model_card_score(model, processor, a, b, render_instruction("rank"))  # doctest: +SKIP
        0.43
    """
    import torch

    content = [
        {"type": "image", "image": image_a},
        {"type": "image", "image": image_b},
        {"type": "text", "text": instruction},
    ]
    inputs = processor.apply_chat_template(
        [{"role": "user", "content": content}],
        tokenize=True,
        return_dict=True,
        add_generation_prompt=True,
        return_tensors="pt",
    )
    if image_attention == "causal":
        inputs.pop("token_type_ids")
    with torch.no_grad():
        logits = model(**inputs).logits[0, -1].double()
    tokenizer = processor.tokenizer
    yes, no = tokenizer.convert_tokens_to_ids("Yes"), tokenizer.convert_tokens_to_ids("No")
    return torch.sigmoid(logits[yes] - logits[no]).item()
