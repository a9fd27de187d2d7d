"""Upstream default launch tables shared by several policies (written once, used by the
gfx950/generic rules and by every measured target's unmeasured part in specs/index_decode.py).
Data only; no SPECS here."""
from codegen.policy import Buckets

# Split-K scorer grid of upstream's default policy (§8.2): kv_chunks = pow2floor(min(256, 512 // R)).
DEFAULT_SPLIT = Buckets(axis="num_reqs", rows=(
    (1, 2, dict(kv_chunks=256)), (3, 4, dict(kv_chunks=128)), (5, 8, dict(kv_chunks=64)),
    (9, 16, dict(kv_chunks=32)), (17, 32, dict(kv_chunks=16)), (33, 64, dict(kv_chunks=8)),
    (65, 128, dict(kv_chunks=4)), (129, 256, dict(kv_chunks=2)), (257, None, dict(kv_chunks=1)),
))
# Launch options of an untuned sm_90 split row (Triton's CUDA defaults, written out).
UNTUNED_SPLIT_OPTIONS = dict(high_batch=False, static_chunks=False, num_warps=4, num_stages=3)

# Upstream's general selector branch (§8.3): topk_chunks = pow2floor(min(16, 64 // (rows·heads))).
GENERAL_TOPK = Buckets(axis="rows_x_heads", rows=(
    (1, 4, dict(topk_chunks=16)), (5, 8, dict(topk_chunks=8)), (9, 16, dict(topk_chunks=4)),
    (17, 32, dict(topk_chunks=2)), (33, None, dict(topk_chunks=1)),
))
GENERAL_TOPK_OPTIONS = dict(topk_tile=512, num_warps=8, num_stages=2, single_tile=False,
                            adaptive_merge=False, pdl=False)
