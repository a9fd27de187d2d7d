#!/usr/bin/env python3
"""Prototype (not generated, timing study only): a decode scorer whose resident programs take
work units (a few blocks of one request) from an atomic counter until none is left, instead of a
fixed grid. Question: does dynamic scheduling shorten the scorer's drain at 128k contexts, where
the split scorer streams at ~4.3 TB/s against ~4.6 at 64 requests (ncu, NOTES.md)?

Every block is scored by the generated ``_score_request_range`` (same ``_score_block``), so the
scores must be bitwise identical to the split scorer's; the tool checks that.

    python3 tools/explore_dynamic.py --scenarios 11:131072:1,16:131072:4 --units 2,4,8
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import common  # noqa: E402

common.setup(False)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from generated import index_score as isc  # noqa: E402
from generated.index_score import _score_request_range  # noqa: E402


@triton.jit(do_not_specialize=["num_units", "units_per_req", "unit_blocks", "decode_query_len",
                               "init_blocks", "local_blocks"])
def _score_dynamic_kernel(
    idx_q_ptr, kv_ptr, block_table_ptr, seq_lens_ptr, scores_ptr,
    work_ptr,  # int32 [2]: next unit, programs finished; zero between launches
    num_units, units_per_req, unit_blocks, decode_query_len, init_blocks, local_blocks,
    stride_qt, stride_qh, stride_qd,
    stride_kp, stride_kt, stride_kd,
    stride_bt,
    stride_sh, stride_st, stride_sb,
    H: tl.constexpr, D: tl.constexpr, BLOCK_SIZE_Q: tl.constexpr, LANES: tl.constexpr,
):
    unit = tl.atomic_add(work_ptr, 1, sem="relaxed")
    while unit < num_units:
        # take the next unit now: its round trip overlaps this unit's loads
        nxt = tl.atomic_add(work_ptr, 1, sem="relaxed")
        req = unit // units_per_req
        seq_len = tl.load(seq_lens_ptr + req)
        nb_req = (tl.maximum(seq_len, 0) + 127) // 128
        blk_start = (unit % units_per_req) * unit_blocks
        blk_end = tl.minimum(blk_start + unit_blocks, nb_req)
        _score_request_range(
            req, blk_start, blk_end, blk_start < blk_end, seq_len, decode_query_len,
            init_blocks, local_blocks,
            idx_q_ptr, kv_ptr, block_table_ptr, scores_ptr,
            stride_qt, stride_qh, stride_qd, stride_kp, stride_kt, stride_kd, stride_bt,
            stride_sh, stride_st, stride_sb, H, D, BLOCK_SIZE_Q, LANES)
        unit = nxt
    # the last program to finish leaves the counters at zero for the next launch
    done = tl.atomic_add(work_ptr + 1, 1, sem="acq_rel")
    if done == tl.num_programs(0) - 1:
        tl.atomic_xchg(work_ptr, 0, sem="relaxed")
        tl.atomic_xchg(work_ptr + 1, 0, sem="relaxed")


def launch_dynamic(q, cache, table, seq, scores, Q, max_block, *, programs, unit_blocks,
                   work, num_warps, num_stages):
    R = int(seq.shape[0])
    units_per_req = triton.cdiv(max_block, unit_blocks)
    H, D, bq, lanes = isc._tile_params(q, Q)
    _score_dynamic_kernel[(programs,)](
        q, cache, table, seq, scores, work,
        R * units_per_req, units_per_req, unit_blocks, Q, bench.INIT_BLOCKS, bench.LOCAL_BLOCKS,
        *isc._common_args(q, cache, table, scores),
        H=H, D=D, BLOCK_SIZE_Q=bq, LANES=lanes, num_warps=num_warps, num_stages=num_stages)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default="11:131072:1,16:131072:4",
                   type=common.int_groups)
    p.add_argument("--units", type=common.int_list, default=(2, 4, 8),
                   help="blocks per work unit")
    p.add_argument("--per-sm", type=common.int_list, default=(3, 4),
                   help="resident programs per SM")
    p.add_argument("--options", default=((4, 2), (4, 3)),
                   type=common.int_groups,
                   help="num_warps:num_stages,...")
    p.add_argument("--split", default="512:4:2", help="reference split scorer chunks:warps:stages")
    args = p.parse_args(argv)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    empty = common.empty_kernel_us()["median_us"]
    print(f"empty kernel {empty:.2f} µs, {sms} SMs", flush=True)
    work = torch.zeros(2, dtype=torch.int32, device="cuda")
    ((chunks, sw, ss),) = common.int_groups(args.split)
    for R, ctx, Q in args.scenarios:
        sc = bench.Scenario(R, ctx, Q)
        inp = bench.make_decode_inputs(sc, "cuda")
        q, cache, table, seq = inp["idx_q"], inp["cache"], inp["block_table"], inp["seq_lens"]
        nbytes = R * ctx * bench.D * 2
        ref = isc.alloc_scores(1, sc.total_q, ctx, "cuda").fill_(-7.0)
        isc.launch_score_split(q, cache, table, seq, ref, bench.INIT_BLOCKS, bench.LOCAL_BLOCKS,
                               Q, Q, num_kv_chunks=chunks, num_warps=sw, num_stages=ss)
        t = common.time_graph(lambda: isc.launch_score_split(
            q, cache, table, seq, ref, bench.INIT_BLOCKS, bench.LOCAL_BLOCKS, Q, Q,
            num_kv_chunks=chunks, num_warps=sw, num_stages=ss), reps=30)["median_us"]
        print(f"{sc.name}: split c{chunks} w{sw} s{ss} {t:7.2f} µs "
              f"({common.tb_per_s(nbytes, t, empty):.2f} TB/s after the empty kernel)",
              flush=True)
        for unit in args.units:
            for k in args.per_sm:
                for w, s in args.options:
                    got = isc.alloc_scores(1, sc.total_q, ctx, "cuda").fill_(-7.0)

                    def fn():
                        launch_dynamic(q, cache, table, seq, got, Q, sc.max_block,
                                       programs=sms * k, unit_blocks=unit, work=work,
                                       num_warps=w, num_stages=s)
                    try:
                        td = common.time_graph(fn, reps=30)["median_us"]
                    except Exception as e:  # noqa: BLE001
                        print(f"  dynamic u{unit} {k}/SM w{w} s{s}: ERROR {e}", flush=True)
                        continue
                    same = torch.equal(got, ref) and int(work.abs().sum()) == 0
                    print(f"  dynamic u{unit} {k}/SM w{w} s{s}: {td:7.2f} µs ({td - t:+.2f}; "
                          f"{common.tb_per_s(nbytes, td, empty):.2f} TB/s) "
                          f"{'bitwise same' if same else 'DIFFERENT'}", flush=True)
                    del got
        del inp, ref
        common.free_memory()


if __name__ == "__main__":
    main()
