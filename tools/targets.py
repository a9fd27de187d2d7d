"""The performance targets tools/bench.py and tools/hostcost.py judge, as data, and the
verdicts on a bench.json.

Issue 18: the input kinds other than bf16 (tools/bench.py's KINDS): vLLM's common Triton
indexer on fp32 and fp8 inputs, measured beside ours on H200s (2026-12-01), and the fp8 kinds'
time over our bf16 time of the same row.
Issue 15: vLLM's common Triton indexer (ids only) measured side by side on one H200, CUDA-graph
replay with L2 flushed before each replay, median µs. Issue 20: vLLM's CUDA router kernel per x
dtype (two H200s), the router against F.linear, and the small-context decode rows. Issue 5
(older): the decode rows it set that issue 15 sets nothing for and that are still open
(docs/OPEN_PROBLEMS.md), and its router limit over the bandwidth floor. Issue 13: host time per
eager call.

A verdict is a dict: issue, what (the kind of target), limit, op ("≤" or "≥"), unit, value
(measured; None when the row failed) and pass. ``attach(report)`` writes each row's verdicts
into ``row["targets"]``.
"""
from __future__ import annotations

ISSUE18 = "issue 18"
ISSUE15 = "issue 15"
ISSUE5 = "issue 5"
ISSUE20 = "issue 20"
LE, GE = "≤", "≥"

# decode indexer, bf16 cache, every request at the full context: (R, context, Q) -> vLLM's
# best µs, the rows where ours trailed on that machine (ours led in the other 42)
VLLM_DECODE_US = {
    (32, 131072, 1): 268.4,
    (64, 131072, 1): 516.0,
    (64, 131072, 4): 524.3,
}
# the large-batch 128k rows read the index cache at this rate or faster (cache bytes / time)
LARGE_BATCH = {"min_R": 32, "ctx": 131072, "tb_per_s": 4.4}
# latency-bound rows, µs (with the page-16 table): issue 20
SMALL_CONTEXT_US = {
    (1, 8192, 4): 6.0,
    (4, 32768, 4): 15.0,
}
# fp8 kinds (fp8 cache with a bf16 query, fp8 query and cache): their time / the bf16 row's,
# (smallest context, limit), largest context first; contexts below the last have no limit
FP8_RATIO = ((32768, 0.6), (8192, 1.0))
FP8_KINDS = ("fp8kv", "fp8")
# vLLM's common Triton indexer, ids only, µs per input kind, at (R, context, Q)
VLLM_KIND_US = {
    "fp32": {(1, 8192, 4): 14.0, (4, 32768, 4): 33.4, (16, 131072, 1): 285.7,
             (64, 8192, 4): 83.1, (64, 131072, 1): 1097.8},
    "fp8": {(1, 8192, 4): 12.2, (4, 32768, 4): 16.5, (16, 131072, 1): 86.3,
            (64, 8192, 4): 33.6, (64, 131072, 1): 323.4},
}
VLLM_KIND_ROWS = sorted({k for rows in VLLM_KIND_US.values() for k in rows})

# issue 19: vLLM's prefill indexer (common Triton index_score + index_topk), bf16, D 128, topk
# 16, init 0, local 1, graph replay after its selector's autotune: (R, prefix, chunk, H) ->
# (score µs, top-k µs, both µs). Ours: the two-call path ≤ both; index_prefill ≤ both, and
# ≤ PREFILL_STREAM_RATIO × both at the long-prefix row.
ISSUE19 = "issue 19"
VLLM_PREFILL_US = {
    (1, 0, 8192, 4): (131.0, 48.0, 177.0),
    (1, 0, 8192, 1): (94.0, 16.0, 108.0),
    (1, 122880, 8192, 1): (1456.0, 221.0, 1673.0),
    (4, 32768, 2048, 1): (385.0, 71.0, 454.0),
    (16, 8192, 512, 1): (106.0, 29.0, 132.0),
    (2, 0, 16384, 2): (395.0, 141.0, 533.0),
    (1, 0, 1024, 1): (16.0, 6.0, 20.0),
    (8, 1024, 128, 4): (18.0, 10.0, 27.0),
}
PREFILL_LONG_ROW = (1, 122880, 8192, 1)
PREFILL_STREAM_RATIO = 0.5

# issue 21: vLLM's common Triton sparse attention (decode), bf16 q and KV, cache
# [pages, 2, 128, Hkv, D], D 128, topk 16 (own block + 15 earlier), PDL on, measured beside ours
# on H200s: (Hq, Hkv, R, context, Q) -> µs. Ours: at or below these, and from ATTN_MIN_ROWS rows
# up at least ATTN_FLOOR_SHARE of the copy rate on the KV bytes the rows list (topk blocks per
# row and KV head): the larger of those bytes at ATTN_COPY_TBPS and a plain read of as many
# distinct bytes timed the same way (tools/bench_attn.py).
ISSUE21 = "issue 21"
VLLM_ATTN_US = {
    (32, 2, 1, 8192, 1): 9.8,
    (32, 2, 1, 8192, 4): 11.7,
    (32, 2, 1, 32768, 1): 10.6,
    (32, 2, 1, 32768, 4): 12.5,
    (32, 2, 1, 131072, 1): 10.5,
    (32, 2, 1, 131072, 4): 12.8,
    (32, 2, 8, 8192, 1): 16.4,
    (32, 2, 8, 8192, 4): 28.3,
    (32, 2, 8, 32768, 1): 16.4,
    (32, 2, 8, 32768, 4): 31.3,
    (32, 2, 8, 131072, 1): 16.7,
    (32, 2, 8, 131072, 4): 32.3,
    (32, 2, 32, 8192, 1): 33.1,
    (32, 2, 32, 8192, 4): 74.6,
    (32, 2, 32, 32768, 1): 33.1,
    (32, 2, 32, 32768, 4): 79.1,
    (32, 2, 32, 131072, 1): 33.4,
    (32, 2, 32, 131072, 4): 80.7,
    (32, 2, 64, 8192, 1): 49.6,
    (32, 2, 64, 8192, 4): 133.5,
    (32, 2, 64, 32768, 1): 50.2,
    (32, 2, 64, 32768, 4): 141.7,
    (32, 2, 64, 131072, 1): 50.0,
    (32, 2, 64, 131072, 4): 143.9,
    (32, 2, 128, 8192, 1): 82.0,
    (32, 2, 128, 8192, 4): 248.7,
    (32, 2, 128, 32768, 1): 82.2,
    (32, 2, 128, 32768, 4): 265.1,
    (32, 2, 128, 131072, 1): 82.5,
    (32, 2, 128, 131072, 4): 268.9,
    (64, 4, 1, 32768, 1): 11.9,
    (64, 4, 32, 32768, 1): 50.5,
    (64, 4, 128, 32768, 1): 149.0,
    (64, 4, 32, 32768, 4): 142.7,
    (16, 1, 1, 32768, 1): 10.1,
    (16, 1, 32, 32768, 1): 23.4,
    (16, 1, 128, 32768, 1): 50.3,
    (16, 1, 32, 32768, 4): 47.5,
    (8, 1, 1, 32768, 1): 9.9,
    (8, 1, 32, 32768, 1): 21.8,
    (8, 1, 128, 32768, 1): 48.7,
    (8, 1, 32, 32768, 4): 45.7,
}
ATTN_COPY_TBPS = 4.3
ATTN_FLOOR_SHARE = 0.8
ATTN_MIN_ROWS = 32

# issue 20: vLLM's CUDA router kernel (fp32_router_gemm, what vLLM runs on Hopper) per x dtype,
# measured beside ours on two H200s (2026-12-01): (K, N, x dtype) -> µs for M = ROUTER_MS. Ours:
# at or below, within ROUTER_SLACK_US. The other shapes (the ones vLLM hands to F.linear, and the
# bf16-weight (7168, 896)) at least ROUTER_LINEAR_SPEEDUP × faster than F.linear(x.float(), w).
ROUTER_MS = (1, 4, 8, 16, 32)
VLLM_ROUTER_US = {
    (3072, 256, "bf16"): (5.79, 5.89, 6.34, 7.26, 9.98),
    (3072, 256, "fp32"): (5.86, 5.70, 6.24, 7.33, 10.11),
    (6144, 128, "bf16"): (5.86, 6.34, 7.39, 9.34, 14.11),
    (6144, 128, "fp32"): (5.76, 6.11, 6.91, 8.70, 13.98),
    (6144, 256, "bf16"): (6.82, 7.04, 7.81, 10.05, 14.82),
    (6144, 256, "fp32"): (6.69, 6.91, 7.97, 9.70, 15.39),
}
ROUTER_SLACK_US = 0.1
ROUTER_LINEAR_SPEEDUP = 2.0
VLLM_ROUTER_SHAPES = sorted({(K, N) for K, N, _ in VLLM_ROUTER_US})

# issue 5: µs, bf16, full context (its other rows are superseded by issue 15's, and its mixed
# R16 row's 62 µs lies below the bandwidth floor of the bench's lengths)
ISSUE5_DECODE_US = {
    (11, 131072, 1): 92.0,
    (16, 131072, 4): 125.0,
}


# issue 13: host µs per eager call (tools/hostcost.py): decode entries at most these; the
# router GEMM at most F.linear(x.float(), w), router_logits at most router_gemm + this
HOST_US = {"index_decode": 60.0, "index_decode_scores": 30.0}
HOST_LOGITS_OVER_GEMM_US = 5.0


def issue5_router_limit(m: int, floor_us: float):
    """Issue 5's router limit on ours minus the empty kernel, µs (None: no limit at this M)."""
    if m <= 8:
        return 1.3 * floor_us + 0.5
    if m == 32:
        return 2.0 * floor_us + 1.0
    return None


def fp8_ratio_limit(ctx: int):
    return next((limit for least, limit in FP8_RATIO if ctx >= least), None)


def decode_time_limits(R: int, ctx: int, Q: int) -> list:
    """(issue, what, µs) of a bf16 full-context decode row."""
    key = (R, ctx, Q)
    return [(issue, what, table[key]) for issue, what, table in (
        (ISSUE15, "≤ vLLM", VLLM_DECODE_US), (ISSUE20, "small context", SMALL_CONTEXT_US),
        (ISSUE5, "time", ISSUE5_DECODE_US)) if key in table]


def is_large_batch(R: int, ctx: int) -> bool:
    return R >= LARGE_BATCH["min_R"] and ctx == LARGE_BATCH["ctx"]


def judged_alone(R: int, ctx: int, Q: int) -> bool:
    """True for a bf16 full-context row with a target of its own (not a ratio to another row)."""
    return bool(decode_time_limits(R, ctx, Q)) or is_large_batch(R, ctx)


def verdict(issue, what, value, op, limit, unit) -> dict:
    """A target with no measured value (the row failed) is not met."""
    ok = value is not None and (value <= limit if op == LE else value >= limit)
    return {"issue": issue, "what": what, "limit": limit, "op": op, "unit": unit,
            "value": value, "pass": ok}


def decode_time(row):
    """The row's median µs under the device's own tables (None when it did not run)."""
    return (row.get("ours") or {}).get(row.get("target_policy"), {}).get("median_us")


def row_kind(row) -> str:
    """A bench row's input kind (rows of older runs name only an fp8 cache)."""
    return row.get("kind") or ("bf16" if row.get("cache", "bf16") == "bf16" else "fp8kv")


def decode_verdicts(row) -> list:
    t = decode_time(row)
    if row.get("mixed"):
        return []
    kind = row_kind(row)
    if kind != "bf16":
        out = []
        limit = fp8_ratio_limit(row["ctx"]) if kind in FP8_KINDS else None
        if limit is not None:
            out.append(verdict(ISSUE18, f"{kind}/bf16", row.get("vs_bf16"), LE, limit, "×"))
        vllm = VLLM_KIND_US.get(kind, {}).get((row["R"], row["ctx"], row["Q"]))
        if vllm is not None:
            out.append(verdict(ISSUE18, "≤ vLLM", t, LE, vllm, "µs"))
        return out
    out = [verdict(issue, what, t, LE, limit, "µs")
           for issue, what, limit in decode_time_limits(row["R"], row["ctx"], row["Q"])]
    if is_large_batch(row["R"], row["ctx"]):
        rate = None if not t else row["cache_bytes"] / (t * 1e-6) / 1e12
        out.append(verdict(ISSUE15, "cache read", rate, GE, LARGE_BATCH["tb_per_s"], "TB/s"))
    return out


def router_verdicts(row) -> list:
    out = []
    ours = (row.get("ours") or {}).get("median_us")
    # rows of runs older than the x dtype axis timed a bf16 x
    limits = VLLM_ROUTER_US.get((row["K"], row["N"], row.get("x_dtype", "bf16")))
    if limits and row["M"] in ROUTER_MS:
        out.append(verdict(ISSUE20, "≤ vLLM", ours, LE,
                           round(limits[ROUTER_MS.index(row["M"])] + ROUTER_SLACK_US, 2), "µs"))
    elif (row["K"], row["N"]) not in VLLM_ROUTER_SHAPES:
        linear = (row.get("linear") or {}).get("median_us")
        speedup = linear / ours if ours and linear else None
        out.append(verdict(ISSUE20, "vs F.linear", speedup, GE, ROUTER_LINEAR_SPEEDUP, "×"))
    if row.get("floor_us") is not None:
        limit = issue5_router_limit(row["M"], row["floor_us"])
        if limit is not None:
            out.append(verdict(ISSUE5, "ours-empty", row.get("ours_minus_empty_us"), LE,
                               limit, "µs"))
    return out


def attach(report) -> None:
    """Write every decode and router row's verdicts into ``row["targets"]``."""
    for row in report.get("decode") or []:
        row["targets"] = decode_verdicts(row)
    for row in report.get("router") or []:
        row["targets"] = router_verdicts(row)
