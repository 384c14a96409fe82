"""Typed errors. Each names the offending input and says how to fix it.

All derive from :class:`PacoError`, and also from the builtin a caller would
expect (``ValueError`` for bad input, ``ConnectionError`` for an unreachable
server), so ``except ValueError`` keeps working.
"""

from __future__ import annotations


class PacoError(Exception):
    """Base class of every error paco-rl raises on purpose."""


class ConfigError(PacoError, ValueError):
    """A recipe, config field or command-line override is invalid: an unknown key, a value of
    the wrong type or out of range, or fields that contradict each other. The message names
    the field as a recipe spells it (``train.noise_steps``, ``lora_r``) and what it accepts."""


class InvalidImageError(PacoError, ValueError):
    """An image input could not be read or is not an image (corrupt file, zero size,
    wrong array shape or dtype)."""


class LayoutError(PacoError, ValueError):
    """A grid layout is missing, malformed, or does not divide the grid image."""


class PromptError(PacoError, ValueError):
    """A template or prompt is unusable (empty theme where one is needed, unknown template,
    panel markers that do not number the layout's panels)."""


class YesNoTokenError(PacoError, ValueError):
    """The tokenizer has no single-token "Yes"/"No", so the score cannot be computed."""


class UnsupportedModelError(PacoError, ValueError):
    """A model the evaluator cannot score with: no image input (a text-only model) or no chat
    template; or, where Qwen-VL's dynamic-resolution image processing is needed (the Qwen-VL
    scorer ``LocalBackend``, the SFT trainer, the in-process vLLM backend), an image processor
    of another kind (no patch or merge size, no image placeholder token). The message names
    what is missing."""


class VisionAttentionError(UnsupportedModelError):
    """A vision tower or vision attention module has not the shape the scorer's one-call-per-
    window-length attention was written for (the Qwen-VL families of the transformers range
    ``setup.cfg`` pins). The message names the class and what differs."""


class WeightsMismatchError(PacoError, ValueError):
    """A checkpoint's weights do not fit the class it was loaded into: some are missing (they
    would be randomly initialised), unexpected (they would be dropped) or of another shape.

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


class RewardServerError(PacoError, ConnectionError):
    """A reward server is unreachable, does not serve the model, or answered badly."""


class LogprobTokenIdsIgnoredError(RewardServerError):
    """A reward server answered without the log-probabilities of the requested yes/no
    token ids (``logprob_token_ids``), so an exact score cannot be computed."""
