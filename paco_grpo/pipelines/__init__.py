"""The generators a GRPO run can train, one file per model, registered by name.

- ``flux``: FLUX.1-dev text-to-image (``FluxPipeline``, :class:`FluxGRPOSampler`);
- ``flux_kontext``: FLUX.1-Kontext editing (``FluxKontextPipeline``,
  :class:`KontextGRPOSampler`);
- ``qwen_image``: Qwen-Image text-to-image (``QwenImagePipeline``,
  :class:`QwenImageGRPOSampler`);
- ``qwen_image_edit``: Qwen-Image-Edit editing (``QwenImageEditPipeline``,
  :class:`QwenImageEditGRPOSampler`);
- ``qwen_image_edit_plus``: Qwen-Image-Edit-2509 / -2511 editing from several references
  (``QwenImageEditPlusPipeline``, :class:`QwenImageEditPlusGRPOSampler`);
- ``flux2`` / ``flux2_klein``: FLUX.2-dev / FLUX.2-klein text-to-image (``Flux2Pipeline`` /
  ``Flux2KleinPipeline``, :class:`Flux2GRPOSampler`);
- ``sd3``: Stable Diffusion 3 / 3.5 text-to-image (``StableDiffusion3Pipeline``,
  :class:`SD3GRPOSampler`);
- ``z_image``: Z-Image text-to-image (``ZImagePipeline``, :class:`ZImageGRPOSampler`).

Shared pieces: :mod:`~paco_grpo.pipelines.sampling` (the one sampling loop and the hooks a
model fills in, :class:`GRPOSampler`; :class:`SampleOutput`; the denoising loop
:func:`sde_denoise`), :mod:`~paco_grpo.pipelines.editing` (reference images,
:class:`EditGRPOSampler`) and :mod:`~paco_grpo.pipelines.registry` (:class:`PipelineSpec`,
:data:`PIPELINE_SPECS`).

To add a model, write ``paco_grpo/pipelines/<model>.py`` with its sampler and a
:func:`register_pipeline` call, and import it below (the docs' "Add a model" section).

    >>> from paco_grpo.pipelines import PIPELINE_SPECS
    >>> list(PIPELINE_SPECS)
    ['flux', 'flux2', 'flux2_klein', 'flux_kontext', 'qwen_image', 'qwen_image_edit', 'qwen_image_edit_plus', 'sd3', 'z_image']
"""

from paco_grpo.pipelines.editing import (
    EditGRPOSampler,
    area_preserving_size,
    prepare_edit_items,
    resize_to_area,
)
from paco_grpo.pipelines.flux import FluxConditioning, FluxGRPOSampler
from paco_grpo.pipelines.flux2 import Flux2Conditioning, Flux2GRPOSampler
from paco_grpo.pipelines.flux_kontext import KontextGRPOSampler
from paco_grpo.pipelines.qwen_image import QwenImageConditioning, QwenImageGRPOSampler
from paco_grpo.pipelines.qwen_image_edit import QwenImageEditGRPOSampler
from paco_grpo.pipelines.qwen_image_edit_plus import QwenImageEditPlusGRPOSampler
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
from paco_grpo.pipelines.sd3 import SD3Conditioning, SD3GRPOSampler
from paco_grpo.pipelines.z_image import ZImageConditioning, ZImageGRPOSampler

__all__ = [
    "PIPELINE_SPECS",
    "EditGRPOSampler",
    "Flux2Conditioning",
    "Flux2GRPOSampler",
    "FluxConditioning",
    "FluxGRPOSampler",
    "GRPOSampler",
    "KontextGRPOSampler",
    "PipelineSpec",
    "QwenImageConditioning",
    "QwenImageEditGRPOSampler",
    "QwenImageEditPlusGRPOSampler",
    "QwenImageGRPOSampler",
    "SD3Conditioning",
    "SD3GRPOSampler",
    "SampleOutput",
    "ZImageConditioning",
    "ZImageGRPOSampler",
    "area_preserving_size",
    "check_sampling_inputs",
    "get_pipeline_spec",
    "prepare_edit_items",
    "register_pipeline",
    "resize_to_area",
    "sde_denoise",
]
