"""In-process scoring with transformers: what every model family's backend shares.

:meth:`TransformersBackend.from_pretrained` loads the evaluator (the class its config names,
through ``AutoModelForImageTextToText``; an optional PEFT adapter; the processor) and picks
the backend from the config, before any weight loads (the judge registry,
:mod:`paco_reward.judges`):

* :class:`~paco_reward.local_backend.LocalBackend` for a Qwen-VL family whose vision tower it
  knows (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, ...): dynamic-resolution images, each distinct image
  through the vision tower once, prompts, rope positions and vision inputs built on the host;
* :class:`~paco_reward.processor_backend.ProcessorBackend` for any other image-text-to-text
  model whose tokenizer has single-token "Yes"/"No" (Gemma-3, GLM-4V, ...): the model's own
  processor resizes and expands the images, its vision output reused across pairs where the
  family allows it.

Both render the same messages with the model's own chat template
(:func:`~paco_reward.local_backend.render_prompt_text`), score the first answer token through
:func:`~paco_reward.yes_no.yes_probability`, run their host work (image processing, padding)
in a worker thread while the model works on the previous chunk, and read the device back
once per call.

    >>> backend = TransformersBackend.from_pretrained("google/gemma-3-4b-it")  # doctest: +SKIP
    >>> type(backend).__name__                                                # doctest: +SKIP
    'ProcessorBackend'
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from PIL import Image

from paco_reward.devices import default_device, resolve_device
from paco_reward.errors import InputError, UsageError
from paco_reward.hub import (
    ADAPTER_KWARGS,
    HUB_KWARGS,
    check_kwargs,
    check_source,
    default_model_name,
    hub_kwargs,
)
from paco_reward.judges import backend_for_config, resolve
from paco_reward.modeling import (
    check_vision_language_config,
    load_adapter,
    load_evaluator_processor,
    load_vision_language_model,
)
from paco_reward.stage_timer import StageTimer
from paco_reward.vision_attention import check_vision_attention_mode
from paco_reward.yes_no import YesNoTokens, yes_probability

logger = logging.getLogger(__name__)

# (index of first image, index of second image, instruction text)
PairRequest = tuple[int, int, str]
_Job = TypeVar("_Job")
_Prepared = TypeVar("_Prepared")
_Result = TypeVar("_Result")
_Backend = TypeVar("_Backend", bound="TransformersBackend")

# Strategies of a transformers ``device_map`` (anything else names one device).
DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
# Keys of ``model_kwargs`` that ``from_pretrained`` takes as arguments of its own.
_OWN_ARGUMENTS = {
    **{name: f"{name}=" for name in (*HUB_KWARGS, "dtype", "device_map", "attn_implementation")},
    "torch_dtype": "dtype=",
    "device": "device= or device_map=",
}


def resolve_device_map(device_map: str | int | torch.device | dict | None):
    """A transformers ``device_map`` with a bare ``"cuda"`` given this process's index (see
    :mod:`paco_reward.devices`); strategies (``"auto"``, ...) and dicts are kept as given.

    Example:
        >>> resolve_device_map("cpu"), resolve_device_map("auto")
        (device(type='cpu'), 'auto')
    """
    if device_map is None or isinstance(device_map, dict) or device_map in DEVICE_MAP_STRATEGIES:
        return device_map
    return resolve_device(device_map)


def _placements(device_map) -> list[torch.device]:
    """The devices a ``device_map`` may put weights on (CUDA for a strategy when available)."""
    if isinstance(device_map, dict):
        values = [v for v in device_map.values() if v not in ("disk", "meta")]
    else:
        values = [device_map]
    placements = []
    for value in values:
        if value in DEVICE_MAP_STRATEGIES:
            placements.append(default_device())
        elif isinstance(value, int):
            placements.append(torch.device("cuda", value))
        else:
            placements.append(torch.device(value))
    return placements


def default_dtype(device: torch.device | None, device_map=None) -> torch.dtype:
    """bfloat16 when the weights go to a CUDA device, else float32.

    Example:
        >>> default_dtype(torch.device("cpu")), default_dtype(None, device_map={"": "cpu"})
        (torch.float32, torch.float32)
    """
    targets = _placements(device_map) if device_map is not None else [device]
    on_cuda = any(t is not None and t.type == "cuda" for t in targets)
    return torch.bfloat16 if on_cuda else torch.float32


def backend_class_for(config) -> type[TransformersBackend]:
    """The backend that scores with a model of ``config``'s family (a transformers config or
    its dict): :class:`~paco_reward.local_backend.LocalBackend` for a family whose vision
    tower it knows, else :class:`~paco_reward.processor_backend.ProcessorBackend` (see
    :func:`paco_reward.judges.backend_for_config`)."""
    return resolve(backend_for_config(config))


class TransformersBackend:
    """Loading, pipelining and scoring shared by the in-process backends; a subclass says how
    its family's pairs become first-answer-token logits (:meth:`first_token_outputs`) and
    greedy text (:meth:`generate`).

    Safe for several callers: the entry points (:meth:`first_token_outputs`, so
    :meth:`score_batch`, and :meth:`generate`) take the backend's lock, so calls from several
    threads run one after another and score as they would serially; the processor (its
    tokenizer is not thread-safe) is used under a lock of its own, whichever thread prepares.
    :meth:`close` (or leaving a ``with`` block) stops the preprocessing worker thread; a call
    after it raises :class:`~paco_reward.errors.UsageError`.

    Attributes:
        stage_timer: a :class:`~paco_reward.stage_timer.StageTimer` to time the stages into
            (``preprocess``, ``vision``, ``llm``), or ``None`` (the default).
    """

    model: Any
    processor: Any
    name: str
    stage_timer: StageTimer | None = None
    default_vision_batch_size: int = 8

    def __init__(
        self,
        model,
        processor,
        *,
        batch_size: int = 8,
        vision_batch_size: int | None = None,
        canonical_yes_no: bool = True,
        name: str = "local",
    ) -> None:
        self.model = model.eval()
        self.processor = processor
        # Re-entrant: an entry point calls others (score_batch -> first_token_outputs ->
        # encode_images -> _pipelined) in the same thread.
        self._lock = threading.RLock()
        self._processor_lock = threading.RLock()
        self._worker: ThreadPoolExecutor | None = None
        self._closed = False
        self.tokenizer = processor.tokenizer
        self.batch_size = batch_size
        self.vision_batch_size = vision_batch_size or self.default_vision_batch_size
        self.name = name
        self.yes_no = YesNoTokens.from_tokenizer(self.tokenizer, canonical=canonical_yes_no)
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else self.tokenizer.eos_token_id

    # ------------------------------------------------------------------ loading
    @classmethod
    def check_config(cls, config, source: str | Path) -> None:
        """Raise :class:`~paco_reward.errors.UnsupportedModelError` when this backend cannot
        score with a model of ``config``'s family (checked before any weight loads)."""

    @classmethod
    def check_processor(cls, processor, source: str | Path) -> None:
        """Raise :class:`~paco_reward.errors.UnsupportedModelError` when this backend cannot
        score with a model of ``processor``'s family (checked before any weight loads)."""

    @classmethod
    def from_pretrained(
        cls,
        path_or_id: str | Path,
        adapter: str | Path | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | str | None = None,
        *,
        batch_size: int = 8,
        vision_batch_size: int | None = None,
        canonical_yes_no: bool = True,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        merge_adapter: bool = True,
        revision: str | None = None,
        cache_dir: str | Path | None = None,
        token: str | bool | None = None,
        local_files_only: bool = False,
        trust_remote_code: bool = False,
        device_map: str | int | torch.device | dict | None = None,
        attn_implementation: str | None = None,
        vision_attention: str = "auto",
        model_kwargs: Mapping[str, Any] | None = None,
        adapter_kwargs: Mapping[str, Any] | None = None,
    ) -> TransformersBackend:
        """Load an evaluator (the class its config names, through
        ``AutoModelForImageTextToText``), and optionally a PEFT LoRA ``adapter``, with its
        processor; the arguments are those of :meth:`paco_reward.PacoReward.from_pretrained`.
        Called on this class, the backend is the one of the model's family
        (:func:`backend_class_for`, from its config); called on a subclass, that subclass,
        which must accept the model.

        Raises:
            TypeError: ``model_kwargs`` or ``adapter_kwargs`` holds a key that has its own
                argument here, or an unknown one.
            InputError: both ``device`` and ``device_map`` are given; ``min_pixels`` /
                ``max_pixels`` for a model whose processor has no pixel budget; an unknown
                ``vision_attention``.
            PathNotFoundError: ``path_or_id`` names no folder and is no hub id either.
            UnsupportedModelError: the model has no image input, no chat template, or (on a
                subclass) not the vision tower or image processing that subclass needs
                (checked before the weights load).
            YesNoTokenError: its tokenizer has no single-token "Yes"/"No" (idem).
            WeightsMismatchError: a weight of the model or the adapter is missing or
                unexpected (the model would score with randomly initialised weights).
            VisionAttentionError: ``vision_attention="grouped"`` and a vision attention
                that cannot be grouped (see :mod:`paco_reward.vision_attention`).

        Example:
            >>> backend = TransformersBackend.from_pretrained("X-GenGroup/PaCo-Reward-7B",
            ...                                               device_map="auto")  # doctest: +SKIP
        """
        from transformers import AutoConfig

        if device is not None and device_map is not None:
            raise InputError(
                f"Give device= (one device; got {device!r}) or device_map= (weights placed by "
                f"accelerate; got {device_map!r}), not both."
            )
        check_vision_attention_mode(vision_attention)
        model_kwargs = check_kwargs(model_kwargs, name="model_kwargs", reserved=_OWN_ARGUMENTS)
        adapter_kwargs = check_kwargs(adapter_kwargs, name="adapter_kwargs", allowed=ADAPTER_KWARGS)
        hub = hub_kwargs(
            revision=revision,
            cache_dir=cache_dir,
            token=token,
            local_files_only=local_files_only,
            trust_remote_code=trust_remote_code,
        )
        device_map = resolve_device_map(device_map)
        device = resolve_device(device) if device_map is None else None
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        if dtype is None:
            dtype = default_dtype(device, device_map)
        load_kwargs = {**model_kwargs, **hub, "dtype": dtype}
        if device_map is not None:
            load_kwargs["device_map"] = device_map
        if attn_implementation:
            load_kwargs["attn_implementation"] = attn_implementation

        # Cheapest checks first: the config (and the backend of its family), then the
        # processor; the weights last.
        source = check_source(path_or_id)
        config = AutoConfig.from_pretrained(source, **hub)
        check_vision_language_config(config, source)
        backend_class = backend_class_for(config) if cls is TransformersBackend else cls
        backend_class.check_config(config, source)
        processor_source, processor_kwargs = path_or_id, hub
        if adapter is not None and (Path(adapter) / "tokenizer_config.json").is_file():
            processor_source = adapter
            processor_kwargs = {k: v for k, v in hub.items() if k != "revision"}
        processor = load_evaluator_processor(processor_source, **processor_kwargs)
        backend_class.check_processor(processor, processor_source)
        backend_kwargs = backend_class._backend_kwargs(
            processor,
            batch_size=batch_size,
            vision_batch_size=vision_batch_size,
            canonical_yes_no=canonical_yes_no,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            vision_attention=vision_attention,
        )
        model = load_vision_language_model(path_or_id, **load_kwargs)
        if adapter is not None:
            # Where to find files applies to the adapter too; its revision is its own.
            shared = {k: v for k, v in hub.items() if k in ADAPTER_KWARGS and k != "revision"}
            model = load_adapter(model, adapter, **shared, **adapter_kwargs)
            if merge_adapter:
                model = model.merge_and_unload()
        if device is not None:
            model = model.to(device)
        name = default_model_name(path_or_id, adapter)
        return backend_class(model, processor, name=name, **backend_kwargs)

    @classmethod
    def _backend_kwargs(cls, processor, **kwargs: Any) -> dict[str, Any]:
        """The constructor's keyword arguments from ``from_pretrained``'s, checked against the
        processor before any weight loads (a subclass drops or refuses what it does not take)."""
        return kwargs

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ lifetime
    @contextmanager
    def _serving(self) -> Iterator[None]:
        """The backend's lock, for one call of an entry point; refuses a closed backend."""
        with self._lock:
            if self._closed:
                raise UsageError(
                    f"backend {self.name!r} is closed (close() or the end of its with block); "
                    "load it again to score."
                )
            yield

    def close(self) -> None:
        """Stop the preprocessing worker thread (waiting for its current job); the model
        stays loaded until the backend is dropped. Idempotent.

        Example:
            >>> with PacoReward.from_pretrained(path) as rm:   # doctest: +SKIP
            ...     rm.score(a, b, "a fox")
        """
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.shutdown(wait=True)

    def __enter__(self: _Backend) -> _Backend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ pipeline
    def _host_stage(self, name: str) -> AbstractContextManager:
        return self.stage_timer.host_stage(name) if self.stage_timer else nullcontext()

    def _device_stage(self, name: str) -> AbstractContextManager:
        return self.stage_timer.device_stage(name) if self.stage_timer else nullcontext()

    def _pipelined(
        self,
        jobs: Sequence[_Job],
        prepare: Callable[[_Job], _Prepared],
        run: Callable[[_Prepared], _Result],
    ) -> list[_Result]:
        """``run(prepare(job))`` for each job in order, each job's ``prepare`` (host work) in
        the worker thread while the previous job's ``run`` queues the model's work."""
        with self._serving():  # the worker is made once, and used by one call at a time
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="paco-preprocess")
            worker = self._worker
            results: list[_Result] = []
            pending: Future | None = worker.submit(prepare, jobs[0]) if jobs else None
            for k in range(len(jobs)):
                prepared = pending.result()
                if k + 1 < len(jobs):
                    pending = worker.submit(prepare, jobs[k + 1])
                results.append(run(prepared))
            return results

    def _in_length_order(
        self,
        lengths: Sequence[int],
        prepare: Callable[[list[int]], _Prepared],
        run: Callable[[_Prepared], torch.Tensor],
    ) -> torch.Tensor:
        """``run(prepare(chunk))`` over chunks of ``batch_size`` request indices sorted by
        their ``lengths`` (so a chunk pads little), pipelined; the chunks' results come back
        to the host in one transfer (the call's one wait for the device), in request order."""
        order = sorted(range(len(lengths)), key=lengths.__getitem__)  # stable
        step = self.batch_size
        chunks = [order[s : s + step] for s in range(0, len(order), step)]
        sorted_results = torch.cat(self._pipelined(chunks, prepare, run)).cpu()
        results = torch.empty_like(sorted_results)
        results[torch.tensor(order, dtype=torch.long)] = sorted_results
        return results

    # ------------------------------------------------------------------ scoring
    @torch.inference_mode()
    def first_token_outputs(
        self,
        images: Sequence[Image.Image],
        pairs: Sequence[PairRequest],
        reduce: Callable[[torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """``reduce`` of the first-answer-token logits of ``pairs`` (indices into
        ``images``), on the host, in the order of ``pairs``. ``reduce`` maps a chunk's logits
        ``[n, vocab]`` to a ``[n, ...]`` tensor on the device; its results come back in one
        transfer at the end of the call. Every scoring path goes through here (the scores,
        the server's log-probabilities).

        Each image the pairs use is encoded once (:meth:`encode_images`); the pairs then run
        in chunks of similar length (:meth:`_in_length_order`).

        Example:
            >>> backend.first_token_outputs(images, [(0, 1, text)], lambda x: x.argmax(-1))  # doctest: +SKIP
            tensor([9454])
        """
        with self._serving():
            used_images, requests = used_images_and_requests(images, pairs)
            features, lengths, prepare = self._text_chunks(used_images, requests)
            return self._in_length_order(
                lengths, prepare, lambda chunk: reduce(self._chunk_logits(chunk, features))
            )

    def _text_chunks(
        self, images: Sequence[Image.Image], requests: Sequence[PairRequest]
    ) -> tuple[Any, list[int], Callable[[list[int]], Any]]:
        """For :meth:`first_token_outputs`: the features of ``images`` (each used by
        ``requests``), each request's length to sort by, and the function that prepares a
        chunk of request indices on the host (worker thread) for :meth:`_chunk_logits`."""
        raise NotImplementedError

    def _chunk_logits(self, chunk: Any, features: Any) -> torch.Tensor:
        """The last position's logits ``[n, vocab]`` of a prepared chunk, on the device."""
        raise NotImplementedError

    def score_batch(
        self, images: Sequence[Image.Image], pairs: Sequence[PairRequest]
    ) -> np.ndarray:
        """Scores of ``pairs`` (indices into ``images``); each image is encoded once."""
        if not pairs:
            return np.zeros(0, dtype=np.float64)
        scores = self.first_token_outputs(
            images, pairs, lambda logits: yes_probability(logits, tokens=self.yes_no)
        )
        return scores.double().numpy()

    @torch.inference_mode()
    def generate(
        self,
        images: Sequence[Image.Image],
        instruction: str,
        max_new_tokens: int = 256,
        **generate_kwargs,
    ) -> str:
        """Greedy (by default) continuation for one pair, decoded without special tokens."""
        with self._serving():
            inputs = self.generation_inputs(images, instruction)
            generate_kwargs.setdefault("do_sample", False)
            output = self.model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                pad_token_id=self.pad_token_id,
                **generate_kwargs,
            )
            new_tokens = output[0, inputs["input_ids"].shape[1] :]
            with self._processor_lock:
                return self.tokenizer.decode(new_tokens, skip_special_tokens=True)

    def generation_inputs(
        self, images: Sequence[Image.Image], instruction: str
    ) -> dict[str, torch.Tensor]:
        """The model's inputs, on its device, for :meth:`generate` of one pair's prompt."""
        raise NotImplementedError


def used_images_and_requests(
    images: Sequence[Image.Image], pairs: Sequence[PairRequest]
) -> tuple[list[Image.Image], list[PairRequest]]:
    """The images ``pairs`` use, and the pairs re-indexed into that list (an image no pair
    uses is never encoded)."""
    used = sorted({i for a, b, _ in pairs for i in (a, b)})
    local = {index: k for k, index in enumerate(used)}
    return [images[i] for i in used], [(local[a], local[b], text) for a, b, text in pairs]
