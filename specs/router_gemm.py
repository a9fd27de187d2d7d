"""fp32 low-token router GEMM (docs/KERNELS.md §11): one RouterGemmShape per weight shape.

Launch tables map token-count buckets (gfx950/generic: M ≤ 4, 5–16, 17–32, upstream's; the
measured tables use finer ones) to a kernel and its launch parameters. A row without `kernel=`
takes the per-expert kernel of §11 (block_m, block_e, block_k, num_warps, num_stages; upstream's
rows and generic's are block_e = 1, one expert per program); `kernel="splitk"` takes the split-K
tl.dot kernel (block_m ≥ the bucket's largest M, block_n, block_k, split_k with block_k·split_k
dividing hidden_size, num_warps, num_stages; see codegen/families/router_gemm.py). gfx950
reproduces the upstream table exactly; every measured target (sm_90) takes its rows from its
data file (specs/measured/<target>.json, measured by tools/tune); generic is a conservative
default.
"""
from codegen.families.router_gemm import RouterGemmFamily, RouterGemmShape
from codegen.model import SpecError, TensorContract
from codegen.policy import Buckets

from .measured_targets import TARGETS


def measured(hidden_size, num_experts):
    """Every measured target's rows for one weight shape (each row keeps its data-file line)."""
    return {name: target.router_rows((hidden_size, num_experts))
            for name, target in TARGETS.items()}


def gfx950(small, mid, large):
    """Upstream gfx950 rows: (block_m, block_k, num_warps) per bucket; one expert per program and
    one stage always."""
    rows = []
    for (lo, hi), (block_m, block_k, num_warps) in zip(((1, 4), (5, 16), (17, 32)),
                                                      (small, mid, large)):
        rows.append((lo, hi, dict(block_m=block_m, block_e=1, block_k=block_k,
                                  num_warps=num_warps, num_stages=1)))
    return Buckets(axis="num_tokens", rows=tuple(rows))


# generic (unknown devices: other NVIDIA/AMD parts, the CPU interpreter) stays on the per-expert
# kernel: plain loads and reductions only (no tl.dot, no atomics, no persistent counter), the
# most portable choice for a table nobody has measured.
GENERIC = Buckets(axis="num_tokens", rows=(
    (1, 4, dict(block_m=1, block_e=1, block_k=1024, num_warps=4, num_stages=1)),
    (5, 16, dict(block_m=4, block_e=1, block_k=1024, num_warps=4, num_stages=1)),
    (17, 32, dict(block_m=8, block_e=1, block_k=1024, num_warps=4, num_stages=1)),
))
# The same rows for a shape that serves at most 9 tokens.
GENERIC_9 = Buckets(axis="num_tokens", rows=(
    (1, 4, dict(block_m=1, block_e=1, block_k=1024, num_warps=4, num_stages=1)),
    (5, 9, dict(block_m=4, block_e=1, block_k=1024, num_warps=4, num_stages=1)),
))

SPECS = (
    RouterGemmFamily(
        max_tokens=32,
        hidden_states=TensorContract(name="hidden_states", rank=2, dtypes=("bf16", "fp32"),
                                     contiguous=True, doc="[M, hidden_size] activations"),
        router_weight=TensorContract(name="router_weight", rank=2, dtypes=("fp32", "bf16"),
                                     contiguous=True, doc="[num_experts, hidden_size] weight "
                                                          "in its shape's weight_dtype"),
        logits=TensorContract(name="logits", rank=2, dtypes=("fp32",), contiguous=True,
                              doc="[M, num_experts] fresh output"),
    ),
    RouterGemmShape(hidden_size=3072, num_experts=256, models="MiniMax-M2 / M2.5",
                    launch={"gfx950": gfx950((1, 1024, 8), (4, 1024, 8), (8, 1024, 8)),
                            **measured(3072, 256), "generic": GENERIC}),
    RouterGemmShape(hidden_size=4096, num_experts=8, models="Nemotron-H (per upstream review)",
                    launch={"gfx950": gfx950((1, 1024, 4), (1, 1024, 4), (1, 1024, 4)),
                            **measured(4096, 8), "generic": GENERIC}),
    RouterGemmShape(hidden_size=4096, num_experts=192, models="Hunyuan V3 (per upstream review)",
                    launch={"gfx950": gfx950((1, 1024, 8), (4, 1024, 8), (4, 2048, 8)),
                            **measured(4096, 192), "generic": GENERIC}),
    RouterGemmShape(hidden_size=6144, num_experts=128, models="MiniMax-M3",
                    launch={"gfx950": gfx950((1, 1024, 8), (4, 1024, 8), (4, 2048, 8)),
                            **measured(6144, 128), "generic": GENERIC}),
    RouterGemmShape(hidden_size=6144, num_experts=256, models="GLM-5.x shape (fp32 path unused upstream)",
                    launch={"gfx950": gfx950((1, 1024, 8), (8, 1024, 8), (4, 2048, 8)),
                            **measured(6144, 256), "generic": GENERIC}),
    # vLLM's newer router: a bf16 weight (read as bf16, half fp32's bytes), fp32 accumulation
    # and logits, at most 9 tokens. Upstream published no gfx950 launch table for it: gfx950
    # takes the generic rows.
    RouterGemmShape(hidden_size=7168, num_experts=896, models="bf16-weight router (vLLM)",
                    weight_dtype="bf16", max_tokens=9,
                    launch={"gfx950": GENERIC_9, **measured(7168, 896), "generic": GENERIC_9}),
)


def _rows_of_declared_shapes():
    """Every measured router row is for a declared weight shape (the rows of any other shape
    would be read by nothing)."""
    declared = {(s.hidden_size, s.num_experts) for s in SPECS if isinstance(s, RouterGemmShape)}
    for target in TARGETS.values():
        for row in target.rows("router_gemm"):
            if row.when["shape"] not in declared:
                raise SpecError(row.loc, f"measured target {target.name}", "shape",
                                f"{list(row.when['shape'])} is not a weight shape "
                                f"specs/router_gemm.py declares (declared: "
                                f"{', '.join(f'{h}x{e}' for h, e in sorted(declared))})")


_rows_of_declared_shapes()
