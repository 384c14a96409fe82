"""What the distribution declares, read from the source: every third-party module the three
packages import is a declared dependency (``install_requires`` or an extra), the version is
written once, and ruff checks the code against the oldest Python the package supports.
(``tests/test_wheel.py`` builds the wheel and checks what it holds.)"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("paco_reward", "paco_grpo", "data_pipeline")


def _setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def _requirement_names(text: str) -> set[str]:
    lines = (line.split("#")[0].strip() for line in text.splitlines())
    return {canonicalize_name(Requirement(line).name) for line in lines if line}


def declared_distributions() -> dict[str, str]:
    """Each declared distribution (canonical name) -> where: ``install_requires`` or
    ``extra <name>``."""
    config = _setup_cfg()
    where = {name: "install_requires" for name in
             _requirement_names(config["options"]["install_requires"])}  # fmt: skip
    for extra, text in config["options.extras_require"].items():
        for name in _requirement_names(text):
            where.setdefault(name, f"extra {extra}")
    return where


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> the files of the three packages that import it (at module level
    or inside a function), the standard library and the packages themselves left out."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in PACKAGES and top not in sys.stdlib_module_names:
                        found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_a_declared_dependency():
    """``import certifi`` in a package with no ``certifi`` in setup.cfg works only where some
    other package happens to install it: an import is declared where it is used."""
    providers = importlib.metadata.packages_distributions()
    declared = declared_distributions()
    imports = third_party_imports()
    assert {"torch", "transformers", "yaml", "PIL"} <= set(imports)  # the walk finds them
    undeclared = []
    for module, files in sorted(imports.items()):
        # a module not installed here (vllm has a venv of its own) is named as its distribution
        distributions = {canonicalize_name(d) for d in providers.get(module, [module])}
        if not distributions & set(declared):
            undeclared.append(f"{module} (distribution {sorted(distributions)}): {sorted(files)}")
    assert not undeclared, "imported but not in setup.cfg:\n" + "\n".join(undeclared)


def test_the_version_is_written_once():
    """``paco_reward.__version__`` is the version: setup.cfg reads it, ``paco_grpo`` re-exports
    it, and no other file of the distribution writes one."""
    import paco_grpo
    import paco_reward

    assert _setup_cfg()["metadata"]["version"] == "attr: paco_reward.__version__"
    assert paco_grpo.__version__ == paco_reward.__version__
    written = re.compile(r"""^\s*(__version__|version)\s*[:=]\s*["']?\d+\.\d+""", re.MULTILINE)
    files = [ROOT / "setup.cfg", ROOT / "pyproject.toml", ROOT / "CITATION.cff"]
    files += [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    writers = [str(path.relative_to(ROOT)) for path in files if written.search(path.read_text())]
    assert writers == ["paco_reward/__init__.py"], writers


def test_ruff_targets_the_oldest_supported_python():
    """Ruff's ``target-version`` is ``python_requires``' lower bound, so a syntax or an
    upgrade rule of a newer Python is not suggested for code that must run on the oldest."""
    python_requires = _setup_cfg()["options"]["python_requires"]
    (major, minor) = re.fullmatch(r">=\s*(\d+)\.(\d+)", python_requires.strip()).groups()
    target = re.search(r'^target-version\s*=\s*"(py\d+)"', (ROOT / "pyproject.toml").read_text(),
                       re.MULTILINE)  # fmt: skip
    assert target is not None and target.group(1) == f"py{major}{minor}", (target, python_requires)
    classifiers = _setup_cfg()["metadata"]["classifiers"]
    assert f"Programming Language :: Python :: {major}.{minor}" in classifiers
