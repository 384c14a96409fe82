"""Run t2v-metrics 3.0's own CLIP-FlanT5 VQAScore on a tiny model: a script for the
t2v-metrics venv (``make`` builds ``.venv-t2v-metrics``: transformers 4.49.0 as t2v-metrics
3.0 pins it), started by ``tests/reference/test_ref_vqascore.py``; nothing of paco_reward is
imported here.

``--source`` is a folder holding t2v-metrics' files at commit 7c06208 (the test extracts
them from a checkout into a temporary folder; none is in this repository). Only the modules
of the CLIP-FlanT5 scorer are imported: ``t2v_metrics/__init__.py`` refuses to import
without an ``ffmpeg`` binary and imports every other scorer (LLaVA-NeXT from git, decord,
open_clip, ...), so its packages are entered without running their ``__init__``; and
``mm_utils`` imports OpenCV for its video helpers only, so ``cv2`` is an empty module.

Steps: (1) the reference class ``CLIPT5ForConditionalGeneration`` is built from the tiny
model's ``config.json`` (its vision tower from ``mm_vision_tower``, a local tiny CLIP), the
tiny weights are loaded into it, and it saves itself (``save_pretrained``) to
``OUT/reference_model``; (2) the reference tokenizer (transformers 4.49's slow, sentencepiece
``T5Tokenizer``, as t2v-metrics loads it with ``use_fast=False``) gets a ``spiece.model`` of
the tiny tokenizer's pieces with sentencepiece's own ``nmt_nfkc`` normalizer (T5's);
(3) ``CLIPT5Model("clip-flant5-xxl")`` loads both through its own ``load_pretrained_model``
and scores every image against the texts as ``Score.forward`` does (the image repeated once
per text, one forward per image): in float32, and in bfloat16 under CPU autocast (its
``@torch.autocast("cuda")`` does nothing on a CPU, where the bfloat16 model would fail on
the float32 vision features). Everything is written to ``OUT/reference.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import struct
import sys
import types
from pathlib import Path


def _enter_packages(source: Path) -> None:
    """Make ``t2v_metrics`` and its model packages importable without their ``__init__``."""
    for name in ("t2v_metrics", "t2v_metrics.models", "t2v_metrics.models.vqascore_models"):
        module = types.ModuleType(name)
        module.__path__ = [str(source / name.replace(".", "/"))]
        sys.modules[name] = module


# ---------------------------------------------------------------------- spiece.model
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint at ``data[i:]`` and the index after it."""
    value, shift = 0, 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _fields(data: bytes) -> list[tuple[int, bytes]]:
    """The top-level (field number, raw field bytes incl. tag) of a serialized protobuf."""
    fields, i = [], 0
    while i < len(data):
        start = i
        tag, i = _read_varint(data, i)
        kind = tag & 7
        if kind == 0:
            _, i = _read_varint(data, i)
        elif kind == 2:
            length, i = _read_varint(data, i)
            i += length
        else:  # fixed32 / fixed64
            i += 4 if kind == 5 else 8
        fields.append((tag >> 3, data[start:i]))
    return fields


def _piece(text: str, score: float, kind: int) -> bytes:
    raw = text.encode()
    body = b"\x0a" + _varint(len(raw)) + raw + b"\x15" + struct.pack("<f", score)
    body += b"\x18" + _varint(kind)
    return b"\x0a" + _varint(len(body)) + body


def write_spiece_model(tokenizer_json: Path, out: Path) -> None:
    """``spiece.model`` of the unigram pieces in ``tokenizer_json`` (the sentinels left to the
    tokenizer, as in T5's), with the trainer and normalizer specs of a model sentencepiece
    trains here in T5's layout (pad 0, eos 1, unk 2, no bos; ``nmt_nfkc``)."""
    import sentencepiece as spm

    vocab = json.loads(tokenizer_json.read_text())["model"]["vocab"]
    pieces = [(p, s) for p, s in vocab if not p.startswith("<extra_id_")]
    lines = ["a tiny corpus for the normalizer spec of a T5 style model"] * 20
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=40, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, normalization_rule_name="nmt_nfkc",
        hard_vocab_limit=False, num_threads=1, minloglevel=2,
    )  # fmt: skip
    kinds = {"<pad>": 3, "</s>": 3, "<unk>": 2}
    proto = b"".join(_piece(p, s, kinds.get(p, 1)) for p, s in pieces)
    proto += b"".join(raw for number, raw in _fields(model.getvalue()) if number != 1)
    out.write_bytes(proto)


# ---------------------------------------------------------------------- the run
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True, help="the tiny CLIP-FlanT5")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cases", type=Path, required=True, help="JSON [[image, [texts]]]")
    args = parser.parse_args()
    import torch
    import transformers
    from safetensors.torch import load_file

    _enter_packages(args.source.resolve())
    sys.modules["cv2"] = types.ModuleType("cv2")  # after transformers, which probes for it

    from t2v_metrics.models.vqascore_models import clip_t5_model
    from t2v_metrics.models.vqascore_models.clip_t5.model import (
        CLIPT5Config,
        CLIPT5ForConditionalGeneration,
    )
    from t2v_metrics.models.vqascore_models.mm_utils import t5_tokenizer_image_token

    torch.set_num_threads(1)
    # (1) the reference class, built from the config, given the tiny weights, saved by itself
    config = CLIPT5Config.from_pretrained(args.model)
    model = CLIPT5ForConditionalGeneration(config)
    weights = load_file(args.model / "model.safetensors")
    missing, unexpected = model.load_state_dict(weights, strict=False)
    aliases = {"embed_tokens.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    assert not unexpected and set(missing) <= aliases, (missing, unexpected)
    reference_model = args.out / "reference_model"
    # safetensors refuses the class's shared embedding under two names (shared, embed_tokens)
    # that T5 does not declare tied: the class saves as the published checkpoint is stored,
    # pickled (pytorch_model.bin).
    model.save_pretrained(reference_model, safe_serialization=False)
    state = model.state_dict()
    digest = hashlib.sha256()
    for name in sorted(state):
        if name not in aliases:
            digest.update(name.encode() + state[name].float().numpy().tobytes())
    del model

    # (2) the slow sentencepiece tokenizer, as t2v-metrics loads google/flan-t5-xxl's
    tokenizer_dir = args.out / "reference_tokenizer"
    tokenizer_dir.mkdir(parents=True, exist_ok=True)
    write_spiece_model(args.model / "tokenizer.json", tokenizer_dir / "spiece.model")
    (tokenizer_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "T5Tokenizer", "extra_ids": 100, "eos_token": "</s>",
        "unk_token": "<unk>", "pad_token": "<pad>", "model_max_length": 512,
    }))  # fmt: skip

    # (3) t2v-metrics' scorer, loading both through its own load_pretrained_model
    entry = clip_t5_model.CLIP_T5_MODELS["clip-flant5-xxl"]
    entry["model"]["path"] = str(reference_model)
    entry["tokenizer"]["path"] = str(tokenizer_dir)
    scorer = clip_t5_model.CLIPT5Model("clip-flant5-xxl", device="cpu", cache_dir=str(args.out / "cache"))
    cases = json.loads(args.cases.read_text())
    result: dict = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "weights_sha256": digest.hexdigest(),
        "saved_weight_names": sorted(
            torch.load(reference_model / "pytorch_model.bin", weights_only=True)
        ),
        "len_tokenizer": len(scorer.tokenizer),
        "label_ids": t5_tokenizer_image_token("Yes", scorer.tokenizer).copy(),
        "input_ids": [],
        "float32": [],
        "bfloat16": [],
    }
    for _image, texts in cases:
        questions = [clip_t5_model.format_question(clip_t5_model.default_question_template.format(t),
                                                    conversation_style="t5_chat") for t in texts]  # fmt: skip
        result["input_ids"].append([t5_tokenizer_image_token(q, scorer.tokenizer) for q in questions])
    scorer.model.float()
    for image, texts in cases:
        result["float32"].append(scorer.forward([image] * len(texts), texts).tolist())
    scorer.model.to(torch.bfloat16)
    for image, texts in cases:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            result["bfloat16"].append(scorer.forward([image] * len(texts), texts).tolist())
    (args.out / "reference.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
