"""``PacoReward``: the public scoring API.

The front-end turns user inputs (any image type, themes, templates, grids) into a
list of image pairs plus rendered instructions, de-duplicating images by content,
and hands them to a backend (in-process transformers here; a remote
OpenAI-compatible server through ``from_server``). Every method is built on one
primitive, :meth:`PacoReward._score`, so they all share normalisation, templates
and the Yes/No extraction.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from PIL import Image

from paco_reward.errors import InputError, InputTypeError, LayoutError, PromptError
from paco_reward.grids import parse_layout, split_grid, split_panel_prompts
from paco_reward.hub import hub_kwargs
from paco_reward.images import ImageInput, ImagePolicy, image_hash, load_image, resize_for_model
from paco_reward.outputs import EditScore, Judgement, Ranking, SetScore
from paco_reward.templates import DEFAULT_TEMPLATE, Template, get_template, render_instruction

logger = logging.getLogger(__name__)


_ANSWER = re.compile(r"^\W*(\w+)[\s.,:;!\"'*]*(.*)$", re.DOTALL)


def split_answer(text: str) -> tuple[str, str]:
    """Split a generated judgement into its decision word and the reasons after it.

    >>> split_answer("Yes. Both panels show the same fox.")
    ('Yes', 'Both panels show the same fox.')
    """
    match = _ANSWER.match(text.strip())
    if match is None:
        return "", text.strip()
    return match.group(1), match.group(2).strip()


class ScoringBackend(Protocol):
    """What a backend provides. Images arrive as RGB PIL images already resized by
    ``image_policy`` (as they are when it is ``None``: the model's processor resizes them);
    pairs are (index, index, instruction)."""

    name: str
    image_policy: ImagePolicy | None

    def score_batch(
        self, images: Sequence[Image.Image], pairs: Sequence[tuple[int, int, str]]
    ) -> np.ndarray: ...

    def generate(
        self, images: Sequence[Image.Image], instruction: str, max_new_tokens: int = 256, **kwargs
    ) -> str: ...


class _ImageTable:
    """Normalises images once and de-duplicates them by content. An input seen before in the
    call (the same object, or the same path) is not decoded, resized nor hashed again: a
    panel of a 2x2 grid is in three pairs."""

    def __init__(self, policy: ImagePolicy | None) -> None:
        self.policy = policy
        self.images: list[Image.Image] = []
        self._index: dict[str, int] = {}
        self._seen: dict[Any, int] = {}
        self._inputs: list[ImageInput] = []  # keeps each seen object alive, so its id stays its

    def add(self, image: ImageInput, name: str) -> int:
        identity = (
            ("path", os.fspath(image)) if isinstance(image, (str, os.PathLike)) else id(image)
        )
        if identity in self._seen:
            return self._seen[identity]
        pil = resize_for_model(load_image(image, name), self.policy, name)
        key = image_hash(pil)
        if key not in self._index:
            self._index[key] = len(self.images)
            self.images.append(pil)
        self._seen[identity] = self._index[key]
        self._inputs.append(image)
        return self._index[key]


class PacoReward:
    """Pairwise consistency evaluator: score = P(Yes) / (P(Yes) + P(No)) of the first answer token.

    Example:
        >>> rm = PacoReward.from_pretrained("X-GenGroup/PaCo-Reward-7B")        # doctest: +SKIP
        >>> rm.score("panel_1.png", "panel_2.png", "a red fox in four seasons")  # doctest: +SKIP
        0.93
        >>> rm.score_grid("grid.png", "FOUR-PANEL Images with a 2x2 grid layout ...").mean  # doctest: +SKIP
        0.88

    Args:
        backend: an in-process or remote backend (see :meth:`from_pretrained`).
        template: default instruction template (name, :class:`Template` or format string).
        symmetric: default for scoring both orders of a pair and averaging.
    """

    def __init__(
        self,
        backend: ScoringBackend,
        template: str | Template = DEFAULT_TEMPLATE,
        symmetric: bool = False,
    ) -> None:
        self.backend = backend
        self.template = get_template(template)
        self.symmetric = symmetric

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Release what the backend holds besides memory: an in-process backend's
        preprocessing thread, a remote backend's connections, a vLLM engine's processes.
        Do not score after it (an in-process backend raises
        :class:`~paco_reward.errors.UsageError`). Idempotent; a ``with`` block calls it at its
        end.

        Example:
            >>> with PacoReward.from_pretrained("X-GenGroup/PaCo-Reward-7B") as rm:  # doctest: +SKIP
            ...     rm.score("panel_1.png", "panel_2.png", "a red fox")
        """
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> PacoReward:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        path_or_id: str | Path,
        adapter: str | Path | None = None,
        device=None,
        dtype=None,
        *,
        backend: str = "transformers",
        batch_size: int = 8,
        vision_batch_size: int | None = None,
        canonical_yes_no: bool = True,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        template: str | Template = DEFAULT_TEMPLATE,
        symmetric: bool = False,
        merge_adapter: bool = True,
        revision: str | None = None,
        cache_dir: str | Path | None = None,
        token: str | bool | None = None,
        local_files_only: bool = False,
        trust_remote_code: bool = False,
        device_map: str | int | dict | None = None,
        attn_implementation: str | None = None,
        vision_attention: str = "auto",
        model_kwargs: Mapping[str, Any] | None = None,
        adapter_kwargs: Mapping[str, Any] | None = None,
        **llm_kwargs: Any,
    ) -> PacoReward:
        """Load a merged PaCo-Reward model, or a base model plus a PEFT LoRA ``adapter``.

        Args:
            path_or_id: a local folder or hub id of an image-text-to-text model whose
                tokenizer has single-token "Yes"/"No": a Qwen-VL family (Qwen2.5-VL,
                Qwen3-VL, ...; :class:`~paco_reward.local_backend.LocalBackend`) or another
                (Gemma-3, ...; :class:`~paco_reward.processor_backend.ProcessorBackend`). Its
                class comes from its config (transformers' ``AutoModelForImageTextToText``),
                its image handling from its processor.
            adapter: optional PEFT LoRA folder/id applied on top (merged for speed unless
                ``merge_adapter=False``; transformers backend only).
            device: one device for the whole model; defaults to this process's device
                (``cuda:<LOCAL_RANK>`` when CUDA is available, else the CPU; see
                :mod:`paco_reward.devices`). A bare ``"cuda"`` gets this process's index.
            dtype: defaults to bfloat16 on CUDA, float32 on CPU.
            backend: ``"transformers"`` (default) or ``"vllm"`` (``vllm.LLM`` in-process,
                exact, same scores; needs ``pip install 'paco-rl[vllm]'``).
            batch_size: pairs per language-model forward; pairs are grouped by token length
                within a call (the results keep the input order). vLLM batches a whole call
                itself.
            vision_batch_size: images per vision-tower pass (transformers backend; default
                :data:`paco_reward.local_backend.DEFAULT_VISION_BATCH_SIZE`, or
                :data:`paco_reward.processor_backend.DEFAULT_VISION_BATCH_SIZE` for another
                family).
            canonical_yes_no: sum every case/space variant of Yes/No (default) or use
                only the exact "Yes"/"No" tokens as the model card does.
            min_pixels / max_pixels: image pixel budget; defaults to the processor's
                (Qwen-VL families; a model whose processor resizes to a fixed size, as
                Gemma-3's does, takes neither).
            template / symmetric: defaults of the scoring methods (see the class).
            revision / cache_dir / token / local_files_only / trust_remote_code: which files
                to load, as in transformers' ``from_pretrained``; they load the model AND its
                processor (see :mod:`paco_reward.hub`). ``cache_dir``, ``token`` and
                ``local_files_only`` apply to the ``adapter`` too (its revision goes in
                ``adapter_kwargs``). With ``backend="vllm"``, ``revision`` and
                ``trust_remote_code`` go to ``vllm.LLM`` and ``cache_dir`` is its
                ``download_dir``.
            device_map: place the weights with accelerate instead of on one ``device``
                (``"auto"``, ``"cpu"``, ``{"": 1}``, ...; a bare ``"cuda"`` gets this
                process's index).
            attn_implementation: ``"sdpa"``, ``"eager"``, ``"flash_attention_2"``, ...
            vision_attention: the Qwen-VL vision tower's window attention
                (:mod:`paco_reward.vision_attention`; transformers backend only):
                ``"auto"`` (default) attends in one call per window length where the loaded
                class's forward is the one that was checked, else logs a warning and keeps
                transformers' own forward (the same scores, slower); ``"grouped"`` raises
                ``VisionAttentionError`` instead; ``"stock"`` always keeps transformers'.
            model_kwargs: any other keyword argument of the model class's
                ``from_pretrained`` (``low_cpu_mem_usage``, ``quantization_config``,
                ``max_memory``, ...); transformers raises on a name it does not take.
            adapter_kwargs: keyword arguments of ``peft.PeftModel.from_pretrained`` for the
                adapter, one of :data:`paco_reward.hub.ADAPTER_KWARGS` (``revision``,
                ``subfolder``, ...).
            **llm_kwargs: ``backend="vllm"`` only: arguments of ``vllm.LLM``
                (``gpu_memory_utilization``, ``max_model_len``, ``enforce_eager``, ...).

        Raises:
            TypeError: an unknown keyword argument (``**llm_kwargs`` with the transformers
                backend), or a ``model_kwargs`` / ``adapter_kwargs`` key that has its own
                argument or is unknown.
            ValueError: an unknown ``backend``; both ``device`` and ``device_map``; a
                transformers-only argument with ``backend="vllm"``.
            UnsupportedModelError: the model has no image input (a text-only model) or no
                chat template; raised before any weight loads.
            YesNoTokenError: its tokenizer has no single-token "Yes"/"No" (idem).
            WeightsMismatchError: a weight of the model or adapter is missing or unexpected
                (transformers would initialise it at random and only log it).

        Example:
            >>> rm = PacoReward.from_pretrained("X-GenGroup/PaCo-Reward-7B", revision="main",
            ...                                 device_map="auto", attn_implementation="sdpa")  # doctest: +SKIP
            >>> rm = PacoReward.from_pretrained("Qwen/Qwen2.5-VL-7B-Instruct", adapter="my/lora",
            ...                                 adapter_kwargs={"revision": "v2"})  # doctest: +SKIP
            >>> rm = PacoReward.from_pretrained("X-GenGroup/PaCo-Reward-7B", backend="vllm")  # doctest: +SKIP
        """
        if backend == "vllm":
            return cls._from_vllm(
                path_or_id,
                dtype=dtype,
                canonical_yes_no=canonical_yes_no,
                min_pixels=min_pixels,
                max_pixels=max_pixels,
                template=template,
                symmetric=symmetric,
                hub=hub_kwargs(
                    revision=revision,
                    cache_dir=cache_dir,
                    token=token,
                    local_files_only=local_files_only,
                    trust_remote_code=trust_remote_code,
                ),
                transformers_only={
                    "adapter": adapter,
                    "vision_batch_size": vision_batch_size,
                    "device": device,
                    "device_map": device_map,
                    "attn_implementation": attn_implementation,
                    "vision_attention": None if vision_attention == "auto" else vision_attention,
                    "model_kwargs": model_kwargs,
                    "adapter_kwargs": adapter_kwargs,
                },
                llm_kwargs=llm_kwargs,
            )
        if backend != "transformers":
            raise InputError(f"backend must be 'transformers' or 'vllm'; got {backend!r}.")
        if llm_kwargs:
            raise InputTypeError(
                f"PacoReward.from_pretrained() got unexpected keyword argument(s) "
                f"{sorted(llm_kwargs)}. The transformers backend loads with revision=, "
                "cache_dir=, token=, local_files_only=, trust_remote_code=, device_map= and "
                "attn_implementation=; any other argument of the model's from_pretrained goes "
                "in model_kwargs={...}, the adapter's in adapter_kwargs={...}. Other keyword "
                "arguments are vllm.LLM's, for backend='vllm'."
            )
        from paco_reward.transformers_backend import TransformersBackend

        scorer = TransformersBackend.from_pretrained(
            path_or_id,
            adapter=adapter,
            device=device,
            dtype=dtype,
            batch_size=batch_size,
            vision_batch_size=vision_batch_size,
            canonical_yes_no=canonical_yes_no,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            merge_adapter=merge_adapter,
            revision=revision,
            cache_dir=cache_dir,
            token=token,
            local_files_only=local_files_only,
            trust_remote_code=trust_remote_code,
            device_map=device_map,
            attn_implementation=attn_implementation,
            vision_attention=vision_attention,
            model_kwargs=model_kwargs,
            adapter_kwargs=adapter_kwargs,
        )
        return cls(scorer, template=template, symmetric=symmetric)

    @classmethod
    def _from_vllm(
        cls,
        path_or_id,
        *,
        dtype,
        canonical_yes_no,
        min_pixels,
        max_pixels,
        template,
        symmetric,
        hub: dict[str, Any],
        transformers_only: dict[str, Any],
        llm_kwargs: dict[str, Any],
    ) -> PacoReward:
        """``from_pretrained(backend="vllm")``: the hub arguments under vllm.LLM's names."""
        if transformers_only["adapter"] is not None or transformers_only["device"] is not None:
            raise InputError(
                "backend='vllm' takes a merged model folder and picks its own device: merge "
                f"the adapter first (paco-reward merge) and drop device= (got adapter="
                f"{transformers_only['adapter']!r}, device={transformers_only['device']!r})."
            )
        from paco_reward.vllm_backend import VLLM_HUB_NAMES, VLLMBackend

        given = sorted(name for name, value in transformers_only.items() if value is not None)
        no_equivalent = sorted(set(hub) - set(VLLM_HUB_NAMES))
        if given or no_equivalent:
            raise InputError(
                f"backend='vllm' does not take {given + no_equivalent}: vllm.LLM places and "
                "builds the model itself (pass its own arguments as keywords, e.g. "
                "gpu_memory_utilization=0.5) and reads the hub token and offline mode from "
                "the environment (HF_TOKEN, HF_HUB_OFFLINE=1). Use backend='transformers' "
                "for these arguments."
            )
        for name, value in hub.items():
            theirs = VLLM_HUB_NAMES[name]
            if theirs in llm_kwargs:
                raise InputTypeError(
                    f"{name}={value!r} and {theirs}={llm_kwargs[theirs]!r} name the same "
                    "vllm.LLM argument; give one."
                )
            llm_kwargs[theirs] = value

        scorer = VLLMBackend.from_pretrained(
            path_or_id,
            dtype=dtype,
            canonical_yes_no=canonical_yes_no,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            **llm_kwargs,
        )
        return cls(scorer, template=template, symmetric=symmetric)

    @classmethod
    def from_server(
        cls,
        base_url: str | Sequence[str],
        model: str,
        api_key: str | None = None,
        *,
        max_concurrency: int = 16,
        timeout: float = 60.0,
        retries: int = 5,
        cache_size: int = 4096,
        template: str | Template = DEFAULT_TEMPLATE,
        symmetric: bool = False,
        **backend_kwargs,
    ) -> PacoReward:
        """Score through an OpenAI-compatible server (``vllm serve`` or ``paco-reward serve``),
        or a list of replicas serving the same model (requests are spread over them; a
        replica that dies is left out, and a call fails only when all are down).

        Same methods as :meth:`from_pretrained`, plus :meth:`ascore_pairs`, with exact scores
        by default (the yes/no token ids and the image budget are found from the server).
        Checks at once that the server serves ``model``
        (:class:`~paco_reward.errors.RewardServerError` otherwise). ``backend_kwargs`` go to
        :class:`~paco_reward.remote_backend.RemoteBackend` (``image_format``, ``tokenizer``,
        ``image_policy``, ``exact_yes_no``, ``replica_cooldown``, ...).

        Example:
            >>> rm = PacoReward.from_server("http://127.0.0.1:8000/v1", model="PaCo-Reward-7B")  # doctest: +SKIP
            >>> rm = PacoReward.from_server(["http://h1:8000/v1", "http://h2:8000/v1"], model="PaCo-Reward-7B")  # doctest: +SKIP
        """
        from paco_reward.remote_backend import RemoteBackend

        backend = RemoteBackend(
            base_url,
            model,
            api_key=api_key,
            max_concurrency=max_concurrency,
            timeout=timeout,
            retries=retries,
            cache_size=cache_size,
            **backend_kwargs,
        )
        return cls(backend, template=template, symmetric=symmetric)

    # ------------------------------------------------------------------ primitive
    def _instruction(self, prompt: str | None, template: str | Template | None) -> str:
        tpl = get_template(template if template is not None else self.template)
        if not tpl.needs_prompt and isinstance(prompt, str) and prompt.strip():
            raise PromptError(
                f"Template {tpl.name!r} takes no prompt, so {prompt[:60]!r} would be ignored; "
                "use a template with a '{prompt}' field (e.g. template='consistency' for a "
                "theme) or pass no prompt."
            )
        return render_instruction(tpl, prompt)

    def _ordered_requests(
        self, pairs: Sequence[tuple[int, int, str]], symmetric: bool | None
    ) -> tuple[list[tuple[int, int, str]], bool]:
        """The requests to send: the pairs, then (when symmetric) the same pairs reversed."""
        symmetric = self.symmetric if symmetric is None else symmetric
        requests = list(pairs)
        if symmetric:
            requests += [(b, a, text) for a, b, text in pairs]
        return requests, symmetric

    @staticmethod
    def _merge_orders(scores, num_pairs: int, symmetric: bool) -> np.ndarray:
        """Average the two orders of each pair when scored symmetrically."""
        scores = np.asarray(scores, dtype=np.float64)
        if symmetric:
            scores = (scores[:num_pairs] + scores[num_pairs:]) / 2.0
        return scores

    def _score(
        self,
        table: _ImageTable,
        pairs: Sequence[tuple[int, int, str]],
        symmetric: bool | None,
    ) -> np.ndarray:
        requests, symmetric = self._ordered_requests(pairs, symmetric)
        scores = self.backend.score_batch(table.images, requests)
        return self._merge_orders(scores, len(pairs), symmetric)

    # ------------------------------------------------------------------ public API
    def score(
        self,
        image_a: ImageInput,
        image_b: ImageInput,
        prompt: str | None = None,
        *,
        template: str | Template | None = None,
        symmetric: bool | None = None,
    ) -> float:
        """Consistency score in [0, 1] of one pair under a theme (``prompt``)."""
        return float(
            self.score_pairs([(image_a, image_b, prompt)], template=template, symmetric=symmetric)[
                0
            ]
        )

    def score_pairs(
        self,
        pairs: Sequence[tuple],
        *,
        template: str | Template | None = None,
        symmetric: bool | None = None,
    ) -> np.ndarray:
        """Scores of many ``(image_a, image_b, prompt)`` (or ``(image_a, image_b)``) pairs,
        batched; repeated images are encoded once.

        Example:
            >>> rm.score_pairs([(a, b, "a fox"), (a, c, "a fox")])   # doctest: +SKIP
            array([0.91, 0.12])
        """
        table, requests = self._pair_requests(pairs, template)
        return self._score(table, requests, symmetric)

    async def ascore_pairs(
        self,
        pairs: Sequence[tuple],
        *,
        template: str | Template | None = None,
        symmetric: bool | None = None,
    ) -> np.ndarray:
        """Async :meth:`score_pairs`: awaits a remote backend's requests on the running event
        loop (an in-process backend runs in a worker thread).

        Example:
            >>> scores = await rm.ascore_pairs([(a, b, "a fox")])   # doctest: +SKIP
        """
        ascore_batch = getattr(self.backend, "ascore_batch", None)
        if ascore_batch is None:
            return await asyncio.to_thread(
                self.score_pairs, pairs, template=template, symmetric=symmetric
            )
        table, pairs_requested = self._pair_requests(pairs, template)
        requests, symmetric = self._ordered_requests(pairs_requested, symmetric)
        scores = await ascore_batch(table.images, requests)
        return self._merge_orders(scores, len(pairs_requested), symmetric)

    def _pair_requests(
        self, pairs: Sequence[tuple], template: str | Template | None
    ) -> tuple[_ImageTable, list[tuple[int, int, str]]]:
        table = _ImageTable(self.backend.image_policy)
        requests = []
        for k, pair in enumerate(pairs):
            if not isinstance(pair, (tuple, list)) or len(pair) not in (2, 3):
                raise InputTypeError(
                    f"pairs[{k}] must be (image_a, image_b[, prompt]); got {type(pair).__name__}."
                )
            prompt = pair[2] if len(pair) == 3 else None
            requests.append(
                (
                    table.add(pair[0], f"pairs[{k}][0]"),
                    table.add(pair[1], f"pairs[{k}][1]"),
                    self._instruction(prompt, template),
                )
            )
        return table, requests

    def score_set(
        self,
        images: Sequence[ImageInput],
        prompt: str | None = None,
        *,
        template: str | Template | None = None,
        symmetric: bool | None = None,
    ) -> SetScore:
        """Score all n(n-1)/2 pairs of a set; each distinct image is encoded once.

        Raises:
            InputError: fewer than two images (a set of one has no pair to score, and a
                NaN mean would pass for a score in a trainer's average).
        """
        images = list(images)
        if len(images) < 2:
            raise InputError(
                f"score_set scores every pair of a set and needs two images or more; got "
                f"{len(images)}. Score one image against another with score(a, b, prompt)."
            )
        table = _ImageTable(self.backend.image_policy)
        indices = [table.add(img, f"images[{k}]") for k, img in enumerate(images)]
        instruction = self._instruction(prompt, template)
        pairs = list(combinations(range(len(indices)), 2))
        scores = self._score(
            table, [(indices[i], indices[j], instruction) for i, j in pairs], symmetric
        )
        matrix = np.full((len(indices), len(indices)), np.nan)
        for (i, j), s in zip(pairs, scores):
            matrix[i, j] = matrix[j, i] = s
        mean = float(scores.mean())
        return SetScore(matrix=matrix, mean=mean, pairs=pairs, scores=scores)

    def score_grid(
        self,
        grid: ImageInput,
        prompt: str | None = None,
        layout: str | tuple[int, int] | None = None,
        *,
        template: str | Template | None = None,
        symmetric: bool | None = None,
    ) -> SetScore:
        """Cut a grid image into panels (layout from ``layout`` or from the prompt, e.g.
        "2x2", "1x3", "2 ⨉ 3") and score all panel pairs. For a T2IS grid prompt the theme
        is the global description before the first panel marker."""
        if layout is None:
            if prompt is None:
                raise LayoutError(
                    "score_grid needs layout=(rows, cols) or a prompt that names one ('2x2')."
                )
            layout = prompt
        rows, cols = parse_layout(layout)
        panels = split_grid(load_image(grid, "grid"), rows, cols)
        # The prompt may only name the layout; its theme goes to templates that take one.
        needs_theme = get_template(template if template is not None else self.template).needs_prompt
        theme = split_panel_prompts(prompt)[0] if prompt is not None and needs_theme else None
        return self.score_set(panels, theme, template=template, symmetric=symmetric)

    def rank(
        self,
        reference: ImageInput,
        candidates: Sequence[ImageInput],
        prompt: str | None = None,
        *,
        template: str | Template | None = "rank",
        symmetric: bool | None = None,
    ) -> Ranking:
        """Rank candidates by consistency with a reference (most consistent first)."""
        table = _ImageTable(self.backend.image_policy)
        ref = table.add(reference, "reference")
        instruction = self._instruction(prompt, template)
        pairs = [
            (ref, table.add(c, f"candidates[{k}]"), instruction) for k, c in enumerate(candidates)
        ]
        scores = self._score(table, pairs, symmetric)
        order = [int(i) for i in np.argsort(-scores, kind="stable")]
        return Ranking(order=order, scores=scores)

    def explain(
        self,
        image_a: ImageInput,
        image_b: ImageInput,
        prompt: str | None = None,
        *,
        template: str | Template | None = None,
        max_new_tokens: int = 256,
        **generate_kwargs,
    ) -> Judgement:
        """Generate the judgement text (greedy by default) and return it with the score."""
        table = _ImageTable(self.backend.image_policy)
        a, b = table.add(image_a, "image_a"), table.add(image_b, "image_b")
        instruction = self._instruction(prompt, template)
        score = float(self._score(table, [(a, b, instruction)], symmetric=False)[0])
        text = self.backend.generate(
            [table.images[a], table.images[b]],
            instruction,
            max_new_tokens=max_new_tokens,
            **generate_kwargs,
        )
        answer, reasons = split_answer(text)
        return Judgement(score=score, answer=answer, reasons=reasons, text=text)

    def score_edit(self, source: ImageInput, edited: ImageInput, instruction: str) -> EditScore:
        """Editing reward: consistency (SC) and prompt following (PF) of ``edited`` with
        ``source`` (shown first), and ``overall = sqrt(SC * PF)``."""
        table = _ImageTable(self.backend.image_policy)
        src, out = table.add(source, "source"), table.add(edited, "edited")
        pairs = [
            (src, out, render_instruction("edit_consistency", instruction)),
            (src, out, render_instruction("edit_following", instruction)),
        ]
        consistency, following = self._score(table, pairs, symmetric=False)
        return EditScore(
            float(consistency), float(following), float(math.sqrt(consistency * following))
        )
