"""fp32 low-token router GEMM (docs/KERNELS.md §11): one RouterGemmShape per weight shape.

Launch tables map token-count buckets (gfx950/generic: M ≤ 4, 5–16, 17–32, upstream's; the
measured tables use finer ones) to a kernel and its launch parameters. A row without `kernel=` takes the per-expert kernel of §11 (block_m, block_k,
num_warps, num_stages); `kernel="splitk"` takes the split-K tl.dot kernel (block_m ≥ the
bucket's largest M, block_n, block_k, split_k with block_k·split_k dividing hidden_size,
num_warps, num_stages; see codegen/families/router_gemm.py). gfx950 reproduces the upstream
table exactly; every measured target (sm_90) takes its tables from tools/tune measurements
(specs/tuned_<target>.py, listed in specs/tuned.py); generic is a conservative default.
"""
from codegen.families.router_gemm import RouterGemmFamily, RouterGemmShape
from codegen.model import TensorContract
from codegen.policy import Buckets

from .tuned import TUNED


def measured(hidden_size, num_experts):
    """Every measured target's table for one weight shape (specs/tuned_<target>.py)."""
    out = {}
    for name, tuned in TUNED.items():
        if (hidden_size, num_experts) not in tuned.ROUTER_GEMM:
            raise KeyError(f"specs/tuned_{name}.py has no router table for ({hidden_size}, "
                           f"{num_experts}): add one to its ROUTER_GEMM by hand (e.g. the "
                           f"generic rows), then `tools/tune.py --sections router "
                           f"--write-specs` on a {name} device measures it")
        out[name] = tuned.ROUTER_GEMM[hidden_size, num_experts]
    return out


def gfx950(small, mid, large):
    """Upstream gfx950 rows: (block_m, block_k, num_warps) per bucket; always one stage."""
    rows = []
    for (lo, hi), (block_m, block_k, num_warps) in zip(((1, 4), (5, 16), (17, 32)),
                                                      (small, mid, large)):
        rows.append((lo, hi, dict(block_m=block_m, block_k=block_k, num_warps=num_warps,
                                  num_stages=1)))
    return Buckets(axis="num_tokens", rows=tuple(rows))


# generic (unknown devices: other NVIDIA/AMD parts, the CPU interpreter) stays on the per-expert
# kernel: plain loads and reductions only (no tl.dot, no atomics, no persistent counter), the
# most portable choice for a table nobody has measured.
GENERIC = Buckets(axis="num_tokens", rows=(
    (1, 4, dict(block_m=1, block_k=1024, num_warps=4, num_stages=1)),
    (5, 16, dict(block_m=4, block_k=1024, num_warps=4, num_stages=1)),
    (17, 32, dict(block_m=8, block_k=1024, num_warps=4, num_stages=1)),
))

SPECS = (
    RouterGemmFamily(
        max_tokens=32,
        hidden_states=TensorContract(name="hidden_states", rank=2, dtypes=("bf16", "fp32"),
                                     contiguous=True, doc="[M, hidden_size] activations"),
        router_weight=TensorContract(name="router_weight", rank=2, dtypes=("fp32",),
                                     contiguous=True, doc="[num_experts, hidden_size] weight"),
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
)
