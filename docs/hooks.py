"""Build hooks of the documentation site (``hooks:`` in mkdocs.yml).

- ``cli.md`` is generated from the command-line dataclasses: for every command of
  ``paco-reward``, ``paco-grpo`` and ``paco-data`` (their modules' ``COMMANDS``), the
  ``python -m demo`` program and the benchmarks, its help line and one row per option, built
  by :func:`paco_reward.command_line.add_dataclass_arguments`, the function that builds the
  ``--help`` of the command itself. The recipe configs (``GRPOConfig``, ``PacoSFTConfig``)
  get sections of their own.
- Every public name (the ``__all__`` of :data:`PUBLIC_MODULES`) must be rendered by a
  ``:::`` directive of a page under ``api/`` (its own, or one of the module that holds it)
  and have a docstring; each one that is not logs a WARNING, so ``mkdocs build --strict``
  fails naming it.
- :class:`SphinxRoles`, a griffe extension (mkdocs.yml: the python handler's
  ``extensions``), turns the docstrings' Sphinx roles (``:class:`~a.B```) into links.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import logging
import re
import sys
import typing
from pathlib import Path

log = logging.getLogger("mkdocs.plugins.paco_rl_docs")

ROOT = Path(__file__).resolve().parent.parent
# Modules whose ``__all__`` is the public API: each name must be on an API page.
PUBLIC_MODULES = (
    "paco_reward",
    "paco_reward.training",
    "paco_reward.server",
    "paco_grpo",
    "paco_grpo.pipelines",
    "paco_grpo.rewards",
    "data_pipeline",
    "data_pipeline.annotate",
)
API_DIR = "api/"
DIRECTIVE = re.compile(r"^:::\s+([\w.]+)", re.MULTILINE)
# The command lines: (program, module with ``COMMANDS``, what it is for).
CLIS = (
    ("paco-reward", "paco_reward.cli", "The evaluator: scoring, training, serving."),
    ("paco-grpo", "paco_grpo.cli", "PaCo-GRPO training and the tiny offline generators."),
    ("paco-data", "data_pipeline.cli", "The dataset pipeline, one command per stage."),
)
BENCHMARKS = (
    "consistency_rank",
    "edit_reward_bench",
    "throughput",
    "scoring_speed",
    "server_throughput",
    "annotate_load",
    "gpu_check",
    "plan_calibration",
    "sft_step",
    "grpo_step_cost",
    "grpo_reward_overlap",
    "grpo_kl_cost",
    "llamafactory_peer",
)
TRAINING_ARGUMENTS_URL = (
    "https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments"
)
SFT_CONFIG_URL = "https://huggingface.co/docs/trl/sft_trainer#trl.SFTConfig"


# ---------------------------------------------------------------------- mkdocs events
def on_config(config):
    # ``demo`` is no installed package: import it (and the rest) from this checkout.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, "cli.md", content=cli_reference()))
    directives = set()
    for file in files.documentation_pages():
        if file.src_uri.startswith(API_DIR):
            directives.update(DIRECTIVE.findall(file.content_string))
    for problem in check_public_api(directives):
        log.warning(problem)
    return files


# ---------------------------------------------------------------------- public API check
def _griffe_object(loader, path: str):
    try:
        obj = loader.modules_collection[path]
        return obj.final_target if obj.is_alias else obj
    except Exception:  # not there statically (a lazy export), or an unresolvable alias
        return None


def check_public_api(directives: set[str]) -> list[str]:
    """One message per public name that no API page renders or that has no docstring."""
    import griffe

    loader = griffe.GriffeLoader(search_paths=[str(ROOT)])
    for package in sorted({name.split(".")[0] for name in PUBLIC_MODULES}):
        loader.load(package)
    modules = {d for d in directives if getattr(_griffe_object(loader, d), "is_module", False)}
    problems = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            public = identifier = f"{module_name}.{name}"
            obj = _griffe_object(loader, public)
            if obj is None:  # a lazy export griffe cannot follow: where it is defined
                value = getattr(module, name)
                identifier = f"{value.__module__}.{value.__qualname__}"
                obj = _griffe_object(loader, identifier)
            paths = {public} | ({obj.path} if obj is not None else set())
            if not any(p in directives or p.rpartition(".")[0] in modules for p in paths):
                problems.append(
                    f"public name {public} is on no API page: add '::: {identifier}' to a "
                    f"page under docs/{API_DIR}"
                )
            if obj is None or not (obj.docstring and obj.docstring.value.strip()):
                problems.append(f"public name {public} has no docstring")
    return problems


# ---------------------------------------------------------------------- CLI reference
@dataclasses.dataclass
class RecipeConfig:
    """A config that ``train`` / ``plan`` recipes are made of, documented in a section of its own."""

    cls: type
    heading: str
    anchor: str
    intro: str
    own_fields_only: bool = False  # only the fields the class declares (not its bases')


def recipe_configs() -> list[RecipeConfig]:
    from paco_grpo.grpo_config import GRPOConfig
    from paco_reward.training.sft_config import PacoSFTConfig

    return [
        RecipeConfig(
            PacoSFTConfig,
            "PacoSFTConfig: paco-reward recipes",
            "pacosftconfig-paco-reward-recipes",
            "The fields of `paco-reward train` and `paco-reward plan` recipes. `PacoSFTConfig` "
            f"is a trl `SFTConfig`: every field of [`TrainingArguments`]({TRAINING_ARGUMENTS_URL})"
            f" and of [trl's `SFTConfig`]({SFT_CONFIG_URL}) is a recipe key and an option too. "
            "The fields it adds, or whose defaults it changes:",
            own_fields_only=True,
        ),
        RecipeConfig(
            GRPOConfig,
            "GRPOConfig: paco-grpo recipes",
            "grpoconfig-paco-grpo-recipes",
            "The fields of `paco-grpo train` and `paco-grpo plan` recipes: flat, except the "
            "`train:` and `test:` sections, whose options are dotted (`--train.resolution 256`).",
        ),
    ]


def _type_name(tp) -> str:
    if isinstance(tp, str):  # a postponed annotation: as written in the source
        return tp
    return inspect.formatannotation(tp)


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _as_yaml(value) -> str:
    """A default as it would be written in a recipe or after its option (values are YAML)."""
    import yaml

    def plain(v):
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v if isinstance(v, (str, int, float, bool, type(None))) else str(v)

    text = yaml.safe_dump(plain(value), default_flow_style=True, width=10**6)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _field(cls: type, dest: str) -> dataclasses.Field:
    """The field a (dotted) option sets."""
    *sections, name = dest.split(".")
    for section in sections:
        tp = typing.get_type_hints(cls)[section]
        cls = next((a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)), tp)
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def _code(text: str) -> str:
    """``text`` as a code span (a table cell's pipes may stay in one: Markdown keeps them)."""
    ticks = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _cell(text: str) -> str:
    """Help text on one line, its pipes outside code spans escaped for a table cell."""
    parts = re.split(r"(`+[^`]*`+)", " ".join(str(text).split()))
    return "".join(p if p.startswith("`") else p.replace("|", "\\|") for p in parts)


def _parser(cls: type, recipe: bool) -> argparse.ArgumentParser:
    """The options of ``cls`` exactly as its command's ``--help`` gets them."""
    from paco_reward.command_line import add_dataclass_arguments

    parser = argparse.ArgumentParser(add_help=False)
    add_dataclass_arguments(parser, cls, required=not recipe)
    return parser


def option_table(cls: type, recipe: bool, keep=lambda name: True) -> list[str]:
    """A Markdown table of the options of ``cls`` whose (top-level) field ``keep`` accepts."""
    rows = []
    for action in _parser(cls, recipe)._actions:
        if action.help == argparse.SUPPRESS or not keep(action.dest.split(".")[0]):
            continue
        f = _field(cls, action.dest)
        default = _default(f)
        if action.option_strings:
            name = _code(action.option_strings[0])
        else:
            name = f"{_code(action.dest.upper())} (positional)"
        if default is not dataclasses.MISSING:
            shown = _code(_as_yaml(default))
        else:
            shown = "required"
        rows.append(f"| {name} | {_code(_type_name(f.type))} | {shown} | {_cell(action.help)} |")
    if not rows:
        return []
    return ["| option | type | default | description |", "| --- | --- | --- | --- |", *rows]


def _usage(title: str, cls: type, recipe: bool) -> str:
    words = [title, *(["RECIPE"] if recipe else [])]
    for action in _parser(cls, recipe)._actions:
        if not action.option_strings:
            name = action.dest.upper()
            nargs = action.nargs
            words.append(
                f"[{name}]" if nargs == "?" else f"[{name} ...]" if nargs == "*"
                else " ".join([name] * nargs) if isinstance(nargs, int) else name
            )  # fmt: skip
    return " ".join([*words, "[OPTIONS]"])


def command_section(
    title: str, cls: type, help_text: str, recipe: bool, heading: bool = True
) -> list[str]:
    """The section of one command: its help, usage and options."""
    lines = [
        *([f"### {title}", ""] if heading else []),
        help_text.strip(),
        "",
        f"```\n{_usage(title, cls, recipe)}\n```",
        "",
    ]
    keep = None
    for config in recipe_configs():
        if issubclass(cls, config.cls):
            lines += [
                f"`RECIPE` is a YAML file of [`{config.cls.__name__}`](#{config.anchor}) fields; "
                "every field is also an option (`--key value`), and options override the file.",
                "",
            ]
            base_fields = {f.name for f in dataclasses.fields(config.cls)}
            keep = lambda name, base=base_fields: name not in base  # noqa: E731
            break
    rows = option_table(cls, recipe, keep or (lambda name: True))
    if rows and keep is not None:
        lines += ["Options besides the recipe's fields:", ""]
    return [*lines, *rows, ""]


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _benchmark_arguments(module) -> type:
    """The arguments dataclass of a benchmark (its one ``*Arguments`` dataclass)."""
    found = [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and dataclasses.is_dataclass(value)
        and value.__module__ == module.__name__
        and value.__name__.endswith("Arguments")
    ]
    if len(found) != 1:
        raise RuntimeError(f"{module.__name__}: expected one *Arguments dataclass, found {found}")
    return found[0]


def cli_reference() -> str:
    """The text of ``cli.md``."""
    lines = [
        "# Command-line reference",
        "",
        "<!-- Generated by docs/hooks.py from the commands' argument dataclasses at every "
        "build; edit the dataclasses, not this page. -->",
        "",
        "Every `paco-*` command, `python -m demo` and each benchmark share one command-line "
        "dialect (`paco_reward.command_line`): each option is a field of the command's "
        "arguments dataclass, written `--field_name` or `--field-name`; a value is read as "
        "YAML, like the same key in a recipe (`--noise_steps 1 2`, `--rewards "
        "'{clip_t: 1.0}'`); a boolean option alone means true (`--flag`, `--flag false`, "
        "`--no_flag`); a list option given twice adds to the list (`--scorer a --scorer b`); "
        "a dotted option sets one entry of a mapping option and keeps its others "
        "(`--reward_kwargs.consistency.server_url http://127.0.0.1:8001/v1`). "
        "A `RECIPE` is a YAML file of a config's fields, and options override it. `-v` logs "
        "INFO and shows the traceback of an error (`-vv`: DEBUG). Exit status: 0 done, 1 an "
        "error (one line naming the input), 2 a usage error. `--help` after a command prints "
        "what its section lists.",
        "",
    ]
    for prog, module_name, summary in CLIS:
        lines += [f"## {prog}", "", summary, ""]
        for command in importlib.import_module(module_name).COMMANDS:
            lines += command_section(
                f"{prog} {command.name}", command.resolve(), command.help, command.recipe
            )
    from demo.__main__ import DemoArguments

    lines += [
        "## python -m demo",
        "",
        "From the root of a checkout (`demo` is no installed package); see [the demo](demo.md).",
        "",
        *command_section("python -m demo", DemoArguments, DemoArguments.__doc__, False, False),
        "## Benchmarks",
        "",
        "Each runs as `python -m benchmarks.<name>` wherever paco-rl is installed; see "
        "[Benchmarks](benchmarks.md).",
        "",
    ]
    for name in BENCHMARKS:
        module = importlib.import_module(f"benchmarks.{name}")
        title = f"python -m benchmarks.{name}"
        arguments = _benchmark_arguments(module)
        lines += command_section(title, arguments, _first_paragraph(module.__doc__), False)
    for config in recipe_configs():
        own = set(vars(config.cls).get("__annotations__", {}))
        keep = (lambda name, own=own: name in own) if config.own_fields_only else None
        lines += [f"## {config.heading}", "", config.intro, ""]
        lines += [*option_table(config.cls, True, keep or (lambda name: True)), ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------- griffe extension
try:
    import griffe
except ImportError:  # only mkdocstrings needs it; the hooks above import it when they run
    griffe = None

ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|data|attr|exc|obj):`(~?)([\w.]+)(?:\(\))?`")
LITERAL_BLOCK = re.compile(r"(?<=\S)::\n", re.MULTILINE)
SECTION = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
DOCTEST_FLAGS = re.compile(r"\s*# doctest:.*$")


def fence_doctests(text: str) -> str:
    """Doctest blocks (``>>>`` lines and their output) as fenced ``pycon`` code, which Markdown
    would otherwise read as block quotes. Blocks indented as code already are left alone."""
    lines = text.splitlines()
    out: list[str] = []
    in_section = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if SECTION.match(line):
            in_section = True
        elif line and not line[0].isspace():
            in_section = False
        indent = len(line) - len(line.lstrip())
        if line.lstrip().startswith(">>>") and (indent == 0 or (in_section and indent == 4)):
            block = []
            while (
                i < len(lines)
                and lines[i].strip()
                and len(lines[i]) - len(lines[i].lstrip()) >= indent
            ):
                block.append(DOCTEST_FLAGS.sub("", lines[i]))
                i += 1
            pad = " " * indent
            if out and out[-1].strip() and not SECTION.match(out[-1]):
                out.append("")
            out += [f"{pad}```pycon", *block, f"{pad}```"]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


if griffe is not None:

    class SphinxRoles(griffe.Extension):
        """Turn Sphinx roles in docstrings into mkdocstrings cross-references.

        ``:class:`~paco_reward.reward.PacoReward``` becomes a link to that object where the site
        documents it, else its name in code; a name is resolved in the docstring's scope, as
        Sphinx does. A reStructuredText ``::`` before a literal block becomes ``:``, and
        doctest blocks become fenced code (:func:`fence_doctests`).
        """

        def on_object(self, *, obj, loader, **kwargs) -> None:
            if obj.is_alias or not obj.docstring:
                return
            text = ROLE.sub(lambda m: self._reference(obj, m), obj.docstring.value)
            obj.docstring.value = fence_doctests(LITERAL_BLOCK.sub(":\n", text))

        @staticmethod
        def _reference(obj, match: re.Match) -> str:
            _, short, name = match.groups()
            first, dot, rest = name.partition(".")
            try:
                identifier = obj.resolve(first) + dot + rest
            except Exception:  # a full path already, or a name outside the loaded packages
                identifier = name
            title = name.rpartition(".")[2] if short else name
            return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'
