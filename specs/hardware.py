"""Hardware targets, by normalized name. Dispatch tables are keyed by these names only."""
from codegen.model import Hardware

SPECS = (
    Hardware(name="gfx950", vendor="amd", gcn_arch="gfx950",
             aliases=("mi355x", "mi350x"),
             description="AMD Instinct MI350X/MI355X (CDNA4); policies reproduced from upstream"),
    Hardware(name="sm_90", vendor="nvidia", capability=(9, 0),
             aliases=("sm90", "h100", "h200", "hopper"),
             description="NVIDIA Hopper (H100/H200); policies measured on an H200"),
    Hardware(name="generic", vendor="any",
             aliases=(),
             description="any other device, and Triton's CPU interpreter: the explicit fallback"),
)
