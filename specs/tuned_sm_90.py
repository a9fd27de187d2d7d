"""sm_90 launch tables. Defaults until tools/tune measures them on an H200 and rewrites
this file (keep the names; tools/tune owns the content)."""
from codegen.policy import Buckets

MEASURED = dict(status="defaults, not measured yet")


def _router(rows):
    return Buckets(axis="num_tokens", rows=tuple(
        (lo, hi, dict(block_m=bm, block_k=bk, num_warps=nw, num_stages=1))
        for lo, hi, bm, bk, nw in rows))


_ROUTER_DEFAULT = ((1, 4, 1, 1024, 8), (5, 16, 4, 1024, 8), (17, 32, 8, 1024, 8))

ROUTER_GEMM = {
    (3072, 256): _router(_ROUTER_DEFAULT),
    (4096, 8): _router(_ROUTER_DEFAULT),
    (4096, 192): _router(_ROUTER_DEFAULT),
    (6144, 128): _router(_ROUTER_DEFAULT),
    (6144, 256): _router(_ROUTER_DEFAULT),
}
