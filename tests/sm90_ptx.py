"""Compile generated kernels for sm_90 without a GPU and report PTX facts (run in a subprocess
without TRITON_INTERPRET: the interpreter replaces @triton.jit functions).

    python3 tests/sm90_ptx.py  ->  JSON {case: {instruction: present}, router_<x dtype>: {...}}
"""
from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]
from sm90_code import attention as attention_kernel, compile_kernel, facts as sass_facts, \
    router as router_kernel, tiled as tiled_kernel  # noqa: E402

from generated import index_fused, index_score, index_topk, sparse_attn  # noqa: E402
from generated.dispatch import ROUTER_GEMM  # noqa: E402

INSTRUCTIONS = ("griddepcontrol.wait", "griddepcontrol.launch_dependents", "prefetch.global.L2")


def _ptx(kernel, pointer_types: dict, constexprs: dict, **options) -> str:
    return compile_kernel(kernel, pointer_types, constexprs, **options).asm["ptx"]


def selector(pdl: bool, emit: bool, dependents: bool = False) -> str:
    return _ptx(index_topk._topk_fused_kernel, {"score_ptr": "*fp32", "partial_ptr": "*i64"},
                dict(TOPK=16, T=16, BLOCK_SIZE_K=128, NUM_CHUNKS=4, SINGLE_TILE=False,
                     ADAPTIVE_MERGE=True, EMIT_SPARSE_TABLE=emit, BLOCK_PAGE_STRIDE=8, PDL=pdl,
                     PREFETCH_L2=emit, LAUNCH_DEPENDENTS=dependents), num_warps=4, num_stages=2)


def fused(dependents: bool) -> str:
    return _ptx(index_fused._index_fused_kernel,
                {"idx_q_ptr": "*bf16", "kv_ptr": "*bf16", "scores_ptr": "*fp32"},
                dict(H=1, D=128, BLOCK_SIZE_Q=4, LANES=16, PRODUCTS="native", TOPK=16, T=16,
                     BLOCK_SIZE_K=256, EMIT_SPARSE_TABLE=False, BLOCK_PAGE_STRIDE=8,
                     LAUNCH_DEPENDENTS=dependents), num_warps=4, num_stages=2)


def attention(pdl: str, merge_kernel: bool = False, table_held: int = 0) -> str:
    return _ptx(sparse_attn._sparse_attn_kernel,
                {"q_ptr": "*bf16", "kv_ptr": "*bf16", "out_ptr": "*bf16", "part_ptr": "*fp32"},
                dict(G=16, GP=16, D=128, BLOCK_N=128, SPLITS=4, MODE="decode", SCALES="none",
                     DOT="native", PDL=pdl, TOPK_P=16, MERGE_KERNEL=merge_kernel,
                     LAUNCH_DEPENDENTS=merge_kernel, TMA=False, kv_desc=None,
                     TABLE_HELD=table_held, FP8_PTX=False, V_PAIRS=False),
                num_warps=4, num_stages=2)


def attention_tma(cache: str) -> dict:
    """How the split kernel's K and V tiles arrive, by pointers or through the tensor
    descriptor (`tma`), with a cache of ``cache``: the PTX's bulk tensor copies and per-thread
    async copies."""
    out = {}
    for tma in (False, True):
        ptx = attention_kernel(group=16, kv_tile=64, splits=4, stages=3, cache=cache,
                               tma=tma).asm["ptx"]
        out["tma" if tma else "pointers"] = {
            "bulk_tensor_copies": ptx.count("cp.async.bulk.tensor"),
            "async_copies": ptx.count("cp.async.cg"), "mbarrier_waits": ptx.count("mbarrier.try_wait")}
    return out


def attention_merge(pdl: bool) -> str:
    return _ptx(sparse_attn._sparse_attn_merge_kernel,
                {"part_ptr": "*fp32", "out_ptr": "*bf16"}, dict(D=128, SPLITS=4, DEPENDENT=pdl),
                num_warps=1, num_stages=1)


def scorer(launch_dependents: bool) -> str:
    return _ptx(index_score._score_split_kernel,
                {"idx_q_ptr": "*bf16", "kv_ptr": "*bf16", "scores_ptr": "*fp32"},
                dict(H=1, D=128, BLOCK_SIZE_Q=4, LANES=16, PRODUCTS="native", STATIC_CHUNKS=True,
                     LAUNCH_DEPENDENTS=launch_dependents), num_warps=4, num_stages=2)


def router(x_dtype: str):
    """The per-expert router kernel with the launch sm_90's table takes for (6144, 256) at M = 5
    with a bf16 x, for either x dtype (the comparison holds the launch fixed: only the load
    widths differ)."""
    p = ROUTER_GEMM.lookup("sm_90", (6144, 256), "bf16", 5).params
    return router_kernel((6144, 256), p["block_m"], p["block_k"], p["num_warps"], x_dtype,
                         block_e=p["block_e"])


def router_facts(kernel) -> dict:
    sass = sass_facts(kernel)
    return {"ptx_barriers": kernel.asm["ptx"].count("bar.sync"),
            "sass_barriers": sum(n for op, n in sass["ops"].items() if op.startswith("BAR")),
            "registers": sass["registers"],
            "spilled": sass["spill_stores"] + sass["spill_loads"]}


def main():
    cases = {"selector_pdl_emit": selector(True, True), "selector_plain": selector(False, False),
             "selector_pdl_dependents": selector(True, False, True),
             "fused_dependents": fused(True), "fused_plain": fused(False),
             "attention_any": attention("any"), "attention_ids": attention("ids"),
             "attention_plain": attention("none"),
             "attention_merge_kernel": attention("ids", True),
             "attention_ids_table_first": attention("ids", table_held=sparse_attn.TABLE_FIRST_MAX),
             "merge_pdl": attention_merge(True), "merge_plain": attention_merge(False),
             "scorer_dependents": scorer(True), "scorer_plain": scorer(False)}
    facts = {name: {i: i in ptx for i in INSTRUCTIONS} for name, ptx in cases.items()}
    for name in ("attention_any", "attention_ids", "merge_pdl"):  # where the wait sits
        ptx = cases[name]
        facts[name + "_waits_before_any_load"] = \
            ptx.index("griddepcontrol.wait") < ptx.index("ld.global")
    for name in ("attention_ids", "attention_ids_table_first"):  # global loads before the wait
        ptx = cases[name]
        facts[name + "_loads_before_wait"] = \
            ptx[:ptx.index("griddepcontrol.wait")].count("ld.global")
    for name in ("attention_ids", "attention_merge_kernel"):  # the last arrival's atomic
        facts[name + "_atomic"] = "atom." in cases[name]
    for cache in ("bf16", "fp8e4m3"):
        facts[f"attention_tma_{cache}"] = attention_tma(cache)
    for x in ("bf16", "fp32"):
        facts[f"router_{x}"] = router_facts(router(x))
    # an expert tile of 4 against one expert per program, the rest of the launch equal
    for block_e in (1, 4):
        facts[f"router_block_e{block_e}"] = router_facts(router_kernel(
            (3072, 256), 4, 1024, 8, "bf16", block_e=block_e))
    # the attention's K/V tiles on a contiguous cache (the copy-rate rows' launch, G 8)
    got = sass_facts(attention_kernel(group=8, kv_tile=64, splits=8, stages=3))
    facts["attention_kv_loads"] = {op: n for op, n in got["ops"].items() if op.startswith("LDG")}
    facts["attention_kv64_loop_products"] = sum(n for op, n in got["loop_ops"].items()
                                                 if op.startswith("HMMA"))
    # a bf16 q over an fp8 cache: fp16 products, each pair of fp8 elements widened by one
    # instruction, the V tile before its trip through shared memory (not read back by bytes)
    ops = sass_facts(attention_kernel(group=16, splits=8, cache="fp8e4m3", merge_kernel=True,
                                      tma=True))["ops"]
    facts["attention_fp8_ops"] = {
        "pair_conversions": sum(n for op, n in ops.items() if op.startswith("F2FP.F16.E4M3")),
        "bf16_conversions": sum(n for op, n in ops.items() if op.startswith("F2F.BF16")),
        "byte_loads": sum(n for op, n in ops.items() if op.startswith(("LDS.U8", "LDS.S8"))),
        "fp16_products": sum(n for op, n in ops.items() if op == "HMMA.16816.F32"),
        "bf16_products": sum(n for op, n in ops.items() if op == "HMMA.16816.F32.BF16")}
    # scalar K and V scales (the 512-program rows' launch): where the kernel's Triton IR loads
    # them, before the loop over the key steps or in it
    ttir = attention_kernel(group=16, splits=2, stages=2, cache="fp8e5m2", tma=True,
                            scales="scalar").asm["ttir"]
    loop = ttir.index("scf.for")
    facts["attention_scalar_scale_loads"] = {
        p: {"before_loop": ttir[:loop].count(f"tt.load %{p} "),
            "in_loop": ttir[loop:].count(f"tt.load %{p} ")} for p in ("k_scale_ptr", "v_scale_ptr")}
    # per-token scales under fp16 probabilities: the reductions before the loop over the key
    # steps and in it, at a launch whose splits take several steps (the scales' range once per
    # split) and at one whose splits take one (each tile's own range, in the step)
    facts["attention_per_token_reductions"] = {}
    for splits in (2, 16):
        ttir = attention_kernel(group=16, splits=splits, cache="fp8e4m3", scales="per_token",
                                merge_kernel=True).asm["ttir"]
        loop = ttir.index("scf.for")
        facts["attention_per_token_reductions"][splits] = {
            "before_loop": ttir[:loop].count("tt.reduce"), "in_loop": ttir[loop:].count("tt.reduce")}
    # the query-tiled kernel at 128 lanes of 8 warps and 3 stages: walking its union as sorted
    # keys it streams the tiles by asynchronous copies (pipelined), or with tma by bulk tensor
    # copies, and at the most keys it sorts (SORTED_UNION_MAX_KEYS over 8 rows: a list of
    # 128) fits sm_90's shared memory without spills; walking by minima (a while loop) it
    # loads them to registers
    facts["tiled_walks"] = {}
    most = sparse_attn.SORTED_UNION_MAX_KEYS // 8
    for walk, topk, tma in (("sorted", most, False), ("sorted_tma", most, True),
                            ("minima", 16, False)):
        compiled = tiled_kernel(group=16, lanes=128, warps=8, stages=3, topk=topk,
                                sorted_union=walk != "minima", tma=tma)
        got = sass_facts(compiled)
        facts["tiled_walks"][walk] = {
            "async_copies": sum(n for op, n in got["ops"].items() if op.startswith("LDGSTS")),
            "bulk_tensor_copies": compiled.asm["ptx"].count("cp.async.bulk.tensor"),
            "shared": compiled.metadata.shared, "spilled": got["spill_stores"]}
    # the sm_90 table's query-tiled launch for G 8 over an fp8 e4m3 cache (the bench's 8/1
    # prefill row): 64 lanes of 4 warps have no register to spare there, and spills took
    # 1.15x the time (K rows past the last key now share V's offsets: `_k_tokens`)
    from generated import sparse_attention
    launch = sparse_attention.explain_sparse_attn("prefill", "sm_90", "bf16", "fp8e4m3", "none",
                                                  8, 128, 2048)
    assert launch["variant"] == "sparse_attn_tiled", launch
    got = sass_facts(tiled_kernel(group=8, lanes=launch["lanes"], warps=launch["num_warps"],
                                  stages=launch["num_stages"], cache="fp8e4m3",
                                  sorted_union=launch["sorted_union"], tma=launch["tma"]))
    facts["tiled_fp8_g8_spilled"] = got["spill_stores"] + got["spill_loads"]
    # an fp16 q over an fp16 cache against a bf16 q's, the query-tiled kernel at the table's
    # bf16 launch: its products, barriers, shared-memory traffic and fused multiply-adds (P·V
    # accumulating into the running output; scaled back after each product it took one
    # [lanes, D] multiply-add per step more)
    facts["tiled_16_bit_ops"] = {}
    for dtype in ("bf16", "fp16"):
        ops = sass_facts(tiled_kernel(group=16, lanes=128, warps=8, stages=3, q=dtype,
                                      cache=dtype, tma=True))["ops"]
        facts["tiled_16_bit_ops"][dtype] = {
            op: n for op, n in ops.items()
            if op.startswith(("HGMMA", "BAR", "LDS", "STS", "LDSM")) or op == "FFMA"}
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
