"""Configs that load from and save to YAML, all the same way (:class:`YAMLConfig`).

A recipe is a YAML mapping of a config's field names (sections as nested mappings); ``{"dotted.key":
value}`` overrides replace what it says (the command line's ``--key value`` are the same
overrides); an unknown key fails naming it. :meth:`YAMLConfig.to_yaml` writes every field back
with the library version, and that file reloads as the config it came from (a run saves its own
as ``training_config.yaml`` in its output folder). :class:`~paco_reward.training.PacoSFTConfig`
and :class:`~paco_grpo.GRPOConfig` are YAML configs.

    >>> from paco_reward.training import PacoSFTConfig
    >>> cfg = PacoSFTConfig.from_yaml("recipes/tiny_cpu.yaml", {"max_steps": 2})  # doctest: +SKIP
    >>> cfg.to_yaml("runs/tiny/training_config.yaml")                           # doctest: +SKIP
    >>> PacoSFTConfig.from_yaml("runs/tiny/training_config.yaml") == cfg        # doctest: +SKIP
    True
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paco_reward.command_line import (
    apply_overrides,
    config_from_mapping,
    read_recipe,
    words_for_strings,
)
from paco_reward.errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = ["SAVED_CONFIG", "VERSION_KEY", "YAMLConfig"]

# The key of the library version in a saved config, and the file a run saves its config to.
VERSION_KEY = "paco_rl_version"
SAVED_CONFIG = "training_config.yaml"


def _plain(name: str, value: Any) -> Any:
    """``value`` as YAML's plain types (an enum as its value, a dataclass as a mapping)."""
    if isinstance(value, enum.Enum):
        return _plain(name, value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(f"{name}.{f.name}", getattr(value, f.name))
                for f in dataclasses.fields(value)}  # fmt: skip
    if isinstance(value, Mapping):
        return {str(k): _plain(f"{name}.{k}", v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(name, v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise ConfigError(
        f"{name} = {value!r} ({type(value).__name__}) cannot be written to YAML; give it as "
        "a plain value (text, number, list or mapping)."
    )


class YAMLConfig:
    """Mixin of a dataclass config: :meth:`from_yaml` / :meth:`from_dict` build it from a
    recipe, :meth:`to_yaml` writes it back. Fields named in ``SECRET_FIELDS`` (a hub token)
    are never written.

    Example:
        >>> import tempfile
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Hello(YAMLConfig):
        ...     name: str = "world"
        ...     times: int = 1
        >>> path = Hello(times=2).to_yaml(Path(tempfile.mkdtemp()) / "hello.yaml")
        >>> Hello.from_yaml(path, {"name": "you"})
        Hello(name='you', times=2)
        >>> Hello.from_dict({"nmae": "you"})
        Traceback (most recent call last):
        ...
        paco_reward.errors.ConfigError: config: unknown key(s) ['nmae'] for Hello (did you mean 'name'?); valid keys: ['name', 'times'].
    """

    SECRET_FIELDS: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], where: str = "config"):
        """The config ``values`` describe, failing on an unknown key (``where`` says whose).
        ``paco_rl_version`` (written by :meth:`to_yaml`) is accepted, and a version other than
        this library's is logged."""
        from paco_reward import __version__

        if not isinstance(values, Mapping):
            raise ConfigError(f"{where} must be a mapping of config fields; got {values!r}.")
        values = dict(values)
        version = values.pop(VERSION_KEY, None)
        if version is not None and version != __version__:
            logger.warning(
                "%s was written by paco-rl %s and is loaded by %s; check that the run "
                "reproduces.", where, version, __version__,
            )  # fmt: skip
        return config_from_mapping(cls, words_for_strings(cls, values), where)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Mapping[str, Any] | None = None):
        """Load a YAML recipe (or a run's saved ``training_config.yaml``), then apply
        ``{"dotted.key": value}`` overrides.

        Example:
            >>> cfg = GRPOConfig.from_yaml("recipes/grpo_tiny_cpu.yaml", {"train.resolution": 64})  # doctest: +SKIP
        """
        values = apply_overrides(read_recipe(path), dict(overrides or {}))
        return cls.from_dict(values, f"recipe {str(path)!r}")

    def to_plain(self) -> dict[str, Any]:
        """Every field (but ``SECRET_FIELDS``) as YAML's plain values: what :meth:`to_yaml`
        writes, without the version."""
        return {
            f.name: _plain(f.name, getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.init and f.name not in self.SECRET_FIELDS
        }

    def to_yaml(self, path: str | Path) -> Path:
        """Write every field (and the library version) to ``path`` as YAML, atomically; the
        file reloads with :meth:`from_yaml` as this config. Returns ``path``."""
        import yaml

        from paco_reward import __version__
        from paco_reward.atomic_io import atomic_write_text

        values = self.to_plain()
        header = (
            f"# {type(self).__name__} written by paco-rl {__version__}; it reloads with "
            f"{type(self).__name__}.from_yaml(path).\n"
        )
        body = yaml.safe_dump({VERSION_KEY: __version__, **values}, sort_keys=False)
        atomic_write_text(path, header + body)
        return Path(path)
