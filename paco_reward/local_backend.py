"""In-process scoring with transformers.

A call scores a list of pairs (indices into a list of images) in two stages, each in chunks
whose host work (the image processor; padding the token ids) runs in a worker thread while
the model works on the previous chunk:

1. **vision**: every *distinct* image goes through the vision tower once, images of one size
   together, ``vision_batch_size`` images a chunk. Pixels travel in the model's dtype, one
   frame (the processor repeats an image's frame ``temporal_patch_size`` times; the frames
   are repeated again on the device), pinned on a GPU. The tower's grid-derived inputs
   (rotary positions, window order, attention boundaries) come precomputed from the host
   (:class:`~paco_reward.host_inputs.VisionGridInputs`) and its window attention makes one
   call per distinct window length where its forward is the one that was checked
   (:mod:`paco_reward.vision_attention`; else transformers' own forward, the same scores);
2. **language model**: each pair's prompt is rendered with the model's own chat template
   (once per distinct instruction), its image placeholders expanded to the image's token
   count, its 3-D rope positions computed on the host once per (instruction, image sizes)
   (:class:`~paco_reward.host_inputs.PromptRows`); pairs are sorted by token length and cut
   into chunks of ``batch_size`` (so a chunk pads little, or not at all and then needs no
   mask), left-padded, and one forward per chunk, fed the cached image features, gives the
   first-answer-token logits of the last position only (``logits_to_keep=1``).

Nothing in a call reads a device tensor back but the results, once, at the end, in the
pairs' order. This is token-for-token what ``processor(text, images)`` + ``model(**inputs)``
computes (the parity tests check it), minus the repeated vision work. The model is any
Qwen-VL family's (Qwen2.5-VL, Qwen3-VL, ...): its class comes from its config and its image
handling from its processor (:mod:`paco_reward.modeling`). Loading and the pipelining are
:class:`~paco_reward.transformers_backend.TransformersBackend`'s; another family scores
through :class:`~paco_reward.processor_backend.ProcessorBackend`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from paco_reward.devices import host_to_device, pin_for
from paco_reward.errors import VisionAttentionError
from paco_reward.host_inputs import (
    PromptRows,
    VisionGridInputs,
    causal_padding_mask,
    knows_vision_tower,
    padding_mask,
)
from paco_reward.images import ImagePolicy
from paco_reward.judges import judge_spec_for_config
from paco_reward.lru import PER_INSTRUCTION_CACHE_SIZE, LRUCache
from paco_reward.modeling import (
    ImageFeatures,
    check_qwen_vl_processor,
    image_features,
    join_image_features,
    vision_tower,
)
from paco_reward.templates import build_messages
from paco_reward.transformers_backend import (
    PairRequest,
    TransformersBackend,
    used_images_and_requests,
)
from paco_reward.vision_attention import group_vision_attention

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_VISION_BATCH_SIZE",
    "LocalBackend",
    "PairRequest",
    "render_prompt_ids",
    "render_prompt_text",
]

# An image's (t, h, w) patch grid.
Grid = tuple[int, int, int]
# Images per vision-tower pass by default (measured on the CPU: docs/benchmarks.md).
DEFAULT_VISION_BATCH_SIZE = 16


def render_prompt_text(processor, instruction: str, num_images: int = 2) -> str:
    """The chat prompt for a pair as text, up to and including the generation prompt
    (``<|im_start|>assistant`` and its newline for Qwen-VL), with ONE image placeholder per
    image (Qwen-VL's ``<|image_pad|>``, Gemma-3's ``<start_of_image>``), as the model's own
    chat template renders :func:`~paco_reward.templates.build_messages`. Every scorer
    (transformers, vLLM) and the SFT collator render through this, so a model is scored on
    exactly the prompt it was trained on.

    Example:
        >>> text = render_prompt_text(processor, render_instruction("rank"))  # doctest: +SKIP
    """
    return processor.apply_chat_template(
        build_messages(instruction, num_images=num_images),
        tokenize=False,
        add_generation_prompt=True,
    )


def render_prompt_ids(processor, instruction: str, num_images: int = 2) -> list[int]:
    """Token ids of :func:`render_prompt_text`.

    Example:
        >>> ids = render_prompt_ids(processor, render_instruction("rank"))  # doctest: +SKIP
    """
    text = render_prompt_text(processor, instruction, num_images)
    return processor.tokenizer.encode(text, add_special_tokens=False)


class LocalBackend(TransformersBackend):
    """Holds a Qwen-VL-family model (Qwen2.5-VL, Qwen3-VL, ...) and its processor; scores
    pairs of pre-normalised images (see the module's docstring for how).
    ``LocalBackend.from_pretrained`` loads a Qwen-VL model only;
    :meth:`TransformersBackend.from_pretrained <paco_reward.transformers_backend.TransformersBackend.from_pretrained>`
    picks this class or :class:`~paco_reward.processor_backend.ProcessorBackend` from the
    model.

    Args:
        model / processor: a loaded evaluator (:func:`~paco_reward.modeling.load_evaluator_model_and_processor`).
        batch_size: pairs per language-model forward.
        vision_batch_size: images per vision-tower pass (default
            :data:`DEFAULT_VISION_BATCH_SIZE`).
        canonical_yes_no / min_pixels / max_pixels / name / vision_attention: as in
            :meth:`paco_reward.PacoReward.from_pretrained`.

    Attributes:
        grouped_vision_attention: whether the vision attention attends in one call per
            window length (:func:`~paco_reward.vision_attention.group_vision_attention`),
            rather than by transformers' own forward.
        stage_timer: a :class:`~paco_reward.stage_timer.StageTimer` to time the stages into
            (``preprocess``, ``vision``, ``llm``), or ``None`` (the default).
        share_prefixes: a pair of images asked several questions in one call runs its
            common prompt prefix once (:meth:`first_token_outputs`); ``False`` runs every
            question as its own row (the same scores, to float rounding).

    Raises:
        UnsupportedModelError: the processor has no Qwen-VL image processing.
        VisionAttentionError: the model's vision tower is not one whose inputs the scorer
            precomputes, or (``vision_attention="grouped"``) its attention not the one the
            grouped window attention was checked against; the model is left unchanged.
    """

    default_vision_batch_size = DEFAULT_VISION_BATCH_SIZE
    share_prefixes = True

    def __init__(
        self,
        model,
        processor,
        *,
        batch_size: int = 8,
        vision_batch_size: int | None = None,
        canonical_yes_no: bool = True,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        name: str = "local",
        vision_attention: str = "auto",
    ) -> None:
        self.check_processor(processor, name)
        super().__init__(
            model,
            processor,
            batch_size=batch_size,
            vision_batch_size=vision_batch_size,
            canonical_yes_no=canonical_yes_no,
            name=name,
        )
        self.image_policy = ImagePolicy.from_processor(processor, min_pixels, max_pixels)
        self.merge_length = processor.image_processor.merge_size**2
        self.image_token_id = processor.image_token_id
        self._prompt_ids: LRUCache[list[int]] = LRUCache(PER_INSTRUCTION_CACHE_SIZE)
        visual = vision_tower(self.model)
        self.vision_device = next(visual.parameters()).device
        self.vision_dtype = visual.dtype
        self.patch_embed = visual.patch_embed
        # checks the tower before the attention is patched: a refused model is left as it was
        self.vision_inputs = VisionGridInputs(self.model, self.vision_device)
        self.grouped_vision_attention = group_vision_attention(self.model, vision_attention) > 0
        self.rows = PromptRows(self.model, self.prompt_ids, self.image_token_id, self.merge_length)

    @classmethod
    def check_config(cls, config, source: str | Path) -> None:
        """Raise :class:`~paco_reward.errors.VisionAttentionError` unless ``config`` names a
        family whose vision tower this scorer knows (:mod:`paco_reward.judges`)."""
        spec = judge_spec_for_config(config)
        if spec is None or not knows_vision_tower(spec.vision_tower):
            model_type = getattr(config, "model_type", None)
            tower = spec.vision_tower if spec else "a family the judge registry does not name"
            raise VisionAttentionError(
                f"{str(source)!r} is a {model_type!r} model, whose vision tower ({tower}) is not "
                "one whose inputs LocalBackend precomputes (the Qwen-VL families'). Score it "
                "through PacoReward.from_pretrained (its ProcessorBackend)."
            )

    @classmethod
    def check_processor(cls, processor, source: str | Path) -> None:
        check_qwen_vl_processor(processor, source)

    @property
    def text_attention(self) -> str:
        """The language model's attention implementation, read at each call: a
        ``model.set_attn_implementation(...)`` after construction changes the mask it needs
        (eager adds a 4-D mask to its scores, where sdpa reads a boolean one)."""
        config = self.model.config
        return getattr(config, "text_config", config)._attn_implementation

    # ------------------------------------------------------------------ vision
    def preprocess_images(self, images: Sequence[Image.Image]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pixel patches and (t, h, w) grids of already-resized images, as the processor makes them."""
        out = self.processor.image_processor(
            images=list(images), size=self.image_policy.processor_size, return_tensors="pt"
        )
        return out["pixel_values"], out["image_grid_thw"]

    def _vision_chunk(self, images: Sequence[Image.Image]) -> _VisionChunk:
        """Host work of a vision pass (worker thread): the processor's patches, one frame of
        each (an image's frames are copies), in the tower's dtype, pinned for a GPU."""
        with self._host_stage("preprocess"):
            pixel_values, grid_thw = self.preprocess_images(images)
            embed = self.patch_embed
            frames = pixel_values.view(
                -1, embed.in_channels, embed.temporal_patch_size, embed.patch_size, embed.patch_size
            )[:, :, :1].to(self.vision_dtype)  # fmt: skip
            grids = [(int(t), int(h), int(w)) for t, h, w in grid_thw.tolist()]
            return _VisionChunk(pin_for(frames, self.vision_device), grids)

    def _vision_forward(self, chunk: _VisionChunk) -> tuple[list[ImageFeatures], list[Grid]]:
        with self._device_stage("vision"):
            frames = host_to_device(chunk.frames, self.vision_device)
            patches, channels, _, size, _ = frames.shape
            temporal = self.patch_embed.temporal_patch_size
            pixels = frames.expand(patches, channels, temporal, size, size).reshape(patches, -1)
            vision = self.model.get_image_features(
                pixels, torch.tensor(chunk.grids), return_dict=True, **self.vision_inputs(chunk.grids)
            )  # fmt: skip
            return image_features(vision), chunk.grids

    @torch.inference_mode()
    def encode_images(
        self, images: Sequence[Image.Image]
    ) -> tuple[list[ImageFeatures], torch.Tensor]:
        """Vision-tower features (one :class:`~paco_reward.modeling.ImageFeatures` per image:
        its merged embeddings, and Qwen3-VL's DeepStack features) and the images' grids (a
        host tensor ``[len(images), 3]``), in the order of ``images``."""
        order = sorted(range(len(images)), key=lambda i: images[i].size)  # one size: one call
        step = self.vision_batch_size
        chunks = [order[s : s + step] for s in range(0, len(order), step)]
        done = self._pipelined(
            chunks, lambda chunk: self._vision_chunk([images[i] for i in chunk]), self._vision_forward
        )  # fmt: skip
        features: list[ImageFeatures] = [None] * len(images)  # type: ignore[list-item]
        grids: list[Grid] = [(0, 0, 0)] * len(images)
        for chunk, (chunk_features, chunk_grids) in zip(chunks, done):
            for i, feature, grid in zip(chunk, chunk_features, chunk_grids):
                features[i], grids[i] = feature, grid
        return features, torch.tensor(grids, dtype=torch.long).reshape(-1, 3)

    # ------------------------------------------------------------------ language model
    def prompt_ids(self, instruction: str) -> list[int]:
        """Token ids of the rendered chat prompt for a pair, with one image placeholder per
        image (cached per instruction: the text does not depend on the images)."""

        def render() -> list[int]:
            with self._processor_lock:  # the tokenizer, from the worker or a caller
                return render_prompt_ids(self.processor, instruction)

        return self._prompt_ids.get(instruction, render)

    def _pair_rows(
        self, pairs: Sequence[PairRequest], grids: Sequence[Grid]
    ) -> list[tuple[list[int], torch.Tensor]]:
        return [self.rows(text, (grids[a], grids[b])) for a, b, text in pairs]

    def _left_padded(
        self, rows: Sequence[tuple[list[int], torch.Tensor]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``input_ids`` ``[len(rows), width]`` and rope positions ``[3, len(rows), width]``,
        left-padded (pad id, position 0: as transformers' ``get_rope_index`` leaves a pad),
        and each row's pad count."""
        width = max(len(ids) for ids, _ in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        positions = torch.zeros((3, len(rows), width), dtype=torch.long)
        padding = torch.tensor([width - len(ids) for ids, _ in rows], dtype=torch.long)
        for i, (ids, row_positions) in enumerate(rows):
            input_ids[i, width - len(ids) :] = torch.tensor(ids)
            positions[:, i, width - len(ids) :] = row_positions
        return input_ids, positions, padding

    def _text_chunk(
        self, rows: Sequence[tuple[list[int], torch.Tensor]], occurrences: list[int]
    ) -> _TextChunk:
        """Host work of a language-model forward (worker thread): the padded batch, pinned."""
        with self._host_stage("preprocess"):
            input_ids, positions, padding = self._left_padded(rows)
            device = self.device
            return _TextChunk(
                pin_for(input_ids, device),
                pin_for(positions, device),
                pin_for(padding, device),
                bool(padding.any()),
                occurrences,
            )

    def _attention_mask(self, chunk: _TextChunk) -> torch.Tensor | None:
        """None when no row is padded (causal attention needs no mask); else sdpa's 4-D mask
        built on the device, or the 2-D mask for the other kernels to build theirs from."""
        if not chunk.padded:
            return None
        padding = host_to_device(chunk.padding, self.device)
        width = chunk.input_ids.shape[1]
        if self.text_attention == "sdpa":
            return causal_padding_mask(padding, width)
        return padding_mask(padding, width).long()

    def _chunk_logits(self, chunk: _TextChunk, features: Sequence[ImageFeatures]) -> torch.Tensor:
        with self._device_stage("llm"):
            input_ids = host_to_device(chunk.input_ids, self.device)
            images = [features[i] for i in chunk.occurrences]
            if set(images[0].fields) == {"pooler_output"}:
                # transformers' own embedding and placeholder scatter, without its check of the
                # placeholder count (a read-back; the rows were built from the same counts)
                embeds = self.model.get_input_embeddings()(input_ids)
                image_embeds = torch.cat([f.fields["pooler_output"] for f in images])
                placeholders = (input_ids == self.image_token_id).unsqueeze(-1)
                inputs: dict[str, Any] = {
                    "inputs_embeds": embeds.masked_scatter(
                        placeholders, image_embeds.to(embeds.device, embeds.dtype)
                    )
                }
            else:  # Qwen3-VL's DeepStack features: through the model's own image input
                inputs = {
                    "input_ids": input_ids,
                    "mm_encoder_outputs": {"image": join_image_features(images)},
                }
            out = self.model(
                **inputs,
                attention_mask=self._attention_mask(chunk),
                position_ids=host_to_device(chunk.positions, self.device),
                logits_to_keep=1,
                use_cache=False,
            )
            return out.logits[:, -1, :]

    def build_inputs(
        self, pairs: Sequence[PairRequest], grids: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Left-padded ``input_ids``/``attention_mask``/``mm_token_type_ids`` and the
        ``image_grid_thw`` of every image occurrence, in order of appearance (host tensors),
        as ``processor(text, images)`` makes them."""
        grid_list = [(int(t), int(h), int(w)) for t, h, w in grids.tolist()]
        input_ids, _, padding = self._left_padded(self._pair_rows(pairs, grid_list))
        occurrences = [i for a, b, _ in pairs for i in (a, b)]
        attention_mask = padding_mask(padding, input_ids.shape[1])
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask.long(),
            "mm_token_type_ids": (input_ids == self.image_token_id).int(),
            "image_grid_thw": grids.cpu()[occurrences],
        }

    # ------------------------------------------------------------------ scoring
    @torch.inference_mode()
    def first_token_logits(
        self, pairs: Sequence[PairRequest], features: list[ImageFeatures], grids: torch.Tensor
    ) -> torch.Tensor:
        """Next-token logits after the generation prompt, ``[len(pairs), vocab]`` (one forward,
        on the model's device), from the images' :meth:`encode_images` features and grids."""
        grid_list = [(int(t), int(h), int(w)) for t, h, w in grids.tolist()]
        occurrences = [i for a, b, _ in pairs for i in (a, b)]
        chunk = self._text_chunk(self._pair_rows(pairs, grid_list), occurrences)
        return self._chunk_logits(chunk, features)

    # ------------------------------------------------------------------ shared prefixes
    @torch.inference_mode()
    def first_token_outputs(
        self,
        images: Sequence[Image.Image],
        pairs: Sequence[PairRequest],
        reduce: Callable[[torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """As :meth:`TransformersBackend.first_token_outputs`; when a pair of images is asked
        several questions (T2IS-Bench: every criterion of a case), the prompt up to where the
        questions differ (the chat header and both images' tokens, nearly all of it) runs
        once per pair and each question continues from its key/value cache
        (:meth:`_shared_prefix_logits`)."""
        if not self.share_prefixes or not _repeats_a_pair(pairs) or self.text_attention != "sdpa":
            return super().first_token_outputs(images, pairs, reduce)
        with self._serving():
            used_images, requests = used_images_and_requests(images, pairs)
            features, grids = self.encode_images(used_images)
            if set(features[0].fields) != {"pooler_output"}:  # DeepStack: one forward per row
                rows = self._pair_rows(requests, [tuple(g) for g in grids.tolist()])
                return self._in_length_order(
                    [len(ids) for ids, _ in rows],
                    lambda chunk: self._text_chunk([rows[k] for k in chunk],
                                                   [i for k in chunk for i in requests[k][:2]]),
                    lambda chunk: reduce(self._chunk_logits(chunk, features)),
                )  # fmt: skip
            rows = self._pair_rows(requests, [tuple(g) for g in grids.tolist()])
            groups: dict[tuple[int, int], list[int]] = {}
            for k, (a, b, _) in enumerate(requests):
                groups.setdefault((a, b), []).append(k)
            # chunks of up to batch_size pairs, their questions at most 4 x batch_size rows
            chunks, current, size = [], [], 0
            for members in groups.values():
                if current and (len(current) == self.batch_size or size + len(members) > 4 * self.batch_size):
                    chunks.append(current)
                    current, size = [], 0
                current.append(members)
                size += len(members)
            chunks.append(current)
            order, outputs = [], []
            for chunk in chunks:
                outputs.append(reduce(self._shared_prefix_logits(chunk, rows, requests, features)))
                order += [k for members in chunk for k in members]
            sorted_results = torch.cat(outputs).cpu()
            results = torch.empty_like(sorted_results)
            results[torch.tensor(order, dtype=torch.long)] = sorted_results
            return results

    def _shared_prefix_logits(
        self,
        chunk: list[list[int]],
        rows: Sequence[tuple[list[int], torch.Tensor]],
        requests: Sequence[PairRequest],
        features: Sequence[ImageFeatures],
    ) -> torch.Tensor:
        """Last-position logits ``[rows, vocab]`` of a chunk of pairs' questions (each list
        in ``chunk``: the requests of one image pair): the pairs' common prefixes in one
        left-padded forward that keeps its cache, then every question's own tokens in one
        right-padded forward on that cache, repeated for each of its pair's questions."""
        with self._device_stage("llm"):
            device = self.device
            prefixes, suffixes, owners = [], [], []
            for g, members in enumerate(chunk):
                ids = [rows[k][0] for k in members]
                shared = min(len(x) for x in ids) - 1  # each question keeps one token at least
                for n in range(shared):
                    if any(x[n] != ids[0][n] for x in ids[1:]):
                        shared = n
                        break
                prefixes.append((ids[0][:shared], rows[members[0]][1][:, :shared]))
                for k in members:
                    suffixes.append((rows[k][0][shared:], rows[k][1][:, shared:]))
                    owners.append(g)
            # the prefix: left-padded as a scoring chunk, image features scattered, cache kept
            input_ids, positions, padding = self._left_padded(prefixes)
            input_ids = input_ids.to(device)
            embeds = self.model.get_input_embeddings()(input_ids)
            image_embeds = torch.cat([features[i].fields["pooler_output"]
                                      for members in chunk for i in requests[members[0]][:2]])  # fmt: skip
            placeholders = (input_ids == self.image_token_id).unsqueeze(-1)
            embeds = embeds.masked_scatter(placeholders, image_embeds.to(embeds.device, embeds.dtype))
            width = input_ids.shape[1]
            padded = bool(padding.any())  # a host tensor: no device read-back
            padding = padding.to(device)
            # pairs of images of one size (T2IS-Bench's sub-images) have prefixes of one length:
            # no padding, no mask, the causal kernel
            mask = causal_padding_mask(padding, width) if padded else None
            out = self.model(inputs_embeds=embeds, attention_mask=mask, position_ids=positions.to(device),
                             logits_to_keep=1, use_cache=True)  # fmt: skip
            cache = out.past_key_values
            owner = torch.tensor(owners, dtype=torch.long, device=device)
            cache.reorder_cache(owner)  # each pair's cache once per question of it
            # the questions: right-padded (a pad after the last token changes nothing before it)
            lengths = [len(ids) for ids, _ in suffixes]
            tail = max(lengths)
            suffix_ids = torch.full((len(suffixes), tail), self.pad_token_id, dtype=torch.long)
            suffix_positions = torch.zeros((3, len(suffixes), tail), dtype=torch.long)
            for r, (ids, pos) in enumerate(suffixes):
                suffix_ids[r, : len(ids)] = torch.tensor(ids)
                suffix_positions[:, r, : len(ids)] = pos
                suffix_positions[:, r, len(ids):] = pos[:, -1:]
            # every question sees its pair's prefix and its own tokens before it: an additive
            # float mask, one for all rows when no prefix is padded (sdpa's math kernel runs
            # a broadcast float mask ~40 % faster than a per-row boolean one on the CPU)
            prefix_keys = padding_mask(padding, width)[owner] if padded else padding_mask(padding[:1], width)
            causal = torch.ones(tail, tail, dtype=torch.bool, device=device).tril()
            allowed = torch.cat([prefix_keys[:, None, None, :].expand(-1, 1, tail, width),
                                 causal[None, None].expand(len(prefix_keys), 1, tail, tail)], dim=-1)  # fmt: skip
            mask = torch.zeros(allowed.shape, dtype=embeds.dtype, device=device)
            mask = mask.masked_fill(~allowed, torch.finfo(embeds.dtype).min)
            # logits only at the questions' last positions (Qwen2.5-VL-7B's 152k vocabulary
            # over every question token is ~7 % of this forward, and a [rows, tail, 152k] tensor)
            ends = sorted({n - 1 for n in lengths})
            out = self.model(
                input_ids=suffix_ids.to(device),
                attention_mask=mask,
                position_ids=suffix_positions.to(device),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=torch.tensor(ends, device=device),
            )
            column = torch.tensor([ends.index(n - 1) for n in lengths], device=device)
            return out.logits[torch.arange(len(suffixes), device=device), column]

    def _text_chunks(
        self, images: Sequence[Image.Image], requests: Sequence[PairRequest]
    ) -> tuple[list[ImageFeatures], list[int], Callable[[list[int]], _TextChunk]]:
        features, grids = self.encode_images(images)
        rows = self._pair_rows(requests, [tuple(g) for g in grids.tolist()])

        def prepare(chunk: list[int]) -> _TextChunk:
            occurrences = [i for k in chunk for i in requests[k][:2]]
            return self._text_chunk([rows[k] for k in chunk], occurrences)

        return features, [len(ids) for ids, _ in rows], prepare

    # ------------------------------------------------------------------ generation
    def generation_inputs(
        self, images: Sequence[Image.Image], instruction: str
    ) -> dict[str, torch.Tensor]:
        pixel_values, grid_thw = self.preprocess_images(images)
        inputs = self.build_inputs([(0, 1, instruction)], grid_thw)
        inputs["pixel_values"] = pixel_values.to(self.model.dtype)
        return {name: value.to(self.device) for name, value in inputs.items()}


def _repeats_a_pair(pairs: Sequence[PairRequest]) -> bool:
    """Whether some image pair is asked more than one question."""
    seen = set()
    for a, b, _ in pairs:
        if (a, b) in seen:
            return True
        seen.add((a, b))
    return False


@dataclass
class _VisionChunk:
    """A vision pass's host inputs: ``frames`` ``[patches, channels, 1, patch, patch]`` in the
    tower's dtype, and each image's grid."""

    frames: torch.Tensor
    grids: list[Grid]


@dataclass
class _TextChunk:
    """A language-model forward's host inputs: left-padded ids, rope positions, pad counts,
    whether any row is padded, and the image (feature index) of each placeholder in order."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    padding: torch.Tensor
    padded: bool
    occurrences: list[int]
