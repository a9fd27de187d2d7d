"""Compile generated kernels for sm_90 without a GPU and report PTX facts (run in a subprocess
without TRITON_INTERPRET: the interpreter replaces @triton.jit functions).

    python3 tests/sm90_ptx.py  ->  JSON {case: {instruction: present}, "router_barriers": ...}
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from generated import index_score, index_topk, moe_router  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
INSTRUCTIONS = ("griddepcontrol.wait", "griddepcontrol.launch_dependents", "prefetch.global.L2")


def _ptx(kernel, pointer_types: dict, constexprs: dict, aligned=False, **options) -> str:
    """PTX of ``kernel``; ``aligned``: every pointer 16-byte aligned, as the JIT specializes
    the pointers of aligned tensors (what lets loads be vectorized)."""
    names = kernel.arg_names
    signature = {n: ("constexpr" if n in constexprs else
                     pointer_types.get(n, "*i32") if n.endswith("_ptr") else "i32")
                 for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names
             if aligned and signature[n].startswith("*")}
    src = ASTSource(fn=kernel, signature=signature,
                    constexprs={(names.index(n),): v for n, v in constexprs.items()}, attrs=attrs)
    return triton.compile(src, target=TARGET, options=options).asm["ptx"]


def selector(pdl: bool, emit: bool) -> str:
    return _ptx(index_topk._topk_fused_kernel, {"score_ptr": "*fp32", "partial_ptr": "*i64"},
                dict(TOPK=16, T=16, BLOCK_SIZE_K=128, NUM_CHUNKS=4, SINGLE_TILE=False,
                     ADAPTIVE_MERGE=True, EMIT_SPARSE_TABLE=emit, BLOCK_PAGE_STRIDE=8, PDL=pdl,
                     PREFETCH_L2=emit), num_warps=4, num_stages=2)


def scorer(launch_dependents: bool) -> str:
    return _ptx(index_score._score_split_kernel,
                {"idx_q_ptr": "*bf16", "kv_ptr": "*bf16", "scores_ptr": "*fp32"},
                dict(H=1, D=128, BLOCK_SIZE_Q=4, LANES=16, STATIC_CHUNKS=True,
                     LAUNCH_DEPENDENTS=launch_dependents), num_warps=4, num_stages=2)


def router(x_dtype: str) -> str:
    """The per-expert router kernel of sm_90's (6144, 256) row for M 5–16."""
    return _ptx(moe_router._router_gemm_kernel,
                {"x_ptr": x_dtype, "w_ptr": "*fp32", "out_ptr": "*fp32"},
                dict(HIDDEN_SIZE=6144, NUM_EXPERTS=256, BLOCK_M=4, BLOCK_K=512), aligned=True,
                num_warps=4, num_stages=1)


def main():
    cases = {"selector_pdl_emit": selector(True, True), "selector_plain": selector(False, False),
             "scorer_dependents": scorer(True), "scorer_plain": scorer(False)}
    facts = {name: {i: i in ptx for i in INSTRUCTIONS} for name, ptx in cases.items()}
    facts["router_barriers"] = {x: router(f"*{x}").count("bar.sync") for x in ("bf16", "fp32")}
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
