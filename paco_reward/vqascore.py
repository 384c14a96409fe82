"""VQAScore (Lin et al., 2024) as t2v-metrics 3.0 computes it with CLIP-FlanT5: how strongly a
model answers "Yes" to ``Does this figure show "{text}"? Please answer yes or no.``.

The score of an (image, text) is ``exp(-mean cross-entropy)`` of the answer ``"Yes"``
*including T5's end token*: the geometric mean of P(▁Yes | prompt) and P(</s> | prompt, Yes),
not P(Yes) alone. As the reference (``t2v_metrics/models/vqascore_models/clip_t5_model.py``,
commit 7c06208):

- prompt: the ``t5_chat`` conversation, ``SYSTEM_MESSAGE + " USER: <image>\\n" + question +
  " ASSISTANT: "``; the text on each side of ``<image>`` tokenized on its own, each with its
  ``</s>``, the image's projected patches in between; ids cut at 2,048 (the tokenizer's
  ``model_max_length``);
- image: padded to a square with the CLIP mean colour (``expand2square``), then the vision
  tower's ``CLIPImageProcessor`` (336 px for the published model);
- the decoder reads ``[<pad>, ▁Yes]`` and is scored on ``[▁Yes, </s>]``; the softmax runs over
  the tokenizer's ids only (the reference shrinks FlanT5's 32,128-row head to its tokenizer's
  32,100 with ``resize_token_embeddings``);
- bfloat16 weights, the forward under ``torch.autocast`` on CUDA, as the reference runs.

:class:`VQAScore` scores many texts per image with ONE vision pass per image (the reference
encodes the image again for every text; the features are the same). It is the
``AlignmentScorer`` the T2IS-Bench harness takes::

    >>> scorer = VQAScore.from_pretrained("zhiqiulin/clip-flant5-xxl")   # doctest: +SKIP
    >>> scorer.score(["cat.png"], [["a cat", "a dog"]])                  # doctest: +SKIP
    [array([0.93..., 0.01...])]
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from paco_reward.errors import InputError, InputTypeError
from paco_reward.images import ImageInput, load_image

__all__ = [
    "ANSWER",
    "CLIP_FLANT5_XXL",
    "CONTEXT_LENGTH",
    "JudgeVQAScore",
    "QUESTION_TEMPLATE",
    "SYSTEM_MESSAGE",
    "VQAScore",
    "expand2square",
    "t5_chat_prompt",
    "vqascore_components",
]

logger = logging.getLogger(__name__)

CLIP_FLANT5_XXL = "zhiqiulin/clip-flant5-xxl"
FLAN_T5_XXL = "google/flan-t5-xxl"  # the tokenizer t2v-metrics loads for it
REFERENCE = "t2v_metrics@7c06208 (v3.0) clip-flant5-xxl"

# t2v_metrics/constants.py (LLaVA's system line) and clip_t5_model.py's templates.
SYSTEM_MESSAGE = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
QUESTION_TEMPLATE = 'Does this figure show "{}"? Please answer yes or no.'
ANSWER = "Yes"
CONTEXT_LENGTH = 2048
IMAGE_TAG = "<image>"


def t5_chat_prompt(question: str) -> str:
    """The reference's ``t5_chat`` conversation around ``question``, with its ``<image>`` tag.

    Example:
        >>> t5_chat_prompt("Q?")[-30:]
        '. USER: <image>\\nQ? ASSISTANT: '
    """
    return f"{SYSTEM_MESSAGE} USER: {IMAGE_TAG}\n{question} ASSISTANT: "


def expand2square(image: Image.Image, background: tuple[int, ...]) -> Image.Image:
    """``image`` centred on a square of its longer side filled with ``background`` (LLaVA's
    ``expand2square``: the offset rounds down).

    Example:
        >>> expand2square(Image.new("RGB", (4, 2)), (9, 9, 9)).getpixel((0, 0))
        (9, 9, 9)
    """
    width, height = image.size
    if width == height:
        return image
    side = max(width, height)
    square = Image.new(image.mode, (side, side), background)
    square.paste(image, ((side - width) // 2, (side - height) // 2))
    return square


class VQAScore:
    """CLIP-FlanT5 VQAScore (see the module docstring), scoring each image's texts.

    Args:
        model: a loaded :class:`~paco_reward.clip_t5.CLIPT5ForConditionalGeneration`.
        tokenizer: its T5 tokenizer (``google/flan-t5-xxl``'s for the published model).
        image_processor: the vision tower's CLIP image processor.
        batch_size: texts per forward (each image's texts are chunked; the reference runs
            all of an image's texts in one forward).
        question_template / answer: the prompt and the scored answer.
        source: where the model came from, for :meth:`describe`.

    Attributes:
        name: ``"vqascore"``.
    """

    name = "vqascore"

    def __init__(
        self,
        model,
        tokenizer,
        image_processor,
        *,
        batch_size: int = 32,
        question_template: str = QUESTION_TEMPLATE,
        answer: str = ANSWER,
        source: str = "",
        tokenizer_source: str = "",
    ) -> None:
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1; got {batch_size}.")
        self.model = model
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.batch_size = batch_size
        self.question_template = question_template
        self.answer = answer
        self.source = source
        self.tokenizer_source = tokenizer_source
        self.background = tuple(int(x * 255) for x in image_processor.image_mean)
        prefix, _ = t5_chat_prompt("").split(IMAGE_TAG)
        self._prefix_ids = self._ids(prefix)
        self._labels = self._ids(answer)
        start = model.config.decoder_start_token_id
        self._decoder_ids = [start] + self._labels[:-1]
        self._max_length = min(int(tokenizer.model_max_length), CONTEXT_LENGTH)

    @classmethod
    def from_pretrained(
        cls,
        model: str | Path = CLIP_FLANT5_XXL,
        tokenizer: str | Path = FLAN_T5_XXL,
        *,
        vision_tower: str | Path | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | str = "bfloat16",
        batch_size: int = 32,
        **hub: Any,
    ) -> VQAScore:
        """Load CLIP-FlanT5 (:func:`~paco_reward.clip_t5.load_clip_t5`) and its tokenizer.

        Args:
            model: a CLIP-FlanT5 folder or hub id.
            tokenizer: its tokenizer's folder or hub id (t2v-metrics loads
                ``google/flan-t5-xxl``'s; a tiny test model carries its own).
            vision_tower: the vision tower's folder or hub id (default: the config's
                ``mm_vision_tower``).
            device: where to score (default: this process's device).
            dtype: the weights' dtype (the reference's bfloat16 by default).
            batch_size: texts per forward.
            **hub: ``revision``, ``cache_dir``, ``token``, ``local_files_only``.

        Raises:
            PathNotFoundError: ``model`` names no folder and is no hub id.
            UnsupportedModelError: ``model`` is not a CLIP-FlanT5 checkpoint.
            WeightsMismatchError: its weights do not fit the model.
        """
        from transformers import AutoTokenizer

        from paco_reward.clip_t5 import load_clip_t5
        from paco_reward.devices import resolve_device
        from paco_reward.hub import check_source

        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        device = resolve_device(device)
        loaded, image_processor = load_clip_t5(
            model, vision_tower=vision_tower, dtype=dtype, device=device, **hub
        )
        tokenizer_source = check_source(tokenizer, "tokenizer")
        hub = {k: v for k, v in hub.items() if k != "revision"}
        tok = AutoTokenizer.from_pretrained(tokenizer_source, model_max_length=CONTEXT_LENGTH, **hub)
        return cls(
            loaded,
            tok,
            image_processor,
            batch_size=batch_size,
            source=str(model),
            tokenizer_source=str(tokenizer),
        )

    # ------------------------------------------------------------------ inputs
    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text).input_ids)

    def pixel_values(self, image: ImageInput, name: str = "image") -> torch.Tensor:
        """``[1, 3, size, size]`` float32 pixels of ``image``: padded square with the CLIP
        mean colour, then the vision tower's processor."""
        square = expand2square(load_image(image, name), self.background)
        pixels = self.image_processor(square, return_tensors="pt")["pixel_values"]
        return torch.as_tensor(pixels, dtype=torch.float32)

    def input_ids(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded prompt ids of ``texts`` with the image placeholder, and their mask."""
        from paco_reward.clip_t5 import IMAGE_PLACEHOLDER_ID

        rows = []
        for text in texts:
            _, suffix = t5_chat_prompt(self.question_template.format(text)).split(IMAGE_TAG)
            ids = self._prefix_ids + [IMAGE_PLACEHOLDER_ID] + self._ids(suffix)
            rows.append(ids[: self._max_length])
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        return input_ids, mask

    # ------------------------------------------------------------------ scoring
    def _autocast(self):
        dtype = self.model.dtype
        if dtype in (torch.bfloat16, torch.float16):
            return torch.autocast(self.device.type, dtype=dtype)
        return torch.autocast(self.device.type, enabled=False)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.inference_mode()
    def score_image(self, image: ImageInput, texts: Sequence[str], name: str = "image") -> np.ndarray:
        """VQAScores (float64, in [0, 1]) of ``texts`` for one image; empty for no text."""
        texts = _texts(texts, name)
        if not texts:
            return np.zeros(0, dtype=np.float64)
        pixels = self.pixel_values(image, name).to(self.device)
        vocabulary = len(self.tokenizer)
        labels = torch.tensor(self._labels, device=self.device)
        scores = []
        with self._autocast():
            features = self.model.encode_images(pixels)
            for start in range(0, len(texts), self.batch_size):
                chunk = texts[start : start + self.batch_size]
                input_ids, mask = self.input_ids(chunk)
                decoder = torch.tensor([self._decoder_ids] * len(chunk), device=self.device)
                logits = self.model(
                    input_ids=input_ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    image_features=features,
                    decoder_input_ids=decoder,
                    use_cache=False,
                ).logits
                logprobs = torch.log_softmax(logits[..., :vocabulary].float(), dim=-1)
                answer = logprobs.gather(-1, labels.expand(len(chunk), -1).unsqueeze(-1))
                scores.append(answer.squeeze(-1).mean(-1).exp())
        return torch.cat(scores).double().cpu().numpy()

    def score(
        self, images: Sequence[ImageInput], texts: Sequence[Sequence[str]]
    ) -> list[np.ndarray]:
        """One float64 array per image: the VQAScore of each of that image's texts.

        Raises:
            InputError: ``images`` and ``texts`` differ in length.
            InvalidImageError: an image is missing, corrupt or not an image (named).
        """
        if isinstance(texts, str) or len(images) != len(texts):
            raise InputError(
                f"score(images, texts) takes one list of texts per image; got {len(images)} "
                f"image(s) and {1 if isinstance(texts, str) else len(texts)} text list(s)."
            )
        return [
            self.score_image(image, image_texts, f"images[{i}]")
            for i, (image, image_texts) in enumerate(zip(images, texts))
        ]

    def describe(self) -> dict[str, Any]:
        """The protocol of these scores, for a report."""
        return {
            "name": self.name,
            "model": self.source,
            "tokenizer": self.tokenizer_source,
            "vision_tower": self.model.config.mm_vision_tower,
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "image_size": int(self.model.config.vision_config["image_size"]),
            "question_template": self.question_template,
            "answer": self.answer,
            "conversation": "t5_chat",
            "prompt_sha256": hashlib.sha256(
                t5_chat_prompt(self.question_template).encode()
            ).hexdigest(),
            "formula": "exp(-mean cross-entropy of the answer tokens, T5's </s> included)",
            "image_padding": f"expand2square with the CLIP mean colour {self.background}",
            "reference": REFERENCE,
        }


def _texts(texts: Sequence[str], name: str) -> list[str]:
    if isinstance(texts, str):
        raise InputTypeError(
            f"the texts of {name} must be a list of strings, not one string ({texts[:40]!r})."
        )
    texts = list(texts)
    for k, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputTypeError(f"the texts of {name}: item {k} is {type(text).__name__}, not str.")
    return texts


# ---------------------------------------------------------------------- other judges
class JudgeVQAScore:
    """The VQAScore formula on any image-text-to-text judge the library scores with (Qwen2.5-VL,
    Gemma-3, ...; a :class:`~paco_reward.transformers_backend.TransformersBackend`), for users
    without the 11B CLIP-FlanT5: ``exp(-mean cross-entropy)`` of the answer ``"Yes"`` and the
    end-of-turn token the judge's chat template writes after it, the question
    (:data:`QUESTION_TEMPLATE`) in the judge's own chat template with one image. NOT the
    paper's VQAScore (its model is CLIP-FlanT5: :class:`VQAScore`); :meth:`describe` says so.

    The prompt is the messages every backend renders (:func:`~paco_reward.templates.build_messages`
    through the judge's template), the images are resized by the backend's policy as the
    server does (:func:`~paco_reward.images.resize_for_model`; a processor that resizes itself
    gets them as they are) and prepared by the judge's own processor; each (image, texts)
    is one batched forward (the image through the vision tower once per text).

    Example:
        >>> judge = JudgeVQAScore(TransformersBackend.from_pretrained("google/gemma-3-4b-it"))  # doctest: +SKIP
        >>> judge.score(["cat.png"], [["a cat"]])                                                 # doctest: +SKIP
    """

    name = "vqascore-judge"

    def __init__(self, backend, *, question_template: str = QUESTION_TEMPLATE, answer: str = ANSWER):
        self.backend = backend
        self.question_template = question_template
        self.answer = answer

    def _texts(self, question: str) -> tuple[str, str]:
        """The prompt up to the generation prompt, and the same conversation with the answer."""
        from paco_reward.local_backend import render_prompt_text
        from paco_reward.templates import build_messages

        processor = self.backend.processor
        prompt = render_prompt_text(processor, question, num_images=1)
        full = processor.apply_chat_template(
            build_messages(question, num_images=1, answer=self.answer), tokenize=False
        )
        if not full.startswith(prompt):
            raise InputError(
                f"{self.backend.name}'s chat template does not render the answer after its "
                "generation prompt, so the answer's tokens cannot be told apart."
            )
        return prompt, full

    def answer_ids(self, question: str = "") -> list[int]:
        """The scored tokens: the answer and the first special token after it (the template's
        end of turn: Qwen's ``<|im_end|>``, Gemma's ``<end_of_turn>``); what follows (a
        newline) is formatting, not scored."""
        prompt, full = self._texts(self.question_template.format(question))
        tokenizer = self.backend.tokenizer
        ids = tokenizer.encode(full[len(prompt) :], add_special_tokens=False)
        special = set(tokenizer.all_special_ids)
        end = next((k for k, i in enumerate(ids) if i in special), len(ids) - 1)
        return ids[: end + 1]

    @torch.inference_mode()
    def score_image(self, image: ImageInput, texts: Sequence[str], name: str = "image") -> np.ndarray:
        """Scores (float64, in [0, 1]) of ``texts`` for one image; empty for no text."""
        from paco_reward.images import resize_for_model

        texts = _texts(texts, name)
        if not texts:
            return np.zeros(0, dtype=np.float64)
        backend = self.backend
        policy = getattr(backend, "image_policy", None)
        pil = resize_for_model(load_image(image, name), policy, name)
        fulls, suffixes, answers = [], [], []
        for text in texts:
            prompt, full = self._texts(self.question_template.format(text))
            fulls.append(full)
            suffixes.append(len(backend.tokenizer.encode(full[len(prompt) :], add_special_tokens=False)))
            answers.append(self.answer_ids(text))
        kwargs = {"size": policy.processor_size} if policy is not None else {}
        inputs = backend.processor(
            text=fulls, images=[[pil] for _ in texts], padding=True, padding_side="left",
            add_special_tokens=False, return_tensors="pt", **kwargs,
        )  # fmt: skip
        inputs = {
            k: (v.to(backend.model.dtype) if v.is_floating_point() else v).to(backend.device)
            for k, v in inputs.items() if isinstance(v, torch.Tensor)
        }  # fmt: skip
        logits = backend.model(**inputs, use_cache=False).logits
        ids = inputs["input_ids"]
        scores = []
        for row, answer in enumerate(answers):
            start = ids.shape[1] - suffixes[row]  # left-padded: the conversation ends each row
            positions = torch.arange(start, start + len(answer), device=ids.device)
            target = ids[row, positions]
            if target.tolist() != answer:
                raise InputError(
                    f"{backend.name}'s tokenizer splits the answer differently inside the "
                    f"conversation ({target.tolist()} against {answer})."
                )
            logprobs = torch.log_softmax(logits[row, positions - 1].float(), dim=-1)
            scores.append(logprobs.gather(-1, target.unsqueeze(-1)).mean().exp())
        return torch.stack(scores).double().cpu().numpy()

    def score(self, images: Sequence[ImageInput], texts: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One float64 array per image: the score of each of its texts (as :meth:`VQAScore.score`)."""
        if isinstance(texts, str) or len(images) != len(texts):
            raise InputError(
                f"score(images, texts) takes one list of texts per image; got {len(images)} "
                f"image(s) and {1 if isinstance(texts, str) else len(texts)} text list(s)."
            )
        return [self.score_image(image, t, f"images[{i}]") for i, (image, t) in enumerate(zip(images, texts))]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.backend.name,
            "dtype": str(self.backend.model.dtype).removeprefix("torch."),
            "question_template": self.question_template,
            "answer": self.answer,
            "scored_tokens": self.backend.tokenizer.convert_ids_to_tokens(self.answer_ids()),
            "conversation": "the judge's own chat template, one image",
            "formula": "exp(-mean cross-entropy of the answer tokens and the template's end of turn)",
            "note": "not the paper's VQAScore: the paper's model is CLIP-FlanT5 "
            f"({CLIP_FLANT5_XXL}); this is the same formula on another judge",
        }


# ---------------------------------------------------------------------- memory plan
def vqascore_components(
    model: str | Path = CLIP_FLANT5_XXL,
    dtype: str = "bfloat16",
    batch_size: int = 32,
    text_tokens: int = 96,
):
    """What a process holding VQAScore's model holds, as plan components: the weights of
    ``model`` (its folder's ``config.json`` or the shipped architecture of the published
    checkpoint, built on the meta device) and an estimate of one forward's largest working
    set (``batch_size`` prompts of ``text_tokens`` tokens plus the image's patches: the
    encoder's attention scores and its feed-forward activations, in float32 at worst).

    Example:
        >>> [c.name for c in vqascore_components()]
        ['VQAScore clip-flant5-xxl weights', 'VQAScore forward (estimate)']
    """
    from paco_reward.architectures import build_empty, count_parameters, model_config
    from paco_reward.planning import Component

    config = model_config(model)
    empty = build_empty(config, getattr(torch, dtype))
    params = count_parameters(empty)
    vision = config["vision_config"]
    tokens = text_tokens + (vision["image_size"] // vision["patch_size"]) ** 2
    scores = batch_size * config["num_heads"] * tokens * tokens * 4
    feed_forward = batch_size * tokens * config["d_ff"] * 3 * 4
    label = Path(str(model)).name
    return [
        Component(f"VQAScore {label} weights", params, dtype, kind="reward",
                  note="exact: meta-device build of the architecture"),  # fmt: skip
        Component("VQAScore forward (estimate)", 0, "float32", bytes=scores + feed_forward,
                  kind="activations",
                  note=f"{batch_size} prompts x {tokens} tokens: attention scores + gated FF"),  # fmt: skip
    ]
