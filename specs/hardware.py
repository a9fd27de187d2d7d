"""Hardware targets, by normalized name. Dispatch tables are keyed by these names only.

gfx950 (tables reproduced from upstream) and generic (the explicit fallback) are declared here;
every measured target declares itself in its data file (specs/measured/<name>.json, written by
tools/tune from measurements on devices of that target).
"""
from codegen.model import Hardware, distinct_names

from .measured_targets import TARGETS

SPECS = distinct_names((
    Hardware(name="gfx950", vendor="amd", gcn_arch="gfx950",
             aliases=("mi355x", "mi350x"),
             description="AMD Instinct MI350X/MI355X (CDNA4); policies reproduced from upstream"),
    *(target.hardware for target in TARGETS.values()),
    Hardware(name="generic", vendor="any",
             aliases=(),
             description="any other device, and Triton's CPU interpreter: the explicit fallback"),
))
