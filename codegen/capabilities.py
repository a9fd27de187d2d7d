"""What a hardware target can run: the one place launch options are matched to hardware.

The spec loader (families' checks), the tuner (which candidates it offers) and the generated
runtime (rendered PDL_CAPABILITY, TF32_CAPABILITY, TMA_CAPABILITY and FP8_CVT_CAPABILITY,
checked again at launch) all ask here.
"""
from __future__ import annotations

PDL_CAPABILITY = (9, 0)  # programmatic dependent launch: NVIDIA Hopper and later
TF32_CAPABILITY = (8, 0)  # TF32 tensor cores: NVIDIA Ampere and later
TMA_CAPABILITY = (9, 0)  # the tensor memory accelerator (bulk tensor copies): NVIDIA Hopper and later
# cvt.rn.f16x2.e4m3x2 / .e5m2x2 (a pair of fp8 to fp16 in one instruction): NVIDIA Ada and later
FP8_CVT_CAPABILITY = (8, 9)


def _nvidia_at_least(hw, capability: tuple) -> bool:
    return hw.vendor == "nvidia" and hw.capability is not None and hw.capability >= capability


def supports_pdl(hw) -> bool:
    """Whether rows for Hardware ``hw`` may ask for programmatic dependent launch (pdl)."""
    return _nvidia_at_least(hw, PDL_CAPABILITY)


def supports_tf32x3(hw) -> bool:
    """Whether split-K router rows for Hardware ``hw`` may use tf32x3 tensor-core products."""
    return _nvidia_at_least(hw, TF32_CAPABILITY)


def supports_tma(hw) -> bool:
    """Whether attention rows for Hardware ``hw`` may load K and V tiles by the tensor memory
    accelerator (tma)."""
    return _nvidia_at_least(hw, TMA_CAPABILITY)
