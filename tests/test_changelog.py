"""CHANGELOG.md names what exists: every module, class or function it cites in backticks
(a dotted path under one of the checkout's packages, or ``python -m <module>``) imports, and
every file or folder it cites is in the checkout; except a rename's old names (left of
``->``: what a clause cites after its last arrow must exist), what a clause says is gone,
and the Removed sections. And each section is one list:
no entry stranded after a blank line, as a merge leaves one."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("paco_reward", "paco_grpo", "data_pipeline", "paco_eval", "benchmarks", "demo")
FOLDERS = (*PACKAGES, "recipes", "docs", "tests")
GONE = ("gone", "former", "removed")
CODE = re.compile(r"`([^`]+)`")
DOTTED = re.compile(r"^(?:python -m )?((?:{})(?:\.\w+)*)".format("|".join(PACKAGES)))
PATH = re.compile(r"[\w.-]+/[\w./-]*")


def _entries(text: str) -> list[tuple[str, str]]:
    """``(section, entry)`` for each list entry (continuation lines joined; a sub-entry is
    an entry of its own)."""
    out, section, entry = [], "", None
    for line in text.splitlines():
        if line.startswith("#"):
            section, entry = line, None
            continue
        match = re.match(r"^\s*- ", line)
        if match:
            entry = [line[match.end() :]]
            out.append((section, entry))
        elif line.strip() and entry is not None:
            entry.append(line.strip())
        elif not line.strip():
            entry = None
    return [(section, " ".join(lines)) for section, lines in out]


def _exists(path: str) -> bool:
    """Whether the dotted ``path`` is a module, or an attribute of one (a class, a function,
    a method)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _cited(clause: str) -> tuple[list[str], list[str]]:
    """The dotted paths and the checkout paths ``clause`` cites."""
    dotted, files = [], []
    for code in CODE.findall(clause):
        if PATH.fullmatch(code):
            if code.split("/")[0] in FOLDERS:
                files.append(code)
        elif match := DOTTED.match(code):
            dotted.append(match.group(1))
    return dotted, files


def problems(text: str) -> list[str]:
    out = []
    for section, entry in _entries(text):
        if section.startswith("### Removed"):
            continue
        for clause in re.split(r";|\.\s", entry):
            if "->" in clause:
                clause = clause.rsplit("->", 1)[1]  # the old names (left) are gone on purpose
            elif any(word in clause for word in GONE):
                continue
            dotted, files = _cited(clause)
            out += [f"{section}: `{p}` does not import ({entry[:70]}...)" for p in dotted
                    if not _exists(p)]  # fmt: skip
            out += [f"{section}: `{f}` is not in the checkout ({entry[:70]}...)" for f in files
                    if not (ROOT / f).exists()]  # fmt: skip
    return out


def stranded(text: str) -> list[str]:
    """Entries that follow a blank line inside a section (the list broken in two)."""
    out = []
    for block in re.split(r"^#+ .*$", text, flags=re.MULTILINE):
        lists = [part for part in re.split(r"\n\s*\n", block) if part.lstrip().startswith("- ")]
        out += [part.strip().splitlines()[0] for part in lists[1:]]
    return out


def test_every_cited_module_and_path_exists():
    assert problems((ROOT / "CHANGELOG.md").read_text()) == []


def test_the_check_sees_a_stale_citation():
    stale = (
        "### Changed\n"
        "- `python -m paco_reward.server.cli` serves; `paco_reward.local_backend.default_dtype`"
        " picks the dtype; `paco_reward/server/cli.py` holds it.\n"
        "- `paco_reward.old_module` -> `paco_reward.cli`; `paco_reward.gone_too` is gone.\n"
    )
    assert [p.split("`")[1] for p in problems(stale)] == [
        "paco_reward.server.cli",
        "paco_reward.local_backend.default_dtype",
        "paco_reward/server/cli.py",
    ]


def test_each_section_is_one_list():
    assert stranded((ROOT / "CHANGELOG.md").read_text()) == []
    assert stranded("### Added\n- one\n  more\n\n- stranded\n\n### Fixed\n- two\n") == ["- stranded"]
