"""tools/tune: measure a hardware target's launch tables and write them as data.

One job per module:

* ``space``   — buckets, representatives and candidates, derived from the registry (policy
  axes, variant parameters, the measured decode shape, the target's options);
* ``kernels`` — the GPU side: inputs, launches with explicit parameters, checks, graph timing;
* ``measure`` — interleaved rounds per bucket after a settle round, the run file;
* ``warm``    — the compile warm-up pool (parallel workers filling Triton's cache);
* ``target``  — which target a device is (codegen/targets.py, shared with the runtime);
* ``choose``  — merge runs of several machines, pick by the worst case, keep the simpler
  candidate within noise;
* ``write``   — put the chosen rows into specs/measured/<target>.json (codegen/measured.py).

Workflow (README: "How to tune a GPU"): on each of two machines or more,
``python3 -m tools.tune measure --out DIR/run.json`` (or ``bash tools/gpu_check.sh tune
SECTION``); then on any machine
``python3 -m tools.tune choose DIR/*.json --write`` and ``codegen regenerate``.
"""
import os
import sys

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TOOLS)
for _path in (TOOLS, ROOT):  # tools/common.py and tools/bench.py are imported as scripts do
    if _path not in sys.path:
        sys.path.insert(0, _path)
