"""``benchmarks.scoring_speed`` measures against transformers' own forward: the reference
scores with a model loaded for it alone, whose vision attention is transformers' (the
scorer's grouped attention changes only the copy ``PacoReward`` holds); on a reduced model
the run prints its table and the scores agree."""

from __future__ import annotations

from benchmarks import scoring_speed
from paco_reward.local_backend import LocalBackend
from paco_reward.vision_attention import vision_attention_modules

TINY = ["--scale", "0.03125", "--vision_blocks", "2", "--resolution", "112", "--pairs", "2",
        "--images", "2", "--batch_size", "2", "--rounds", "1"]  # fmt: skip


def test_the_reference_is_a_separately_loaded_unpatched_model(monkeypatch, capsys):
    seen = {}
    reference_init = scoring_speed.TransformersReference.__init__
    backend_init = LocalBackend.__init__

    def record_reference(self, model, processor, batch_size):
        seen["reference"] = model
        reference_init(self, model, processor, batch_size)

    def record_scorer(self, *args, **kwargs):
        backend_init(self, *args, **kwargs)
        seen["scorer"] = self.model

    monkeypatch.setattr(scoring_speed.TransformersReference, "__init__", record_reference)
    monkeypatch.setattr(LocalBackend, "__init__", record_scorer)
    assert scoring_speed.main(TINY) == 0
    reference, scorer = seen["reference"], seen["scorer"]
    assert reference is not scorer
    # transformers' own forward in the reference; the scorer's copy grouped
    assert not any("forward" in vars(m) for m in vision_attention_modules(reference))
    assert all("forward" in vars(m) for m in vision_attention_modules(scorer))
    out = capsys.readouterr().out
    assert "| transformers |" in out and "largest score difference" in out
