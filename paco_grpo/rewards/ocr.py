"""``ocr``: how well an image renders the text its prompt quotes, read by an OCR model.

The reward of an image is :func:`~paco_grpo.rewards.ocr_text.ocr_score` of what the OCR model
reads in it against the prompt's quoted text, Flow-GRPO's rule by default: 1.0 when the target
appears in the reading, else ``1 - min(1, edit distance / target length)``, on texts
normalised as that module says (NFKC, case-folded, whitespace removed), in [0, 1];
``match="exact"`` charges every extra character read. A prompt without quoted text scores NaN
(a :class:`~paco_reward.errors.PromptError`).

The OCR model is GOT-OCR 2.0 (``stepfun-ai/GOT-OCR-2.0-hf``, 561 M parameters), loaded with
transformers' ``AutoModelForImageTextToText`` and ``AutoProcessor`` from a folder or hub id
(never downloaded at scoring time: it loads once, at start-up, like every reward model).
Why GOT-OCR 2.0: it is an end-to-end OCR model (scene and document text) small enough to sit
beside the generator on every training GPU (1.1 GB in bfloat16), its processor builds its
plain-OCR prompt itself, and every image becomes the same 256 tokens (1024^2 input), so a batch
needs no padding and greedy decoding is batched as is. PaddleOCR-VL (0.9 B, also in
transformers) reads at the image's own resolution, with a chat prompt and a variable token
count per image; Flow-GRPO's reward used the PaddleOCR pipeline, which is not a transformers
model.

Reading is greedy decoding (``do_sample=False``, one beam) from a generation config built here,
not the checkpoint's, stopping at the end of the assistant's turn or after
``max_new_tokens``: the target must appear within that many tokens (a short sign's text takes
a few), and under ``match="exact"`` a reading longer than twice the target already scores 0,
so the bound costs nothing but time on images that ramble.

Devices: as the CLIP rewards, the model lives on ``reward.device`` with its index (a bare
``"cuda"`` or ``None`` is this process's GPU, ``cuda:<LOCAL_RANK>``), so scoring from the
trainer's worker thread runs on the process's own GPU.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from paco_grpo.rewards.base import INPUT_ERRORS, BaseReward, model_dtype, positive_int
from paco_grpo.rewards.ocr_text import check_ocr_rule, ocr_score, quoted_text
from paco_reward.devices import resolve_device
from paco_reward.errors import UnsupportedModelError
from paco_reward.hub import hub_kwargs
from paco_reward.images import ImageInput, load_image
from paco_reward.modeling import load_vision_language_model

if TYPE_CHECKING:
    import torch
    from PIL import Image

__all__ = ["OCR_MODEL_TYPES", "OCRReader", "OCRReward"]

# The OCR families the reader drives (transformers' model_type): their processor writes the
# OCR prompt from the images alone.
OCR_MODEL_TYPES = ("got_ocr2",)


def _image_tokens(vision_config) -> int:
    """Image tokens per picture of a GOT-OCR 2.0 vision tower: its patch grid after the
    projector's two 3x3 convolutions of stride 2 (padding 1), each ``ceil(side / 2)``.
    The processor's own default (256) is the real model's; a smaller tower has fewer."""
    side = vision_config.image_size // vision_config.patch_size
    return math.ceil(math.ceil(side / 2) / 2) ** 2


class OCRReader:
    """An OCR model that reads the text in images: ``read(images) -> list[str]``.

    Args:
        model_name_or_path: a GOT-OCR 2.0 folder or hub id (``stepfun-ai/GOT-OCR-2.0-hf``).
        device: where the model runs; a bare ``"cuda"`` or ``None`` (default) is this
            process's device. Kept, with its index, as ``self.device``.
        dtype: ``"bfloat16"`` (default, the checkpoint's), ``"float32"`` or ``"float16"``.
        batch_size: images per ``generate`` call.
        max_new_tokens: the most tokens read per image (greedy decoding stops there).
        revision / cache_dir / token / local_files_only / trust_remote_code: which files to
            load, for the model and its processor alike (:func:`paco_reward.hub.hub_kwargs`).

    Raises:
        UnsupportedModelError: the model is not of a family in :data:`OCR_MODEL_TYPES`
            (checked from its config, before any weight is read).
        WeightsMismatchError: a weight is missing, unexpected or of another shape.

    Example:
        >>> reader = OCRReader("stepfun-ai/GOT-OCR-2.0-hf", device="cuda")   # doctest: +SKIP
        >>> reader.read([sign])                                             # doctest: +SKIP
        ['OPEN 24/7']
    """

    def __init__(
        self,
        model_name_or_path: str | Path = "stepfun-ai/GOT-OCR-2.0-hf",
        *,
        device: str | torch.device | None = None,
        dtype: str = "bfloat16",
        batch_size: int = 16,
        max_new_tokens: int = 64,
        revision: str | None = None,
        cache_dir: str | Path | None = None,
        token: str | bool | None = None,
        local_files_only: bool = False,
        trust_remote_code: bool = False,
    ) -> None:
        from transformers import AutoConfig, AutoProcessor, GenerationConfig

        positive_int("batch_size", batch_size)
        positive_int("max_new_tokens", max_new_tokens)
        self.dtype = model_dtype(dtype)
        self.device = resolve_device(device)
        self.batch_size = batch_size
        source = str(model_name_or_path)
        hub = hub_kwargs(
            revision=revision,
            cache_dir=cache_dir,
            token=token,
            local_files_only=local_files_only,
            trust_remote_code=trust_remote_code,
        )
        config = AutoConfig.from_pretrained(source, **hub)
        if config.model_type not in OCR_MODEL_TYPES:
            raise UnsupportedModelError(
                f"{source!r} is a {config.model_type!r} model; the ocr reward reads with "
                f"{OCR_MODEL_TYPES} models (GOT-OCR 2.0: stepfun-ai/GOT-OCR-2.0-hf)."
            )
        self.processor = AutoProcessor.from_pretrained(source, **hub)
        self.model = load_vision_language_model(source, dtype=self.dtype, **hub)
        self.model.to(self.device).eval()
        self.num_image_tokens = _image_tokens(config.vision_config)
        tokenizer = self.processor.tokenizer
        # The assistant's turn ends at <|im_end|>; the checkpoint's own end token ends it too.
        stops = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        own = self.model.generation_config.eos_token_id
        stops += [t for t in (own if isinstance(own, list) else [own]) if t is not None]
        self.generation_config = GenerationConfig(
            do_sample=False,
            num_beams=1,
            max_new_tokens=max_new_tokens,
            eos_token_id=list(dict.fromkeys(stops)),
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0],
        )

    def read(self, images: list[Image.Image]) -> list[str]:
        """The text the model reads in each PIL image, special tokens left out."""
        import torch

        texts: list[str] = []
        for start in range(0, len(images), self.batch_size):
            inputs = self.processor(
                images=images[start : start + self.batch_size],
                return_tensors="pt",
                num_image_tokens=self.num_image_tokens,
            ).to(self.device)
            inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
            with torch.inference_mode():
                out = self.model.generate(**inputs, generation_config=self.generation_config)
            texts += self.processor.tokenizer.batch_decode(
                out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True
            )
        return texts


class OCRReward(BaseReward):
    """OCR reward, Flow-GRPO's: 1.0 when an OCR model reads the prompt's quoted text in the
    image, else ``1 - normalised edit distance`` between the two, in [0, 1] (see
    :mod:`paco_grpo.rewards.ocr_text` for the rule and the normalisation). Prompts are the OCR
    task's (``'A storefront sign that says "OPEN"'``:
    :func:`paco_grpo.ocr_prompts.generate_ocr_prompts`); one without quoted text scores NaN.

    Args:
        model: the OCR model, a GOT-OCR 2.0 folder or hub id (default
            ``stepfun-ai/GOT-OCR-2.0-hf``).
        match: ``"contains"`` (default, Flow-GRPO's: the target anywhere in the reading scores
            1.0) or ``"exact"`` (every character read beyond the target costs one edit).
        spans: the target is the prompt's ``"first"`` quoted text (default, Flow-GRPO's) or
            ``"all"`` of them joined by a space.
        device / dtype: where the model runs and in what precision (see :class:`OCRReader`).
        **reader_kwargs: ``batch_size``, ``max_new_tokens`` and the hub arguments
            (``revision``, ``cache_dir``, ...) of :class:`OCRReader`.

    Example:
        >>> reward = OCRReward("stepfun-ai/GOT-OCR-2.0-hf")                  # doctest: +SKIP
        >>> reward([sign], ['A storefront sign that says "OPEN"'], [{}])     # doctest: +SKIP
        array([1.])
    """

    name = "ocr"

    def __init__(
        self,
        model: str | Path = "stepfun-ai/GOT-OCR-2.0-hf",
        *,
        match: str = "contains",
        spans: str = "first",
        device: str | torch.device | None = None,
        dtype: str = "bfloat16",
        **reader_kwargs: Any,
    ) -> None:
        super().__init__()
        check_ocr_rule(match, spans)  # before the model loads
        self.match = match
        self.spans = spans
        self.reader = OCRReader(model, device=device, dtype=dtype, **reader_kwargs)

    @property
    def device(self) -> torch.device:
        """The device of the OCR model, with its index (``cuda:3``, ``cpu``)."""
        return self.reader.device

    def score(self, images: list[ImageInput], prompts: list[str], metadata: list[dict]):
        pictures, keep = [], []
        for k, (image, prompt) in enumerate(zip(images, prompts)):
            try:
                quoted_text(prompt, self.spans)  # a prompt without a target fails before reading
                pictures.append(load_image(image, f"images[{k}]"))
                keep.append(k)
            except INPUT_ERRORS as err:
                self.fail(k, err)
        out = np.full(len(images), np.nan)
        for k, read in zip(keep, self.reader.read(pictures)):
            out[k] = ocr_score(read, prompts[k], self.match, self.spans)
        return out
