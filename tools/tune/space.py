"""What the tuner measures: buckets, representatives and candidates, derived from the registry.

Facts come from where they are declared, never restated here:

* the domain of each bucketed axis (router token range 1..max_tokens, max_q, max_block, topk)
  from the policies' axes; the router weight shapes from the `shape` axis;
* candidate values from the variants' parameters (``Param``: kind, power of two, minimum,
  maximum) and their order from ``Variant.params``;
* the decode inputs measured (dtypes, head_dim, heads) from ``specs/index_decode.py``
  (MEASURED_SCORE, unless other inputs are asked for), topk (MEASURED_TOPK), the sparse block
  size from the variants' contract constants; which keys of a bucket are values rather than
  ranges from ``codegen.measured.TABLES``;
* which options a target may use from the predicates the spec loader applies
  (``supports_tf32x3``, ``supports_pdl``, ``supports_tma``);
* the default row of a bucket (what "simpler" starts from, and what an unmeasured bucket of a
  new target holds) from the ``generic`` target's table.

What is the tuner's own is the sampling plan: where bucket edges sit inside those domains, which
points represent a bucket, and the pruning heuristics below (each says why). The plan was shaped
on the H200 (sessions 1-4; git history of NOTES.md).
"""
from __future__ import annotations

import itertools
import re

from codegen.families import router_gemm as rg
from codegen.capabilities import supports_pdl, supports_tf32x3, supports_tma
from codegen.families.index_decode import FUSED
from codegen.measured import TABLES, is_measured
from codegen.policy import lookup

SPLIT, BALANCED, SELECTOR = "index_score_split", "index_score_balanced", "index_topk_fused"
P_SCORE, P_TOPK, P_ONE, P_STREAM = ("index_prefill_score", "index_prefill_topk", "index_prefill",
                                    "index_prefill_stream")
A_SPLIT, A_TILED = "sparse_attn_split", "sparse_attn_tiled"
ATTN_TABLES = {"decode": "sparse_attn_decode", "prefill": "sparse_attn_prefill"}
# Decode attention points of at most this many programs are also timed inside
# sparse_decode_step (as the indexer's programmatic dependent a launch lost up to 8 % that it
# won alone, at 129–512 programs); above it the indexer's cache read dominates the step.
ATTN_STEP_MAX_PROGRAMS = 512
# Decode attention points of at most this many programs also try table_first launches: one
# dependent load less before the first tile, which counts where the grid is about one wave
# (2026-12-02, attn_ablation on two H200s: 1-5 % at 32-64 programs, 32 rows of one or two KV
# heads; 65-128 programs is the last bucket of a single wave at one split)
ATTN_TABLE_FIRST_MAX_PROGRAMS = 128
# A register cap (ptxas' .maxnreg: the split kernel's max_registers) tried on decode launches of
# four warps whose grid asks for more than two programs per SM, over an 8-bit cache without
# per-token scales: there the 128-key launches compile to 166-168 registers, three programs per
# SM where 40 KiB of shared memory allow five, and capped at 128 to four, without spills
# (`tools/sm90_code.py attention --max-registers`); on an H100 the tuner took the cap at Q >= 2
# and 257-512 programs (alone 60.1 -> 53.8 us). A cap of 168 (three per SM, two uncapped) over
# a bf16 cache or with per-token scales gained at most 1.4 % at the bench's 32k rows and lost up
# to 11 % (2026-12-06, H100: docs/results/2026-12-06_h100_attn_*_cap168.json): not tried.
ATTN_REGISTER_CAP = 128


def attn_register_cap(inputs):
    """The register cap the tuner tries for ``inputs``, or None."""
    eight_bit = inputs["kv_dtype"].startswith("fp8")
    return ATTN_REGISTER_CAP if eight_bit and inputs.get("scales", "none") != "per_token" \
        else None
# The step representative's context: 8k, where the attention takes the largest share of the
# step (at 32k the indexer's cache read is two thirds of it: a launch 5 % slower inside the
# step moved the bucket's worst case by 1 % only, within the noise rule).
ATTN_STEP_CONTEXT = 8192


def pow2_values(param, lo=None, hi=None) -> list:
    """Powers of two a Param allows, within [lo, hi] when given."""
    lo = max(param.minimum, lo or 1)
    hi = param.maximum if hi is None else min(param.maximum, hi)
    return [1 << k for k in range(hi.bit_length()) if lo <= 1 << k <= hi]


def smooth_values(param) -> list:
    """Integers 2^a·3^b a Param allows (split_k: even K slices of 2^n·3 hidden sizes)."""
    def smooth(v):
        while v % 2 == 0:
            v //= 2
        while v % 3 == 0:
            v //= 3
        return v == 1
    return [v for v in range(param.minimum, param.maximum + 1) if smooth(v)]


def pow2ceil(x: int) -> int:
    return 1 if x <= 1 else 1 << (int(x) - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def key(choice: str, params: dict) -> tuple:
    """Identity of a candidate across runs."""
    return choice, tuple(sorted(params.items()))


def as_bucket(bucket: dict) -> dict:
    """A bucket read from JSON (lists) as the tuner uses it: ranges and pairs as tuples."""
    return {a: tuple(v) if isinstance(v, list) else v for a, v in bucket.items()}


def as_json(bucket: dict) -> dict:
    """A bucket as run and data files hold it: ranges and pairs as lists."""
    return {a: list(v) if isinstance(v, tuple) else v for a, v in bucket.items()}


def bucket_text(table: str, bucket: dict) -> str:
    """'num_reqs 1–2, shape 6144x128, q_dtype fp32' for reports."""
    def one(axis, v):
        if axis in TABLES[table].values:
            return "x".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
        lo, hi = v
        return f"≥ {lo}" if hi is None else (str(lo) if lo == hi else f"{lo}–{hi}")
    return ", ".join(f"{a} {one(a, v)}" for a, v in bucket.items())


class Space:
    """Buckets and candidates of one hardware target (a codegen.model.Hardware) on a device
    with ``sms`` SMs; ``quick`` keeps a small sanity subset; ``inputs`` names the decode
    inputs measured (q_dtype, cache_dtype, head_dim, num_heads; default MEASURED_SCORE);
    ``groups``: the attention inputs of these GQA group sizes only (default all);
    ``kv_dtypes``: those of these cache dtypes only (default all), each DTYPE or
    DTYPE:SCALES (an fp8 cache's inputs with that scale mode instead of none); ``modes``:
    the attention tables of these modes only (decode, prefill; default both); ``query_lens``:
    decode attention at these query lengths only (among the representatives: 1, 4)."""

    def __init__(self, reg, target, sms: int, quick: bool = False, inputs: dict | None = None,
                 near: bool = False, groups=None, kv_dtypes=None, modes=None,
                 query_lens=None):
        from specs import index_decode as decode_specs

        self.reg, self.target, self.sms, self.quick = reg, target, sms, quick
        self.near = near
        self.tf32x3 = supports_tf32x3(target)
        self.pdl = supports_pdl(target)
        self.tma = supports_tma(target)
        self.warp = 64 if target.vendor == "amd" else 32  # threads per warp (wavefront)
        self.measured_here = target.name in reg.hardware and is_measured(
            reg.hardware[target.name])
        axes = {p: {a.name: a for a in reg.policies[p].axes} for p in reg.policies}
        self.shapes = sorted(axes[rg.NAME]["shape"].values)
        self.max_tokens = axes[rg.NAME]["num_tokens"].hi
        self.max_q = axes["index_score"]["max_q"].hi
        self.max_block = axes["index_score"]["max_block"].hi
        unknown = sorted(set(inputs or {}) - set(decode_specs.MEASURED_SCORE))
        if unknown:
            raise ValueError(f"decode inputs: unknown axes {unknown} (known: "
                             f"{', '.join(decode_specs.MEASURED_SCORE)})")
        self.inputs = dict(decode_specs.MEASURED_SCORE, **(inputs or {}))
        for axis, value in self.inputs.items():
            if value not in axes["index_score"][axis].values:
                raise ValueError(f"decode inputs: {axis} {value!r} is not in the index_score "
                                 f"policy's domain {axes['index_score'][axis].values}")
        # selector rows are not keyed by the inputs (it ranks fp32 scores whatever they come
        # from): they are measured with the default inputs only
        self.measures_selector = self.inputs == decode_specs.MEASURED_SCORE
        if self.inputs["num_heads"] != 1:
            raise ValueError("decode inputs: the tuner times the calls with the page-16 table, "
                             "which takes one index head (num_heads 1)")
        self.topk = decode_specs.MEASURED_TOPK
        self.block = reg.variants[SPLIT].constant("SPARSE_BLOCK_SIZE")
        self.head_dim = self.inputs["head_dim"]
        self.params = {name: {p.name: p for p in v.params} for name, v in reg.variants.items()}
        self.order = {name: tuple(p.name for p in v.params) for name, v in reg.variants.items()}
        self.order["per_expert"] = tuple(p.name for p in rg.PARAMS)
        self.order["splitk"] = tuple(p.name for p in rg.SPLITK_PARAMS)

        # Router token buckets: finer than upstream's 1–4, 5–16, 17–32 because the best kernel
        # changes inside them (per-expert at M = 8, split-K at M = 16 in session 3; at M = 4 the
        # fastest launch differs from the M = 2 one by 0.2–0.4 µs, and at M = 32 split-K wins
        # by 0.4 µs where it loses by 1.6 at M = 24). Each bucket is measured at its end: the most
        # rows its tiles hold.
        top = self.max_tokens
        ends = [1, 2, 4, 8, 12, 16, 24, top]
        ends = sorted({e for e in ends if e <= top})
        self.token_buckets = [(lo, hi) for lo, hi in zip([1] + [e + 1 for e in ends[:-1]], ends)]
        self.token_reps = {(lo, hi): (hi,) for lo, hi in self.token_buckets}
        # Scorer: request buckets (R = 11 is an issue target of its own; ≥ 257 requests is never
        # measured and keeps its default rows), by max_block bucket (8k / 32k / 128k contexts
        # represent them) and Qmax (1; 2..max measured at Q = 4).
        self.req_buckets = [(1, 2), (3, 4), (5, 8), (9, 11), (12, 16), (17, 32), (33, 64),
                            (65, 256)]
        self.req_reps = {(1, 2): (1, 2), (3, 4): (4,), (5, 8): (8,), (9, 11): (11,),
                         (12, 16): (16,), (17, 32): (32,), (33, 64): (64,), (65, 256): (128,)}
        self.score_mb_buckets = {(0, 64): 64, (65, 256): 256, (257, self.max_block): 1024}
        self.q_buckets = {(1, 1): 1, (2, self.max_q): 4}
        # Selector: rows·heads buckets by powers of two; max_block buckets; the last (longer
        # than any measured context) takes configurations measured at 1024 blocks that do not
        # rely on one tile per chunk.
        self.p_buckets = [(1, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 128),
                          (129, 256), (257, None)]
        self.topk_mb_buckets = {(0, 64): 64, (65, 256): 256, (257, 1024): 1024,
                                (1025, self.max_block): 1024}
        self.fused_max_reqs = 16  # the single launch is compiled per R and only wins small R

        # Prefill: the inputs of specs' MEASURED_PREFILL (one per index-head count), with the
        # query / cache dtype and head_dim of ``inputs`` when given (every head count is
        # measured whatever num_heads the decode inputs name); token and context buckets
        # with (requests, prefix, chunk) representatives (vLLM's prefill rows and their
        # neighbours); selector buckets by rows · heads.
        from specs import index_prefill as prefill_specs
        overrides = {k: v for k, v in (inputs or {}).items() if k != "num_heads"}
        self.prefill_inputs = [dict(i, **overrides) for i in prefill_specs.MEASURED_PREFILL]
        pair = (self.prefill_inputs[0]["q_dtype"], self.prefill_inputs[0]["cache_dtype"])
        # fp32 products (docs/KERNELS.md §14.4): fp32 on either side, or two 16-bit types
        self.prefill_fp32 = "fp32" in pair or set(pair) == {"bf16", "fp16"}
        top = axes[P_SCORE]["max_block"].hi
        self.prefill_mb_buckets = [(0, 64), (65, 512), (513, top)]
        self.prefill_token_buckets = [(1, 2048), (2049, 8192), (8193, None)]
        self.prefill_reps = {  # (mb bucket, token bucket) -> [(R, prefix, chunk)]
            ((0, 64), (1, 2048)): [(1, 0, 1024), (8, 1024, 128)],
            ((0, 64), (2049, 8192)): [(1, 0, 8192)],
            ((0, 64), (8193, None)): [(2, 0, 8192)],
            ((65, 512), (1, 2048)): [(1, 32768, 1024)],
            ((65, 512), (2049, 8192)): [(4, 32768, 2048), (16, 8192, 512)],
            ((65, 512), (8193, None)): [(2, 0, 16384)],
            ((513, top), (1, 2048)): [(1, 122880, 1024)],
            ((513, top), (2049, 8192)): [(1, 122880, 8192)],
            ((513, top), (8193, None)): [(2, 122880, 8192)],
        }
        self.prefill_rows_buckets = [(1, 4096), (4097, 16384), (16385, None)]

        # Attention: specs' MEASURED_ATTN inputs; programs (rows · KV heads) buckets, each
        # measured at its representative counts (both ends where the best launch moves
        # inside the bucket: choose takes the worst case over them), each count at the
        # ends of the KV head counts MiniMax-M3 serves per G (G 16: 64 / 4 heads at TP1 down
        # to 16 / 1 at TP4; G 8: 8 / 1 at TP8): P programs are P / Hkv rows of Hkv heads, so
        # a row is chosen for every layout, not for one; 32k contexts (8k for the step
        # representative: ATTN_STEP_CONTEXT), topk 16.
        from specs import sparse_attn as attn_specs
        caches = [tuple((c.split(":", 1) + ["none"])[:2]) for c in kv_dtypes or ()]
        for kv, mode in caches:
            if mode not in attn_specs.SCALE_MODES or (mode != "none" and
                                                      not kv.startswith("fp8")):
                raise ValueError(f"attention cache {kv}:{mode}: scales are one of "
                                 f"{attn_specs.SCALE_MODES}, and other than none only over "
                                 "an fp8 cache")
        self.attn_inputs = [dict(i, scales=mode) for i in attn_specs.MEASURED_ATTN
                            if not groups or i["group"] in groups
                            for kv, mode in caches or [(i["kv_dtype"], i["scales"])]
                            if i["kv_dtype"] == kv]
        if set(modes or ()) - set(ATTN_TABLES):
            raise ValueError(f"attention modes {sorted(modes)}: each one of "
                             f"{', '.join(ATTN_TABLES)}")
        self.attn_modes = [m for m in ATTN_TABLES if not modes or m in modes]
        if not self.attn_inputs:
            known = sorted({(i["group"], i["kv_dtype"]) for i in attn_specs.MEASURED_ATTN})
            raise ValueError(f"attention groups {sorted(groups or ())}, cache dtypes "
                             f"{sorted(kv_dtypes or ())}: none is measured (known (group, "
                             f"cache dtype): {known})")
        # (129–256 and 257–512 are apart: prefill's best launch changes between 256 and 512
        # programs, the per-token kernel at two splits being 1.2× the best at one end; so are
        # 9–16 and 17–32: G 16 decode at 16 programs took 16 splits with a merge kernel, 13 %
        # faster there than the best single row of 9–32, which took 4 splits for 32 programs
        # (2026-12-02); 1–2 and 3–8: a 1–8 row chosen at 4 and 8 programs was 12 % slower
        # at one (8 / 1, one request) than the row before it; and 513–1024 and 1025–2048: G 8
        # prefill takes 64-lane query tiles at 1024 programs and 128-lane ones at 2048, the
        # best single row of 513–2048 being 1.17× the best at 2048 (2026-12-04). Data files
        # chosen before hold one row for each joined range, which the next tune of these
        # counts splits.)
        self.attn_buckets = {(1, 2): (1, 2), (3, 8): (4, 8), (9, 16): (16,), (17, 32): (32,),
                             (33, 64): (64,), (65, 128): (128,), (129, 256): (256,),
                             (257, 512): (512,), (513, 1024): (1024,), (1025, 2048): (2048,),
                             (2049, None): (8192,)}
        self.attn_kv_heads = {16: (4, 1), 8: (1,)}  # the first: the layout labelled plainly
        # decode query lengths: one token, or speculative decoding's 1 + draft tokens (Q 4
        # represents 2..: at 32/2 R8 Q4 the launch chosen at Q 1 for its 64 programs ran 1.11×
        # the one before it, 2026-12-05)
        self.attn_q_buckets = {(1, 1): 1, (2, None): 4}
        if set(query_lens or ()) - set(self.attn_q_buckets.values()):
            raise ValueError(f"attention query lengths {sorted(query_lens)}: each one of "
                             f"{sorted(self.attn_q_buckets.values())}")
        self.attn_query_lens = tuple(Q for Q in self.attn_q_buckets.values()
                                     if not query_lens or Q in query_lens)

    # -- router --------------------------------------------------------------------------------
    def router_buckets(self, shapes=None, tokens=None):
        """((K, N), (lo, hi), representatives [(M, x dtype)]) for every measured bucket, clipped
        to the shape's token cap (a bucket starting above it is left out; one ending above it
        ends at the cap, which is then its representative); ``tokens``: only the buckets that
        serve one of these token counts (the others keep their rows)."""
        out = []
        for shape in shapes or self.shapes:
            cap = self.token_cap(shape)
            for lo, hi in self.token_buckets[:2] if self.quick else self.token_buckets:
                if lo > cap:
                    continue
                reps = [m for m in self.token_reps[(lo, hi)] if m <= cap] or [cap]
                if tokens and not any(lo <= t <= min(hi, cap) for t in tokens):
                    continue
                out.append((tuple(shape), (lo, min(hi, cap)),
                            [(m, dt) for m in reps for dt in self.router_x_dtypes]))
        return out

    @property
    def router_x_dtypes(self) -> tuple:
        """The router table's x_dtype axis (the family's hidden_states dtypes): rows per dtype."""
        axes = {a.name: a for a in self.reg.policies["router_gemm"].axes}
        return tuple(axes["x_dtype"].values)

    def token_cap(self, shape) -> int:
        """The most tokens the router kernels serve for ``shape`` (its spec's max_tokens)."""
        for spec in self.reg.family_specs[rg.NAME]:
            if isinstance(spec, rg.RouterGemmShape) and \
                    (spec.hidden_size, spec.num_experts) == tuple(shape):
                return rg.token_cap(spec, self.reg.extras[rg.NAME])
        return self.max_tokens

    def per_expert_candidates(self, K, N, lo, hi) -> list:
        """block_m ≤ the bucket's largest M, ≤ 8 and ≥ 4 once M > 4 (more rows per program never
        won); block_k ≥ 256 dividing K; one stage; 4–16 weight elements per thread per step
        (16-byte loads) and 4–32 fp32 partial sums per thread (every upstream row is inside).
        Expert tiles too (block_e 2–8 dividing N: every program reads its rows of x in full,
        so block_e divides that traffic) where every warp lies along K (one or two 16-byte
        weight loads per thread per step: otherwise each step converts layouts through shared
        memory) and the registers fit: the whole row's loads are issued up front (fp32 x at
        worst) and the partial sums stay, ≤ 192 per thread (sm_90 compiles of every shape)."""
        p = {x.name: x for x in rg.PARAMS}
        w_bytes = self.router_weight_bytes((K, N))
        vec = 16 // w_bytes
        out = []
        for bm in pow2_values(p["block_m"], hi=min(hi, 8)):
            if hi > 4 and bm < 4:
                continue
            for be in pow2_values(p["block_e"], hi=8):
                if N % be:
                    continue
                for bk in pow2_values(p["block_k"], lo=256):
                    if K % bk:
                        continue
                    for nw in pow2_values(p["num_warps"]):
                        threads = self.warp * nw
                        lanes = bk / threads
                        if be == 1:
                            fits = 4 <= lanes <= 16 and 4 <= bm * lanes <= 32
                        else:
                            loads = K * (be * w_bytes + bm * 4) / (4 * threads)
                            fits = bk / (vec * threads) in (1, 2) and \
                                loads + bm * be * lanes <= 192
                        if fits:
                            out.append(("per_expert", dict(block_m=bm, block_e=be, block_k=bk,
                                                           num_warps=nw, num_stages=1)))
        return out

    def router_weight_bytes(self, shape) -> int:
        """Bytes per element of the router weight of ``shape`` (its spec's weight_dtype)."""
        for spec in self.reg.family_specs[rg.NAME]:
            if isinstance(spec, rg.RouterGemmShape) and \
                    (spec.hidden_size, spec.num_experts) == tuple(shape):
                return 2 if spec.weight_dtype in ("bf16", "fp16") else 4
        raise KeyError(shape)

    def splitk_candidates(self, K, N, lo, hi) -> list:
        """One row tile (block_m = next_pow2(≥ 16, M)); block_n 16..64 (≤ next_pow2(N));
        block_k 64..256; split_k 2^a·3^b with block_k·split_k dividing K; ≤ 16 dot steps per
        program; a grid of cdiv(N, block_n)·split_k programs in [min(96, largest), 4·SMs].
        tf32x3 where the target has TF32 tensor cores; fp32-FMA dots (they never won on the
        H200) only at ≤ 2 programs per SM, block_n ≤ 32, 4 warps, ≤ 2 stages there, swept like
        tf32x3 elsewhere. Warps by tile size; 1 stage for one step, 2 for two, 2–3 beyond."""
        p = {x.name: x for x in rg.SPLITK_PARAMS}
        bm = pow2ceil(max(rg.SPLITK_MIN_BLOCK, hi))
        if bm > p["block_m"].maximum:
            return []
        tiles = [(bn, bk, sk, cdiv(N, bn) * sk)
                 for bn in pow2_values(p["block_n"], hi=min(64, max(16, pow2ceil(N))))
                 for bk in pow2_values(p["block_k"], lo=64, hi=256)
                 for sk in smooth_values(p["split_k"])
                 if K % (bk * sk) == 0 and cdiv(N, bn) * sk <= 4 * self.sms]
        if not tiles:
            return []
        min_grid = min(96, max(t[3] for t in tiles))
        out = []
        for bn, bk, sk, grid in tiles:
            steps = K // (sk * bk)
            if grid < min_grid or steps > 16:
                continue
            for tf32x3 in (True, False):
                if tf32x3 and not self.tf32x3:
                    continue
                if not tf32x3 and self.tf32x3 and (bn > 32 or grid > 2 * self.sms):
                    continue
                warps = {256: (2, 4), 512: (4,), 1024: (4, 8), 2048: (4, 8)}[bm * bn]
                stages = (1,) if steps == 1 else ((2,) if steps == 2 else (2, 3))
                for nw, ns in itertools.product(warps, stages):
                    if (self.quick or (self.tf32x3 and not tf32x3)) and (nw != 4 or ns > 2):
                        continue
                    if self.quick and self.tf32x3 and not tf32x3:
                        continue
                    out.append(("splitk", dict(block_m=bm, block_n=bn, block_k=bk, split_k=sk,
                                               tf32x3=tf32x3, num_warps=nw, num_stages=ns)))
        return out

    def router_candidates(self, K, N, lo, hi) -> list:
        """Per-expert and split-K candidates, anchored at the rows of both x dtypes (each
        representative is recorded in its x dtype's bucket: `router_bucket`)."""
        cands = self.per_expert_candidates(K, N, lo, hi) + self.splitk_candidates(K, N, lo, hi)
        for dt in self.router_x_dtypes:
            cands = self._with_anchors(cands, "router_gemm", self.router_bucket((K, N), lo, hi,
                                                                                dt))
        return cands

    @staticmethod
    def router_bucket(shape, lo, hi, x_dtype) -> dict:
        return {"shape": tuple(shape), "x_dtype": x_dtype, "num_tokens": (lo, hi)}

    # -- decode --------------------------------------------------------------------------------
    def decode_points(self, contexts=None, requests=None) -> list:
        """(R, Q, max_block) measured, largest inputs first: the multi-GB caches are allocated
        before anything else fragments the device's memory. ``contexts`` / ``requests`` keep
        those contexts (tokens) / request counts only (a bucket whose representatives are all
        left out is not planned, so its row stays)."""
        rs = sorted({r for reps in self.req_reps.values() for r in reps})
        mbs = sorted(set(self.score_mb_buckets.values()))
        if self.quick:
            rs, mbs = [1, 4, 16, 64], [64, 1024]
        if contexts:
            mbs = [mb for mb in mbs if mb * self.block in contexts]
        if requests:
            rs = [r for r in rs if r in requests]
        points = [(R, Q, mb) for mb in mbs for R in rs for Q in sorted(self.q_buckets.values())]
        return sorted(points, key=lambda p: (-p[0] * p[2], -p[1]))

    def mixed_decode_points(self, contexts=None, requests=None) -> list:
        """The points of `decode_points` at the largest context with two requests or more,
        measured a second time with mixed lengths (uniform in [context / 8, context], as the
        bench's mixed rows): a grid cut for equal requests can leave most programs idle when
        they differ, so a bucket's row must hold up under both."""
        if not self.score_mb_buckets:
            return []
        top = max(self.score_mb_buckets.values())
        return [(R, Q, mb) for R, Q, mb in self.decode_points(contexts, requests)
                if mb == top and R >= 2]

    def score_bucket(self, R, Q, mb) -> dict | None:
        rb = next((b for b in self.req_buckets if b[0] <= R <= b[1]), None)
        qb = next(b for b, q in self.q_buckets.items() if q == Q)
        mbb = next(b for b, m in self.score_mb_buckets.items() if m == mb)
        return None if rb is None else {**self.inputs, "max_q": qb, "max_block": mbb,
                                        "num_reqs": rb}

    def selector_buckets(self, R, Q, mb) -> list:
        """The selector buckets of a decode point (P = rows × heads, max_block)."""
        P = R * Q  # one head (the page-16 table path)
        pb = next(b for b in self.p_buckets if b[0] <= P and (b[1] is None or P <= b[1]))
        return [{"max_block": mbb, "rows_x_heads": pb}
                for mbb, rep in self.topk_mb_buckets.items() if rep == mb]

    def topk_buckets(self, R, Q, mb) -> list:
        """The selector buckets a decode point measures: none with other than the default
        inputs (measures_selector)."""
        return self.selector_buckets(R, Q, mb) if self.measures_selector else []

    def rep_label(self, table, point, mixed=False) -> str:
        if table == "router_gemm":
            return f"M{point[0]} {point[1]}"
        R, Q, mb = point
        return f"R{R} Q{Q} mb{mb}" + (" mix" if mixed else "")

    def fused_tile(self, mb_hi):
        """Smallest fused selection tile holding every block of the bucket (None: none does)."""
        tiles = pow2_values(self.params[FUSED]["topk_tile"])
        return next((t for t in tiles if mb_hi is not None and mb_hi <= t), None)

    def scorer_options(self, Q) -> tuple:
        """(num_warps, num_stages) regimes swept for the inputs at Qmax bucket ``Q``."""
        if "fp32" not in (self.inputs["q_dtype"], self.inputs["cache_dtype"]):
            return ((4, 3), (2, 1)) if self.quick else ((2, 1), (2, 3), (4, 1), (4, 2), (4, 3),
                                                        (8, 3))
        lanes = self.inputs["num_heads"] * pow2ceil(Q)
        if lanes <= self.reg.variants[SPLIT].constant("FP32_FMA_MAX_LANES"):
            # exact FMAs over the real lanes: loads go straight to registers (no pipelining);
            # more warps per program hold more of the page in flight (16 won on the H200)
            return ((8, 1), (16, 1)) if self.quick else ((4, 1), (8, 1), (8, 2), (16, 1))
        # 3xTF32 holds a split copy of each 64 KiB page: compiled for sm_90, 2 warps spill
        # heavily and 4 warps ~400 bytes; 8 warps do not
        return ((4, 3), (8, 2)) if self.quick else ((4, 2), (4, 3), (8, 2), (8, 3))

    def scorer_candidates(self, R, Q, mb, mb_bucket) -> list:
        """Split-K: kv_chunks 8..max (≤ max(8, blocks), R·chunks ≤ 64·SMs) × (warps, stages)
        regimes (2 warps / 1 stage reads K straight into registers: it beat 4/3 at 64 × 128k
        once); static chunks in the two regimes that win most; balanced for R ≤ 16 (compiled
        per R) with 1-8 programs per SM; the single launch for R ≤ 16 where one tile holds the
        whole max_block bucket, 32 ≤ R·chunks ≤ 512. high_batch (gfx950's grid) is not swept."""
        p = self.params[SPLIT]
        options = self.scorer_options(Q)
        chunks = [c for c in pow2_values(p["kv_chunks"], lo=8)
                  if c <= max(8, mb) and R * c <= 64 * self.sms] or [8]
        out = [(SPLIT, dict(kv_chunks=c, high_batch=False, static_chunks=static, num_warps=w,
                            num_stages=s))
               for static, opts in ((False, options), (True, ((4, 2), (4, 3))))
               for c, (w, s) in itertools.product(chunks, opts)]
        if R <= 16:
            out += [(BALANCED, dict(program_budget=self.sms * k, num_warps=w, num_stages=s))
                    for k, (w, s) in itertools.product((1, 2, 4, 8), options)]
        tile = self.fused_tile(mb_bucket[1])
        if R <= self.fused_max_reqs and tile is not None:
            fchunks = [c for c in pow2_values(self.params[FUSED]["kv_chunks"], lo=8, hi=256)
                       if c <= max(8, mb) and 32 <= R * c <= 512] or [8]
            fopts = ((4, 2),) if self.quick else ((4, 2), (8, 2))
            out += [(FUSED, dict(kv_chunks=c, topk_tile=tile, num_warps=w, num_stages=s))
                    for c, (w, s) in itertools.product(fchunks, fopts)]
        return out

    def selector_candidates(self, mb) -> list:
        """topk_tile 128 or 512, and the one tile that exactly holds mb blocks
        (next_pow2(mb), when between next_pow2(topk) and the largest tile: half the padded
        keys of the next of 128 / 512); topk_chunks 1..max that can be active (≤
        next_pow2(cdiv(mb, tile))); single_tile where a bucket measured at mb allows it (and
        without, at 1024 blocks, for the longer bucket); adaptive_merge with ≥ 2 chunks; warps
        2/4/8 (and 1 for tiles ≤ 64: no shared-memory steps), 2 stages; pdl where the target
        has programmatic dependent launch."""
        p = self.params[SELECTOR]
        his = [b[1] for b, rep in self.topk_mb_buckets.items() if rep == mb]
        exact = pow2ceil(max(mb, 1))
        tiles = sorted({128, 512} | ({exact} if pow2ceil(self.topk) <= exact
                                      <= p["topk_tile"].maximum else set()))
        out = []
        for tile in tiles:
            cmax = min(p["topk_chunks"].maximum, pow2ceil(cdiv(max(mb, 1), tile)))
            warps = (4,) if self.quick else ((1, 2, 4, 8) if tile <= 64 else (2, 4, 8))
            for c in pow2_values(p["topk_chunks"], hi=cmax):
                singles = sorted({hi is not None and hi <= c * tile for hi in his}, reverse=True)
                for single, adaptive, w, pdl in itertools.product(
                        singles, (False, True) if c >= 2 else (False,),
                        warps, (False, True) if self.pdl else (False,)):
                    out.append((SELECTOR, dict(topk_chunks=c, topk_tile=tile, single_tile=single,
                                               adaptive_merge=adaptive, pdl=pdl, num_warps=w,
                                               num_stages=2)))
        return out

    def feasible(self, table, bucket, cand) -> bool:
        """Whether a candidate may serve the whole bucket (the loader's feasibility rules)."""
        choice, params = cand
        hi = bucket.get("max_block", (0, None))[1]
        if table == "index_topk" and params["single_tile"]:
            return hi is not None and hi <= params["topk_chunks"] * params["topk_tile"]
        if table == "index_score" and choice == FUSED:
            return hi is not None and hi <= params["topk_tile"]
        return True

    # -- prefill -------------------------------------------------------------------------------
    def prefill_points(self, quick=None) -> list:
        """(inputs, (R, prefix, chunk)) measured, largest first (big inputs allocated first)."""
        reps = [rep for rs in self.prefill_reps.values() for rep in rs]
        if self.quick if quick is None else quick:
            reps = [(1, 0, 1024), (1, 122880, 8192)]
        points = [(i, rep) for i in self.prefill_inputs for rep in reps]
        return sorted(points, key=lambda p: (-(p[1][0] * (p[1][1] + p[1][2])),
                                             -p[0]["num_heads"]))

    def prefill_bucket(self, inputs, rep) -> dict:
        """The index_prefill_score / index_prefill bucket of a representative."""
        R, prefix, chunk = rep
        mb, T = cdiv(prefix + chunk, self.block), R * chunk
        mbb = next(b for b in self.prefill_mb_buckets if b[0] <= mb <= b[1])
        tb = next(b for b in self.prefill_token_buckets
                  if b[0] <= T and (b[1] is None or T <= b[1]))
        return {**inputs, "max_block": mbb, "num_tokens": tb}

    def prefill_topk_bucket(self, inputs, rep) -> dict:
        """The selector bucket: score columns (the row capacity) and rows · heads."""
        R, prefix, chunk = rep
        mb, P = cdiv(prefix + chunk, self.block), R * chunk * inputs["num_heads"]
        mbb = next(b for b in self.prefill_mb_buckets if b[0] <= mb <= b[1])
        pb = next(b for b in self.prefill_rows_buckets
                  if b[0] <= P and (b[1] is None or P <= b[1]))
        return {"max_block": mbb, "rows_x_heads": pb}

    def prefill_rep_label(self, inputs, rep) -> str:
        R, prefix, chunk = rep
        return f"H{inputs['num_heads']} R{R} {prefix}+{chunk}"

    def _lanes_options(self):
        """(query lanes, warps, stages) of a prefill tile: 64 lanes as 4 warps (3 or 2
        stages), 128 as 8 or 4 warps (2 stages; 3 overflows nothing but never won); fp32
        products only fit unpipelined 64-lane tiles (3xTF32 copies of each 64 KiB page)."""
        if self.prefill_fp32:
            return ((64, 4, 1),)
        return ((64, 4, 3),) if self.quick else ((64, 4, 3), (64, 4, 2), (128, 8, 2),
                                                 (128, 4, 2))

    def prefill_score_candidates(self, inputs) -> list:
        """Tiles × KV splits 2..8 (one split never won: a tile's blocks in one program leave
        small grids idle)."""
        H = inputs["num_heads"]
        splits = (8,) if self.quick else (2, 4, 8)
        return [(P_SCORE, dict(block_m=n // H, kv_splits=k, num_warps=w, num_stages=st))
                for (n, w, st), k in itertools.product(self._lanes_options(), splits)]

    def prefill_stream_candidates(self, inputs) -> list:
        H = inputs["num_heads"]
        tile = self.params[P_STREAM]["topk_tile"].maximum
        opts = ((64, 4, 1),) if self.prefill_fp32 else ((64, 4, 3), (64, 8, 3), (128, 8, 2))
        return [(P_STREAM, dict(block_m=n // H, topk_tile=tile, num_warps=w, num_stages=st))
                for n, w, st in opts]

    def prefill_selector_candidates(self) -> list:
        """Tiles of 64..512 blocks, 1 or 4 rows a program (≤ 2048 keys), 2 or 4 warps."""
        out = []
        for bk, rows, w in itertools.product((64, 128, 256, 512), (1, 4), (2, 4)):
            if bk * rows <= 2048 and bk >= pow2ceil(self.topk):
                out.append((P_TOPK, dict(block_k=bk, block_rows=rows, num_warps=w,
                                         num_stages=None)))
        return out

    def prefill_candidates_at(self, table, inputs, rep) -> list:
        bucket = (self.prefill_topk_bucket(inputs, rep) if table == P_TOPK
                  else self.prefill_bucket(inputs, rep))
        cands = {P_SCORE: lambda: self.prefill_score_candidates(inputs),
                 P_TOPK: self.prefill_selector_candidates,
                 P_ONE: lambda: [(P_ONE, {})] + self.prefill_stream_candidates(inputs)}[table]()
        return self._with_anchors(cands, table, bucket)

    # -- attention -----------------------------------------------------------------------------
    def attn_points(self, programs=None) -> list:
        """(mode, inputs, programs, KV heads, Q) measured, largest first (prefill: Q 1, as it
        has no query-length axis); ``programs``: those representatives only (a bucket whose
        representatives are all left out keeps its row)."""
        reps = sorted((P for ps in self.attn_buckets.values() for P in ps), reverse=True)
        if self.quick:
            reps = [16, 2048]
        if programs:
            reps = [P for P in reps if P in programs]
        qs = {"decode": self.attn_query_lens, "prefill": (1,)}
        # (P programs at h KV heads are P / h rows, at Q rows a request: no point where
        # P < h · Q)
        return [(mode, i, P, h, Q) for P in reps for mode in self.attn_modes
                for Q in qs[mode] for i in self.attn_inputs
                if i["group"] in self.attn_kv_heads for h in self.attn_kv_heads[i["group"]]
                if h * Q <= P]

    def attn_bucket(self, mode, inputs, programs, Q=1) -> dict:
        """The bucket of a point: its inputs, its query-length bucket (decode) and programs."""
        b = next(b for b in self.attn_buckets
                 if b[0] <= programs and (b[1] is None or programs <= b[1]))
        qb = {} if mode == "prefill" else {"query_len": next(
            q for q in self.attn_q_buckets if q[0] <= Q and (q[1] is None or Q <= q[1]))}
        return {**inputs, **qb, "programs": b}

    def attn_rebucketed(self, run: dict) -> dict:
        """``run`` with its attention points filed under the current program and query-length
        buckets: a run measured before a bucket edge moved (9–32 became 9–16 and 17–32), or
        before decode rows were by query length (its points and planned buckets were all Q 1),
        is chosen as if measured now. A point's program count and query length are its
        ``programs`` and ``query_len`` fields, or in runs written before those, its label's P
        and Q (`attn_rep_label`; no Q: 1). A planned bucket becomes every current bucket its
        program range overlaps, so a machine that planned the old bucket but lost some of its
        points still counts as missing them."""
        mode_of = {table: mode for mode, table in ATTN_TABLES.items()}
        points = []
        for point in run["points"]:
            if point["table"] in mode_of:
                programs = point.get("programs") or int(
                    re.search(r" P(\d+)\b", point["rep"])[1])
                Q = point.get("query_len") or int(  # (runs from before the field: the label's
                    (re.search(r" Q(\d+)\b", point["rep"]) or [None, 1])[1])  # Q, or none: 1)
                inputs = {k: v for k, v in point["buckets"][0].items()
                          if k not in ("programs", "query_len")}
                point = {**point, "buckets": [as_json(self.attn_bucket(
                    mode_of[point["table"]], inputs, programs, Q))]}
            points.append(point)
        out = {**run, "points": points}
        if "planned" in run:
            planned = []
            for entry in run["planned"]:
                news = [entry["bucket"]]
                if entry["table"] in mode_of:
                    lo, hi = entry["bucket"]["programs"]
                    # (a run from before the query-length axis planned Q 1 buckets only)
                    qb = {} if entry["table"] != ATTN_TABLES["decode"] else {
                        "query_len": entry["bucket"].get("query_len", [1, 1])}
                    news = [{**entry["bucket"], **qb, "programs": [b_lo, b_hi]}
                            for b_lo, b_hi in self.attn_buckets
                            if (hi is None or b_lo <= hi) and (b_hi is None or lo <= b_hi)]
                for b in news:
                    if {"table": entry["table"], "bucket": b} not in planned:
                        planned.append({"table": entry["table"], "bucket": b})
            out["planned"] = planned
        return out

    def attn_rep_label(self, mode, inputs, programs, kv_heads, Q=1) -> str:
        """'decode G16 P64'; another head count than the group's first gets ' Hkv1' added,
        a decode query length other than 1 ' Q4', another cache than bf16 its dtype
        (' fp8e4m3'), scales their mode (':per_token')."""
        plain = kv_heads == self.attn_kv_heads[inputs["group"]][0]
        scales = inputs.get("scales", "none")
        return (f"{mode} G{inputs['group']} P{programs}" + ("" if plain else f" Hkv{kv_heads}")
                + ("" if Q == 1 else f" Q{Q}")
                + ("" if inputs["kv_dtype"] == "bf16" else f" {inputs['kv_dtype']}")
                + ("" if scales == "none" else f":{scales}"))

    @staticmethod
    def attn_grid(inputs, programs, params) -> int:
        """Programs a split launch's grid holds at ``programs`` (row, KV head) pairs: each
        pair's head shares (at most G) times its splits."""
        return programs * min(params["head_split"], inputs["group"]) * params["splits"]

    def attn_candidates_at(self, mode, inputs, programs, Q=1) -> list:
        """Split counts 1..16 × (warps, stages) with whole-block steps; up to 512 programs
        also 64-key steps at 2, 3 and 4 stages (more of a row's bytes in flight for small
        grids) and a merge kernel at 4, 8 and 16 splits (G heads in one or two programs); up
        to 64 programs also the G heads shared by 2 or 4 programs at 8 and 16 splits (the
        last split's merge reads a share of the partials), shared by 2 with 64-key steps, and
        two warps at 4–16 splits (shared heads at 1 or 2 splits, little or nothing to merge,
        took 1.2–1.6× the best launch at 32 and 64 programs on 2026-12-02 and are not
        measured); where the target has the tensor memory accelerator (not quick), each of these
        split launches also with its tiles through it (tma); decode at up to
        ATTN_TABLE_FIRST_MAX_PROGRAMS programs (not quick) each also with the table row read
        first (table_first: one dependent load less before the first tile, which matters where
        the grid is one wave); decode launches of four warps whose grid asks for more than
        two programs per SM (not quick; not table_first, which gains where the grid is one
        wave) also under the register cap of its inputs (`attn_register_cap`: an 8-bit cache
        without per-token scales, one more program per SM); prefill also the query-tiled kernel at 32, 64 and 128 lanes (at
        least 16 and G), each walk of the tile's union (sorted_union) at its stages, the sorted
        one's pipelined launches also with tma; decode of Q ≥ 2 (not quick) the query-tiled
        kernel at Q · G lanes (a request's rows in one tile), both walks, 4 and 8 warps, the
        sorted one in 1, 2 and 4 splits up to 512 programs."""
        opts = ((4, 2),) if self.quick else ((4, 2), (4, 3), (8, 2))
        last = dict(merge_kernel=False)  # the last split to finish merges
        whole = dict(kv_tile=self.block, head_split=1, **last)
        cands = [(A_SPLIT, dict(splits=k, **whole, num_warps=w, num_stages=st))
                 for k in (1, 2, 4, 8, 16) for w, st in opts]
        if not self.quick and programs <= 512:
            cands += [(A_SPLIT, dict(splits=k, kv_tile=self.block // 2, head_split=1, **last,
                                     num_warps=4, num_stages=st))
                      for k in (1, 2, 4, 8, 16) for st in (2, 3, 4)]
            # a merge kernel: no arrival atomic, the merge spread over rows × query heads
            cands += [(A_SPLIT, dict(splits=k, kv_tile=self.block, head_split=h,
                                     merge_kernel=True, num_warps=4, num_stages=2))
                      for k in (4, 8, 16) for h in (1, 2) if h <= inputs["group"]]
        if not self.quick and programs <= 64:
            cands += [(A_SPLIT, dict(splits=k, kv_tile=self.block, head_split=h, **last,
                                     num_warps=w, num_stages=2))
                      for h in (2, 4) if h <= inputs["group"] for k in (8, 16) for w in (4, 8)]
            # half-block steps at two stages hold 64 KiB of shared memory: three programs per
            # SM, so a small grid's programs overlap each other's memory round trips
            cands += [(A_SPLIT, dict(splits=k, kv_tile=self.block // 2, head_split=2, **last,
                                     num_warps=4, num_stages=2))
                      for k in (4, 8, 16) if inputs["group"] >= 2]
            # two warps: each key step's softmax reductions and P·V layout change (about nine
            # barriers per step at four warps: `sm90_code.py attention`) wait on half as many
            cands += [(A_SPLIT, dict(splits=k, kv_tile=t, head_split=1, **last, num_warps=2,
                                     num_stages=st))
                      for k in (4, 8, 16) for t, st in ((self.block, 2), (self.block // 2, 3))]
        cands = [(v, dict(p, tma=False, table_first=False)) for v, p in cands]
        if self.tma and not self.quick:
            cands += [(v, dict(p, tma=True)) for v, p in cands]
        if mode == "decode" and programs <= ATTN_TABLE_FIRST_MAX_PROGRAMS and not self.quick:
            cands += [(v, dict(p, table_first=True)) for v, p in cands]
        cands = [(v, dict(p, max_registers=None)) for v, p in cands]
        if mode == "decode" and not self.quick:
            cap = attn_register_cap(inputs)
            cands += [(v, dict(p, max_registers=cap)) for v, p in cands
                      if cap and p["num_warps"] == 4 and not p["table_first"]
                      and self.attn_grid(inputs, programs, p) > 2 * self.sms]
        tiled = []
        if mode == "prefill":
            # the union by minima (not pipelined: its stages change nothing), or as sorted
            # keys, unpipelined (1 stage: two programs per SM) or over 2 or 3 stages
            walks = [(False, 2)] + ([] if self.quick else [(True, 1), (True, 2), (True, 3)])
            tiled = [(A_TILED, dict(lanes=n, sorted_union=su, splits=1, tma=False,
                                    num_warps=w, num_stages=st))
                     for n in (32, 64, 128) for w in (4, 8) for su, st in walks
                     if n >= max(16, inputs["group"])]
        elif Q > 1 and not self.quick:
            # a request's Q rows as one query tile walking the union of their lists (each
            # page loaded once where the rows share blocks, as an indexer's do): Q · G lanes
            # rounded up to a power of two (at most the variant's 256; where Q · G is not one,
            # tiles hold rows of two requests; a row chosen here serves every Q ≥ 2 of its
            # bucket at these lanes); the sorted walk also split in 2
            # and 4 up to 512 programs (one tile per request and KV head leaves small grids
            # a fraction of the SMs)
            n = min(pow2ceil(Q * inputs["group"]), 256)
            shares = (1, 2, 4) if programs <= 512 else (1,)
            tiled = [(A_TILED, dict(lanes=max(16, n), sorted_union=su, splits=k, tma=False,
                                    num_warps=w, num_stages=st))
                     for w in (4, 8) for su, st in ((False, 2), (True, 2), (True, 3))
                     for k in (shares if su else (1,))]
        if tiled:
            # the sorted walk's pipelined tiles also through the tensor memory accelerator
            cands += tiled + ([(v, dict(p, tma=True)) for v, p in tiled
                               if p["sorted_union"] and p["num_stages"] > 1]
                              if self.tma and not self.quick else [])
        table = ATTN_TABLES[mode]
        return self._with_anchors(cands, table, self.attn_bucket(mode, inputs, programs, Q))

    # -- rows of the tables ----------------------------------------------------------------
    def point(self, table, bucket, hardware) -> tuple:
        """The policy point at a bucket's lower corner (value axes as they are; topk the measured
        one)."""
        values = {a: v if a in TABLES[table].values else v[0] for a, v in bucket.items()}
        values["hardware"] = hardware
        if table in ("index_score", "index_topk", P_TOPK, P_ONE):
            values["topk"] = self.topk
        # by axis name: the policy's axis order is the registry's business
        return tuple(values[a.name] for a in self.reg.policies[table].axes)

    def row(self, table, bucket, hardware):
        """(choice, params) a hardware target's table gives at the bucket's lower corner."""
        rule = lookup(self.reg.policies[table], self.reg.tables[table],
                      self.point(table, bucket, hardware))
        return self.choice_of(table, rule.variant), dict(rule.params)

    def default(self, table, bucket):
        """The default row: what the generic target launches there."""
        return self.row(table, bucket, "generic")

    def current(self, table, bucket):
        """This target's current row (None for a target with no measured rows yet)."""
        return self.row(table, bucket, self.target.name) if self.measured_here else None

    def choice_of(self, table, variant) -> str:
        """The row's kernel (router) or variant (decode) for a dispatched variant name."""
        if table != "router_gemm":
            return variant
        return rg.SPLITK if variant.startswith("router_gemm_splitk_") else rg.PER_EXPERT

    def completed(self, choice, params) -> dict:
        """A run's candidate with the launch parameters its variant gained since filled in
        from the variant's defaults (what that launch ran): runs measured before a parameter
        existed still compare with newer ones."""
        variant = self.reg.variants.get(choice)
        if variant is None or not variant.defaults:
            return params
        return {**{k: v for k, v in variant.defaults.items() if k not in params}, **params}

    def _with_anchors(self, cands, table, bucket) -> list:
        """Candidates plus the default and the current row (once each): the noise rule can only
        keep the default if it was measured, and a re-tune must beat the incumbent. ``near``
        (a target with measured rows): only the candidates one launch parameter away from the
        current row (a cheap re-tune after a variant gains a parameter)."""
        current = self.current(table, bucket)
        if self.near and current is not None:
            cur = self.completed(*current)
            cands = [c for c in cands if c[0] == current[0] and sum(
                1 for k, v in self.completed(*c).items() if cur.get(k) != v) <= 1]
        seen = {key(*c) for c in cands}
        for anchor in (self.default(table, bucket), self.current(table, bucket)):
            if anchor is not None and key(*anchor) not in seen:
                seen.add(key(*anchor))
                cands.append(anchor)
        return cands

    def scorer_candidates_at(self, R, Q, mb) -> list:
        bucket = self.score_bucket(R, Q, mb)
        return self._with_anchors(self.scorer_candidates(R, Q, mb, bucket["max_block"]),
                                  "index_score", bucket)

    def selector_candidates_at(self, R, Q, mb) -> list:
        cands = self.selector_candidates(mb)
        for bucket in self.topk_buckets(R, Q, mb):
            cands = self._with_anchors(cands, "index_topk", bucket)
        return cands

    def fixed_selector(self, R, Q, mb) -> dict:
        """The selector scorer candidates are timed with: the one this target's table picks
        here (pdl included), so two-kernel candidates are not judged with a slower selector
        than they run with; the generic one for a new target."""
        bucket = self.selector_buckets(R, Q, mb)[0]
        return (self.current("index_topk", bucket) or self.default("index_topk", bucket))[1]
