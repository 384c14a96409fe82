"""Typed errors: the one family of every error paco-rl raises on purpose.

Each derives from :class:`PacoError`, so one ``except PacoError`` around a job catches every
deliberate failure of ``paco_reward``, ``paco_grpo`` and ``data_pipeline``, and also from the
builtin a caller would expect (``ValueError`` for bad input, ``ConnectionError`` for an
unreachable server, ``FileNotFoundError`` for a missing folder, ...), so ``except
ValueError`` keeps working, as in huggingface_hub's ``errors.py``. Each message names the
offending input and how to fix it. The errors of the other packages derive from these
(``paco_grpo``: ``EpochShapeError``, ``RewardLoadError``; ``data_pipeline``:
``DataPipelineError``). The docs' API page "Errors" lists them all, with what raises each.

    >>> try:
    ...     raise ConfigError("lora_r must be >= 1; got 0.")
    ... except ValueError as err:
    ...     isinstance(err, PacoError)
    True
"""

from __future__ import annotations


class PacoError(Exception):
    """Base class of every error paco-rl raises on purpose: ``except PacoError`` around a
    job catches each deliberate failure of the three packages, and no bug (a bug raises
    the builtin it is, an ``IndexError`` or an ``AttributeError``)."""


# ---------------------------------------------------------------------- bad input
class ConfigError(PacoError, ValueError):
    """A recipe, config field or command-line override is invalid: an unknown key, a value of
    the wrong type or out of range, or fields that contradict each other. The message names
    the field as a recipe spells it (``train.noise_steps``, ``lora_r``) and what it accepts.

    Raised by every config dataclass's checks (``GRPOConfig``, ``PacoSFTConfig``,
    ``PairingConfig``, ``LabelRule``, ``ExportConfig``, ``AnnotateConfig``, ...), the recipe
    and command-line parser, a recipe's unknown reward names, and a launch variable that is
    not what launchers set (``LOCAL_RANK``).
    """


class InputError(PacoError, ValueError):
    """An argument of a call is invalid: empty where items are needed, out of range, of the
    wrong length or shape, an unknown choice, or at odds with another argument. What a
    config field is to a recipe, this is to a function call (those raise :class:`ConfigError`).

    Raised by the library's functions and classes when called with such an argument
    (``compute_advantages``, ``group_normalize``, the ranking metrics, the samplers, ...).
    """


class InputTypeError(InputError, TypeError):
    """An argument of a call is of the wrong type or an unknown keyword (``pairs[0]`` that is
    not a tuple, ``PacoReward.from_pretrained(revison=...)``); a ``TypeError`` too, as Python
    raises for a wrong keyword."""


class PathNotFoundError(PacoError, FileNotFoundError, ValueError):
    """A file or folder an argument names does not exist, or lacks the file that makes it what
    the argument says: a model folder that is not there and is not a hub id either, an
    adapter folder without ``adapter_config.json``, a checkpoint to resume from, a pair
    dataset, a synthetic work folder. A ``FileNotFoundError`` and, for the callers that
    checked a bad path as a bad value, a ``ValueError`` (as huggingface_hub's
    ``LocalEntryNotFoundError``)."""


class InvalidImageError(PacoError, ValueError):
    """An image input could not be read or is not an image (corrupt file, zero size,
    wrong array shape or dtype)."""


class LayoutError(PacoError, ValueError):
    """A grid layout is missing, malformed, or does not divide the grid image."""


class PromptError(PacoError, ValueError):
    """A template or prompt is unusable (empty theme where one is needed, unknown template,
    panel markers that do not number the layout's panels)."""


# ---------------------------------------------------------------------- models
class YesNoTokenError(PacoError, ValueError):
    """The tokenizer has no single-token "Yes"/"No", so the score cannot be computed."""


class UnsupportedModelError(PacoError, ValueError):
    """A model the library cannot use: no image input (a text-only model) or no chat template;
    a vision tower whose output is not split by image; or, where Qwen-VL's dynamic-resolution
    image processing is needed (the Qwen-VL scorer ``LocalBackend``, the SFT trainer, the
    in-process vLLM backend), an image processor of another kind (no patch or merge size, no
    image placeholder token). The message names what is missing."""


class VisionAttentionError(UnsupportedModelError):
    """A vision tower the Qwen-VL scorer does not know (checked from the config, before the
    weights load), or, with ``vision_attention="grouped"``, a vision attention module whose
    forward is not the code the one-call-per-window-length attention was checked against
    (another transformers release, a subclass, a patch, a hook). The message names the class,
    the transformers version and what differs."""


class WeightsMismatchError(PacoError, ValueError):
    """A checkpoint's weights do not fit the class it was loaded into: some are missing (they
    would be randomly initialised), unexpected (they would be dropped) or of another shape.
    Raised when loading the evaluator or an adapter, and when resuming a GRPO checkpoint
    whose LoRA or EMA weights are not the model's.

    Attributes:
        source: the checkpoint (folder or hub id) that was loaded.
        missing / unexpected / mismatched: the weight names, sorted.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str = "",
        missing=(),
        unexpected=(),
        mismatched=(),
    ) -> None:
        super().__init__(message)
        self.source = source
        self.missing = sorted(missing)
        self.unexpected = sorted(unexpected)
        self.mismatched = sorted(mismatched)


class ArchitectureError(PacoError, ValueError):
    """A model whose architecture is neither in a local folder nor shipped with the library
    (``paco_reward.architectures``), so ``plan`` cannot build it on the meta device."""


class MissingDependencyError(PacoError, ImportError):
    """An optional dependency a feature needs is not installed, or is too old (vLLM without
    ``logprob_token_ids``, a baseline scorer's package); the message gives the ``pip
    install`` that fixes it."""


# ---------------------------------------------------------------------- servers and engines
class RewardServerError(PacoError, ConnectionError):
    """A reward server is unreachable (after the retry policy), does not serve the model, did
    not start, or answered badly."""


class TransientError(PacoError, ConnectionError):
    """A failure worth retrying (a connection error, a timeout, HTTP 408/429/5xx); the retry
    policy (``paco_reward.retry``) retries it and, once retries are spent, the client raises
    :class:`RewardServerError`. ``retry_after`` is the server's hint in seconds; ``advice``,
    when known, what fixes the cause (the client's error says it instead of "retry longer")."""

    def __init__(
        self, message: str, retry_after: float | None = None, advice: str | None = None
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.advice = advice


class LogprobTokenIdsIgnoredError(PacoError, RuntimeError):
    """The engine that scored a pair returned no log-probability for some of the requested
    yes/no token ids (``logprob_token_ids``), so an exact score cannot be computed: a reward
    server that ignores the field (through ``PacoReward.from_server``) or vLLM in-process
    (``backend="vllm"``). Not a :class:`RewardServerError`: no retry or other replica fixes
    it; an engine that supports the field does."""


class ServerOverloadedError(PacoError, RuntimeError):
    """The reward server's queue is full, or the server is starting or stopping; the request
    should be retried later (the server answers HTTP 503 with ``Retry-After``)."""


# ---------------------------------------------------------------------- runs
class LaunchError(PacoError, RuntimeError):
    """The processes of a launch do not form the one job the trainer expects (a launcher's
    ``WORLD_SIZE`` that accelerate does not run as one job), or a process has no device of
    its own (``LOCAL_RANK`` beyond the GPUs it sees)."""


class OutputDirInUseError(PacoError, FileExistsError):
    """A run's output folder (or a pipeline's work folder) holds another run's checkpoints or
    metrics: training into it would rotate that run's checkpoints away, resume the wrong run
    and mix both runs' metrics. The message names the folder and the fixes: resume it
    (``resume_from_checkpoint``), overwrite it (``overwrite_output_dir``), or another folder."""


class PlanError(PacoError, RuntimeError):
    """A launch that cannot fit: the weights and optimizer states alone exceed the GPU.
    Raised by ``plan`` and the trainers' start-up check, before any weight loads."""


class UsageError(PacoError, RuntimeError):
    """An object was called in a state that does not allow the call: closed, or a blocking
    call made inside a running event loop. The message says what to call instead."""
