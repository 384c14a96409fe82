"""Where and how ``from_pretrained`` loads a model: the keyword arguments every loader of the
library forwards to transformers, peft and diffusers.

Every loader (:meth:`paco_reward.PacoReward.from_pretrained`, the SFT trainer's
:func:`~paco_reward.training.loading.load_model_and_processor`, the GRPO policy's
``load_pipeline``) takes two kinds of loading arguments, as ``transformers.pipeline`` does:

- **hub arguments** (:data:`HUB_KWARGS`: ``revision``, ``cache_dir``, ``token``,
  ``local_files_only``, ``trust_remote_code``) say which files to load. They go to the
  model *and* its processor, so weights and tokenizer always come from the same revision;
- **model arguments** (``device_map``, ``attn_implementation``, ``low_cpu_mem_usage``,
  ``quantization_config``, ...) say how to build the weights; they go to the model only.

Arguments are checked before anything loads: a name the loader does not know raises a
``TypeError`` (:class:`~paco_reward.errors.InputTypeError`; a
:class:`~paco_reward.errors.ConfigError` in a config) that names it, never silently ignored.
A model argument that names no local folder and cannot be a hub id either fails before the
hub is asked (:func:`check_source`), with a message about the folder, not about repo ids.

    >>> hub_kwargs(revision="v1.0", local_files_only=True)
    {'revision': 'v1.0', 'local_files_only': True}
    >>> check_kwargs({"low_cpu_mem_usage": True}, name="model_kwargs", reserved={"dtype": "dtype="})
    {'low_cpu_mem_usage': True}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paco_reward.errors import InputTypeError, PathNotFoundError

__all__ = [
    "ADAPTER_KWARGS",
    "HUB_KWARGS",
    "PIPELINE_KWARGS",
    "check_kwargs",
    "check_source",
    "default_model_name",
    "hub_kwargs",
]

# Which files to load: the model's and its processor's (transformers' from_pretrained names).
HUB_KWARGS = ("revision", "cache_dir", "token", "local_files_only", "trust_remote_code")
# What ``peft.PeftModel.from_pretrained`` takes for an adapter (peft ignores unknown names,
# so they are checked here).
ADAPTER_KWARGS = (
    "revision",
    "subfolder",
    "cache_dir",
    "token",
    "local_files_only",
    "force_download",
    "low_cpu_mem_usage",
)
# What ``DiffusionPipeline.from_pretrained`` takes to load a pipeline (diffusers only warns
# about unknown names, so they are checked here). The weights' dtype has its own setting.
PIPELINE_KWARGS = (
    *HUB_KWARGS,
    "variant",
    "force_download",
    "use_safetensors",
    "low_cpu_mem_usage",
    "device_map",
    "max_memory",
    "offload_folder",
    "offload_state_dict",
    "quantization_config",
    "disable_mmap",
)


def default_model_name(path_or_id: str | Path, adapter: str | Path | None = None) -> str:
    """The name a loaded evaluator goes by when none is given: its adapter's (else its
    model's) folder or hub repository name.

    Example:
        >>> default_model_name("X-GenGroup/PaCo-Reward-7B")
        'PaCo-Reward-7B'
    """
    return Path(str(adapter or path_or_id)).name


def hub_kwargs(
    *,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    token: str | bool | None = None,
    local_files_only: bool = False,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """The hub arguments that were set (the library defaults are left out, so the libraries
    apply their own), ready for ``**`` into a model's and a processor's ``from_pretrained``.

    Args:
        revision: branch, tag or commit of the hub repository (ignored for a local folder).
        cache_dir: where downloads are cached (default: the Hugging Face cache).
        token: hub token for gated or private repositories (``True``: the stored login).
        local_files_only: never download; fail if the files are not cached.
        trust_remote_code: run a repository's own modelling/processing code.

    Example:
        >>> hub_kwargs(revision="main", cache_dir="/data/hf")
        {'revision': 'main', 'cache_dir': '/data/hf'}
        >>> hub_kwargs()
        {}
    """
    values = {
        "revision": revision,
        "cache_dir": str(cache_dir) if cache_dir is not None else None,
        "token": token,
        "local_files_only": local_files_only or None,
        "trust_remote_code": trust_remote_code or None,
    }
    return {name: value for name, value in values.items() if value is not None}


def check_kwargs(
    kwargs: Mapping[str, Any] | None,
    *,
    name: str,
    allowed: tuple[str, ...] | None = None,
    reserved: Mapping[str, str] | None = None,
    error: type[Exception] = InputTypeError,
) -> dict[str, Any]:
    """A copy of ``kwargs`` meant for another library's ``from_pretrained``, checked.

    Args:
        kwargs: the mapping (``None`` is an empty one).
        name: how the caller calls it, for the messages (``"model_kwargs"``).
        allowed: the only keys accepted (``None``: any key the target library takes; it
            raises on unknown ones itself).
        reserved: keys the caller takes as a parameter or field of its own, mapped to what
            to use instead (``{"torch_dtype": "dtype="}``).
        error: the exception raised (:class:`~paco_reward.errors.InputTypeError`, a
            ``TypeError``, for a function's keyword arguments,
            ``ConfigError`` in a config's ``__post_init__``).

    Raises:
        error: ``kwargs`` is not a mapping with string keys, holds a reserved key, or a key
            outside ``allowed``; the message names the keys and what to use.

    Example:
        >>> check_kwargs({"torch_dtype": "bfloat16"}, name="model_kwargs", reserved={"torch_dtype": "dtype="})
        Traceback (most recent call last):
        ...
        paco_reward.errors.InputTypeError: model_kwargs must not set ['torch_dtype']; use dtype= instead.
    """
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise error(
            f"{name} must be a mapping of keyword names to values, e.g. "
            f"{{'low_cpu_mem_usage': True}}; got {kwargs!r}."
        )
    reserved = reserved or {}
    taken = sorted(k for k in kwargs if k in reserved)
    if taken:
        instead = " and ".join(dict.fromkeys(reserved[k] for k in taken))
        raise error(f"{name} must not set {taken}; use {instead} instead.")
    if allowed is not None:
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            raise error(f"{name} has unknown key(s) {unknown}; valid keys: {sorted(allowed)}.")
    return dict(kwargs)


def check_source(path_or_id: str | Path, what: str = "model") -> str:
    """``path_or_id`` as a string, once it is known to be a local path or a possible hub id.

    A loader treats an argument that names no local file or folder as a hub id; one that
    cannot be a hub id either (``/data/model``, ``./out``, ``~/x``, ``a/b/c``) would fail in
    the hub client with a message about repo id characters. This says what the user meant:
    no folder exists there. A possible hub id (``name`` or ``org/name``) is left to the hub.

    Args:
        path_or_id: the folder or hub id a loader was given.
        what: what it should be, for the message (``"model"``, ``"adapter"``).

    Raises:
        PathNotFoundError: nothing exists at ``path_or_id`` and it is not a valid hub id.

    Example:
        >>> check_source("X-GenGroup/PaCo-Reward-7B")
        'X-GenGroup/PaCo-Reward-7B'
        >>> check_source("/nope")
        Traceback (most recent call last):
        ...
        paco_reward.errors.PathNotFoundError: No model folder exists at '/nope', and '/nope' is not a hub id either (hub ids are 'name' or 'org/name'). Give the path of an existing folder, or a hub id.
    """
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    source = str(path_or_id)
    if os.path.exists(source):
        return source
    where = os.path.abspath(os.path.expanduser(source))
    shown = repr(source) if where == source else f"{source!r} ({where})"
    try:
        validate_repo_id(source)
    except HFValidationError:
        raise PathNotFoundError(
            f"No {what} folder exists at {shown}, and {source!r} is not a hub id either (hub "
            "ids are 'name' or 'org/name'). Give the path of an existing folder, or a hub id."
        ) from None
    parent = os.path.dirname(source)
    if parent and os.path.isdir(parent) and not _in_hub_cache(source):
        # 'runs/tiny_cpux' with a local runs/ is a mistyped folder, not a hub repo: say so
        # now rather than after the hub client's retries (the hub's answer names no path)
        from difflib import get_close_matches

        name = os.path.basename(source)
        close = get_close_matches(name, sorted(os.listdir(parent)), n=3, cutoff=0.6)
        hint = (
            " (did you mean " + " or ".join(repr(os.path.join(parent, c)) for c in close) + "?)"
            if close
            else ""
        )
        raise PathNotFoundError(
            f"No {what} folder exists at {shown}{hint}. {parent!r} is a folder here, so this "
            f"is taken for a local path, not the hub repo {source!r}. Give the path of an "
            "existing folder (to load that hub repo, run from a folder without "
            f"{parent!r})."
        )
    return source


def _in_hub_cache(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds a repository named ``repo_id``."""
    from huggingface_hub.constants import HF_HUB_CACHE

    folder = "--".join(["models", *repo_id.split("/")])
    return os.path.isdir(os.path.join(HF_HUB_CACHE, folder))
