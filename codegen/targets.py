"""Which hardware target a device is: one function for the tuner and the generated runtime.

``device_target`` is rendered verbatim into ``generated/_runtime.py`` (its source text, see
``codegen/render.py``) and imported by ``tools/tune/target.py``, so a device the tuner measures
as target X is the device the generated dispatcher runs X's tables on. It must stay
self-contained (no imports, no names from this module).
"""
from __future__ import annotations

import inspect


def device_target(hardware: dict, vendor: str, capability=None, gcn_arch=None) -> tuple:
    """(target name, declared) of a device.

    ``hardware``: the declared targets, name -> (vendor, AMD gcn arch, NVIDIA (major, minor)).
    A declared target matches an NVIDIA device by compute capability and an AMD device by gcn
    arch (the part of gcnArchName before the first ':'). A device matching none is named the
    new target it would be: sm_<major><minor> (NVIDIA) or its gcn arch (AMD), declared False.
    """
    if vendor == "amd":
        arch = str(gcn_arch or "").split(":")[0]
        for name, (kind, gcn, _) in hardware.items():
            if kind == "amd" and gcn and gcn == arch:
                return name, True
        return "".join(c if c.isalnum() else "_" for c in arch) or "amd_unknown", False
    cap = tuple(capability)
    for name, (kind, _, declared_cap) in hardware.items():
        if kind == "nvidia" and declared_cap is not None and tuple(declared_cap) == cap:
            return name, True
    return f"sm_{cap[0]}{cap[1]}", False


def hardware_table(specs) -> dict:
    """name -> (vendor, gcn_arch, capability) of Hardware specs: device_target's argument (the
    generated runtime's HARDWARE holds the same)."""
    return {h.name: (h.vendor, h.gcn_arch, h.capability) for h in specs}


def source() -> str:
    """device_target's source, as rendered into the generated runtime."""
    return inspect.getsource(device_target)
