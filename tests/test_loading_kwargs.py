"""Loading arguments reach transformers, peft and diffusers (issue 29, item 7).

The scorer (``PacoReward.from_pretrained``), the SFT loader (``model_init_kwargs``) and the
GRPO policy loader (``GRPOConfig.model_init_kwargs``) forward the hub arguments (revision,
cache_dir, token, local_files_only, trust_remote_code) to the model AND its processor, and
the model arguments (device_map, attn_implementation, low_cpu_mem_usage, ...) to the model.
``device_map="cpu"`` and ``attn_implementation="eager"`` are checked on the loaded model;
the arguments a local folder ignores (revision, cache_dir, token) are checked arriving, with
a spy around the real ``from_pretrained`` that calls through, and the model still scores.
Unknown names raise, naming them.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from paco_reward import PacoReward
from paco_reward.errors import ConfigError, InputError, InputTypeError

HUB = {
    "revision": "main",
    "token": "hf_not_a_real_token",
    "local_files_only": True,
    "trust_remote_code": True,
}


def spy(monkeypatch, cls, name: str = "from_pretrained") -> list[dict]:
    """Wrap the class method ``cls.name`` so each call's keyword arguments are recorded,
    then the real method runs."""
    calls: list[dict] = []
    real = inspect.getattr_static(cls, name).__func__

    def recording(klass, *args, **kwargs):
        calls.append(kwargs)
        return real(klass, *args, **kwargs)

    monkeypatch.setattr(cls, name, classmethod(recording))
    return calls


@pytest.fixture
def transformers_spies(monkeypatch):
    """Spies on the two loaders every evaluator load goes through: the image-text-to-text
    auto class (the model's class comes from its config) and the processor's."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    return spy(monkeypatch, AutoModelForImageTextToText), spy(monkeypatch, AutoProcessor)


# What the strict loader adds to every model load (paco_reward.modeling): the loading report.
STRICT = {"output_loading_info": True}


@pytest.fixture(scope="module")
def tiny_adapter(tiny_model_dir, tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2_5_VLForConditionalGeneration

    base = Qwen2_5_VLForConditionalGeneration.from_pretrained(tiny_model_dir)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], init_lora_weights=False)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("adapter") / "lora"
    get_peft_model(base, config).save_pretrained(path)
    return path


# ---------------------------------------------------------------------------- the scorer
def test_scorer_forwards_hub_and_model_arguments(
    tiny_model_dir, transformers_spies, tmp_path, random_images
):
    model_calls, processor_calls = transformers_spies
    plain = PacoReward.from_pretrained(tiny_model_dir, device="cpu")
    model_calls.clear()
    processor_calls.clear()
    rm = PacoReward.from_pretrained(
        tiny_model_dir,
        cache_dir=tmp_path / "cache",
        device_map="cpu",
        attn_implementation="eager",
        model_kwargs={"low_cpu_mem_usage": True},
        **HUB,
    )
    hub = {**HUB, "cache_dir": str(tmp_path / "cache")}
    (model_kwargs,) = model_calls
    assert model_kwargs == {
        **hub,
        **STRICT,
        "dtype": torch.float32,
        "device_map": torch.device("cpu"),
        "attn_implementation": "eager",
        "low_cpu_mem_usage": True,
    }
    (processor_kwargs,) = processor_calls
    assert processor_kwargs == hub  # the processor comes from the same files
    # Really applied: the kernel and the placement.
    model = rm.backend.model
    assert model.config._attn_implementation == "eager"
    assert {p.device for p in model.parameters()} == {torch.device("cpu")}
    # And it scores as the plainly loaded model does.
    a, b = random_images(2, seed=21)
    assert rm.score(a, b, "fox") == pytest.approx(plain.score(a, b, "fox"), abs=1e-5)


def test_scorer_without_loading_arguments_passes_none(tiny_model_dir, transformers_spies):
    model_calls, processor_calls = transformers_spies
    PacoReward.from_pretrained(tiny_model_dir, device="cpu")
    assert model_calls == [{**STRICT, "dtype": torch.float32}] and processor_calls == [{}]


def test_adapter_gets_where_to_find_files_and_its_own_revision(
    tiny_model_dir, tiny_adapter, monkeypatch, transformers_spies, tmp_path, random_images
):
    from peft import PeftModel

    adapter_calls = spy(monkeypatch, PeftModel)
    plain = PacoReward.from_pretrained(tiny_model_dir, adapter=tiny_adapter)
    rm = PacoReward.from_pretrained(
        tiny_model_dir,
        adapter=tiny_adapter,
        revision="main",
        cache_dir=tmp_path,
        token="hf_not_a_real_token",
        local_files_only=True,
        adapter_kwargs={"revision": "adapter-v2", "low_cpu_mem_usage": True},
    )
    assert adapter_calls[-1] == {
        "cache_dir": str(tmp_path),
        "token": "hf_not_a_real_token",
        "local_files_only": True,
        "revision": "adapter-v2",  # the adapter's, not the base model's
        "low_cpu_mem_usage": True,
    }
    assert transformers_spies[0][-1]["revision"] == "main"
    a, b = random_images(2, seed=22)
    assert rm.score(a, b, "fox") == pytest.approx(plain.score(a, b, "fox"), abs=1e-5)


def test_unknown_and_misplaced_loading_arguments_raise_naming_them(tiny_model_dir):
    from paco_reward.local_backend import LocalBackend

    with pytest.raises(InputTypeError, match=r"unexpected keyword argument\(s\) \['revison'\]"):
        PacoReward.from_pretrained(tiny_model_dir, revison="main")
    with pytest.raises(TypeError, match="revison"):
        LocalBackend.from_pretrained(tiny_model_dir, revison="main")
    with pytest.raises(
        InputTypeError, match=r"model_kwargs must not set \['revision'\]; use revision="
    ):
        PacoReward.from_pretrained(tiny_model_dir, model_kwargs={"revision": "main"})
    with pytest.raises(InputTypeError, match=r"must not set \['torch_dtype'\]; use dtype="):
        PacoReward.from_pretrained(tiny_model_dir, model_kwargs={"torch_dtype": torch.float16})
    with pytest.raises(TypeError, match="not_an_argument"):  # transformers names it
        PacoReward.from_pretrained(tiny_model_dir, model_kwargs={"not_an_argument": 1})
    with pytest.raises(InputTypeError, match=r"adapter_kwargs has unknown key\(s\) \['adaptr'\]"):
        PacoReward.from_pretrained(tiny_model_dir, adapter_kwargs={"adaptr": "x"})
    with pytest.raises(InputTypeError, match="model_kwargs must be a mapping"):
        PacoReward.from_pretrained(tiny_model_dir, model_kwargs=["low_cpu_mem_usage"])
    with pytest.raises(InputError, match="Give device= .* or device_map= .* not both"):
        PacoReward.from_pretrained(tiny_model_dir, device="cpu", device_map="cpu")


def test_vllm_backend_gets_the_hub_arguments_under_its_names(tiny_model_dir, monkeypatch):
    """revision / trust_remote_code / cache_dir reach vllm.LLM (as revision, trust_remote_code,
    download_dir), next to its own keywords; what vLLM has no argument for is refused."""
    from paco_reward.vllm_backend import VLLMBackend

    calls = []

    def recording(cls, path_or_id, **kwargs):
        calls.append(kwargs)
        return object()

    monkeypatch.setattr(VLLMBackend, "from_pretrained", classmethod(recording))
    PacoReward.from_pretrained(
        tiny_model_dir,
        backend="vllm",
        revision="v1",
        cache_dir="/data/hf",
        trust_remote_code=True,
        gpu_memory_utilization=0.5,
    )
    (kwargs,) = calls
    assert kwargs["revision"] == "v1" and kwargs["download_dir"] == "/data/hf"
    assert kwargs["trust_remote_code"] is True and kwargs["gpu_memory_utilization"] == 0.5
    with pytest.raises(InputError, match=r"does not take \['device_map', 'token'\].*HF_TOKEN"):
        PacoReward.from_pretrained(tiny_model_dir, backend="vllm", device_map="auto", token="t")
    with pytest.raises(InputTypeError, match="cache_dir='/a' and download_dir='/b'"):
        PacoReward.from_pretrained(
            tiny_model_dir, backend="vllm", cache_dir="/a", download_dir="/b"
        )


# ---------------------------------------------------------------------------- SFT loader
def _sft_config(tmp_path, model_dir, **overrides):
    from paco_reward.training import PacoSFTConfig

    return PacoSFTConfig(
        output_dir=str(tmp_path / "run"),
        model_name_or_path=str(model_dir),
        report_to="none",
        use_cpu=True,
        **overrides,
    )


def test_sft_loader_forwards_model_init_kwargs(tiny_model_dir, transformers_spies, tmp_path):
    from paco_reward.training import load_model_and_processor

    model_calls, processor_calls = transformers_spies
    cfg = _sft_config(
        tmp_path,
        tiny_model_dir,
        model_init_kwargs={
            "revision": "main",
            "cache_dir": str(tmp_path / "cache"),
            "token": "hf_not_a_real_token",
            "local_files_only": True,
            "device_map": "cpu",
            "low_cpu_mem_usage": True,
        },
        trust_remote_code=True,
        attn_implementation="eager",
    )
    model, processor = load_model_and_processor(cfg)
    hub = {
        "revision": "main",
        "cache_dir": str(tmp_path / "cache"),
        "token": "hf_not_a_real_token",
        "local_files_only": True,
        "trust_remote_code": True,
    }
    assert model_calls == [
        {
            **hub,
            **STRICT,
            "device_map": "cpu",
            "low_cpu_mem_usage": True,
            "dtype": torch.float32,
            "attn_implementation": "eager",
        }
    ]
    assert processor_calls == [hub]
    assert model.config._attn_implementation == "eager"
    assert {p.device for p in model.parameters()} == {torch.device("cpu")}
    assert processor.tokenizer is not None


def test_sft_model_init_kwargs_are_checked_at_start_up(tmp_path, tiny_model_dir, monkeypatch):
    from paco_reward.training import PacoSFTConfig
    from paco_reward.training.loading import model_init_kwargs

    with pytest.raises(ConfigError, match=r"must not set \['dtype'\]; use the model_dtype field"):
        _sft_config(tmp_path, tiny_model_dir, model_init_kwargs={"dtype": "bfloat16"})
    with pytest.raises(ConfigError, match="use the attn_implementation field"):
        _sft_config(tmp_path, tiny_model_dir, model_init_kwargs={"attn_implementation": "sdpa"})
    # A JSON string (the command line) is read as the mapping, as in trl.
    cfg = _sft_config(tmp_path, tiny_model_dir, model_init_kwargs='{"revision": "v1"}')
    assert cfg.model_init_kwargs == {"revision": "v1"}
    # Several processes each train their own copy: device_map is dropped, with a warning.
    cfg = _sft_config(tmp_path, tiny_model_dir, model_init_kwargs={"device_map": "auto"})
    monkeypatch.setattr(PacoSFTConfig, "world_size", property(lambda self: 2))
    assert "device_map" not in model_init_kwargs(cfg)[0]


def test_sft_recipe_takes_model_init_kwargs(tmp_path):
    from paco_reward.training.cli import load_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"output_dir: {tmp_path}\nmodel_init_kwargs:\n  revision: v1.0\n  low_cpu_mem_usage: true\n"
    )
    assert load_recipe(recipe).model_init_kwargs == {"revision": "v1.0", "low_cpu_mem_usage": True}


# ---------------------------------------------------------------------------- GRPO policy
def _grpo_config(model_dir, **overrides):
    from paco_grpo.grpo_config import GRPOConfig

    return GRPOConfig(
        model_name_or_path=str(model_dir),
        prompt_file="prompts.txt",
        rewards={"panel_colour_agreement": 1.0},
        **overrides,
    )


def test_grpo_pipeline_loader_forwards_model_init_kwargs(tmp_path, monkeypatch):
    from diffusers import FluxPipeline

    from paco_grpo.policy import load_pipeline
    from paco_grpo.testing.flux import build_tiny_flux

    path = build_tiny_flux(tmp_path / "flux")
    calls = spy(monkeypatch, FluxPipeline)
    init_kwargs = {
        "revision": "main",
        "cache_dir": str(tmp_path / "cache"),
        "token": "hf_not_a_real_token",
        "local_files_only": True,
        "low_cpu_mem_usage": True,
        "device_map": "cpu",
    }
    pipe = load_pipeline(_grpo_config(path, model_init_kwargs=init_kwargs), torch.device("cpu"))
    assert calls == [{"dtype": torch.float32, **init_kwargs}]
    assert {p.device for p in pipe.transformer.parameters()} == {torch.device("cpu")}


def test_grpo_model_init_kwargs_are_checked_at_start_up():
    with pytest.raises(ConfigError, match=r"model_init_kwargs has unknown key\(s\) \['revison'\]"):
        _grpo_config("tiny", model_init_kwargs={"revison": "main"})
    with pytest.raises(ConfigError, match=r"must not set \['torch_dtype'\]; use the dtype field"):
        _grpo_config("tiny", model_init_kwargs={"torch_dtype": "bfloat16"})
    assert _grpo_config("tiny", model_init_kwargs={"variant": "bf16"}).model_init_kwargs == {
        "variant": "bf16"
    }
    assert _grpo_config("tiny").model_init_kwargs == {}
