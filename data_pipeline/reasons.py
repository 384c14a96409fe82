"""Stage 6: a chain-of-thought reason for every pair, consistent with its known label.

A *teacher* writes the reason: any OpenAI-compatible chat endpoint (GPT, vLLM,
``paco-reward serve``) through :class:`OpenAITeacher`, or the offline
:class:`TemplateReasoner` (a fill-in-the-blanks text generator for tests and the
demo, NOT a model). :func:`annotate_reasons` asks the teacher for every pair
without a stored reason, with a concurrency limit, retries with exponential
back-off, and rejection of reasons that contradict the label. Every finished reason
is appended (and fsync'ed) to an on-disk JSONL store before the next is awaited, so
killing the process at any moment and re-running loses no finished reason and asks
no finished pair again.

    >>> import asyncio, tempfile, pathlib
    >>> pairs = [{"pair_id": "p1", "label": 1, "prompt": "a fox", "image_a": "a.png",
    ...           "image_b": "b.png"}]
    >>> store = pathlib.Path(tempfile.mkdtemp()) / "reasons.jsonl"
    >>> stats = annotate_reasons(pairs, TemplateReasoner(), store, load_images=False)
    >>> stats.done, ReasonStore(store).load()["p1"]["reasons"][:4]
    (1, 'Both')
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from PIL import Image
from tqdm.auto import tqdm

from data_pipeline.storage import AppendOnlyJsonl, DataPipelineError
from paco_reward.errors import InputError, UsageError
from paco_reward.images import load_image
from paco_reward.retry import RetryPolicy

logger = logging.getLogger(__name__)

REASONS_FILE = "reasons.jsonl"


class ReasonRejected(DataPipelineError):
    """A teacher's reason is empty or contradicts the pair's label."""


class Teacher(Protocol):
    """Anything that writes a reason for a labelled pair."""

    name: str

    async def areason(
        self, pair: dict, image_a: Image.Image | None, image_b: Image.Image | None
    ) -> str:
        """Return the reason text (it may start with the decision word)."""
        ...


# ---------------------------------------------------------------------- checking
_DECISION = re.compile(r"^\s*[\"'*]*\s*(yes|no)\b[\s.,:;!\"'*-]*", re.IGNORECASE)
_NEGATIVE = re.compile(
    r"\b(inconsistent|not consistent|not maintain|doesn't maintain|don't maintain|"
    r"does not maintain|do not maintain|fails? to maintain|lacks? consistency)\b",
    re.IGNORECASE,
)
# A whole-pair claim of consistency (not "the colour is consistent, but ...").
_POSITIVE = re.compile(
    r"\b((images|they|both|pair) (are|remain|stay) (fully |completely |perfectly |entirely )?"
    r"consistent|(fully|completely|perfectly|entirely) consistent)\b",
    re.IGNORECASE,
)


def check_reason(text: str, label: int, min_chars: int = 8) -> str:
    """Validate a teacher reason against the pair's label and return it without the
    leading decision word.

    Rejected: empty or shorter than ``min_chars``; a leading "Yes"/"No" opposite to the
    label; for a consistent pair, a claim of inconsistency ("inconsistent", "does not
    maintain" ...); for an inconsistent pair, a whole-pair claim of consistency ("the
    images are fully consistent") that is not negated. The check is deliberately
    conservative: a rejected reason is simply asked again.

    Raises:
        ReasonRejected: naming why.

    Example:
        >>> check_reason("Yes. Both show the same red fox.", 1)
        'Both show the same red fox.'
        >>> check_reason("No, the fox is blue.", 1)
        Traceback (most recent call last):
        ...
        data_pipeline.reasons.ReasonRejected: reason starts with 'No' but the label is 1 (consistent): 'No, the fox is blue.'
    """
    if not isinstance(text, str):
        raise ReasonRejected(f"reason must be a string; got {type(text).__name__}.")
    body = text.strip()
    match = _DECISION.match(body)
    if match:
        word = match.group(1).lower()
        if (word == "yes") != bool(label):
            raise ReasonRejected(
                f"reason starts with {match.group(1)!r} but the label is {int(label)} "
                f"({'consistent' if label else 'inconsistent'}): {body[:80]!r}"
            )
        body = body[match.end() :].strip()
    if len(body) < min_chars:
        raise ReasonRejected(f"reason is empty or too short ({len(body)} chars): {text[:80]!r}")
    if label and _NEGATIVE.search(body):
        raise ReasonRejected(f"reason claims inconsistency for a consistent pair: {body[:80]!r}")
    if not label and _POSITIVE.search(body) and not _NEGATIVE.search(body):
        raise ReasonRejected(f"reason claims consistency for an inconsistent pair: {body[:80]!r}")
    return body[0].upper() + body[1:]


# ---------------------------------------------------------------------- teachers
def attribute_comparison(a: dict, b: dict) -> str:
    """One clause per attribute, in a fixed order: whether the two images agree on it,
    then its value in each. The verdict comes before the values on purpose: an evaluator
    answers first (its first token is the score), so every clause trains the comparison
    that token makes, of the two images themselves rather than of two words it has just
    written; the values then say what was compared.

    >>> attribute_comparison({"shape": "circle", "colour": "red"},
    ...                      {"shape": "circle", "colour": "blue"})
    'Shape same, circle and circle; colour different, red and blue.'
    """
    clauses = [
        f"{key} {'same' if a[key] == b.get(key) else 'different'}, {a[key]} and {b.get(key)}"
        for key in a
    ]
    text = "; ".join(clauses) + "."
    return text[0].upper() + text[1:]


_CLAUSE = re.compile(r"^(\w+) (same|different), (.+?) and (.+)$")


def parse_attribute_comparison(
    text: str, vocabulary: Mapping[str, Collection[str]] | None = None
) -> list[tuple[str, bool, str, str]] | None:
    """The clauses of an :func:`attribute_comparison` reason as ``(attribute, same,
    value_a, value_b)``; None when ``text`` is not one: a clause out of its pattern, an
    attribute named twice, or, with ``vocabulary`` (attribute -> its value words), an
    attribute or a value outside it or an attribute of it left out.

    >>> parse_attribute_comparison("Shape same, circle and circle; colour different, red and blue.")
    [('shape', True, 'circle', 'circle'), ('colour', False, 'red', 'blue')]
    >>> parse_attribute_comparison("Shape same, circle and circle.", {"shape": ["circle"],
    ...                                                             "colour": ["red"]}) is None
    True
    """
    body = text.strip().removesuffix(".")
    clauses = []
    for part in body.split(";"):
        match = _CLAUSE.match(part.strip())
        if match is None:
            return None
        key, verdict, a, b = match.groups()
        clauses.append((key.lower(), verdict == "same", a, b))
    keys = [c[0] for c in clauses]
    if len(set(keys)) != len(keys):
        return None
    if vocabulary is not None and (
        set(keys) != set(vocabulary)
        or any(v not in vocabulary[k] for k, _, a, b in clauses for v in (a, b))
    ):
        return None
    return clauses


class TemplateReasoner:
    """OFFLINE TEMPLATE REASONER (for tests and the demo; not a model, sees no pixels).

    Writes a fixed-pattern reason that agrees with the label. With ``describe`` (a
    callable ``pair -> (attrs_a, attrs_b)`` of attribute dicts, e.g.
    :func:`data_pipeline.synthetic.attribute_describer`) the reason compares the two
    images attribute by attribute (:func:`attribute_comparison`); otherwise it writes a
    generic sentence.

    Example:
        >>> import asyncio
        >>> asyncio.run(TemplateReasoner().areason({"label": 0}, None, None))[:3]
        'No.'
    """

    name = "template-offline"

    def __init__(self, describe: Callable[[dict], tuple[dict, dict] | None] | None = None) -> None:
        self.describe = describe

    async def areason(
        self, pair: dict, image_a: Image.Image | None, image_b: Image.Image | None
    ) -> str:
        attrs = self.describe(pair) if self.describe is not None else None
        label = int(pair["label"])
        if attrs:
            return f"{'Yes' if label else 'No'}. {attribute_comparison(*attrs)}"
        if label:
            return (
                "Yes. Both images show the same subject with the same identity, the same "
                "drawing style and a coherent progression."
            )
        return (
            "No. The second image departs from the first: its subject, style or "
            "progression does not match."
        )


def _data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


TEACHER_PROMPT = (
    "You explain consistency judgements of image pairs. The first image is the reference, "
    "the second the candidate{theme}. Human annotators judged that the second image "
    "{verdict} consistent with the first in identity, style and logic. Start your answer "
    "with '{word}.' and then give one to three sentences of concrete visual reasons (what "
    "matches or what differs). Do not contradict the judgement."
)


EDIT_TEACHER_PROMPT = (
    "You explain judgements of image edits. The second image is an edit of the first with "
    "the instruction: '{theme}'. Human annotators judged that, apart from the intended "
    "change, the edited image {verdict} consistent with the original in identity, style and "
    "logic. Start your answer with '{word}.' and then give one to three sentences of concrete "
    "visual reasons. Do not contradict the judgement."
)


class OpenAITeacher:
    """A teacher behind any OpenAI-compatible ``/v1/chat/completions`` endpoint
    (OpenAI, vLLM, SGLang). Images are sent as PNG data URLs; the pair id is sent in the
    ``X-Paco-Pair-Id`` header (servers may log or ignore it).

    Args:
        base_url: e.g. ``"http://127.0.0.1:8000/v1"``.
        model: model name the endpoint serves.
        api_key: key (``"EMPTY"`` for local servers).
        max_tokens / temperature / timeout: request settings.
        prompt / edit_prompt: the request text for set pairs and for editing pairs
            (format fields ``{theme}``, ``{verdict}``, ``{word}``).

    Example:
        >>> teacher = OpenAITeacher("http://127.0.0.1:8000/v1", "Qwen2.5-VL-72B")  # doctest: +SKIP
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        *,
        max_tokens: int = 256,
        temperature: float = 0.3,
        timeout: float = 120.0,
        prompt: str = TEACHER_PROMPT,
        edit_prompt: str = EDIT_TEACHER_PROMPT,
    ) -> None:
        self.name = f"openai:{model}"
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.prompt = prompt
        self.edit_prompt = edit_prompt
        self._client_kwargs = {"base_url": base_url, "api_key": api_key, "timeout": timeout}
        self._clients: dict[int, Any] = {}

    @property
    def client(self):
        """The ``AsyncOpenAI`` client of the running event loop (an async HTTP client
        must not outlive its loop, and each ``annotate_reasons`` call runs its own)."""
        from openai import AsyncOpenAI

        loop = id(asyncio.get_running_loop())
        if loop not in self._clients:
            # Retries and back-off are ours (annotate_reasons), not the client's.
            self._clients = {loop: AsyncOpenAI(max_retries=0, **self._client_kwargs)}
        return self._clients[loop]

    def messages(self, pair: dict, image_a: Image.Image, image_b: Image.Image) -> list[dict]:
        label = int(pair["label"])
        verdict, word = ("IS", "Yes") if label else ("is NOT", "No")
        if str(pair.get("template", "")).startswith("edit") and pair.get("prompt"):
            text = self.edit_prompt.format(theme=pair["prompt"], verdict=verdict, word=word)
        else:
            theme = f', for the theme "{pair["prompt"]}"' if pair.get("prompt") else ""
            text = self.prompt.format(theme=theme, verdict=verdict, word=word)
        return [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": _data_url(image_a)}},
                    {"type": "image_url", "image_url": {"url": _data_url(image_b)}},
                    {"type": "text", "text": text},
                ],
            }
        ]

    async def areason(
        self, pair: dict, image_a: Image.Image | None, image_b: Image.Image | None
    ) -> str:
        if image_a is None or image_b is None:
            raise DataPipelineError("OpenAITeacher needs the two images (load_images=True).")
        response = await self.client.chat.completions.create(
            model=self.model,
            messages=self.messages(pair, image_a, image_b),
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            extra_headers={"X-Paco-Pair-Id": str(pair["pair_id"])},
        )
        content = response.choices[0].message.content
        if not content:
            raise ReasonRejected("teacher returned an empty message.")
        return content

    async def aclose(self) -> None:
        """Close the client of the running event loop."""
        await self.client.close()
        self._clients.clear()


# ---------------------------------------------------------------------- store
class ReasonStore:
    """Append-only, fsync'ed JSONL of finished reasons (``pair_id``, ``label``,
    ``reasons``, ``teacher``, ``attempts``, ``time``). The last record of a pair wins."""

    def __init__(self, path: str | Path) -> None:
        self.log = AppendOnlyJsonl(path)
        self.path = self.log.path

    def load(self) -> dict[str, dict]:
        return {r["pair_id"]: r for r in self.log.load() if "pair_id" in r}

    def add(self, pair: dict, reasons: str, teacher: str, attempts: int) -> None:
        self.log.append(
            {
                "pair_id": pair["pair_id"],
                "label": int(pair["label"]),
                "reasons": reasons,
                "teacher": teacher,
                "attempts": attempts,
                "time": round(time.time(), 3),
            }
        )


@dataclass
class ReasonStats:
    """Counts of one :func:`annotate_reasons` run."""

    total: int = 0
    skipped: int = 0
    done: int = 0
    failed: int = 0
    rejected: int = 0
    errors: int = 0
    requests: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def _resolve(path: str, image_root: Path | None) -> Path:
    p = Path(path)
    return p if p.is_absolute() or image_root is None else image_root / p


async def aannotate_reasons(
    pairs: Sequence[dict],
    teacher: Teacher,
    store: str | Path | ReasonStore,
    *,
    image_root: str | Path | None = None,
    concurrency: int = 8,
    max_attempts: int = 4,
    backoff_s: float = 0.5,
    max_backoff_s: float = 30.0,
    load_images: bool = True,
    progress: bool = True,
) -> ReasonStats:
    """Async core of :func:`annotate_reasons` (use it inside a running event loop)."""
    if concurrency < 1:
        raise InputError(f"concurrency must be >= 1; got {concurrency}.")
    if max_attempts < 1:
        raise InputError(f"max_attempts must be >= 1; got {max_attempts}.")
    store = store if isinstance(store, ReasonStore) else ReasonStore(store)
    root = Path(image_root) if image_root is not None else None
    finished = store.load()
    stats = ReasonStats(total=len(pairs))
    todo = []
    for pair in pairs:
        old = finished.get(pair["pair_id"])
        if old is not None and int(old["label"]) == int(pair["label"]):
            stats.skipped += 1
        else:
            todo.append(pair)
    logger.info(
        "reasons: %d pairs, %d already done, %d to ask", len(pairs), stats.skipped, len(todo)
    )
    semaphore = asyncio.Semaphore(concurrency)
    # transient errors (connection, 408, 429, 5xx) and rejected reasons are asked again
    policy = RetryPolicy(max_attempts - 1, backoff_s, max_backoff_s, seed=0)
    bar = tqdm(total=len(todo), desc="reasons", disable=not progress, leave=False)

    async def one(pair: dict) -> None:
        async with semaphore:
            images: tuple[Image.Image | None, Image.Image | None] = (None, None)
            if load_images:
                images = (
                    load_image(_resolve(pair["image_a"], root), name=f"{pair['pair_id']}.image_a"),
                    load_image(_resolve(pair["image_b"], root), name=f"{pair['pair_id']}.image_b"),
                )
            attempts = 0

            def retry_on(err: BaseException) -> bool:
                return isinstance(err, ReasonRejected) or policy.is_transient(err)

            try:
                async for attempt in policy.async_retrying(retry_on=retry_on):
                    with attempt:
                        attempts += 1
                        stats.requests += 1
                        try:
                            text = await teacher.areason(pair, *images)
                            reasons = check_reason(text, int(pair["label"]))
                        except ReasonRejected as err:
                            stats.rejected += 1
                            logger.info(
                                "pair %s attempt %d rejected: %s", pair["pair_id"], attempts, err
                            )
                            raise
                        except Exception as err:
                            stats.errors += 1
                            logger.warning(
                                "pair %s attempt %d failed: %r", pair["pair_id"], attempts, err
                            )
                            raise
                store.add(pair, reasons, teacher.name, attempts)
                stats.done += 1
            except Exception as err:
                stats.failed += 1
                if not retry_on(err):  # a 401, a bug: asking again cannot help, stop the run
                    raise
                logger.error(
                    "pair %s: no acceptable reason after %d attempts; it stays without a reason "
                    "(re-run to retry).",
                    pair["pair_id"],
                    attempts,
                )
            finally:
                bar.update()

    try:
        await asyncio.gather(*(one(p) for p in todo))
    finally:
        bar.close()
    return stats


def annotate_reasons(
    pairs: Sequence[dict],
    teacher: Teacher,
    store: str | Path | ReasonStore,
    **kwargs: Any,
) -> ReasonStats:
    """Ask ``teacher`` for a reason for every pair not yet in ``store``.

    Args:
        pairs: pair records (``pair_id``, ``label``, ``prompt``, ``image_a``, ``image_b``).
        teacher: :class:`OpenAITeacher`, :class:`TemplateReasoner` or any :class:`Teacher`.
        store: path of the append-only reasons JSONL (or a :class:`ReasonStore`).
        image_root: folder relative image paths are resolved against.
        concurrency: at most this many requests in flight.
        max_attempts: tries per pair (errors and rejected reasons both count).
        backoff_s / max_backoff_s: exponential back-off base and cap between tries (jittered).
        load_images: read the two images and pass them to the teacher.
        progress: show a tqdm bar.

    Returns:
        :class:`ReasonStats`; a pair that failed every attempt has no stored reason and is
        retried by the next run.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(aannotate_reasons(pairs, teacher, store, **kwargs))
    raise UsageError(
        "annotate_reasons() was called inside a running event loop; await "
        "aannotate_reasons(...) instead."
    )


def read_reasons(work_dir: str | Path) -> dict[str, dict]:
    """Finished reasons of a work folder by ``pair_id``."""
    return ReasonStore(Path(work_dir) / REASONS_FILE).load()
