"""attn_ablation's NVIDIA-only variants compiled for sm_90 without a GPU (those of an fp8
cache's widening over an e4m3 cache) (run in a subprocess
without TRITON_INTERPRET), and its timeline summary on records laid out as the timeline
variant writes them.

    python3 tests/ablation_sm90.py  ->  JSON {"ptx": {variant: {instruction: count}}, "timeline": {...}}
"""
from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]
import torch  # noqa: E402

# the timeline variant keeps its records on the GPU: here they stay on the CPU
_zeros = torch.zeros
torch.zeros = lambda *shape, device=None, **kw: _zeros(*shape, **kw)

import attn_ablation as ab  # noqa: E402
import generated.sparse_attn as gsa  # noqa: E402
from sm90_code import attention, compile_kernel  # noqa: E402

INSTRUCTIONS = ("%globaltimer", "%smid", "barrier.cluster", "mapa.shared::cluster",
                "ld.shared::cluster", "cp.async.bulk.prefetch.L2", "cvt.rn.f16x2.e4m3x2",
                "prmt.b32", "cp.async.bulk.tensor")


def main():
    kernel = gsa._sparse_attn_kernel
    ptx = {}
    for name in ab.NVIDIA_ONLY:
        mod = ab.build(name, ab.VARIANTS[name])  # its edits apply
        if "_per_sm" in name:  # host-side launch changes: the kernel as generated
            continue
        gsa._sparse_attn_kernel = mod._sparse_attn_kernel
        try:
            # (an fp8 cache's widening variants over an e4m3 cache)
            # (k_pairs_tma: K's pairs through its descriptor; the others by pointers)
            text = attention(group=16, kv_tile=128, splits=2, stages=2,
                             cache="fp8e4m3" if name in ab.FP8_ONLY else "bf16",
                             tma=name == "k_pairs_tma",
                             pairs_desc=name == "k_pairs_tma").asm["ptx"]
        finally:
            gsa._sparse_attn_kernel = kernel
        ptx[name] = {k: text.count(k) for k in INSTRUCTIONS}
    # --dsplit's attention: four programs per (KV head, row) summing their scores through
    # distributed shared memory, and the same without the exchange
    dsplit = ab._dsplit_module()._dsplit_attention
    for exchange in (True, False):
        text = compile_kernel(
            dsplit, {"q_ptr": "*bf16", "kv_ptr": "*bf16", "pages_ptr": "*i32",
                     "out_ptr": "*bf16", "sm_scale": "fp32"},
            dict(TOPK=16, D=128, C=4, G=16, GP=16, EXCHANGE=exchange, STAGES=3),
            div16=("stride_p", "stride_t", "stride_h", "v_off"), num_warps=4,
            num_stages=1).asm["ptx"]
        ptx[f"dsplit{'' if exchange else '_no_exchange'}"] = {
            k: text.count(k) for k in INSTRUCTIONS + ("cp.async.cg",)}
    # three programs (start, listed, looped, end in ns; SM), then another launch's leftovers
    records = torch.tensor([1000, 2000, 5000, 6000, 7, 1500, 2700, 6500, 9000, 7,
                            2000, 2600, 4000, 4500, 9] + [99] * 5, dtype=torch.int64)
    print(json.dumps({"ptx": ptx, "timeline": ab.timeline_summary(records, 3)}))


if __name__ == "__main__":
    main()
