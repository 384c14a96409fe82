"""Configuration of ``paco-data annotate``.

>>> import tempfile
>>> AnnotateConfig(tempfile.gettempdir(), annotator="alice").url()
'http://127.0.0.1:8765/?annotator=alice'
"""

from __future__ import annotations

import logging
import math
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from paco_reward.errors import ConfigError, InputError
from paco_reward.launch import is_loopback

logger = logging.getLogger(__name__)

# Annotator names go into the store and into URLs: keep them short and plain. Matched with
# fullmatch: `$` would also accept a trailing newline ("alice\n", a second "alice").
ANNOTATOR_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
ANNOTATOR_RULE = "1-64 characters: letters, digits and _ . @ -, starting with a letter or digit"
NOT_LETTER_OR_DIGIT_AT_ENDS = re.compile(r"^[\W_]+|[\W_]+$")
MIN_KEY_LENGTH = 8
# Error messages quote what was sent, but only this much of it: a reply never grows with the
# request.
ECHO_LIMIT = 80


def shown(value: object, limit: int = ECHO_LIMIT) -> str:
    """``value`` quoted for an error message, cut to ``limit`` characters.

    >>> shown("x" * 100, limit=3)
    "'xxx…' (100 characters)"
    """
    text = str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit] + '…'!r} ({len(text)} characters)"


def check_annotator(name: str) -> str:
    """``name`` if it is a valid annotator id, else :class:`~paco_reward.errors.InputError` (a
    ``ValueError``) naming the rule."""
    if not isinstance(name, str) or not ANNOTATOR_PATTERN.fullmatch(name):
        raise InputError(f"annotator name {shown(name)} is not allowed; use {ANNOTATOR_RULE}.")
    return name


def canonical_annotator(name: str) -> str:
    """The form in which annotator names compare, and new rankings are stored: Unicode NFKC,
    case-folded, without the characters other than letters and digits at either end. So
    ``ALICE``, ``alice.`` and ``Alice-`` are one annotator, ``alice``; ``a.lice`` is another.
    A valid name (:func:`check_annotator`) stays valid.

    >>> canonical_annotator("ALICE."), canonical_annotator("Bo.B-1")
    ('alice', 'bo.b-1')
    """
    folded = unicodedata.normalize("NFKC", name).casefold()
    return NOT_LETTER_OR_DIGIT_AT_ENDS.sub("", folded) or folded


@dataclass
class AnnotateConfig:
    """Where the annotation app reads and writes, and how it is reached."""

    work_dir: Path = field(
        metadata={
            "help": "The pipeline's work folder: instances.jsonl (stage 3) and the panel images "
            "it names are read; rankings go to annotations.jsonl and rankings.jsonl there.",
            "positional": True,  # `paco-data annotate WORK`
        }
    )
    annotator: str | None = field(
        default=None,
        metadata={
            "help": "Default annotator name shown on the page (each person can still type "
            f"their own; {ANNOTATOR_RULE})."
        },
    )
    host: str = field(
        default="127.0.0.1",
        metadata={
            "help": "Interface to bind. The default accepts this machine only; use 0.0.0.0 "
            "for a team on a LAN, together with a shared key."
        },
    )
    port: int = field(default=8765, metadata={"help": "TCP port to listen on."})
    key: str | None = field(
        default=None,
        metadata={
            "help": f"Shared key a browser must present (at least {MIN_KEY_LENGTH} characters). "
            "Prefer key_env: a key on the command line is visible to other users of the machine."
        },
    )
    key_env: str = field(
        default="PACO_ANNOTATE_KEY",
        metadata={"help": "Environment variable read for the shared key when key is not given."},
    )
    request_timeout: float = field(
        default=10.0,
        metadata={
            "help": "Seconds a client may take to send one whole request (a ranking takes "
            "milliseconds); a connection whose request has not arrived by then is closed, so "
            "half-sent requests cannot hold the server's connections."
        },
    )
    log_level: str = field(
        default="info",
        metadata={"help": "Server log level: 'debug', 'info', 'warning' or 'error'."},
    )

    def __post_init__(self) -> None:
        self.work_dir = Path(self.work_dir)
        if not self.work_dir.is_dir():
            raise ConfigError(
                f"work folder {str(self.work_dir)!r} does not exist; give the folder the "
                "pipeline's stages write to (the one with instances.jsonl)."
            )
        if self.annotator is not None:
            try:
                check_annotator(self.annotator)
            except InputError as err:
                raise ConfigError(str(err)) from None
        if not 0 < self.port < 65536:
            raise ConfigError(f"port must be in 1..65535; got {self.port}.")
        if not self.host:
            raise ConfigError("host must not be empty; use 127.0.0.1 (this machine only).")
        if self.key is None and self.key_env:
            self.key = os.environ.get(self.key_env) or None
        if self.key is not None and len(self.key) < MIN_KEY_LENGTH:
            raise ConfigError(
                f"the shared key must have at least {MIN_KEY_LENGTH} characters; got "
                f"{len(self.key)}. Pick a longer one (e.g. `openssl rand -hex 16`)."
            )
        if not (math.isfinite(self.request_timeout) and self.request_timeout > 0):
            raise ConfigError(
                f"request_timeout must be a positive number of seconds; got {self.request_timeout}."
            )
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ConfigError(
                f"log_level must be 'debug', 'info', 'warning' or 'error'; got {self.log_level!r}."
            )
        if not is_loopback(self.host) and self.key is None:
            logger.warning(
                "annotate: binding %s without a shared key: anyone who can reach this port can "
                "read the panels and submit rankings. Set %s (or --key) to require one.",
                self.host,
                self.key_env or "a key",
            )

    def url(self) -> str:
        """The address to open in a browser (with the default annotator, if any)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        host = f"[{host}]" if ":" in host else host
        query = f"?{urlencode({'annotator': self.annotator})}" if self.annotator else ""
        return f"http://{host}:{self.port}/{query}"
