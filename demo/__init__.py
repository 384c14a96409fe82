"""`make demo`: the whole PaCo-RL job on built-in tiny models and synthetic data.

Each stage is a module ``demo/stage_<name>.py`` with ``run(ctx) -> None``; stages
share a :class:`DemoContext` (output folder + artifacts such as model paths).
The models the stages start from (stand-in, world generator, editor, CLIP) are cached and
pretrained in the background while the stages run (:mod:`demo.pretrained`).
"""
