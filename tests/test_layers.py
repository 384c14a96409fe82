"""The package layers: ``paco_reward`` is the ground floor; ``data_pipeline`` and
``paco_grpo`` build on it and not on each other; no import cycle.

The import graph is read from the source (AST), function-local imports included, so a lazy
import can hide neither an upward dependency nor a cycle (``paco_reward.cli`` importing a
module whose ``main`` imports ``paco_reward.cli`` back).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("paco_reward", "data_pipeline", "paco_grpo")
# What each package may import from the others.
ALLOWED = {
    "paco_reward": set(),
    "data_pipeline": {"paco_reward"},
    "paco_grpo": {"paco_reward"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if module_level_only else ast.walk(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _sources():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield package, path


def test_no_upward_or_sideways_import_between_packages():
    offences = []
    for package, path in _sources():
        for name in _imports(path, module_level_only=False):
            top = name.split(".")[0]
            if top in PACKAGES and top != package and top not in ALLOWED[package]:
                offences.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offences, "layer violations:\n" + "\n".join(sorted(set(offences)))


def test_the_packages_import_nothing_of_a_checkout():
    """``benchmarks`` and ``demo`` run from a checkout (``python -m benchmarks.<name>``,
    ``python -m demo``) and are not in the wheel: the three packages import neither (nor
    ``tests``), and the benchmarks build on the packages, not on the demo."""
    checkout_only = ("benchmarks", "demo", "tests")
    offences = [
        f"{path.relative_to(ROOT)} imports {name}"
        for _, path in _sources()
        for name in _imports(path, module_level_only=False)
        if name.split(".")[0] in checkout_only
    ]
    offences += [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "benchmarks").rglob("*.py"))
        for name in _imports(path, module_level_only=False)
        if name.split(".")[0] in ("demo", "tests")
    ]
    assert not offences, "\n".join(sorted(set(offences)))


def test_no_import_cycle():
    """Module-level and function-local imports alike: a cycle closed inside a function is a
    cycle all the same (it only fails later, when the function runs)."""
    modules = {_module_name(path): path for _, path in _sources()}
    graph = {
        name: {m for m in _imports(path, module_level_only=False) if m in modules and m != name}
        for name, path in modules.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name)):
            raise AssertionError("import cycle: " + " -> ".join(cycle))


def test_importing_the_ground_floor_loads_nothing_above_it():
    code = (
        "import importlib, pkgutil, sys, paco_reward\n"
        "for m in pkgutil.walk_packages(paco_reward.__path__, 'paco_reward.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('data_pipeline', 'paco_grpo')))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
