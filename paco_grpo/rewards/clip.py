"""CLIP-family rewards: ``clip_t`` (panel-text alignment), ``clip_i`` (panel-panel similarity),
``pickscore`` (human-preference score of the grid).

Any ``transformers`` ``CLIPModel`` checkpoint works (the paper's CLIP-T uses ViT-H-14
laion2B: ``laion/CLIP-ViT-H-14-laion2B-s32B-b79K``; PickScore is
``yuvalkirstain/PickScore_v1`` with that model's processor). Embeddings are
L2-normalised; every panel and text of a batch is encoded once, in batches.

Long texts: CLIP reads at most ``max_position_embeddings`` tokens (77). With
``long_text="truncate"`` (default) longer texts keep their first 77 tokens (end token
kept) and a warning says so once per reward; ``long_text="split"`` cuts the text into
77-token chunks and averages the similarity over the chunks.

Devices: each reward keeps its model on ``reward.device``, a ``torch.device`` with its
index (``cuda:3``, never a bare ``cuda``: a bare ``"cuda"`` or ``None`` resolves to this
process's GPU, ``cuda:<LOCAL_RANK>``, through :func:`paco_reward.devices.resolve_device`),
and moves every input there, so scoring in a worker thread (whose current CUDA device is 0)
still runs on the process's own GPU. :func:`~paco_grpo.rewards.build_rewards` passes the
trainer's ``accelerator.device``.
"""

from __future__ import annotations

import logging
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from paco_grpo.rewards.base import INPUT_ERRORS, BaseReward, grid_panels, model_dtype
from paco_reward.devices import resolve_device
from paco_reward.errors import InputError, PromptError
from paco_reward.grids import split_panel_prompts
from paco_reward.images import load_image

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("paco_grpo.rewards")

__all__ = ["CLIPEncoder", "CLIPImageReward", "CLIPTextReward", "PickScoreReward", "LONG_TEXT"]

LONG_TEXT = ("truncate", "split")


class CLIPEncoder:
    """A ``transformers`` CLIP model + processor that embeds images and (long) texts.

    Args:
        model_name_or_path: CLIP checkpoint folder or hub id.
        processor_name_or_path: processor folder or hub id (default: the model's).
        device: where the model runs (``"cuda:1"``, ``torch.device("cpu")``, ...); a bare
            ``"cuda"`` or ``None`` (default) is this process's device, ``cuda:<LOCAL_RANK>``
            when CUDA is available, else CPU. Kept, with its index, as ``self.device``.
        dtype: ``"float32"`` (default), ``"bfloat16"`` or ``"float16"``.
        batch_size: images or text chunks per forward pass.
        long_text: ``"truncate"`` or ``"split"`` (see the module docstring).
        warn_long_text: warn (once) when a text is truncated.
        owner: the reward name used in warnings.

    Example:
        >>> enc = CLIPEncoder("openai/clip-vit-base-patch32")            # doctest: +SKIP
        >>> enc.image_embeddings([img]).shape                             # doctest: +SKIP
        (1, 512)
        >>> CLIPEncoder("openai/clip-vit-base-patch32", device="cuda").device  # doctest: +SKIP
        device(type='cuda', index=0)
    """

    def __init__(
        self,
        model_name_or_path: str | Path,
        processor_name_or_path: str | Path | None = None,
        device: str | torch.device | None = None,
        dtype: str = "float32",
        batch_size: int = 16,
        long_text: str = "truncate",
        warn_long_text: bool = True,
        owner: str = "clip",
    ) -> None:
        from transformers import CLIPModel, CLIPProcessor

        if long_text not in LONG_TEXT:
            raise InputError(
                f"long_text must be one of {LONG_TEXT} (truncate to the model's max length, or "
                f"split into chunks and average); got {long_text!r}."
            )
        self.dtype = model_dtype(dtype)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer; got {batch_size!r}.")
        self.device = resolve_device(device)
        self.model = CLIPModel.from_pretrained(model_name_or_path, dtype=self.dtype)
        self.model.to(self.device).eval()
        self.processor = CLIPProcessor.from_pretrained(processor_name_or_path or model_name_or_path)
        self.tokenizer = self.processor.tokenizer
        self.max_length = int(self.model.config.text_config.max_position_embeddings)
        self.batch_size = batch_size
        self.long_text = long_text
        self.warn_long_text = warn_long_text
        self.owner = owner
        self.num_truncated = 0  # texts truncated since construction
        self._warned = False

    @property
    def logit_scale(self) -> float:
        """``exp(logit_scale)`` of the checkpoint (100 for CLIP/PickScore)."""
        return float(self.model.logit_scale.detach().float().exp())

    # ------------------------------------------------------------------ images
    def image_embeddings(self, images: list) -> np.ndarray:
        """``(n, d)`` L2-normalised float64 embeddings of PIL images."""
        import torch

        rows = []
        for s in range(0, len(images), self.batch_size):
            pixels = self.processor(images=images[s : s + self.batch_size], return_tensors="pt")
            with torch.inference_mode():
                out = self.model.get_image_features(
                    pixel_values=pixels["pixel_values"].to(self.device, self.dtype)
                )
            rows.append(_features(out))
        return _normalise(rows)

    # ------------------------------------------------------------------ texts
    def _chunks(self, text: str) -> list[list[int]]:
        """Token ids of ``text`` as one or more sequences of at most ``max_length`` tokens."""
        ids = list(self.tokenizer(text, verbose=False)["input_ids"])
        if len(ids) <= self.max_length:
            return [ids]
        bos, body, eos = ids[:1], ids[1:-1], ids[-1:]
        width = self.max_length - 2
        if self.long_text == "split":
            return [bos + body[s : s + width] + eos for s in range(0, len(body), width)]
        self.num_truncated += 1
        if self.warn_long_text and not self._warned:
            self._warned = True
            logger.warning(
                "%s: a text of %d tokens is longer than the CLIP model's %d and was truncated "
                "(the model sees only its first %d tokens; later ones are counted in "
                "num_truncated). Pass long_text='split' to average over %d-token chunks instead, "
                "or warn_long_text=False to silence this warning.",
                self.owner,
                len(ids),
                self.max_length,
                self.max_length,
                self.max_length,
            )
        return [bos + body[:width] + eos]

    def text_embeddings(self, texts: list[str]) -> list[np.ndarray]:
        """One ``(chunks, d)`` L2-normalised array per text (one chunk unless split)."""
        import torch

        chunks = [self._chunks(t) for t in texts]
        flat = [c for cs in chunks for c in cs]
        rows = []
        for s in range(0, len(flat), self.batch_size):
            batch = self.tokenizer.pad(
                {"input_ids": flat[s : s + self.batch_size]}, return_tensors="pt"
            )
            with torch.inference_mode():
                out = self.model.get_text_features(
                    input_ids=batch["input_ids"].to(self.device),
                    attention_mask=batch["attention_mask"].to(self.device),
                )
            rows.append(_features(out))
        emb = _normalise(rows)
        out, start = [], 0
        for cs in chunks:
            out.append(emb[start : start + len(cs)])
            start += len(cs)
        return out


def _features(out) -> np.ndarray:
    import torch

    features = out if isinstance(out, torch.Tensor) else out.pooler_output
    return features.float().cpu().numpy().astype(np.float64)


def _normalise(rows: list[np.ndarray]) -> np.ndarray:
    if not rows:
        return np.zeros((0, 1))
    emb = np.concatenate(rows, axis=0)
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    return emb / np.where(norms > 0, norms, 1.0)


class _CLIPReward(BaseReward):
    def __init__(
        self,
        model: str | Path,
        processor: str | Path | None = None,
        *,
        device: str | torch.device | None = None,
        dtype: str = "float32",
        batch_size: int = 16,
        long_text: str = "truncate",
        warn_long_text: bool = True,
    ) -> None:
        super().__init__()
        self.encoder = CLIPEncoder(
            model,
            processor,
            device=device,
            dtype=dtype,
            batch_size=batch_size,
            long_text=long_text,
            warn_long_text=warn_long_text,
            owner=self.name,
        )

    @property
    def device(self) -> torch.device:
        """The device of the reward's model, with its index (``cuda:3``, ``cpu``)."""
        return self.encoder.device


class CLIPTextReward(_CLIPReward):
    """CLIP-T: each panel's cosine similarity with its own panel description, mean over panels.

    Panel descriptions come from ``metadata["panel_prompts"]``, else
    :func:`paco_reward.grids.split_panel_prompts` of the prompt (T2IS markers, row-major,
    matching the panels cut by the layout). A prompt without panel markers is compared with
    the whole image (the plain CLIP score); a marker count that does not match the layout
    scores NaN. The reward is the raw cosine in [-1, 1] (about 0.2-0.4 for real CLIP on
    matching text). With ``global_description=True`` each panel description is read after
    the prompt's global description (the text before the first marker): for prompts whose
    panels say "the same character ..." and whose global description says which.

    Args:
        model: CLIP checkpoint (paper: ``laion/CLIP-ViT-H-14-laion2B-s32B-b79K``).
        processor: processor checkpoint (default: ``model``).
        layout: the layout when neither ``metadata["layout"]`` nor the prompt names one.
        global_description: prefix every panel description with the global description.
        device / dtype / batch_size / long_text / warn_long_text: see :class:`CLIPEncoder`.

    Example:
        >>> reward = CLIPTextReward("laion/CLIP-ViT-H-14-laion2B-s32B-b79K")   # doctest: +SKIP
        >>> reward(grids, prompts, metadata)                                   # doctest: +SKIP
        array([0.27, 0.31])
    """

    name = "clip_t"

    def __init__(
        self,
        model: str | Path = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K",
        processor: str | Path | None = None,
        layout: str | None = None,
        global_description: bool = False,
        *,
        device: str | torch.device | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, processor, device=device, **kwargs)
        self.layout = layout
        self.global_description = bool(global_description)

    def score(self, images, prompts, metadata) -> np.ndarray:
        pics, texts, items = [], [], []  # items[k] = (first pic, first text, count) or None
        for k, (image, prompt, meta) in enumerate(zip(images, prompts, metadata)):
            try:
                global_text, panel_texts = split_panel_prompts(prompt)
                descriptions = meta.get("panel_prompts") or panel_texts
                if descriptions and self.global_description:
                    descriptions = [f"{global_text} {d}" for d in descriptions]
                if not descriptions:
                    panels, descriptions = [load_image(image, f"images[{k}]")], [prompt]
                else:
                    panels = grid_panels(image, prompt, meta, self.layout, k)
                    if len(descriptions) != len(panels):
                        raise PromptError(
                            f"{len(descriptions)} panel descriptions for {len(panels)} panels; "
                            "check the layout or the prompt's panel markers"
                        )
                if any(not isinstance(d, str) or not d.strip() for d in descriptions):
                    raise PromptError("an empty panel description")
                items.append((len(pics), len(texts), len(panels)))
                pics.extend(panels)
                texts.extend(descriptions)
            except INPUT_ERRORS as err:
                self.fail(k, err)
                items.append(None)
        image_emb = self.encoder.image_embeddings(pics)
        text_emb = self.encoder.text_embeddings(texts)
        out = np.full(len(images), np.nan)
        for k, item in enumerate(items):
            if item is not None:
                p, t, n = item
                out[k] = np.mean([(text_emb[t + i] @ image_emb[p + i]).mean() for i in range(n)])
        return out


class CLIPImageReward(_CLIPReward):
    """CLIP-I: mean pairwise cosine similarity of the panels' CLIP image embeddings.

    A cheap consistency baseline (it sees appearance, not identity or logic).

    Args:
        model: CLIP checkpoint folder or hub id.
        layout: the layout when neither ``metadata["layout"]`` nor the prompt names one.
        device / dtype / batch_size: see :class:`CLIPEncoder`.

    Example:
        >>> CLIPImageReward("openai/clip-vit-large-patch14")(grids, prompts, metadata)  # doctest: +SKIP
    """

    name = "clip_i"

    def __init__(
        self,
        model: str | Path = "openai/clip-vit-large-patch14",
        processor: str | Path | None = None,
        layout: str | None = None,
        *,
        device: str | torch.device | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, processor, device=device, **kwargs)
        self.layout = layout

    def score(self, images, prompts, metadata) -> np.ndarray:
        pics, items = [], []
        for k, (image, prompt, meta) in enumerate(zip(images, prompts, metadata)):
            try:
                panels = grid_panels(image, prompt, meta, self.layout, k)
                if len(panels) < 2:
                    raise PromptError("a 1x1 layout has no panel pair")
                items.append((len(pics), len(panels)))
                pics.extend(panels)
            except INPUT_ERRORS as err:
                self.fail(k, err)
                items.append(None)
        emb = self.encoder.image_embeddings(pics)
        out = np.full(len(images), np.nan)
        for k, item in enumerate(items):
            if item is not None:
                p, n = item
                out[k] = np.mean([emb[p + i] @ emb[p + j] for i, j in combinations(range(n), 2)])
        return out


class PickScoreReward(_CLIPReward):
    """PickScore of the whole grid with its prompt: ``exp(logit_scale) * cos / scale``.

    PickScore's raw value is ``100 * cosine`` (about 18-23 for real images); the default
    ``scale=26`` (as Flow-GRPO's PickScore scorer) maps it to about 0.7-0.9, in line with the
    other rewards so that log taming and weights behave alike. Prompts longer than 77 tokens
    are handled as ``long_text`` says (PickScore itself truncates).

    Args:
        model: ``yuvalkirstain/PickScore_v1`` (any CLIPModel checkpoint works).
        processor: ``laion/CLIP-ViT-H-14-laion2B-s32B-b79K`` (PickScore's processor).
        scale: divisor of the raw score (> 0).
        device / dtype / batch_size / long_text / warn_long_text: see :class:`CLIPEncoder`.

    Example:
        >>> PickScoreReward()(grids, prompts, metadata)   # doctest: +SKIP
        array([0.83, 0.86])
    """

    name = "pickscore"

    def __init__(
        self,
        model: str | Path = "yuvalkirstain/PickScore_v1",
        processor: str | Path | None = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K",
        scale: float = 26.0,
        *,
        device: str | torch.device | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(scale, (int, float)) or scale <= 0:
            raise InputError(f"pickscore scale must be a number > 0 (default 26); got {scale!r}.")
        super().__init__(model, processor, device=device, **kwargs)
        self.scale = float(scale)

    def score(self, images, prompts, metadata) -> np.ndarray:
        pics, texts, keep = [], [], []
        for k, (image, prompt) in enumerate(zip(images, prompts)):
            try:
                if not isinstance(prompt, str) or not prompt.strip():
                    raise PromptError(f"empty prompt {prompt!r}")
                pics.append(load_image(image, f"images[{k}]"))
                texts.append(prompt)
                keep.append(k)
            except INPUT_ERRORS as err:
                self.fail(k, err)
        image_emb = self.encoder.image_embeddings(pics)
        text_emb = self.encoder.text_embeddings(texts)
        out = np.full(len(images), np.nan)
        factor = self.encoder.logit_scale / self.scale
        for i, k in enumerate(keep):
            out[k] = factor * float((text_emb[i] @ image_emb[i]).mean())
        return out
