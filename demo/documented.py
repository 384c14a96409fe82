"""The demo's headline figures as the miniature study documents them: ranges over the runs
the page reports (:data:`PAGE`), in one place for the page and the stages' printout.

Results move with the CPU (the same code and seed give other numbers on another machine), so
a stage prints its own figure next to the documented range, and a figure outside it gets a
note, not an error. ``tests/demo/test_documented.py`` checks that the page's table shows
every range as :func:`range_text` writes it.

    >>> documented("train.truth_accuracy", 0.801)
    'truth-pair accuracy 0.801 (documented 0.772–0.848, docs/miniature-study.md)'
"""

from __future__ import annotations

from dataclasses import dataclass

PAGE = "docs/miniature-study.md"
# The same page on the documentation site that ``make docs`` serves.
SITE_PAGE = "http://127.0.0.1:8000/miniature-study/"


@dataclass(frozen=True)
class Figure:
    """A figure's name (as the page's table and the demo's printout say it), its documented
    range, the heading of the page's section about it and whether it is a gain (printed
    with its sign)."""

    name: str
    low: float
    high: float
    section: str
    signed: bool = False

    def number(self, value: float) -> str:
        return f"{value:+.3f}" if self.signed else f"{value:.3f}"


RL = "Experiments 1-4: RL on the generator"
EDITING = "Experiment 5: editing"
HACKING = "Experiment 6: reward hacking"
T2IS = "T2IS-Bench in miniature"
# The runs each range spans are in the page's table (a to f: the page's runs).
FIGURES: dict[str, Figure] = {
    # The train stage's evaluator on held-out ground-truth pairs: runs a, b, c, d, f.
    "train.truth_accuracy": Figure(
        "truth-pair accuracy", 0.772, 0.848, "The train-stage evaluator"
    ),
    "train.truth_roc_auc": Figure("truth-pair ROC-AUC", 0.821, 0.906, "The train-stage evaluator"),
    # Its reasons on 48 of those pairs: runs c, d, f.
    "train.reasons_agree": Figure(
        "answer agrees with its reasons", 0.667, 0.854, "The train-stage evaluator"
    ),
    # The world generator, judged by the oracle on 48 held-out prompts: runs a, c, d, f.
    "generator.consistency": Figure("generator consistency", 0.628, 0.662, "The world generator"),
    "generator.alignment": Figure("generator alignment", 0.539, 0.564, "The world generator"),
    # The evaluator of the generator's grids: runs a, c, d, f.
    "world_evaluator.roc_auc": Figure(
        "world evaluator ROC-AUC", 0.638, 0.679, "The world evaluator"
    ),
    # Experiments 1-4: the oracle's consistency gain over both RL seeds, per arm: runs a, c,
    # d, f (arm 2 also b).
    "world_grpo.paco": Figure("arm 1 consistency gain", 0.031, 0.054, RL, True),
    "world_grpo.clipi": Figure("arm 2 consistency gain", 0.012, 0.063, RL, True),
    "world_grpo.paco_half": Figure("arm 3 consistency gain", 0.023, 0.054, RL, True),
    "world_grpo.paco_sum": Figure("arm 4 consistency gain", 0.026, 0.058, RL, True),
    # Experiment 5: the oracle's edit success gain over both RL seeds, per arm: runs a, c, d, f.
    "world_edit.paco": Figure("PaCo edit arm success gain", -0.010, 0.016, EDITING, True),
    "world_edit.clipt": Figure("CLIP-T edit arm success gain", -0.005, 0.016, EDITING, True),
    # Experiment 6: the oracle's alignment gain over the three RL seeds, per arm: runs e, f.
    "world_hacking.alone": Figure("proxy-alone alignment gain", -0.022, -0.018, HACKING, True),
    "world_hacking.log_tamed": Figure("log-tamed alignment gain", -0.011, -0.004, HACKING, True),
    "world_hacking.kl": Figure("KL-arm alignment gain", -0.017, -0.005, HACKING, True),
    "world_hacking.gardo": Figure("GARDO-arm alignment gain", 0.003, 0.005, HACKING, True),
    # paco-eval t2is, the mean VC change of world_grpo's arm 1 (RL seed 0) judged by the world
    # evaluator: run f.
    "world_t2is.vc": Figure("mean VC change", 0.036, 0.036, T2IS, True),
}


def range_text(key: str) -> str:
    """The documented range of a figure, as the page's table writes it."""
    figure = FIGURES[key]
    low, high = figure.number(figure.low), figure.number(figure.high)
    if low == high:
        return low
    return f"{low} to {high}" if figure.signed else f"{low}–{high}"


def documented(key: str, value: float) -> str:
    """``value`` named and printed next to its documented range (and a note when outside)."""
    figure = FIGURES[key]
    text = f"{figure.name} {figure.number(value)} (documented {range_text(key)}, {PAGE})"
    # At the printed precision: a value that prints as an end of the range is inside it.
    if not figure.low <= round(value, 3) <= figure.high:
        text += f"; outside that range: results move with the CPU (see {figure.section!r} there)"
    return text
