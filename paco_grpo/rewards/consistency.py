"""PaCo-Reward rewards: ``consistency`` (image sets / grids), ``t2is_consistency`` (T2IS-Bench's
visual-consistency protocol, for a held-out judge) and ``edit_consistency`` (editing).

Both take the evaluator in-process (``PacoReward.from_pretrained``), from a server
(``server_url=``, one URL or a list of replicas: ``PacoReward.from_server``, which checks at construction that the server
serves ``model`` and raises :class:`~paco_reward.errors.RewardServerError` otherwise, so a
trainer fails at start-up, not at its first reward), or as a ready ``PacoReward``.

A batch is turned into one list of image pairs and scored with **one** ``score_pairs`` call
(``ascore_pairs`` when awaited): each distinct panel is encoded once and a remote evaluator
sees every request of the batch at once.

Devices: an in-process evaluator (transformers backend) is loaded on ``device`` with its
index (a bare ``"cuda"`` or ``None`` is this process's GPU, ``cuda:<LOCAL_RANK>``, through
:func:`paco_reward.devices.resolve_device`); its inputs follow its model there, so scoring
in a worker thread runs on the process's own GPU. A served evaluator (``server_url=``), an
in-process vLLM one (``backend="vllm"``, which places itself) and a ready ``PacoReward``
ignore ``device``; ``reward.device`` is then the ready model's device, or ``None``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from paco_grpo.rewards.base import INPUT_ERRORS, BaseReward, grid_panels
from paco_reward.devices import resolve_device
from paco_reward.errors import ConfigError, InputError, PromptError, RewardServerError
from paco_reward.grids import split_panel_prompts
from paco_reward.images import load_image, resize_as_requested

if TYPE_CHECKING:
    import torch

__all__ = [
    "CONSISTENCY_TEMPLATES",
    "ConsistencyReward",
    "EditConsistencyReward",
    "load_paco_reward",
]

CONSISTENCY_TEMPLATES = ("consistency", "criteria", "t2is")
T2IS_REQUEST = 512  # the side T2IS-Bench's evaluation asks qwen_vl_utils for (504 after rounding)
# SC then PF: the two scores of an edit (``PacoReward.score_edit``'s templates).
EDIT_TEMPLATES = ("edit_consistency", "edit_following")
# How an edit from several references aggregates its per-reference scores.
REFERENCE_AGGREGATIONS = ("mean", "min")


def load_paco_reward(
    model: Any,
    adapter: str | Path | None = None,
    server_url: str | Sequence[str] | None = None,
    api_key: str | None = None,
    *,
    device: str | torch.device | None = None,
    **kwargs: Any,
):
    """A :class:`paco_reward.PacoReward` from a ready instance, a server or a model path/id.

    Args:
        model: a ``PacoReward``; with ``server_url`` the served model name; else a folder or
            hub id for ``PacoReward.from_pretrained``.
        adapter: LoRA adapter on top of ``model`` (in-process only).
        server_url: API root of ``paco-reward serve`` / ``vllm serve`` (``http://host:8000/v1``),
            or a list of replicas' API roots (spread over, a dead replica left out).
        api_key: bearer token for the server.
        device: where an in-process (transformers) evaluator is loaded; a bare ``"cuda"`` or
            ``None`` (default) is this process's device (``cuda:<LOCAL_RANK>``, else CPU).
            Ignored for a ready ``PacoReward``, a server and ``backend="vllm"`` (vLLM places
            itself), so a process-wide default can be passed to every evaluator.
        **kwargs: passed to ``from_pretrained`` (dtype, batch_size, backend, ...) or
            ``from_server`` (max_concurrency, timeout, retries, ...).

    Raises:
        RewardServerError: the server is unreachable or does not serve ``model``.
        ValueError: ``adapter`` given together with ``server_url``.

    Example:
        >>> rm = load_paco_reward("PaCo-Reward-7B", server_url="http://127.0.0.1:8000/v1")  # doctest: +SKIP
        >>> load_paco_reward("X-GenGroup/PaCo-Reward-7B", device="cuda:1").backend.device  # doctest: +SKIP
        device(type='cuda', index=1)
    """
    from paco_reward import PacoReward

    if hasattr(model, "score_pairs") and hasattr(model, "backend"):
        return model
    if server_url is not None:
        if adapter is not None:
            raise InputError(
                f"adapter={adapter!r} cannot be applied to a served model; merge it before serving "
                "or drop server_url to load it in-process."
            )
        return PacoReward.from_server(server_url, model=str(model), api_key=api_key, **kwargs)
    if kwargs.get("backend", "transformers") == "vllm":
        return PacoReward.from_pretrained(model, adapter=adapter, **kwargs)
    return PacoReward.from_pretrained(
        model, adapter=adapter, device=resolve_device(device), **kwargs
    )


def _evaluator_device(evaluator) -> torch.device | None:
    """The device of an in-process evaluator's model; ``None`` for a server or vLLM."""
    return getattr(evaluator.backend, "device", None)


def _is_remote(evaluator) -> bool:
    """Whether the evaluator's backend awaits its requests (a server) rather than computing."""
    return getattr(evaluator.backend, "ascore_batch", None) is not None


def _criteria_texts(criteria: Any, titles: bool = True) -> dict[str, list[str]]:
    """``{dimension: [criterion text, ...]}`` from T2IS ``criteria``
    (``{dimension: {name: description}}``; lists or single strings per dimension also work).
    Each text is ``"name: description"``, or the description alone with ``titles=False`` (as
    T2IS-Bench's own evaluation reads them)."""
    if not isinstance(criteria, dict) or not criteria:
        raise PromptError(
            "template='criteria' needs metadata['criteria'] as {dimension: {name: description}} "
            f"(T2IS JSONL); got {str(criteria)[:80]!r}. Use template='consistency' for prompts "
            "without criteria."
        )
    out: dict[str, list[str]] = {}
    for dim, entries in criteria.items():
        if isinstance(entries, dict):
            texts = [f"{name}: {text}".strip() if titles else str(text) for name, text in entries.items()]
        elif isinstance(entries, str):
            texts = [entries]
        else:
            texts = [str(t) for t in entries]
        texts = [t for t in texts if t.strip(" :")]
        if texts:
            out[str(dim)] = texts
    if not out:
        raise PromptError(f"metadata['criteria'] holds no criterion text: {str(criteria)[:80]!r}.")
    return out


class ConsistencyReward(BaseReward):
    """PaCo-Reward consistency of a grid: panels cut by the layout, every panel pair scored.

    With ``template="consistency"`` (default, the paper's theme template) a grid's reward is
    the mean pairwise score under its theme: ``metadata["theme"]`` where the prompt file has
    one (T2IS records and the data pipeline's prompts do; it is the text the evaluator's
    training pairs carry), else the global description before the first panel marker (then
    the same number as ``PacoReward.score_grid``). With ``template="criteria"`` each
    pair is scored once per criterion of ``metadata["criteria"]`` (T2IS); the reward is the
    mean over the criteria of each dimension (each criterion: mean over pairs), then the mean
    over dimensions. All pairs of the whole batch go to the evaluator in one call.

    Args:
        model: a ``PacoReward``, a model folder / hub id, or with ``server_url`` the served name.
        adapter: LoRA adapter on ``model`` (in-process).
        server_url: score through a server, or a list of replicas of it; its model list is
            checked here (fail fast).
        api_key: server bearer token.
        layout: the layout when neither ``metadata["layout"]`` nor the prompt names one.
        template: ``"consistency"`` (theme) or ``"criteria"``.
        symmetric: score both panel orders and average (position-bias control).
        device: where an in-process evaluator is loaded (see :func:`load_paco_reward`); kept
            with its index as ``self.device`` (``None`` for a served evaluator).
        **load_kwargs: for :func:`load_paco_reward` (dtype, batch_size, timeout, ...).

    Example:
        >>> reward = ConsistencyReward("X-GenGroup/PaCo-Reward-7B")      # doctest: +SKIP
        >>> reward(grids, prompts, [{"layout": "2x2"}] * len(grids))   # doctest: +SKIP
        array([0.81, 0.64])
    """

    name = "consistency"
    default_template = "consistency"

    def __init__(
        self,
        model: Any = "X-GenGroup/PaCo-Reward-7B",
        adapter: str | None = None,
        server_url: str | Sequence[str] | None = None,
        api_key: str | None = None,
        layout: str | None = None,
        template: str | None = None,
        symmetric: bool = False,
        *,
        device: str | torch.device | None = None,
        **load_kwargs: Any,
    ) -> None:
        super().__init__()
        template = template or self.default_template
        if template not in CONSISTENCY_TEMPLATES:
            raise InputError(
                f"consistency template must be one of {CONSISTENCY_TEMPLATES} ('consistency': "
                f"theme, the default; 'criteria': T2IS criteria; 't2is': T2IS-Bench's question); "
                f"got {template!r}."
            )
        self.evaluator = load_paco_reward(
            model, adapter, server_url, api_key, device=device, **load_kwargs
        )
        self.device = _evaluator_device(self.evaluator)
        self.layout = layout
        self.template = template
        self.symmetric = bool(symmetric)

    # ------------------------------------------------------------------ plan -> score -> reduce
    def _plan(self, images, prompts, metadata):
        """All pair requests of the batch and, per item, its request ranges by dimension
        (``None`` for an item that failed before scoring)."""
        requests: list[tuple] = []
        plans: list[list[list[tuple[int, int]]] | None] = []
        for k, (image, prompt, meta) in enumerate(zip(images, prompts, metadata)):
            try:
                panels = grid_panels(image, prompt, meta, self.layout, k)
                if self.template == "t2is":  # the benchmark asks qwen_vl_utils for 512 x 512
                    panels = [resize_as_requested(p, T2IS_REQUEST, T2IS_REQUEST) for p in panels]
                if len(panels) < 2:
                    raise PromptError("a 1x1 layout has no panel pair to score")
                pairs = list(combinations(panels, 2))
                if self.template in ("criteria", "t2is"):
                    texts_by_dim = _criteria_texts(meta.get("criteria"), titles=self.template == "criteria").values()
                else:
                    # The theme the pairs were labelled under, where the prompt file
                    # keeps it (T2IS, the data pipeline), as data_pipeline.prompts reads it.
                    theme = meta.get("theme") or split_panel_prompts(prompt)[0] or prompt
                    texts_by_dim = [[theme]]
                dims = []
                for texts in texts_by_dim:
                    ranges = []
                    for text in texts:
                        ranges.append((len(requests), len(requests) + len(pairs)))
                        requests.extend((a, b, text) for a, b in pairs)
                    dims.append(ranges)
                plans.append(dims)
            except INPUT_ERRORS as err:
                self.fail(k, err)
                plans.append(None)
        return requests, plans

    def _reduce(self, scores: np.ndarray, plans) -> np.ndarray:
        out = np.full(len(plans), np.nan)
        for k, dims in enumerate(plans):
            if dims is None:
                continue
            value = float(
                np.mean([np.mean([scores[a:b].mean() for a, b in ranges]) for ranges in dims])
            )
            if math.isnan(value):
                self.fail(k, "the evaluator returned NaN for at least one panel pair")
            out[k] = value
        return out

    def _server_failed(self, plans, err: RewardServerError) -> np.ndarray:
        """Every planned item NaN: the evaluator's server failed the batch for good."""
        self.fail_items([k for k, dims in enumerate(plans) if dims is not None], err)
        return np.full(len(plans), np.nan)

    def score(self, images, prompts, metadata) -> np.ndarray:
        requests, plans = self._plan(images, prompts, metadata)
        if not requests:
            return np.full(len(plans), np.nan)
        try:
            scores = self.evaluator.score_pairs(
                requests, template=self.template, symmetric=self.symmetric
            )
        except RewardServerError as err:
            return self._server_failed(plans, err)
        return self._reduce(np.asarray(scores, dtype=np.float64), plans)

    async def ascore(self, images, prompts, metadata) -> np.ndarray:
        """Awaits a remote evaluator's requests (``ascore_pairs``); in-process runs in a thread."""
        if not _is_remote(self.evaluator):
            return await asyncio.to_thread(self.score, images, prompts, metadata)
        requests, plans = self._plan(images, prompts, metadata)
        if not requests:
            return np.full(len(plans), np.nan)
        try:
            scores = await self.evaluator.ascore_pairs(
                requests, template=self.template, symmetric=self.symmetric
            )
        except RewardServerError as err:
            return self._server_failed(plans, err)
        return self._reduce(np.asarray(scores, dtype=np.float64), plans)


class T2ISConsistencyReward(ConsistencyReward):
    """T2IS-Bench's visual consistency as ``paco-eval t2is`` judges it, as a reward: each panel
    pair asked the benchmark's question (template ``t2is``) once per criterion of
    ``metadata["criteria"]``, the panels resized as the benchmark's 512 x 512 request, P(Yes)
    from the exact Yes/No tokens; mean over pairs, criteria, then dimensions. Meant for a
    ``test:`` section with a judge the policy does not train on (Qwen2.5-VL-7B-Instruct, as
    Table 3), so a held-out VC is logged beside the training reward
    (``eval/reward/t2is_consistency/mean``).

    Example:
        >>> reward = T2ISConsistencyReward("Qwen/Qwen2.5-VL-7B-Instruct")   # doctest: +SKIP
    """

    name = "t2is_consistency"
    default_template = "t2is"

    def __init__(
        self,
        model: Any = "Qwen/Qwen2.5-VL-7B-Instruct",
        *args: Any,
        device: str | torch.device | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("server_url") is None:
            kwargs.setdefault("canonical_yes_no", False)  # the benchmark's two exact tokens
        else:
            kwargs.setdefault("exact_yes_no", True)
        super().__init__(model, *args, device=device, **kwargs)


class EditConsistencyReward(BaseReward):
    """Editing reward ``sqrt(SC * PF)``: PaCo-Reward's edit templates with the source first.

    SC is the ``edit_consistency`` score and PF the ``edit_following`` score of
    ``(source, edited)`` under the edit instruction (the prompt): the same numbers as
    ``PacoReward.score_edit(source, edited, prompt).overall``, batched over the whole batch.
    The source image comes from ``metadata[source_key]`` (the parquet prompt loader and the
    editing trainer put it in ``metadata["source_image"]``).

    An edit from several references (``metadata[references_key]``, a list, as
    Qwen-Image-Edit-Plus takes them) is scored against each reference in turn, as if it were
    the source (``sqrt(SC_i * PF_i)`` of ``(reference_i, edited)``), and the item's reward is
    their mean (``reference_aggregation="mean"``: keeping most references consistent pays) or
    their minimum (``"min"``: the worst-kept reference decides). With one reference both are
    the single-source reward.

    Args:
        model / adapter / server_url / api_key / device / **load_kwargs: as for
            :class:`ConsistencyReward`.
        source_key: metadata key of the source image.
        references_key: metadata key of a multi-reference edit's references (it wins over
            ``source_key`` where present).
        reference_aggregation: ``"mean"`` or ``"min"`` over the references.

    Example:
        >>> reward = EditConsistencyReward("X-GenGroup/PaCo-Reward-7B")              # doctest: +SKIP
        >>> reward([edited], ["make the sky red"], [{"source_image": source}])      # doctest: +SKIP
        array([0.74])
        >>> reward([edited], ["the cat of picture 2 on the sofa of picture 1"],
        ...        [{"source_images": [sofa, cat]}])                                # doctest: +SKIP
        array([0.61])
    """

    name = "edit_consistency"

    def __init__(
        self,
        model: Any = "X-GenGroup/PaCo-Reward-7B",
        adapter: str | None = None,
        server_url: str | Sequence[str] | None = None,
        api_key: str | None = None,
        source_key: str = "source_image",
        references_key: str = "source_images",
        reference_aggregation: str = "mean",
        *,
        device: str | torch.device | None = None,
        **load_kwargs: Any,
    ) -> None:
        super().__init__()
        if reference_aggregation not in REFERENCE_AGGREGATIONS:
            raise ConfigError(
                f"reference_aggregation must be one of {REFERENCE_AGGREGATIONS}; got "
                f"{reference_aggregation!r}."
            )
        self.evaluator = load_paco_reward(
            model, adapter, server_url, api_key, device=device, **load_kwargs
        )
        self.device = _evaluator_device(self.evaluator)
        self.source_key = source_key
        self.references_key = references_key
        self.reference_aggregation = reference_aggregation

    def _plan(self, images, prompts, metadata):
        """One request per reference of each item; ``positions`` says whose."""
        requests, positions = [], []
        for k, (image, prompt, meta) in enumerate(zip(images, prompts, metadata)):
            try:
                references = meta.get(self.references_key) or [meta.get(self.source_key)]
                if any(reference is None for reference in references):
                    raise PromptError(
                        f"metadata[{self.source_key!r}] is missing; editing rewards need the "
                        "source image (load prompts from a (prompt, image) parquet file)"
                    )
                if not isinstance(prompt, str) or not prompt.strip():
                    raise PromptError(f"the edit instruction is empty ({prompt!r})")
                edited = load_image(image, f"images[{k}]")
                mine = [
                    (load_image(reference, f"metadata[{k}] reference {j}"), edited, prompt)
                    for j, reference in enumerate(references)
                ]
            except INPUT_ERRORS as err:
                self.fail(k, err)
                continue
            requests += mine
            positions += [k] * len(mine)
        return requests, positions

    def _reduce(self, n: int, positions, consistency, following) -> np.ndarray:
        out = np.full(n, np.nan)
        overall = np.sqrt(np.asarray(consistency, float) * np.asarray(following, float))
        per_item: dict[int, list[float]] = {}
        for k, value in zip(positions, overall):
            per_item.setdefault(k, []).append(float(value))
        aggregate = np.mean if self.reference_aggregation == "mean" else np.min
        for k, values in per_item.items():
            if any(math.isnan(v) for v in values):
                self.fail(k, "the evaluator returned NaN for SC or PF")
                continue
            out[k] = aggregate(values)
        return out

    def score(self, images, prompts, metadata) -> np.ndarray:
        requests, positions = self._plan(images, prompts, metadata)
        if not requests:
            return np.full(len(images), np.nan)
        try:
            sc, pf = (
                self.evaluator.score_pairs(requests, template=template, symmetric=False)
                for template in EDIT_TEMPLATES
            )
        except RewardServerError as err:
            self.fail_items(sorted(set(positions)), err)
            return np.full(len(images), np.nan)
        return self._reduce(len(images), positions, sc, pf)

    async def ascore(self, images, prompts, metadata) -> np.ndarray:
        if not _is_remote(self.evaluator):
            return await asyncio.to_thread(self.score, images, prompts, metadata)
        requests, positions = self._plan(images, prompts, metadata)
        if not requests:
            return np.full(len(images), np.nan)
        try:
            sc, pf = await asyncio.gather(
                *(
                    self.evaluator.ascore_pairs(requests, template=template, symmetric=False)
                    for template in EDIT_TEMPLATES
                )
            )
        except RewardServerError as err:
            self.fail_items(sorted(set(positions)), err)
            return np.full(len(images), np.nan)
        return self._reduce(len(images), positions, sc, pf)
