"""``--judge``: how every ``paco-eval`` benchmark names its judge, one spec for all of them.

==============================  ==============================================================
``chat:<url>@<model>``          an OpenAI-compatible chat endpoint (``vllm serve``, GPT-4.1 at
                                ``https://api.openai.com/v1`` with the key in
                                ``$OPENAI_API_KEY``, ``paco-reward serve``, the gateway)
``local:<folder or hub id>``    a VLM loaded in this process, answering through the library's
                                ``generate`` (greedy)
``paco:<folder or hub id>``     a :class:`paco_reward.PacoReward` (a ``paco-reward train``
                                output folder too), scoring P(Yes)
``server:<url>@<model>``        a served PaCo evaluator (``paco-reward serve``, vLLM)
``clip:<folder or hub id>``     CLIP-I, an image-similarity baseline
``pixel[:size]``                pixel L1 similarity at ``size`` px, a baseline
``dreamsim[:cache folder]``     DreamSim similarity, a baseline (``pip install dreamsim``)
==============================  ==============================================================

A benchmark takes the kinds its protocol can use (GEdit-Bench's VIEScore needs text: ``chat``,
``local``; VCReward-Bench takes ``chat``, ``paco`` and ``server``; ConsistencyRank and EditReward-Bench
take ``paco``, ``server`` and the baselines). Written without a kind, as T2IS-Bench's
judges are, a URL (``http://host:8000/v1@model``) is a ``chat`` judge and a folder or hub id
is the benchmark's in-process kind (GEdit-Bench ``local``, VCReward-Bench ``paco``). The spec, and the settings that change
what a judge answers, are part of the results file's fingerprint (:meth:`JudgeArguments.judge_id`),
so two judges never share a results file. Parsing imports nothing heavy: ``--help`` and a
mistyped spec fail before any model code loads.

    >>> parse_judge("chat:http://127.0.0.1:8000/v1@Qwen/Qwen2.5-VL-72B-Instruct-AWQ", ("chat",))
    JudgeSpec(kind='chat', target='http://127.0.0.1:8000/v1', model='Qwen/Qwen2.5-VL-72B-Instruct-AWQ')
    >>> parse_judge("paco:out/run", ("paco", "server")).slug()
    'paco_out_run'
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from paco_reward.command_line import config_field
from paco_reward.errors import ConfigError

__all__ = ["JUDGE_KINDS", "JudgeArguments", "JudgeSpec", "parse_judge", "pixel_size"]

#: kind -> what its argument is (for error messages).
JUDGE_KINDS = {
    "chat": "chat:<url>@<model>",
    "local": "local:<model folder or hub id>",
    "paco": "paco:<evaluator folder or hub id>",
    "server": "server:<url>@<model>",
    "clip": "clip:<CLIP folder or hub id>",
    "pixel": "pixel[:size]",
    "dreamsim": "dreamsim[:cache folder]",
}
# Kinds whose argument may be left out (``pixel``, ``dreamsim``).
_OPTIONAL_ARGUMENT = ("pixel", "dreamsim")


def pixel_size(arg: str, what: str = "pixel") -> int | None:
    """The side of ``pixel:<size>`` (``None``: the scorer's default).

    Raises:
        ConfigError: not a positive integer, naming ``what``.
    """
    if not arg:
        return None
    if not arg.isdigit() or int(arg) < 1:
        raise ConfigError(f"{what}: the size after 'pixel:' must be a positive integer; got {arg!r}.")
    return int(arg)


@dataclass(frozen=True)
class JudgeSpec:
    """A parsed ``--judge``: its kind, target (URL, folder or hub id) and served model name."""

    kind: str
    target: str
    model: str | None = None

    def text(self) -> str:
        """The spec as written (normalised)."""
        if not self.target:  # "pixel", "dreamsim": the kind alone
            return self.kind
        return f"{self.kind}:{self.target}" + (f"@{self.model}" if self.model else "")

    def slug(self) -> str:
        """A file-name-safe form of the spec (the results file is named after it)."""
        return re.sub(r"[^A-Za-z0-9.-]+", "_", self.text()).strip("_")[:120]


def parse_judge(spec: str, kinds: Sequence[str], flag: str = "--judge",
                bare: tuple[str, str] | None = None) -> JudgeSpec:  # fmt: skip
    """``spec`` parsed, when its kind is one of ``kinds``.

    Args:
        bare: the kinds of a spec without a kind, ``(for a URL, for a folder or hub id)``, as
            T2IS-Bench's judges are written (``http://host:8000/v1@model``, ``org/model``);
            ``None``: a kind is required.

    Raises:
        ConfigError: an unknown or unaccepted kind, a missing argument, a ``chat:`` spec
            without ``@<model>``; the message names ``flag`` and shows the forms it takes.

    Example:
        >>> parse_judge("runs/paco", ("chat", "paco"), bare=("chat", "paco")).kind
        'paco'
    """
    forms = ", ".join(JUDGE_KINDS[k] for k in kinds)
    text = str(spec).strip()
    head = text.partition(":")[0].lower()
    if head in _OPTIONAL_ARGUMENT and head in kinds:  # "pixel" alone is a whole spec
        arg = text.partition(":")[2].strip()
        if head == "pixel":
            pixel_size(arg, f"{flag} {spec!r}")
        return JudgeSpec(head, arg)
    if bare is not None and head in ("http", "https"):
        text = f"{bare[0]}:{text}"
    elif bare is not None and ":" not in text and text:
        text = f"{bare[1]}:{text}"  # a mistyped kind still has its ':' and fails below
    kind, sep, rest = text.partition(":")
    kind = kind.strip().lower()
    if not sep or kind not in kinds or not rest.strip():
        raise ConfigError(f"{flag} {spec!r}: give one of {forms}.")
    rest = rest.strip()
    if kind in ("chat", "server"):
        url, at, model = rest.rpartition("@")  # model names hold no '@'; a URL's '@' comes first
        if not at:
            url, model = rest, ""
        if not re.match(r"^https?://", url):
            raise ConfigError(
                f"{flag} {spec!r}: {url!r} is not an http(s) URL; give {JUDGE_KINDS[kind]}."
            )
        if not model:
            raise ConfigError(
                f"{flag} {spec!r}: give the served model's name after '@' ({JUDGE_KINDS[kind]}, "
                "e.g. chat:http://127.0.0.1:8000/v1@Qwen/Qwen2.5-VL-72B-Instruct-AWQ)."
            )
        return JudgeSpec(kind, url.rstrip("/"), model)
    return JudgeSpec(kind, rest)


@dataclass(kw_only=True)
class JudgeArguments:
    """The judge flags every ``paco-eval`` benchmark shares (its config inherits them)."""

    judge: str | None = config_field(
        None,
        help="The judge: chat:<url>@<model> (OpenAI-compatible endpoint), local:<folder> "
        "(in-process VLM), paco:<folder> or server:<url>@<model> (a PaCo evaluator); which "
        "kinds a benchmark takes is in its docs; a bare URL@model or folder picks the "
        "benchmark's own. Needed by judge and report.",
    )
    api_key_env: str = config_field(
        "OPENAI_API_KEY", help="Environment variable holding a chat endpoint's key (unset: none)."
    )
    text_first: bool = config_field(
        False, help="Chat judges: the prompt text before the images (Step1X-Edit's GPT-4.1 route)."
    )
    image_format: Literal["png", "jpeg"] = config_field(
        "png", help="Chat judges: how images are sent (png; jpeg is Step1X-Edit's GPT-4.1 route)."
    )
    max_tokens: int = config_field(512, help="Chat and local judges: answer length limit.")
    temperature: float | None = config_field(
        0.0, help="Chat judges: sampling temperature (0 greedy; null sends none, GPT-4.1's route)."
    )
    judge_seed: int | None = config_field(None, help="Chat judges: the request's seed, when given.")
    timeout: float = config_field(120.0, help="Chat judges: seconds per request.")
    retries: int = config_field(3, help="Chat judges: retries of a transient failure.")
    adapter: str | None = config_field(None, help="paco: judges: a LoRA adapter folder or hub id.")
    device: str | None = config_field(
        None, help="local: and paco: judges: torch device (default: cuda if available)."
    )
    batch_size: int = config_field(8, help="paco: judges: pairs per forward.")

    # The kinds the benchmark's protocol can use, and those of a URL and of a folder given
    # without a kind (class attributes, not flags).
    judge_kinds: ClassVar[tuple[str, ...]] = ("chat", "local", "paco", "server")
    bare_judge_kinds: ClassVar[tuple[str, str]] = ("chat", "paco")

    def __post_init__(self) -> None:
        if self.judge is not None:  # a mistyped spec fails before any data or model loads
            parse_judge(self.judge, self.judge_kinds, bare=self.bare_judge_kinds)
        for name in ("max_tokens", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name} must be >= 1; got {getattr(self, name)}.")
        if self.retries < 0:
            raise ConfigError(f"--retries must be >= 0; got {self.retries}.")

    def judge_spec(self, stage: str) -> JudgeSpec:
        """The parsed ``--judge``.

        Raises:
            ConfigError: none given (naming the stage that needs it).
        """
        if self.judge is None:
            forms = ", ".join(JUDGE_KINDS[k] for k in self.judge_kinds)
            raise ConfigError(f"the {stage} stage needs --judge ({forms}).")
        return parse_judge(self.judge, self.judge_kinds, bare=self.bare_judge_kinds)

    def judge_id(self, stage: str) -> dict[str, Any]:
        """What makes two judges' answers differ: the spec and the settings its kind uses (for
        the results file's fingerprint and the report's protocol; no key)."""
        spec = self.judge_spec(stage)
        out: dict[str, Any] = {"spec": spec.text()}
        if spec.kind == "chat":
            out.update(text_first=self.text_first, image_format=self.image_format,
                       max_tokens=self.max_tokens, temperature=self.temperature,
                       seed=self.judge_seed)  # fmt: skip
        elif spec.kind == "local":
            out.update(max_tokens=self.max_tokens, decoding="greedy")
        elif spec.kind == "paco":
            out.update(adapter=self.adapter)
        return out

    def chat_judge(self, stage: str) -> Any:
        """A chat judge (``chat:`` or ``local:``): an
        :class:`~paco_eval.chat_judge.OpenAIChatJudge` or an
        :class:`~paco_eval.chat_judge.InProcessChatJudge`."""
        from paco_eval.chat_judge import InProcessChatJudge, OpenAIChatJudge

        spec = self.judge_spec(stage)
        if spec.kind == "chat":
            return OpenAIChatJudge(spec.target, spec.model or "", api_key_env=self.api_key_env,
                                   text_first=self.text_first, image_format=self.image_format,
                                   max_tokens=self.max_tokens, temperature=self.temperature,
                                   seed=self.judge_seed, timeout=self.timeout,
                                   retries=self.retries)  # fmt: skip
        if spec.kind == "local":
            from paco_reward import PacoReward

            model = PacoReward.from_pretrained(spec.target, device=self.device)
            return InProcessChatJudge(model, spec.target, max_new_tokens=self.max_tokens)
        raise ConfigError(f"--judge {spec.text()!r} scores P(Yes); this stage needs a chat judge "
                          f"({JUDGE_KINDS['chat']} or {JUDGE_KINDS['local']}).")  # fmt: skip

    def reward(self, stage: str) -> Any:
        """A :class:`paco_reward.PacoReward` (``paco:`` in-process or ``server:`` remote)."""
        from paco_reward import PacoReward

        spec = self.judge_spec(stage)
        if spec.kind == "paco":
            return PacoReward.from_pretrained(spec.target, adapter=self.adapter, device=self.device,
                                              batch_size=self.batch_size)  # fmt: skip
        if spec.kind == "server":
            key = os.environ.get(self.api_key_env) or None
            return PacoReward.from_server(spec.target, model=spec.model or "", api_key=key,
                                          timeout=self.timeout, retries=self.retries)  # fmt: skip
        raise ConfigError(f"--judge {spec.text()!r} is not a PaCo evaluator "
                          f"({JUDGE_KINDS['paco']} or {JUDGE_KINDS['server']}).")  # fmt: skip

    def pair_scorer(self, stage: str, template: str) -> Any:
        """A scorer of image pairs (``score_pairs``): a PaCo evaluator (``paco:``,
        ``server:``) with ``template``, or a baseline (``clip:``, ``pixel``, ``dreamsim``);
        see :mod:`paco_eval.pair_scorers`."""
        from paco_eval.pair_scorers import BASELINE_KINDS, PacoPairScorer, build_baseline

        spec = self.judge_spec(stage)
        if spec.kind in BASELINE_KINDS:
            return build_baseline(spec.kind, spec.target, self.device)
        return PacoPairScorer(self.reward(stage), template, spec.text())
