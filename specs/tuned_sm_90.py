"""sm_90 launch tables. Defaults (upstream's non-gfx950 branches) until tools/tune measures them
on an H200 and rewrites this file; tools/tune owns its content."""
from codegen.policy import Buckets, Rule, between

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

INDEX_SCORE = [
    Rule(when={"hardware": "sm_90"}, variant="index_score_split",
         params=dict(high_batch=False, num_warps=4, num_stages=3),
         by=Buckets(axis="num_reqs", rows=(
             (1, 2, dict(kv_chunks=256)), (3, 4, dict(kv_chunks=128)), (5, 8, dict(kv_chunks=64)),
             (9, 16, dict(kv_chunks=32)), (17, 32, dict(kv_chunks=16)),
             (33, 64, dict(kv_chunks=8)), (65, 128, dict(kv_chunks=4)),
             (129, 256, dict(kv_chunks=2)), (257, None, dict(kv_chunks=1)))),
         note="default split grid (untuned)"),
]

INDEX_TOPK = [
    Rule(when={"hardware": "sm_90"}, variant="index_topk_fused",
         params=dict(topk_tile=512, num_warps=8, num_stages=2, single_tile=False,
                     adaptive_merge=False),
         by=Buckets(axis="rows_x_heads", rows=(
             (1, 4, dict(topk_chunks=16)), (5, 8, dict(topk_chunks=8)),
             (9, 16, dict(topk_chunks=4)), (17, 32, dict(topk_chunks=2)),
             (33, None, dict(topk_chunks=1)))),
         note="general branch (untuned)"),
]
