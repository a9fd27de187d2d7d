#!/usr/bin/env python3
"""Is the single-launch decode variant (index_decode_fused: the last scorer program of a request
selects its rows) worth a wider topk_tile at long contexts? Times it with launch parameters
beyond the spec's range next to what the sm_90 tables dispatch now, on the H200, and checks
that both give the same ids, page-16 table and context lengths.

    python3 tools/explore_fused.py --scenarios 11:131072:1,16:131072:4 --chunks 128,256,512
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import common  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default="11:131072:1,16:131072:4",
                   type=common.int_groups)
    p.add_argument("--chunks", type=common.int_list, default=(128, 256, 512))
    p.add_argument("--options", default=((4, 2), (8, 2)),
                   type=common.int_groups,
                   help="num_warps:num_stages,...")
    args = p.parse_args(argv)
    common.setup(False)
    import torch

    import generated
    from generated import index_fused, index_score

    empty = common.empty_kernel_us()["median_us"]
    print(f"empty kernel {empty:.2f} µs", flush=True)
    for R, ctx, Q in args.scenarios:
        sc = bench.Scenario(R, ctx, Q)
        inp = bench.make_decode_inputs(sc, "cuda")
        table_fn = bench.ours_fn(generated, sc, inp, "sm_90")
        info = generated.explain_index_decode("sm_90", "bf16", "bf16", bench.D, R,
                                              sc.max_block, sc.total_q, 1, bench.TOPK, Q)
        launch = {k: info.get(k) for k in ("scorer", "kv_chunks", "program_budget", "fused",
                                           "topk_chunks", "topk_tile", "pdl")}
        t = common.time_graph(table_fn, reps=30)["median_us"]
        table_fn()
        torch.cuda.synchronize()
        want = (inp["out"].clone(), inp["table"].clone(), inp["ctx_out"].clone())
        print(f"{sc.name}: table {t:7.2f} µs {launch}", flush=True)
        scores = index_score.alloc_scores(1, sc.total_q, sc.max_seq_len, "cuda")
        counter = torch.zeros(R, dtype=torch.int32, device="cuda")
        block_k = 1 << (sc.max_block - 1).bit_length()
        for chunks in args.chunks:
            for w, s in args.options:
                def fn():
                    return index_fused.launch_index_fused(
                        inp["idx_q"], inp["cache"], inp["block_table"], inp["seq_lens"],
                        scores, inp["out"], bench.TOPK, bench.INIT_BLOCKS, bench.LOCAL_BLOCKS,
                        sc.Q, sc.Q, num_kv_chunks=chunks, block_k=block_k,
                        completion_counter=counter, num_warps=w, num_stages=s,
                        attention_block_table=inp["attn_table"],
                        sparse_block_table_out=inp["table"],
                        sparse_context_lens_out=inp["ctx_out"], block_page_stride=8)
                for x in (inp["out"], inp["table"], inp["ctx_out"]):
                    x.fill_(-7)
                try:
                    tf = common.time_graph(fn, reps=30)["median_us"]
                except Exception as e:  # noqa: BLE001
                    print(f"  fused c{chunks} tile{block_k} w{w} s{s}: ERROR {e}", flush=True)
                    continue
                same = all(torch.equal(a, b) for a, b in zip(
                    (inp["out"], inp["table"], inp["ctx_out"]), want))
                print(f"  fused c{chunks} tile{block_k} w{w} s{s}: {tf:7.2f} µs "
                      f"({tf - t:+.2f} vs table) {'same' if same else 'DIFFERENT'} results",
                      flush=True)
        del inp, scores
        common.free_memory()


if __name__ == "__main__":
    main()
