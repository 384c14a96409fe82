"""Quiet on the happy path: the libraries' progress bars (weights loaded, model shards
written, pipeline components, datasets' maps) and their expected warnings (a prompt truncated
to a text encoder's length) are off for a command line run without ``-v``; ``-v`` shows them.

The command lines call :func:`quiet_libraries` once, before the heavy imports: environment
variables reach the libraries imported later (and any child process), and a library already
imported is told directly. :func:`apply_quiet` re-applies it after a late import (diffusers
in the GRPO policy), and does nothing unless :func:`quiet_libraries` was called: a library
user's own settings are never changed.

    >>> quiet_libraries()      # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["EXPECTED_WARNINGS", "apply_quiet", "quiet_libraries"]

# What transformers, huggingface_hub and datasets read at import to turn their bars off.
QUIET_ENVIRONMENT = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
# Warnings a run is expected to raise on every call: a long T2IS prompt truncated to CLIP's 77
# tokens (FLUX reads the whole of it through T5) or to the recipe's max_sequence_length.
EXPECTED_WARNINGS = (
    "Token indices sequence length is longer than the specified maximum sequence length",
    "The following part of your input was truncated because",
)
_quiet = False


class _ExpectedWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).lstrip().startswith(EXPECTED_WARNINGS)


_FILTER = _ExpectedWarnings()


def quiet_libraries() -> None:
    """Turn the libraries' progress bars and expected warnings off for this process and its
    children (a command line's default; ``-v`` skips it)."""
    global _quiet
    _quiet = True
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)  # a user's own setting wins
    apply_quiet()


def apply_quiet() -> None:
    """Tell each of the libraries imported by now (after :func:`quiet_libraries` only)."""
    if not _quiet:
        return
    modules = sys.modules
    if "huggingface_hub" in modules:
        modules["huggingface_hub"].utils.disable_progress_bars()
    if "datasets" in modules:
        modules["datasets"].disable_progress_bars()
    for library in ("transformers", "diffusers"):
        if library not in modules:
            continue
        library_logging = sys.modules.get(f"{library}.utils.logging")
        if library_logging is not None:
            library_logging.disable_progress_bar()
        # The library's records go to its root logger's own handler (it does not propagate).
        for handler in logging.getLogger(library).handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)
