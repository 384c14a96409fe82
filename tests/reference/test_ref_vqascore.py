"""VQAScore against t2v-metrics 3.0's own CLIP-FlanT5 scorer, on a tiny random CLIP-FlanT5
that its class builds, loads and saves.

Reference: ``t2v_metrics/models/vqascore_models/clip_t5_model.py`` (``CLIPT5Model.forward``)
and ``clip_t5/model/language_model/clip_t5.py`` (``CLIPT5ForConditionalGeneration``) of
github.com/linzhiqiu/t2v_metrics at commit 7c06208 (v3.0, the last release with
clip-flant5), run by ``tests/reference/t2v_metrics_peer.py`` in the t2v-metrics venv
(``.venv-t2v-metrics``: transformers 4.49.0 as 3.0 pins it; ``make`` builds it).

The live comparison runs the released code: PyPI's ``t2v-metrics==3.0`` wheel, installed in
that venv without its dependencies (its files of the scorer are byte-identical to the
repository's at 7c06208), or, where ``PACO_REF_T2V_METRICS`` names a checkout of the
repository or its git directory (``git clone https://github.com/linzhiqiu/t2v_metrics``), the
files at commit 7c06208. Either way the files the scorer needs are copied into a temporary
folder and imported from there, without the package's ``__init__`` (which needs ffmpeg,
LLaVA-NeXT, decord and open_clip). ``PACO_T2V_METRICS_PYTHON`` names the venv's python
(default ``.venv-t2v-metrics/bin/python``). Without the venv the live test is skipped and
:func:`test_frozen_reference_numbers` checks this implementation against the numbers that run
printed (:data:`FROZEN`).

The reference loads the model and casts it to bfloat16 (``load_pretrained_model``); both sides
score twice: with those bfloat16 weights in float32 arithmetic (``model.float()``; equal to
1e-5), and in bfloat16 under autocast (CPU autocast for both: the reference's
``@torch.autocast("cuda")`` does nothing on a CPU). In bfloat16 the two differ as much as
either differs from its own float32 run (a few %: rounding, not protocol).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from paco_reward.testing.clip_t5 import TINY_TEXTS, build_tiny_clip_t5
from paco_reward.vqascore import VQAScore

REPO = Path(__file__).resolve().parents[2]
COMMIT = "7c06208"
PEER_SCRIPT = Path(__file__).with_name("t2v_metrics_peer.py")
# The files of t2v-metrics the CLIP-FlanT5 scorer imports.
SOURCE_FILES = [
    "t2v_metrics/constants.py",
    "t2v_metrics/models/model.py",
    "t2v_metrics/models/vqascore_models/vqa_model.py",
    "t2v_metrics/models/vqascore_models/mm_utils.py",
    "t2v_metrics/models/vqascore_models/clip_t5_model.py",
    "t2v_metrics/models/vqascore_models/clip_t5/__init__.py",
    "t2v_metrics/models/vqascore_models/clip_t5/model/__init__.py",
    "t2v_metrics/models/vqascore_models/clip_t5/model/language_model/clip_t5.py",
    "t2v_metrics/models/vqascore_models/clip_t5/model/multimodal_encoder/builder.py",
    "t2v_metrics/models/vqascore_models/clip_t5/model/multimodal_encoder/clip_encoder.py",
    "t2v_metrics/models/vqascore_models/clip_t5/model/multimodal_projector/builder.py",
]
# Image sizes: wider, taller (both padded square), square, and larger than the tower's input.
IMAGE_SIZES = [(40, 20), (24, 48), (32, 32), (100, 60)]

# Printed by test_t2v_metrics_peer (t2v-metrics @ 7c06208, transformers 4.49.0, torch
# 2.14.1): the reference's scores of CASES in float32 arithmetic on its bfloat16 weights, and
# the digest of the weights its class saved.
FROZEN = {
    "weights_sha256": "a324bb49fc3ec5e222731c5544e0183544d6a137e9f710fc0c497d812af9d0c1",
    "float32": [
        [0.0011887524742633104, 0.001820506528019905, 0.0011118518887087703,
         0.0030184497591108084, 0.0009775982471182942, 0.0026793447323143482],
        [0.003363655414432287, 0.0043816776014864445, 0.007281797006726265,
         0.0027409133035689592, 0.004129914101213217],
        [0.0019086898537352681, 0.0024202538188546896, 0.0010007874807342887,
         0.0022938684560358524],
        [0.001274996204301715, 0.00042874703649431467, 0.002305887872353196],
    ],
}  # fmt: skip


def cases(folder: Path) -> list[tuple[str, list[str]]]:
    """Images of a few sizes (deterministic patterns) with their texts (some words out of the
    tiny vocabulary), written to ``folder``."""
    from PIL import Image

    out = []
    for k, (w, h) in enumerate(IMAGE_SIZES):
        y, x = np.mgrid[0:h, 0:w]
        pixels = np.stack([(x * 7 + k * 40) % 256, (y * 11 + k * 80) % 256, ((x + y) * 5) % 256], -1)
        path = folder / f"image{k}.png"
        Image.fromarray(pixels.astype(np.uint8)).save(path)
        out.append((str(path), list(TINY_TEXTS)[k:] + ["a zebra eating grass"]))
    return out


def weights_digest(model) -> str:
    """sha256 of a CLIP-FlanT5's weights (float32 bytes, by sorted name, aliases of the
    shared embedding left out), as the peer script computes it."""
    import hashlib

    aliases = {"embed_tokens.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    state = model.state_dict()
    digest = hashlib.sha256()
    for name in sorted(state):
        if name not in aliases:
            digest.update(name.encode() + state[name].float().numpy().tobytes())
    return digest.hexdigest()


def reference_weights_scores(model_dir, tokenizer_dir, items, dtype: str) -> list[np.ndarray]:
    """Our scores of ``items`` as the reference makes them: the model loaded and cast to
    bfloat16, then scored in float32 arithmetic (``"float32"``) or in bfloat16."""
    scorer = VQAScore.from_pretrained(model_dir, tokenizer=tokenizer_dir, dtype="bfloat16", device="cpu")
    if dtype == "float32":
        scorer.model.float()
    return scorer.score([image for image, _ in items], [texts for _, texts in items])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vqascore_ref")
    return build_tiny_clip_t5(folder / "model", seed=0), cases(folder)


def _installed_package(python: Path) -> Path:
    """The folder of the peer venv's ``t2v_metrics`` 3.0 (found without importing it)."""
    probe = (
        "import importlib.metadata as m, importlib.util as u; "
        "print(m.version('t2v_metrics')); "
        "print(u.find_spec('t2v_metrics').submodule_search_locations[0])"
    )
    run = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ""})  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    version, folder = run.stdout.split()
    assert version == "3.0", f"the t2v-metrics venv has {version}, not 3.0"
    return Path(folder)


def _source(checkout: Path | None, python: Path, into: Path) -> Path:
    """The scorer's files of t2v-metrics 3.0: from a checkout at :data:`COMMIT`, else from
    the peer venv's installed wheel."""
    package = None if checkout else _installed_package(python)
    for name in SOURCE_FILES:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if checkout:
            blob = subprocess.run(["git", "-C", str(checkout), "show", f"{COMMIT}:{name}"],
                                  check=True, capture_output=True).stdout  # fmt: skip
        else:
            blob = (package.parent / name).read_bytes()
        target.write_bytes(blob)
    return into


def _peer_python() -> Path | None:
    python = Path(os.environ.get("PACO_T2V_METRICS_PYTHON", REPO / ".venv-t2v-metrics/bin/python"))
    return python if python.exists() else None


@pytest.mark.slow
def test_t2v_metrics_peer(tiny, tmp_path):
    checkout = os.environ.get("PACO_REF_T2V_METRICS")
    python = _peer_python()
    if python is None:
        pytest.skip(
            "needs the t2v-metrics venv (make .venv-t2v-metrics/.installed-stamp, or "
            "PACO_T2V_METRICS_PYTHON)"
        )
    model_dir, items = tiny
    source = _source(Path(checkout) if checkout else None, python, tmp_path / "t2v_metrics_source")
    (tmp_path / "cases.json").write_text(json.dumps(items))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    run = subprocess.run(
        [str(python), str(PEER_SCRIPT), "--source", str(source), "--model", str(model_dir),
         "--out", str(tmp_path / "peer"), "--cases", str(tmp_path / "cases.json")],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    reference = json.loads((tmp_path / "peer" / "reference.json").read_text())
    saved = tmp_path / "peer" / "reference_model"

    # The reference class saved the shared embedding under all its names; ours loads them.
    assert {"shared.weight", "embed_tokens.weight", "lm_head.weight"} <= set(reference["saved_weight_names"])
    # Tokenization: their slow sentencepiece T5Tokenizer, ours from tokenizer.json.
    scorer = VQAScore.from_pretrained(saved, tokenizer=model_dir, dtype="float32", device="cpu")
    assert len(scorer.tokenizer) == reference["len_tokenizer"]
    assert scorer._labels == reference["label_ids"]
    for (_, texts), their_rows in zip(items, reference["input_ids"], strict=True):
        ours, mask = scorer.input_ids(texts)
        assert [row[: int(m.sum())].tolist() for row, m in zip(ours, mask)] == their_rows

    ours = {d: reference_weights_scores(saved, model_dir, items, d) for d in ("float32", "bfloat16")}
    print(f"\nt2v-metrics @ {COMMIT} (transformers {reference['transformers']}, torch "
          f"{reference['torch']}) against ours:")  # fmt: skip
    for dtype in ("float32", "bfloat16"):
        theirs = [np.array(s) for s in reference[dtype]]
        rel = max(float(np.max(np.abs(o - t) / t)) for o, t in zip(ours[dtype], theirs))
        print(f"  {dtype}: max relative difference {rel:.2e}")
    print(f"  weights_sha256 = {reference['weights_sha256']!r}")
    print(f"  float32 = {json.dumps(reference['float32'])}")
    for o, t in zip(ours["float32"], reference["float32"], strict=True):
        np.testing.assert_allclose(o, t, rtol=1e-5, atol=1e-7)
    ref_self = max(
        float(np.max(np.abs(np.array(b) - np.array(f)) / np.array(f)))
        for b, f in zip(reference["bfloat16"], reference["float32"])
    )
    for o, t in zip(ours["bfloat16"], reference["bfloat16"], strict=True):
        np.testing.assert_allclose(o, t, rtol=max(0.1, 2 * ref_self))
    # The same tiny model as the frozen test's rebuild: the weights the reference saved are ours.
    assert reference["weights_sha256"] == weights_digest(
        VQAScore.from_pretrained(model_dir, tokenizer=model_dir, dtype="float32", device="cpu").model
    )


def test_frozen_reference_numbers(tiny):
    """This implementation on the tiny model rebuilt here equals the reference's numbers."""
    model_dir, items = tiny
    scorer = VQAScore.from_pretrained(model_dir, tokenizer=model_dir, dtype="float32", device="cpu")
    assert weights_digest(scorer.model) == FROZEN["weights_sha256"]
    ours = reference_weights_scores(model_dir, model_dir, items, "float32")
    for o, t in zip(ours, FROZEN["float32"], strict=True):
        np.testing.assert_allclose(o, t, rtol=1e-5, atol=1e-7)

