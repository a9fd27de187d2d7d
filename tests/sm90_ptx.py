"""Compile generated kernels for sm_90 without a GPU and report PTX facts (run in a subprocess
without TRITON_INTERPRET: the interpreter replaces @triton.jit functions).

    python3 tests/sm90_ptx.py  ->  JSON {case: {instruction: present}}
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from generated import index_score, index_topk  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
INSTRUCTIONS = ("griddepcontrol.wait", "griddepcontrol.launch_dependents", "prefetch.global.L2")


def _ptx(kernel, pointer_types: dict, constexprs: dict, **options) -> str:
    names = kernel.arg_names
    signature = {n: ("constexpr" if n in constexprs else
                     pointer_types.get(n, "*i32") if n.endswith("_ptr") else "i32")
                 for n in names}
    src = ASTSource(fn=kernel, signature=signature,
                    constexprs={(names.index(n),): v for n, v in constexprs.items()})
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


def main():
    cases = {"selector_pdl_emit": selector(True, True), "selector_plain": selector(False, False),
             "scorer_dependents": scorer(True), "scorer_plain": scorer(False)}
    print(json.dumps({name: {i: i in ptx for i in INSTRUCTIONS} for name, ptx in cases.items()}))


if __name__ == "__main__":
    main()
