"""The task-aware instructions of PaCo-Reward, and the one place chat messages are built.

Training (SFT targets), scoring (in-process and remote), serving and the
benchmarks all render a pair through :func:`render_instruction` and
:func:`build_messages`, so a trained model is scored on exactly the text it
learned from.

    >>> render_instruction("consistency", "a red fox")[:53]
    'Given two subfigures generated based on the theme: "a'
    >>> format_answer(True, "Both show the same fox.")
    'Yes. Both show the same fox.'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paco_reward.errors import PromptError


@dataclass(frozen=True)
class Template:
    """A named instruction. ``{prompt}`` is the one field a caller fills (theme,
    criterion or edit instruction); a template without it takes no prompt."""

    name: str
    text: str
    description: str
    # The prompt goes in stripped, except where a benchmark's released code inserts it as
    # written (T2IS-Bench: a criterion's trailing space stays, so the question is its bytes).
    strip_prompt: bool = True

    @property
    def needs_prompt(self) -> bool:
        return "{prompt}" in self.text


# The paper's task-aware instructions (arXiv 2512.04784, appendix "Prompt Templates").
TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in [
        Template(
            "consistency",
            'Given two subfigures generated based on the theme: "{prompt}", do the two images '
            "maintain consistency in terms of style, logic and identity? "
            'Answer "Yes" and "No" first, and then provide detailed reasons.',
            "Text-to-image-set consistency of two panels under a theme (paper v2; the default).",
        ),
        Template(
            "criteria",
            "Do images meet the following criteria? {prompt} "
            "Please answer Yes or No first, then provide detailed reasons.",
            "Per-criterion judgement; the prompt is one consistency criterion (paper v1).",
        ),
        Template(
            "t2is",
            "Do images meet the following criteria? {prompt} Please answer Yes or No.",
            "T2IS-Bench's per-criterion consistency question, byte for byte as its released "
            "evaluation asks it (chengyou-jia/T2IS@a40b858 test_prompt_consistency.py).",
            strip_prompt=False,
        ),
        Template(
            "rank",
            "Do the two images maintain consistency in terms of style, logic and identity? "
            'Answer "Yes" and "No" first, and then provide detailed reasons.',
            "Theme-free consistency of a candidate with a reference (ConsistencyRank).",
        ),
        Template(
            "edit_consistency",
            "Compare the edited image (second) with the original image (first). "
            "Instruction: '{prompt}'. Except for the parts that are intentionally changed "
            "according to the instruction, does the edited image remain consistent with the "
            "original in style, logic, and identity? "
            "Answer 'Yes' or 'No' first, then provide detailed reasons.",
            "Editing: semantic consistency (SC) of the edited image with the source.",
        ),
        Template(
            "edit_following",
            "Compare the edited image (second) with the original image (first). "
            "Instruction: '{prompt}'. Does the edited image accurately follow this instruction? "
            "Answer 'Yes' or 'No' first, then provide detailed reasons.",
            "Editing: prompt following (PF) of the edited image.",
        ),
    ]
}
"""The paper's task-aware instructions by name: ``consistency`` (the default), ``criteria``,
``t2is`` (the benchmark's question), ``rank``, ``edit_consistency`` and ``edit_following``. A scorer's ``template=`` takes one of
these names, a :class:`Template`, or a format string with a ``{prompt}`` field."""

DEFAULT_TEMPLATE = "consistency"


def get_template(template: str | Template) -> Template:
    """Resolve a template name, a :class:`Template`, or a format string containing ``{prompt}``
    (or no field at all) into a :class:`Template`."""
    if isinstance(template, Template):
        return template
    if template in TEMPLATES:
        return TEMPLATES[template]
    if "{" in template or " " in template:
        _check_format_string(template)
        return Template("custom", template, "A caller-supplied instruction.")
    raise PromptError(
        f"Unknown template {template!r}. Use one of {sorted(TEMPLATES)} or a format string "
        "with a '{prompt}' field."
    )


def _check_format_string(text: str) -> None:
    try:
        text.format(prompt="")
    except (KeyError, IndexError, ValueError) as err:
        raise PromptError(
            f"Template {text!r} is not a valid format string: the only field allowed is "
            f"'{{prompt}}' (literal braces must be doubled). ({err!r})"
        ) from None


def render_instruction(template: str | Template, prompt: str | None = None) -> str:
    """Fill a template with the theme / criterion / edit instruction.

    Raises:
        PromptError: if the template needs a prompt and ``prompt`` is empty or not a string.
    """
    tpl = get_template(template)
    if not tpl.needs_prompt:
        return tpl.text
    if not isinstance(prompt, str) or not prompt.strip():
        raise PromptError(
            f"Template {tpl.name!r} needs a non-empty prompt (theme, criterion or instruction); "
            f"got {prompt!r}."
        )
    return tpl.text.replace("{prompt}", prompt.strip() if tpl.strip_prompt else prompt)


def format_answer(label: bool, reasons: str = "") -> str:
    """The assistant turn PaCo-Reward is trained on: the decision word first, then reasons."""
    word = "Yes" if label else "No"
    reasons = reasons.strip()
    return f"{word}. {reasons}" if reasons else word


def build_messages(
    instruction: str,
    images: list[Any] | None = None,
    answer: str | None = None,
    num_images: int = 2,
) -> list[dict]:
    """Chat messages for one pair: the images first (source/reference first), then the
    instruction; optionally the assistant answer for training.

    ``images`` are placed in the content parts as ``{"type": "image", "image": img}``; with
    ``images=None`` placeholders ``{"type": "image"}`` are used (enough for the chat
    template, which only counts them).
    """
    parts: list[dict] = []
    for img in images if images is not None else [None] * num_images:
        parts.append({"type": "image"} if img is None else {"type": "image", "image": img})
    parts.append({"type": "text", "text": instruction})
    messages = [{"role": "user", "content": parts}]
    if answer is not None:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return messages
