"""The evaluator on any Qwen-VL family (Qwen2.5-VL and Qwen3-VL): the class comes from the
config, scores equal a direct transformers forward, the vision reuse keeps every feature the
family reads (Qwen3-VL's DeepStack ones too); loading is strict, and a model the library
cannot score with fails at load, naming what it lacks."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from paco_reward import PacoReward, UnsupportedModelError, WeightsMismatchError, YesNoTokenError
from paco_reward.templates import render_instruction

CLASSES = {
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
}


def _model_type(folder) -> str:
    return json.loads((folder / "config.json").read_text())["model_type"]


class DirectScorer:
    """P(Yes) / (P(Yes) + P(No)) of the first generated token, by plain transformers: the
    auto class, the processor's chat template and call, one forward per pair."""

    def __init__(self, folder) -> None:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.model = AutoModelForImageTextToText.from_pretrained(folder).eval()
        self.processor = AutoProcessor.from_pretrained(folder)

    @torch.no_grad()
    def score(self, image_a, image_b, instruction: str) -> float:
        messages = [
            {
                "role": "user",
                "content": [
                    {"type": "image"},
                    {"type": "image"},
                    {"type": "text", "text": instruction},
                ],
            }
        ]
        processor = self.processor
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        inputs = processor(text=[text], images=[image_a, image_b], return_tensors="pt")
        probs = torch.softmax(self.model(**inputs).logits[0, -1].double(), dim=-1)
        yes = processor.tokenizer.convert_tokens_to_ids("Yes")
        no = processor.tokenizer.convert_tokens_to_ids("No")
        return (probs[yes] / (probs[yes] + probs[no])).item()


def _copy(folder, tmp_path, name="copy"):
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


# ---------------------------------------------------------------------- scoring
def test_score_equals_a_direct_transformers_forward(family_dir, random_images):
    rm = PacoReward.from_pretrained(family_dir, canonical_yes_no=False)
    assert type(rm.backend.model).__name__ == CLASSES[_model_type(family_dir)]
    factor = rm.backend.image_policy.factor  # 28 (Qwen2.5-VL) or 32 (Qwen3-VL) pixels a token
    a, b = random_images(2, size=(2 * factor, factor), seed=3)
    ours = rm.score(a, b, "a red fox")
    direct = DirectScorer(family_dir)
    reference = direct.score(a, b, render_instruction("consistency", "a red fox"))
    assert abs(ours - reference) < 1e-6, (ours, reference)


def test_the_image_budget_comes_from_the_processor(tiny_model_dir, tiny_qwen3_vl_dir):
    from transformers import AutoProcessor

    for folder, factor in ((tiny_model_dir, 28), (tiny_qwen3_vl_dir, 32)):
        rm = PacoReward.from_pretrained(folder)
        size = AutoProcessor.from_pretrained(folder).image_processor.size
        policy = rm.backend.image_policy
        assert policy.factor == factor
        assert (policy.min_pixels, policy.max_pixels) == (
            size["shortest_edge"],
            size["longest_edge"],
        )


def test_qwen3_vl_set_scoring_reuses_deepstack_features(tiny_qwen3_vl_dir, random_images):
    """score_set encodes each image once and feeds the cached merged and DeepStack features
    to left-padded batches of pairs with different token counts: the scores of the model's
    own vision path (pixel_values through the processor), pair by pair."""
    from paco_reward.modeling import image_features, join_image_features

    rm = PacoReward.from_pretrained(tiny_qwen3_vl_dir, batch_size=4, canonical_yes_no=False)
    images = random_images(2, size=(64, 64), seed=5) + random_images(2, size=(32, 64), seed=6)
    result = rm.score_set(images, "a knight")
    direct = DirectScorer(tiny_qwen3_vl_dir)
    instruction = render_instruction("consistency", "a knight")
    reference = [direct.score(images[i], images[j], instruction) for i, j in result.pairs]
    np.testing.assert_allclose(result.scores, reference, atol=1e-5)
    assert np.std(reference) > 1e-3  # the pairs really differ

    features, _ = rm.backend.encode_images([images[0], images[2]])
    assert len(features[0].fields["deepstack_features"]) == 2  # one per DeepStack block
    joined = join_image_features([features[1], features[0]])
    assert [len(f) for f in joined.deepstack_features] == [2, 2]
    assert torch.equal(joined.pooler_output[0], features[1].fields["pooler_output"])
    assert torch.equal(joined.deepstack_features[1][1], features[0].fields["deepstack_features"][1])
    assert image_features(joined)[1].fields.keys() == features[0].fields.keys()


def test_qwen3_vl_explain_gives_the_score_and_greedy_text(tiny_qwen3_vl_dir, random_images):
    rm = PacoReward.from_pretrained(tiny_qwen3_vl_dir)
    a, b = random_images(2, seed=7)
    judgement = rm.explain(a, b, "a fox", max_new_tokens=4)
    assert judgement.score == pytest.approx(rm.score(a, b, "a fox"), abs=1e-6)
    assert judgement.text == rm.explain(a, b, "a fox", max_new_tokens=4).text


# ---------------------------------------------------------------------- strict loading
def test_a_checkpoint_whose_config_names_another_family_fails_naming_the_weights(
    tiny_qwen3_vl_dir, tmp_path
):
    folder = _copy(tiny_qwen3_vl_dir, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="qwen2_5_vl", architectures=["Qwen2_5_VLForConditionalGeneration"])
    config["text_config"]["model_type"] = "qwen2_5_vl_text"
    config["vision_config"]["model_type"] = "qwen2_5_vl_vision"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        WeightsMismatchError, match=r"does not fit Qwen2_5_VLForConditionalGeneration: missing"
    ) as error:
        PacoReward.from_pretrained(folder)
    assert "model.language_model.layers.0.self_attn.q_norm.weight" in error.value.unexpected
    assert "model.language_model.layers.0.self_attn.q_proj.bias" in error.value.missing
    assert "q_norm.weight" in str(error.value)


@pytest.mark.parametrize("change", ["missing", "unexpected"])
def test_a_missing_or_unexpected_weight_fails_every_load(
    tiny_qwen3_vl_dir, tmp_path, change, random_images
):
    """Scorer, SFT loading and merge alike: transformers would only log it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from paco_reward.training import PacoSFTConfig
    from paco_reward.training.loading import load_model_and_processor
    from paco_reward.training.merge import merge_lora

    adapter = tmp_path / "adapter"
    base = AutoModelForImageTextToText.from_pretrained(tiny_qwen3_vl_dir)
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(adapter)

    folder = _copy(tiny_qwen3_vl_dir, tmp_path)
    weights = load_file(folder / "model.safetensors")
    if change == "missing":
        name = "lm_head.weight"
        del weights[name]
    else:
        name = "model.visual.extra_projection.weight"
        weights[name] = torch.zeros(2, 2)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})

    match = rf"{change} \(would be .*\) {name.replace('.', '[.]')}"
    with pytest.raises(WeightsMismatchError, match=match) as error:
        PacoReward.from_pretrained(folder)
    assert getattr(error.value, change) == [name]
    cfg = PacoSFTConfig(output_dir=str(tmp_path / "run"), model_name_or_path=str(folder))
    with pytest.raises(WeightsMismatchError, match=match):
        load_model_and_processor(cfg)
    with pytest.raises(WeightsMismatchError, match=match):
        merge_lora(folder, adapter, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize("change", ["missing", "unexpected"])
def test_an_adapter_that_does_not_fit_its_base_fails(tiny_model_dir, tmp_path, change):
    """peft only warns about a missing adapter weight and ignores an unexpected one."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    base = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    adapter = tmp_path / "adapter"
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(adapter)
    weights = load_file(adapter / "adapter_model.safetensors")
    if change == "missing":
        (name,) = [k for k in weights if "layers.1." in k and "lora_B" in k]
        del weights[name]
    else:
        name = next(iter(weights)).replace("q_proj", "k_proj")
        weights[name] = torch.zeros(2, 64)
    save_file(weights, adapter / "adapter_model.safetensors", metadata={"format": "pt"})
    layer = "layers[.]1[.]self_attn[.]q_proj" if change == "missing" else "k_proj[.]lora_A"
    with pytest.raises(WeightsMismatchError, match=rf"{change} .*{layer}.*trained on") as error:
        PacoReward.from_pretrained(tiny_model_dir, adapter=adapter)
    assert len(getattr(error.value, change)) == 1


# ---------------------------------------------------------------------- what cannot be scored
def test_a_text_only_model_fails_before_loading_weights(tmp_path):
    from transformers import Qwen2Config

    from paco_reward.testing import build_tiny_tokenizer

    folder = tmp_path / "text-only"
    Qwen2Config(vocab_size=1024, hidden_size=32, num_hidden_layers=1).save_pretrained(folder)
    build_tiny_tokenizer().save_pretrained(folder)  # no weights: nothing may read them
    with pytest.raises(UnsupportedModelError, match=r"'qwen2' model .* with no image input"):
        PacoReward.from_pretrained(folder)


def test_a_tokenizer_without_single_token_yes_no_fails_before_loading_weights(
    tiny_qwen3_vl_dir, tmp_path
):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoProcessor, Qwen2Tokenizer

    from paco_reward.testing.qwen import QWEN_SPECIAL_TOKENS

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=QWEN_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(["a red fox in the forest"] * 10, trainer=trainer)
    folder = _copy(tiny_qwen3_vl_dir, tmp_path)
    processor = AutoProcessor.from_pretrained(folder)
    processor.tokenizer = Qwen2Tokenizer(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    processor.save_pretrained(folder)
    (folder / "model.safetensors").unlink()  # the check comes before any weight is read
    with pytest.raises(YesNoTokenError, match="does not encode 'Yes' and 'No' as single tokens"):
        PacoReward.from_pretrained(folder)


def test_an_image_processor_without_qwen_vl_sizes_is_named(tiny_qwen3_vl_dir):
    from transformers import AutoProcessor

    from paco_reward.modeling import check_qwen_vl_processor, is_qwen_vl_processor

    processor = AutoProcessor.from_pretrained(tiny_qwen3_vl_dir)
    assert is_qwen_vl_processor(processor)
    processor.image_processor.merge_size = None
    assert not is_qwen_vl_processor(processor)
    with pytest.raises(UnsupportedModelError, match=r"has no \['merge_size'\].*Qwen-VL"):
        check_qwen_vl_processor(processor, "some/model")
