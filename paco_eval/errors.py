"""Typed errors of the benchmarks: each a :class:`~paco_reward.errors.PacoError` (and the
builtin a caller would expect), each message naming the item and the fix.

    >>> from paco_reward.errors import PacoError
    >>> issubclass(StaleResultsError, PacoError) and issubclass(StaleResultsError, ValueError)
    True
"""

from __future__ import annotations

from paco_reward.errors import (
    ConfigError,
    InputError,
    InvalidImageError,
    LayoutError,
    PacoError,
    PathNotFoundError,
)

__all__ = [
    "BenchmarkDataError",
    "BenchmarkNotFoundError",
    "GenerationSettingsError",
    "ImageCountError",
    "MissingImageError",
    "PacoError",
    "StaleResultsError",
    "UnknownItemError",
    "InvalidImageError",
]


class BenchmarkNotFoundError(ConfigError):
    """``paco-eval NAME``: no benchmark of that name is registered (the message lists them)."""


class BenchmarkDataError(PacoError, ValueError):
    """A judge benchmark's data (ConsistencyRank, EditReward-Bench) is missing, malformed or
    inconsistent; the message names the file or row."""


class StaleResultsError(PacoError, ValueError):
    """A results file under the output folder was written for other inputs (another image
    folder, judge, prompt or case selection): its header's fingerprint is not this run's.
    Resuming would mix two runs; use another ``--output_dir`` or delete the file.

    Attributes:
        path: the results file.
        expected / found: this run's fingerprint and the file's.
    """

    def __init__(self, message: str, *, path: str = "", expected: str = "", found: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.expected = expected
        self.found = found


class GenerationSettingsError(InputError):
    """A generate stage's output folder holds images made with other settings (its
    ``generation.json``): adding to it would mix two runs. Use another folder or delete it.

    Attributes:
        path: the manifest file.
        differ: the settings that differ.
    """

    def __init__(self, message: str, *, path: str = "", differ: list[str] | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.differ = list(differ or [])


class UnknownItemError(InputError):
    """A case or item id that the benchmark does not have (a selection, an exclude list)."""


class MissingImageError(PathNotFoundError):
    """An image the benchmark needs is not in the image folder (strict mode)."""


class ImageCountError(LayoutError):
    """A case's images do not match its layout: a grid that does not cut into the layout's
    panels, or more/fewer sub-images than the case's ``output_image_count``."""
