"""VIEScore's prompts for text-guided image editing (``task="tie"``), byte for byte.

Transcribed from TIGER-AI-Lab/VIEScore@2cbea4e ``viescore/vie_prompts.py``, which
stepfun-ai/Step1X-Edit@570eba6 ``GEdit-Bench/viescore/vie_prompts.py`` ships unchanged (the two
files are identical). The text is data: trailing spaces included, since a stripped copy (as
evalscope's) is another prompt. Each line below ends where the original has a newline; the
strings are spelled with explicit ``\n`` so no editor or linter can strip a trailing space.
``tests/paco_eval/test_gedit_viescore.py`` pins their sha256 and, given a checkout
(``PACO_REF_STEP1X``), compares them with the released file.

The two prompts GEdit-Bench sends, composed as ``VIEScore.__init__`` joins them:

* :data:`SC_PROMPT` (semantic consistency): context + two-image edit rule + the SC rule, the
  images being [source, edited]; ``<instruction>`` is replaced by the editing instruction.
* :data:`PQ_PROMPT` (perceptual quality): context + the PQ rule, the edited image alone.

    >>> SC_PROMPT.count("<instruction>"), PQ_PROMPT.startswith(CONTEXT_NO_DELIMIT)
    (1, True)
    >>> render_sc("make it red").splitlines()[-1]
    'Editing instruction: make it red'
"""

from __future__ import annotations

import hashlib

# vie_prompts._context_no_delimit
CONTEXT_NO_DELIMIT = (
    "You are a professional digital artist. You will have to evaluate the effectiveness of the AI-generated image(s) based on given rules.\n"
    "All the input images are AI-generated. All human in the images are AI-generated too. so you need not worry about the privacy confidentials.\n"
    "\n"
    "You will have to give your output in this way (Keep your reasoning concise and short.):\n"
    "{\n"
    '"score" : [...],\n'
    '"reasoning" : "..."\n'
    "}"
)

# vie_prompts._prompts_0shot_two_image_edit_rule
TWO_IMAGE_EDIT_RULE = (
    "RULES:\n"
    "\n"
    "Two images will be provided: The first being the original AI-generated image and the second being an edited version of the first.\n"
    "The objective is to evaluate how successfully the editing instruction has been executed in the second image.\n"
    "\n"
    "Note that sometimes the two images might look identical due to the failure of image edit.\n"
)

# vie_prompts._prompts_0shot_tie_rule_SC
TIE_RULE_SC = (
    "\n"
    "From scale 0 to 10: \n"
    "A score from 0 to 10 will be given based on the success of the editing. (0 indicates that the scene in the edited image does not follow the editing instruction at all. 10 indicates that the scene in the edited image follow the editing instruction text perfectly.)\n"
    "A second score from 0 to 10 will rate the degree of overediting in the second image. (0 indicates that the scene in the edited image is completely different from the original. 10 indicates that the edited image can be recognized as a minimal edited yet effective version of original.)\n"
    "Put the score in a list such that output score = [score1, score2], where 'score1' evaluates the editing success and 'score2' evaluates the degree of overediting.\n"
    "\n"
    "Editing instruction: <instruction>\n"
)

# vie_prompts._prompts_0shot_rule_PQ
RULE_PQ = (
    "RULES:\n"
    "\n"
    "The image is an AI-generated image.\n"
    "The objective is to evaluate how successfully the image has been generated.\n"
    "\n"
    "From scale 0 to 10: \n"
    "A score from 0 to 10 will be given based on image naturalness. \n"
    "(\n"
    "    0 indicates that the scene in the image does not look natural at all or give a unnatural feeling such as wrong sense of distance, or wrong shadow, or wrong lighting. \n"
    "    10 indicates that the image looks natural.\n"
    ")\n"
    "A second score from 0 to 10 will rate the image artifacts. \n"
    "(\n"
    "    0 indicates that the image contains a large portion of distortion, or watermark, or scratches, or blurred faces, or unusual body parts, or subjects not harmonized. \n"
    "    10 indicates the image has no artifacts.\n"
    ")\n"
    "Put the score in a list such that output score = [naturalness, artifacts]\n"
)

#: The SC prompt as ``VIEScore(task="tie")`` composes it (``<instruction>`` still in it).
SC_PROMPT = "\n".join([CONTEXT_NO_DELIMIT, TWO_IMAGE_EDIT_RULE, TIE_RULE_SC])
#: The PQ prompt as ``VIEScore(task="tie")`` composes it.
PQ_PROMPT = "\n".join([CONTEXT_NO_DELIMIT, RULE_PQ])

#: sha256 of the composed prompts (UTF-8), recorded in every report's protocol.
SC_PROMPT_SHA256 = "8f529562c2f89f8db51a3f7cc4d487686f676909c21010b67b0e65ec78150de5"
PQ_PROMPT_SHA256 = "2473ff2c7406e06545c5c039ceb039ff2604ebacf150868a48f0bf07c9e733b0"


def render_sc(instruction: str) -> str:
    """The SC prompt for one instruction, as ``VIEScore.evaluate`` renders it
    (``str.replace`` of ``<instruction>``, so an instruction is inserted verbatim)."""
    return SC_PROMPT.replace("<instruction>", instruction)


def prompt_sha256(text: str) -> str:
    """sha256 hex digest of ``text`` in UTF-8 (the protocol records it)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
