"""Hardware targets, by normalized name. Dispatch tables are keyed by these names only.

gfx950 (tables reproduced from upstream) and generic (the explicit fallback) are declared here;
every measured target declares itself in its tuned file (specs/tuned_<name>.py, written by
tools/tune.py on a device of that target, listed in specs/tuned.py).
"""
from codegen.model import Hardware

from .tuned import TUNED

SPECS = (
    Hardware(name="gfx950", vendor="amd", gcn_arch="gfx950",
             aliases=("mi355x", "mi350x"),
             description="AMD Instinct MI350X/MI355X (CDNA4); policies reproduced from upstream"),
    *(tuned.HARDWARE for tuned in TUNED.values()),
    Hardware(name="generic", vendor="any",
             aliases=(),
             description="any other device, and Triton's CPU interpreter: the explicit fallback"),
)
