"""The tiny CLIP's tokenizer: byte-pair merges learned by hand-checkable rules, the same in
every process (tokenizers' BpeTrainer numbered its end-of-word symbols in hash-map order, so
two trainings of the world's CLIP differed), and a tokenizer that reads any text."""

from __future__ import annotations

import json
import subprocess
import sys

from paco_reward.testing.clip import build_tiny_clip_tokenizer, learn_bpe


def test_learn_bpe_merges_the_most_frequent_pair_and_breaks_ties_by_the_pair():
    # "ab" twice and "abab" once: (a, b</w>) is seen 3 times; then (a, b) and (b, ab</w>)
    # once each, the smaller pair first; then the two halves of "abab".
    merges = learn_bpe({"abab": 1, "ab": 2}, num_merges=10)
    assert merges == [("a", "b</w>"), ("a", "b"), ("ab", "ab</w>")]
    assert learn_bpe({"abab": 1, "ab": 2}, num_merges=1) == [("a", "b</w>")]


SCRIPT = """
import json
from paco_reward.testing.clip import build_tiny_clip_tokenizer
corpus = ["A green diamond character with dots markings, drawn on a warm-toned background.",
          "The same character with 3 pips below it.", "Make the character blue."] * 3
tokenizer = build_tiny_clip_tokenizer(corpus=corpus)
print(json.dumps(sorted(tokenizer.get_vocab().items())))
"""


def test_two_processes_learn_the_same_tokenizer():
    vocabularies = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(2)
    ]
    assert vocabularies[0] == vocabularies[1]


def test_the_tokenizer_reads_its_corpus_in_words_and_any_text_without_unknowns():
    corpus = ["A green diamond character, drawn twice.", "The same character below it."]
    tokenizer = build_tiny_clip_tokenizer(corpus=corpus * 4)
    assert tokenizer.tokenize("The same green character.") == [
        "the</w>",
        "same</w>",
        "green</w>",
        "character</w>",
        ".</w>",
    ]
    text = "Zebra #42 — ünïcode!"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.unk_token_id not in ids[1:-1]
    assert tokenizer.decode(ids, skip_special_tokens=True).replace(" ", "") == (
        text.lower().replace(" ", "")
    )
