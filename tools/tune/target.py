"""Which hardware target this device's measurements are for.

The name comes from codegen/targets.py's ``device_target``, the function the generated runtime
renders and runs: a declared target is matched by NVIDIA compute capability / AMD gcn arch; any
other device is the new target sm_<major><minor> / <gcn arch>, whose Hardware spec is made here
(its short model name as an alias when free). Targets with hand-written tables (gfx950) are
refused: there is nothing to measure.
"""
from __future__ import annotations

import re

from codegen import measured, targets
from codegen.model import Hardware
from tools import common


def device_facts(torch, device=None) -> dict:
    """What identifies the device: vendor, capability / gcn arch, name, SMs, a machine label
    (the GPU's UUID when torch reports one: two runs on one physical GPU share it)."""
    index = torch.cuda.current_device() if device is None else device
    props = torch.cuda.get_device_properties(index)
    facts = {"device": props.name, "sms": props.multi_processor_count,
             "machine": common.machine_label(props)}
    if torch.version.hip:
        facts.update(vendor="amd", gcn_arch=str(getattr(props, "gcnArchName", "")),
                     capability=None)
    else:
        facts.update(vendor="nvidia", capability=(props.major, props.minor), gcn_arch=None)
    facts["driver"] = _driver()
    return facts


def _driver():
    """The NVIDIA driver version (nvidia-smi), or None where it cannot be read."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
    except (OSError, IndexError, subprocess.SubprocessError):
        return None


def target_of(facts: dict, declared: dict) -> tuple:
    """(Hardware, declared?) for a device (``facts`` as device_facts returns them), given the
    declared Hardware specs by name. SystemExit for a target with hand-written tables."""
    name, known = targets.device_target(targets.hardware_table(declared.values()),
                                        facts["vendor"], facts.get("capability"),
                                        facts.get("gcn_arch"))
    if known:
        hw = declared[name]
        if not measured.is_measured(hw):
            raise SystemExit(f"tune: this device is hardware target {name!r}, whose tables are "
                             f"written by hand in specs/ ({hw.loc}), not measured: nothing to "
                             f"tune")
        return hw, True
    taken = {a for hw in declared.values() for a in (hw.name,) + hw.aliases}
    # the model in the device name ("NVIDIA B200" -> b200, "A100-SXM4-80GB" -> a100,
    # "AMD Instinct MI300X" -> mi300x), not bus or form-factor words
    model = next((t for t in re.split(r"[^a-z0-9]+", facts["device"].lower())
                  if re.fullmatch(r"[a-z]+\d+[a-z]*", t) and not re.fullmatch(
                      r"(sxm|pcie|nvl|gen|hbm|oam)\d*[a-z]*", t)), "")
    aliases = tuple(a for a in dict.fromkeys((name.replace("_", ""), model))
                    if a and a != name and a not in taken)
    match = ({"capability": tuple(facts["capability"])} if facts["vendor"] == "nvidia"
             else {"gcn_arch": name})
    return Hardware(name=name, vendor=facts["vendor"], aliases=aliases, **match,
                    description=f"{facts['device']}; policies measured by tools/tune"), False


def hardware_dict(hw: Hardware) -> dict:
    """A Hardware spec as the data file and the run file hold it."""
    return {k: list(v) if isinstance(v, tuple) else v
            for k, v in ((k, getattr(hw, k)) for k in measured.HARDWARE_KEYS)
            if v is not None and v != ()}


def hardware_from(d: dict) -> Hardware:
    return Hardware(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
