"""The generators a GRPO run can train, one file per model, registered by name.

Every module of this package other than the shared ones is a model file: it is imported
here, which registers its :class:`PipelineSpec` (its last line is a :func:`register_pipeline`
call), and its classes (the model's ``__all__``: its sampler and conditioning) are exported
from this package. :data:`PIPELINE_SPECS` lists the registered generators, as does
``paco-grpo train --help`` (``--pipeline``).

Shared pieces: :mod:`~paco_grpo.pipelines.sampling` (the one sampling loop and the hooks a
model fills in, :class:`GRPOSampler`; :class:`SampleOutput`; the denoising loop
:func:`sde_denoise`), :mod:`~paco_grpo.pipelines.editing` (reference images,
:class:`EditGRPOSampler`) and :mod:`~paco_grpo.pipelines.registry` (:class:`PipelineSpec`,
:data:`PIPELINE_SPECS`).

To add a model, write ``paco_grpo/pipelines/<model>.py`` with its sampler and a
:func:`register_pipeline` call (the docs' "Add a model" section): nothing here changes.

    >>> from paco_grpo.pipelines import PIPELINE_SPECS, FluxGRPOSampler
    >>> PIPELINE_SPECS["flux"].sampler is FluxGRPOSampler
    True
"""

import importlib as _importlib
import pkgutil as _pkgutil

from paco_grpo.pipelines.editing import (
    EditGRPOSampler,
    area_preserving_size,
    prepare_edit_items,
    resize_to_area,
)
from paco_grpo.pipelines.registry import (
    PIPELINE_SPECS,
    PipelineSpec,
    get_pipeline_spec,
    register_pipeline,
)
from paco_grpo.pipelines.sampling import (
    GRPOSampler,
    SampleOutput,
    check_sampling_inputs,
    sde_denoise,
)

# The modules every model shares; each other module of the package is a model file.
SHARED_MODULES = ("editing", "registry", "sampling")

# The shared pieces, then each model file's classes (below).
__all__ = [
    "PIPELINE_SPECS",
    "EditGRPOSampler",
    "GRPOSampler",
    "PipelineSpec",
    "SampleOutput",
    "area_preserving_size",
    "check_sampling_inputs",
    "get_pipeline_spec",
    "prepare_edit_items",
    "register_pipeline",
    "resize_to_area",
    "sde_denoise",
]
for _info in sorted(_pkgutil.iter_modules(__path__), key=lambda info: info.name):
    if _info.name in SHARED_MODULES:
        continue
    _module = _importlib.import_module(f"{__name__}.{_info.name}")  # registers its spec
    for _name in _module.__all__:
        _value = getattr(_module, _name)
        if isinstance(_value, type) and _value.__module__ == _module.__name__:
            globals()[_name] = _value
            __all__.append(_name)
del _info, _module, _name, _value
