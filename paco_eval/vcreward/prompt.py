"""VCReward-Bench's judge prompt ``visual_consistency/pairwise/v1``, byte for byte, and how the
released client lays it out.

Transcribed from ZhangqiJiang07/GEditBench_v2@82bc00e
``src/prompts/assets/vlm/assessment/visual_consistency/pairwise/v1.yaml`` (prompt text is
data). The release renders each text block with ``jinja2.Template(text).render(...)``, which
drops the block's final newline, and its OpenAI-style adapter
(``prompt_adapters.py::OpenAIStylePromptAdapter``) sends the system prompt as a system message
and the blocks as one user message, a separator text part between blocks: ``""`` from text to
image, ``"\\n"`` from image to text. :func:`build_messages` reproduces that; the answer is a
JSON ``{"winner": "Image A" | "Image B" | "Tie"}``.

    >>> msgs = build_messages("make the sky pink", "SRC", ["A", "B"])
    >>> [p.get("text", p.get("image")) for p in msgs[1]["content"]][-5:]
    ['A', '\\n', 'Image B:', '', 'B']
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

PROMPT_ID = "vlm/assessment/visual_consistency/pairwise"
PROMPT_VERSION = "v1"

SYSTEM_PROMPT = "You are a meticulous Image Integrity Analyst. Your function is to detect unintended modifications by comparing a generated image to its original source. Your sole purpose is to assess whether regions *outside the explicit scope of the editing instruction* have been unintentionally altered. You must first deduce the intended target of the edit, then ignore that target area and focus exclusively on the preservation of all other regions. Output your answer in a structured JSON format."

# The user blocks: text, the source image, text, edit 0, text, edit 1.
TEXT_TASK = (
    "**Task: Evaluate Preservation of Non-Target Regions ONLY.**\n"
    "\n"
    "You will be given an **Original Image**, an **Editing Instruction**, and two generated images: **Image A** and **Image B**. Your job is to determine which generated image did a better job of keeping the areas *not targeted by the instruction* identical to the **Original Image**.\n"
    "\n"
    "**Your Single Focus:**\n"
    "- **Scope Analysis:** First, what is the specific object, area, or concept the instruction intended to change?\n"
    "- **Collateral Impact on Style:** In areas outside the instruction's direct scope, did the overall artistic style, mood, or filter change compared to the original?\n"
    "- **Color & Lighting Spillover:** Did the color grading, saturation, or lighting shift in regions that should not have been affected by the edit? Compare them strictly against the Original Image.\n"
    "- **Integrity of Untouched Elements:** Were any objects, patterns, or structures that were *not supposed to be edited* distorted, added, or removed?\n"
    "- **Texture & Detail Fidelity:** In untouched parts of the image, was the original texture, sharpness, and fine detail preserved, or did it become blurry, artificially smooth, or noisy?\n"
    "\n"
    "**Your Thought Process:**\n"
    "1.  **Deconstruct the Instruction:** First, analyze the editing instruction to clearly define the intended target area(s) of the modification.\n"
    "2.  **Analyze Image A:** Compare the regions *outside* of this target area in Image A against the Original Image, looking for any unintended changes.\n"
    "3.  **Analyze Image B:** Compare the regions *outside* of this target area in Image B against the Original Image, looking for any unintended changes.\n"
    "4.  **Declare a Winner:** Decide which image better preserved the non-target regions with higher fidelity to the Original Image. The image with fewer or less severe unintended changes wins. Provide your winner in the specified JSON format.\n"
    "\n"
    "**Required Output JSON Schema:**\n"
    "```json\n"
    "{\n"
    "    \"winner\": \"Choose one from: 'Image A', 'Image B', or 'Tie'\"\n"
    "}\n"
    "```\n"
    "**Editing Instruction:** {{ instruction }}\n"
    "Original Image:\n"
)

TEXT_COMPARE = "--- Generated Images to Compare ---\nImage A:\n"

TEXT_IMAGE_B = "Image B:\n"


def _render(text: str, instruction: str) -> str:
    # jinja2's {{ instruction }} without autoescape, and its default keep_trailing_newline=False
    out = text.replace("{{ instruction }}", instruction)
    return out[:-1] if out.endswith("\n") else out


def build_messages(instruction: str, source: Any, edits: Sequence[Any]) -> list[dict]:
    """Chat messages for one pair, image parts as ``{"type": "image", "image": img}`` (see
    :meth:`paco_eval.chat_judge.OpenAIChatJudge.chat_messages`)."""
    if len(edits) != 2:
        raise ValueError(f"a VCReward-Bench pair has two edited images; got {len(edits)}.")
    blocks: list[dict] = [
        {"type": "text", "text": _render(TEXT_TASK, instruction)},
        {"type": "image", "image": source},
        {"type": "text", "text": _render(TEXT_COMPARE, instruction)},
        {"type": "image", "image": edits[0]},
        {"type": "text", "text": _render(TEXT_IMAGE_B, instruction)},
        {"type": "image", "image": edits[1]},
    ]
    content: list[dict] = []
    for k, block in enumerate(blocks):
        content.append(block)
        if k < len(blocks) - 1:
            sep = "" if block["type"] == "text" else "\n"  # text->image "", image->text "\n"
            content.append({"type": "text", "text": sep})
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": content}]


def prompt_sha256() -> str:
    """sha256 of the system prompt and the three text blocks, joined by NUL (the protocol)."""
    joined = "\0".join([SYSTEM_PROMPT, TEXT_TASK, TEXT_COMPARE, TEXT_IMAGE_B])
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()
