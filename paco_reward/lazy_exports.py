"""Names a package exports but imports on first use (PEP 562), so that importing the package
does not load torch. One implementation for ``paco_reward`` and ``data_pipeline``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], lazy: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for ``lazy`` (name -> module defining it);
    ``namespace`` is the package's ``globals()``, where a loaded name is cached.

        >>> ns = {}
        >>> getattr_, dir_ = lazy_exports("pkg", ns, {"sqrt": "math"})
        >>> getattr_("sqrt")(4.0), "sqrt" in ns, dir_()
        (2.0, True, ['sqrt'])
    """

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(lazy))

    return __getattr__, __dir__
