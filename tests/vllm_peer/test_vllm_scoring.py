"""vLLM as the scoring engine: a stock vLLM server through ``PacoReward.from_server`` with
nothing but its URL and model name, and ``PacoReward.from_pretrained(backend="vllm")``,
each against the transformers backend on the same folder, method by method."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from peer_settings import EXACT, LLM_KWARGS, SERVED_NAME
from PIL import Image

from paco_reward import PacoReward
from paco_reward.images import ImagePolicy
from paco_reward.testing.hub_cache import install_in_hub_cache
from paco_reward.yes_no import YesNoTokens

README = Path(__file__).resolve().parents[2] / "README.md"
THEME = "a red fox in four seasons"
# Sizes the processor must resize (non-square, odd, larger than the budget), so the test
# fails if the client and the server resize differently.
SIZES = [(64, 64), (300, 200), (97, 131), (512, 256), (40, 90), (150, 150)]


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    out = []
    for k, (w, h) in enumerate(SIZES):
        base = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        base[: h // 2, :, k % 3] //= 3  # some structure, so resizing changes the content
        out.append(Image.fromarray(base))
    return out


@pytest.fixture(scope="module")
def remote(vllm_server):
    """Exactly the README's call: the URL and the model name, nothing else."""
    rm = PacoReward.from_server(vllm_server.base_url, model=SERVED_NAME)
    yield rm
    rm.backend.close()


def every_method(rm: PacoReward, images) -> dict[str, np.ndarray]:
    """Every scoring method of ``PacoReward`` on the same inputs, as arrays."""
    a, b, c, d, e, f = images
    grid = Image.new("RGB", (256, 256))
    for k, panel in enumerate([a, b, c, d]):
        grid.paste(panel.resize((128, 128)), ((k % 2) * 128, (k // 2) * 128))
    pairs = [(a, b, THEME), (b, c, THEME), (c, d, "a blue bird"), (d, e, "a cat"), (e, f, THEME)]
    edit = rm.score_edit(a, d, "make the sky red")
    explained = rm.explain(b, e, THEME, max_new_tokens=1)
    return {
        "score": np.array([rm.score(a, b, THEME)]),
        "score_pairs": rm.score_pairs(pairs),
        "score_pairs symmetric": rm.score_pairs(pairs, symmetric=True),
        "ascore_pairs": asyncio.run(rm.ascore_pairs(pairs)),
        "score_set": rm.score_set([a, b, c, f], THEME).scores,
        "score_grid": rm.score_grid(grid, THEME, layout=(2, 2)).scores,
        "rank": rm.rank(a, [b, c, d, e, f]).scores,
        "score_edit": np.array([edit.consistency, edit.prompt_following, edit.overall]),
        "explain": np.array([explained.score]),
    }


def assert_same_as_reference(rm: PacoReward, reference: PacoReward, images) -> float:
    ours, expected = every_method(rm, images), every_method(reference, images)
    worst = 0.0
    for name, values in expected.items():
        assert np.all(np.isfinite(ours[name])), name
        np.testing.assert_allclose(ours[name], values, rtol=0, atol=EXACT, err_msg=name)
        worst = max(worst, float(np.abs(ours[name] - values).max()))
    spread = np.ptp(np.concatenate(list(expected.values())))
    assert spread > 0.05, "scores barely differ; the comparison would prove little"
    return worst


def test_remote_vllm_is_exact_by_default(remote, reference, images):
    """from_server(url, model=...) alone: yes/no ids from vLLM's /tokenize, the image budget
    from the served folder, and every method equal to the transformers backend."""
    expected_ids = YesNoTokens.from_tokenizer(reference.backend.tokenizer)
    assert remote.backend.yes_no_token_ids == [*expected_ids.yes, *expected_ids.no]
    assert len(remote.backend.yes_no_token_ids) == 12
    assert remote.backend.image_policy == reference.backend.image_policy
    worst = assert_same_as_reference(remote, reference, images)
    print(f"\nremote vLLM vs transformers: max |diff| = {worst:.2e}")
    assert remote.backend.cache_info()["missing_yes_no"] == 0


def test_remote_generation_matches(remote, reference, images):
    """explain's text: greedy decoding through vLLM equals transformers' greedy decoding."""
    a, b = images[0], images[2]
    ours = remote.explain(a, b, THEME, max_new_tokens=12)
    theirs = reference.explain(a, b, THEME, max_new_tokens=12)
    assert ours.text == theirs.text and ours.text.strip()
    assert ours.score == pytest.approx(theirs.score, abs=EXACT)


def test_the_image_budget_matters(vllm_server, reference, images):
    """The control: sent at Qwen's default budget, the server resizes the images again and
    the scores drift far beyond EXACT, which is why the client reads the served budget."""
    rm = PacoReward.from_server(vllm_server.base_url, SERVED_NAME, image_policy=ImagePolicy())
    pairs = [(images[1], images[3], THEME), (images[3], images[5], THEME)]
    drift = np.abs(rm.score_pairs(pairs) - reference.score_pairs(pairs)).max()
    assert drift > 10 * EXACT, drift


def test_in_process_vllm_is_exact(vllm_inprocess, reference, images):
    assert vllm_inprocess.backend.image_policy == reference.backend.image_policy
    worst = assert_same_as_reference(vllm_inprocess, reference, images)
    print(f"\nin-process vLLM vs transformers: max |diff| = {worst:.2e}")
    a, b = images[0], images[2]
    ours = vllm_inprocess.explain(a, b, THEME, max_new_tokens=12)
    assert ours.text == reference.explain(a, b, THEME, max_new_tokens=12).text


def test_in_process_vllm_rejects_what_it_cannot_do(vllm_model_dir):
    with pytest.raises(ValueError, match="merge the adapter first"):
        PacoReward.from_pretrained(vllm_model_dir, adapter="some/lora", backend="vllm")
    with pytest.raises(ValueError, match="backend must be"):
        PacoReward.from_pretrained(vllm_model_dir, backend="sglang")


def test_readme_vllm_example_as_written(vllm_server, reference, images, tmp_path, monkeypatch):
    """The README's vLLM client block, run as written against the session's server (only
    its port differs) on two panels written where the block expects them."""
    text = README.read_text()
    block = re.search(r"<!-- vllm-example -->.*?```python\n(.*?)```", text, re.DOTALL)
    assert block is not None, "README has no <!-- vllm-example --> python block"
    code = block.group(1)
    assert 'from_server("http://127.0.0.1:8000/v1", model="PaCo-Reward-7B")' in code
    code = code.replace("http://127.0.0.1:8000/v1", vllm_server.base_url)
    monkeypatch.chdir(tmp_path)
    images[1].save("panel_1.png")
    images[3].save("panel_2.png")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    expected = reference.score(images[1], images[3], THEME)
    assert namespace["score"] == pytest.approx(expected, abs=EXACT)


@pytest.fixture(scope="module")
def qwen3_vl_dir(tmp_path_factory):
    """A tiny Qwen3-VL evaluator whose heads vLLM's CPU kernels accept (32 wide), with widely
    spread weights and 1 to 16 vision tokens per image."""
    from paco_reward.testing.qwen3_vl import build_tiny_qwen3_vl

    return build_tiny_qwen3_vl(
        tmp_path_factory.mktemp("tiny-vllm-qwen3") / "model",
        seed=0,
        max_pixels=16 * 32 * 32,
        vllm_compatible=True,
        text_config={"initializer_range": 0.3},
        vision_config={"initializer_range": 0.3},
    )


def test_in_process_vllm_is_exact_on_qwen3_vl(qwen3_vl_dir, images):
    """The Qwen3-VL family through vLLM (its DeepStack vision features included) scores as
    the transformers backend does, method by method."""
    reference = PacoReward.from_pretrained(qwen3_vl_dir)
    engine = PacoReward.from_pretrained(qwen3_vl_dir, backend="vllm", **LLM_KWARGS)
    try:
        assert engine.backend.image_policy == reference.backend.image_policy
        worst = assert_same_as_reference(engine, reference, images)
        print(f"\nin-process vLLM vs transformers on Qwen3-VL: max |diff| = {worst:.2e}")
    finally:
        engine.backend.close()


# Run in a process of its own, whose Hugging Face cache is the test's (read at import).
AT_REVISION = """
import json, sys
from PIL import Image
from paco_reward import PacoReward

repo, revision, llm_kwargs, *paths = sys.argv[1:]
pair = (*(Image.open(p) for p in paths), "a red fox in four seasons")
reference = PacoReward.from_pretrained(repo, revision=revision)
engine = PacoReward.from_pretrained(repo, backend="vllm", revision=revision, **json.loads(llm_kwargs))
print("result:", json.dumps({
    "budgets": [r.backend.image_policy.max_pixels for r in (reference, engine)],
    "scores": [r.score(*pair) for r in (reference, engine)],
}))
engine.backend.close()
"""


def test_in_process_vllm_loads_the_processor_of_the_revision_it_loads(
    vllm_model_dir, images, tmp_path
):
    """A hub id at a revision whose image budget differs from main's: the engine and the
    processor that resizes its images come from that revision, so it scores as the
    transformers backend does at that revision (a processor from main would resize the
    images to another budget)."""
    for revision, max_pixels in (("main", 16 * 28 * 28), ("v2", 4 * 28 * 28)):
        snapshot = install_in_hub_cache(
            vllm_model_dir, "acme/paco-tiny", tmp_path / "hub", revision
        )
        config = json.loads((snapshot / "processor_config.json").read_text())
        config["image_processor"]["size"]["longest_edge"] = max_pixels
        (snapshot / "processor_config.json").write_text(json.dumps(config))
    paths = [tmp_path / "a.png", tmp_path / "b.png"]
    images[1].save(paths[0])
    images[3].save(paths[1])
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-c", AT_REVISION, "acme/paco-tiny", "v2", json.dumps(LLM_KWARGS),
           *map(str, paths)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("result: ")]  # vLLM logs too
    result = json.loads(line.removeprefix("result: "))
    assert result["budgets"] == [4 * 28 * 28] * 2
    assert result["scores"][1] == pytest.approx(result["scores"][0], abs=EXACT)
