"""Prefill indexer benchmark (issue 19): our two-call path (score, then top-k) and the one-call
`index_prefill` against vLLM's measured times (tools/targets.py VLLM_PREFILL_US), on fresh
inputs checked against a float64 reference first.

    python3 tools/bench_prefill.py --out DIR            # every row, bf16, plus input kinds
    python3 tools/bench_prefill.py --out DIR --quick    # three rows
    python3 tools/bench_prefill.py --out DIR --study    # also time launch candidates per row
    python3 tools/bench_prefill.py --out DIR --smoke    # CPU interpreter, tiny rows
    python3 tools/bench_prefill.py --condense RUN/bench_prefill.json docs/results/X.json
        # a result of record: per row µs, TFLOP/s, checks, ratios (no study candidates)

Per row it prints the scorer's µs and TFLOP/s (2 · D · H · visible keys summed over tokens:
the useful products), the selector's µs, both, the streaming path, the table's choice, the
scratch bytes of each path (the two-call path's [H, T, S] fp32 scores; streaming: none) and
the ratio to vLLM's "both". GPU time by CUDA-graph replay with L2 flushed, median of many,
after a settle pass (tools/common.py). Writes DIR/bench_prefill.json.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from specs.index_decode import CONSTANTS  # noqa: E402
from tools import common, targets  # noqa: E402

BLOCK = dict(CONSTANTS)["SPARSE_BLOCK_SIZE"]
D = 128
TOPK = 16
INIT_BLOCKS, LOCAL_BLOCKS = 0, 1
CHECK_ROWS = 48  # rows per scenario checked against float64 (first/last rows, block edges)
KIND_ROWS = ((1, 0, 8192, 1), (4, 32768, 2048, 1), (1, 122880, 8192, 1))
KINDS = {"bf16": ("bf16", "bf16"), "fp8kv": ("bf16", "fp8e4m3"), "fp8": ("fp8e4m3", "fp8e4m3"),
         "fp32": ("fp32", "fp32")}
SMOKE_ROWS = ((2, 100, 30, 1), (1, 120, 40, 2))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="output directory (bench_prefill.json)")
    p.add_argument("--condense", nargs=2, metavar=("RUN_JSON", "RECORD_JSON"),
                   help="write a result of record from a run's bench_prefill.json and exit")
    p.add_argument("--source", default="", help="what the condensed run was (--condense)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--study", action="store_true", help="time launch candidates per row")
    p.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny rows")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--kinds", default="bf16,fp8kv,fp8,fp32")
    return p.parse_args(argv)


def make_inputs(row, kind, device, seed=0):
    import torch

    R, prefix, chunk, H = row
    q_name, cache_name = KINDS[kind]
    g = torch.Generator(device="cpu").manual_seed(seed)
    seq = prefix + chunk
    mb = common.cdiv(seq, BLOCK)
    pages = R * mb + 16
    T = R * chunk
    cache = torch.randn((pages, BLOCK, D), generator=g)
    q = torch.randn((T, H, D), generator=g)
    table = torch.randperm(pages, generator=g)[:R * mb].view(R, mb).to(torch.int32)
    cu = torch.arange(R + 1, dtype=torch.int32) * chunk
    return dict(
        idx_q=q.to(common.torch_dtype(q_name)).to(device),
        index_kv_cache=cache.to(common.torch_dtype(cache_name)).to(device),
        block_table=table.to(device), cu_seqlens_q=cu.to(device),
        seq_lens=torch.full((R,), seq, dtype=torch.int32, device=device),
        prefix_lens=torch.full((R,), prefix, dtype=torch.int32, device=device),
        max_query_len=chunk, max_seq_len=seq, num_kv_heads=H)


def check_rows(row):
    """Rows checked against float64: each request's first and last rows and rows at block
    edges of their position, spread over the requests."""
    R, prefix, chunk, H = row
    picks = set()
    for r in range(R):
        base = r * chunk
        for j in (0, 1, chunk - 1, chunk // 2, (128 - prefix % 128) % 128, (256 - prefix % 128) % 128):
            if 0 <= j < chunk:
                picks.add(base + j)
    step = max(1, (R * chunk) // CHECK_ROWS)
    picks.update(range(0, R * chunk, step))
    return sorted(picks)[: 2 * CHECK_ROWS]


def visible_keys(row) -> int:
    R, prefix, chunk, H = row
    return R * sum(prefix + j + 1 for j in range(chunk))


def check(generated, inp, row, ids_by_path):
    """Scores within 1e-6 · Σ|q·k| of float64 on the checked rows; ids equal the exact selection
    where the k-th / (k+1)-th gap exceeds 1e-5; every path's ids equal the two-call ids."""
    import torch
    from reference_prefill import kth_gap, ref_prefill_scores, ref_prefill_topk

    rows = check_rows(row)
    args = {k: inp[k] for k in ("idx_q", "index_kv_cache", "block_table", "cu_seqlens_q",
                                "seq_lens", "prefix_lens")}
    score = generated.index_prefill_score(**args, max_query_len=inp["max_query_len"],
                                          max_seq_len=inp["max_seq_len"],
                                          num_kv_heads=inp["num_kv_heads"])
    ref = ref_prefill_scores(**args, max_seq_len=inp["max_seq_len"], rows=rows)
    scale = ref_prefill_scores(**args, max_seq_len=inp["max_seq_len"], rows=rows, absolute=True)
    mb = ref.shape[2]
    known = ~torch.isnan(ref)
    err = (score[:, :, :mb].double() - ref).abs()[known]
    bound = (1e-6 * scale[known] + 1e-30)
    worst = float((err / bound).max()) if err.numel() else 0.0
    problems = []
    if worst > 1.0:
        problems.append(f"score error {worst:.2f}× the 1e-6·Σ|q·k| bound")
    ref_ids = ref_prefill_topk(ref.float(), inp["cu_seqlens_q"], inp["prefix_lens"], TOPK,
                               INIT_BLOCKS, LOCAL_BLOCKS, rows=rows)
    H = ref.shape[0]
    two = ids_by_path["two_kernels"].cpu()
    for r in rows:
        p = inp["prefix_lens"][0].item() + r % inp["max_query_len"]
        nb = p // BLOCK + 1
        for h in range(H):
            vals = ref[h, r, :nb].float().cpu()
            if LOCAL_BLOCKS:
                vals[max(nb - LOCAL_BLOCKS, 0):] = float("inf")
            if kth_gap(vals, nb, TOPK) > 1e-5 and not torch.equal(two[h, r], ref_ids[h, r]):
                problems.append(f"ids of row {r} head {h} differ from float64")
                break
    for name, ids in ids_by_path.items():
        if not torch.equal(ids.cpu(), two):
            problems.append(f"{name} ids differ from the two-call ids")
    return {"ok": not problems, "problems": problems[:5], "score_err_vs_bound": worst,
            "rows_checked": len(rows)}


def run_row(generated, row, kind, device, reps, study, smoke):
    import torch
    from generated import prefill_indexer as pi

    inp = make_inputs(row, kind, device)
    R, prefix, chunk, H = row
    T, S = R * chunk, common.cdiv(common.cdiv(inp["max_seq_len"], BLOCK), 16) * 16
    args = [inp[k] for k in ("idx_q", "index_kv_cache", "block_table", "cu_seqlens_q",
                             "seq_lens", "prefix_lens", "max_query_len", "max_seq_len",
                             "num_kv_heads")]
    sel_args = (inp["cu_seqlens_q"], inp["prefix_lens"], inp["max_query_len"], TOPK,
                INIT_BLOCKS, LOCAL_BLOCKS)
    hw = common.detected_hardware(smoke)
    explain = generated.explain_index_prefill(hw, inp["idx_q"].dtype,
                                              inp["index_kv_cache"].dtype, D, H, T,
                                              common.cdiv(inp["max_seq_len"], BLOCK), TOPK)
    # the streaming kernel is timed on every row (the table's launch where it streams; else a
    # 64-lane tile, unpipelined for fp32 products, whose 3xTF32 tiles fill shared memory)
    stream_launch = {"variant": "index_prefill_stream", "block_m": 64 // H, "topk_tile": 16,
                     "num_warps": 4, "num_stages": 1 if kind == "fp32" else 3}
    if explain["path"] == "stream":
        stream_launch.update({k: explain[k] for k in ("block_m", "topk_tile", "num_warps",
                                                      "num_stages")})
    two_launch = {"variant": "index_prefill", "score": None, "topk": None}
    ids = {"two_kernels": pi.index_prefill_with_launch(two_launch, *args, TOPK, INIT_BLOCKS,
                                                       LOCAL_BLOCKS),
           "stream": pi.index_prefill_with_launch(stream_launch, *args, TOPK, INIT_BLOCKS,
                                                  LOCAL_BLOCKS),
           "table": generated.index_prefill(*args, TOPK, INIT_BLOCKS, LOCAL_BLOCKS)}
    verdict = check(generated, inp, row, ids)
    score = generated.index_prefill_score(*args)
    out = torch.empty((H, T, TOPK), dtype=torch.int32, device=device)
    fns = {
        "score": lambda: generated.index_prefill_score(*args),
        "topk": lambda: generated.index_prefill_topk(score, *sel_args, out),
        "two_kernels": lambda: pi.index_prefill_with_launch(two_launch, *args, TOPK,
                                                            INIT_BLOCKS, LOCAL_BLOCKS, out),
        "stream": lambda: pi.index_prefill_with_launch(stream_launch, *args, TOPK,
                                                       INIT_BLOCKS, LOCAL_BLOCKS, out),
        "table": lambda: generated.index_prefill(*args, TOPK, INIT_BLOCKS, LOCAL_BLOCKS, out),
    }
    times = {name: common.time_op(fn, smoke=smoke, reps=reps)["median_us"]
             for name, fn in fns.items()}
    flops = 2.0 * D * H * visible_keys(row)
    vllm = targets.VLLM_PREFILL_US.get(row) if kind == "bf16" else None
    result = {"row": list(row), "kind": kind, "T": T, "S": S, "us": times,
              "score_tflops": flops / times["score"] / 1e6 if times["score"] else None,
              "stream_tflops": flops / times["stream"] / 1e6 if times["stream"] else None,
              "scratch_bytes": {"two_kernels": H * T * S * 4, "stream": 0},
              "table_path": explain["path"], "explain": explain, "check": verdict,
              "vllm_us": list(vllm) if vllm else None}
    if vllm:
        both = vllm[2]
        result["vs_vllm_both"] = {k: times[k] / both for k in ("two_kernels", "stream", "table")}
        limit = both * (targets.PREFILL_STREAM_RATIO if row == targets.PREFILL_LONG_ROW else 1.0)
        result["targets"] = [
            targets.verdict(targets.ISSUE19, "two-call µs", times["two_kernels"], targets.LE,
                            both, "µs"),
            targets.verdict(targets.ISSUE19, "index_prefill µs", times["table"], targets.LE,
                            limit, "µs")]
    if study:
        result["study"] = study_row(pi, args, score, sel_args, out, H, smoke, reps)
    del inp, score, out
    common.free_memory()
    return result


def study_row(pi, args, score, sel_args, out, H, smoke, reps):
    """µs of launch candidates: scorer (block_m, kv_splits, warps, stages), streaming
    (block_m, warps, stages) and selector (block_k, block_rows, warps)."""
    cands = {"score": [], "stream": [], "topk": []}
    # (query lanes, warps, stages): 64-lane tiles as 4 warps, 128-lane ones as 4 or 8
    tiles = ((64, 4, 3), (64, 4, 2), (128, 8, 2), (128, 4, 2))
    for (n, warps, stages), splits in itertools.product(tiles, (2, 4, 8)):
        launch = dict(block_m=n // H, kv_splits=splits, num_warps=warps, num_stages=stages)
        shape, run = pi._plan_scores(*args, None, launch=launch)

        def fn(run=run):
            run(*args[:6], score)
        cands["score"].append({**launch, "us": _time(fn, smoke, reps)})
    for n, warps, stages in ((64, 4, 3), (64, 8, 3), (128, 8, 2)):
        bm = n // H
        launch = dict(variant="index_prefill_stream", block_m=bm, topk_tile=16, num_warps=warps,
                      num_stages=stages)
        cands["stream"].append({**launch, "us": _time(
            lambda launch=launch: pi.index_prefill_with_launch(launch, *args, TOPK, INIT_BLOCKS,
                                                               LOCAL_BLOCKS, out),
            smoke, reps)})
    for bk, rows, warps in itertools.product((64, 128, 256, 512, 1024), (1, 4, 16), (2, 4)):
        if bk * rows > 4096:
            continue
        launch = dict(block_k=bk, block_rows=rows, num_warps=warps, num_stages=None)
        _, run, _ = pi._plan_topk(score, *sel_args, out, None, launch=launch)
        cands["topk"].append({**launch, "us": _time(
            lambda run=run: run(score, sel_args[0], sel_args[1], out), smoke, reps)})
    for name, rows in cands.items():
        best = min((r for r in rows if r["us"] is not None), key=lambda r: r["us"], default=None)
        common.say(f"    study {name}: best {best}")
    return cands


def _time(fn, smoke, reps):
    try:
        return common.time_op(fn, smoke=smoke, reps=max(10, reps // 2))["median_us"]
    except Exception as e:  # noqa: BLE001 - a candidate that cannot compile or run
        common.say(f"    candidate failed: {type(e).__name__}: {str(e)[:200]}")
        return None


def condense(report, source: str) -> dict:
    """A run as a result of record: every row without its study candidates, each study's
    best candidate per kernel kept."""
    rows = []
    for row in report["rows"]:
        kept = {k: v for k, v in row.items() if k not in ("study", "explain")}
        if "study" in row:
            kept["study_best"] = {name: min((c for c in cands if c["us"] is not None),
                                            key=lambda c: c["us"], default=None)
                                  for name, cands in row["study"].items()}
        rows.append(kept)
    return {"source": source, "env": report["env"], "rows": rows}


def main(argv=None):
    args = parse_args(argv)
    if args.condense:
        import json

        with open(args.condense[0], encoding="utf-8") as f:
            common.write_json(args.condense[1], condense(json.load(f), args.source))
        return 0
    if not args.out:
        sys.exit("bench_prefill: --out DIR is required")
    common.setup(args.smoke)
    sys.path.insert(0, os.path.join(common.ROOT, "tests"))
    import generated

    device = "cpu" if args.smoke else "cuda"
    os.makedirs(args.out, exist_ok=True)
    rows = SMOKE_ROWS if args.smoke else tuple(targets.VLLM_PREFILL_US)
    if args.quick and not args.smoke:
        rows = (targets.PREFILL_LONG_ROW, (1, 0, 8192, 4), (8, 1024, 128, 4))
    kinds = [k for k in args.kinds.split(",") if k]
    env = common.env_info(args.smoke)
    results = []
    plan = [(row, "bf16") for row in rows]
    if not args.smoke and not args.quick:
        plan += [(row, kind) for kind in kinds if kind != "bf16" for row in KIND_ROWS]
    for row, kind in plan:
        R, prefix, chunk, H = row
        common.say(f"== prefill {kind} R{R} × ({prefix} + {chunk}) H{H}")
        try:
            res = run_row(generated, row, kind, device, args.reps,
                          args.study and kind == "bf16", args.smoke)
        except Exception as e:  # noqa: BLE001 - the other rows still count
            common.say(f"  ERROR {type(e).__name__}: {str(e)[:400]}")
            results.append({"row": list(row), "kind": kind, "error": f"{type(e).__name__}: {e}"})
            continue
        us = res["us"]
        line = (f"  score {common.fmt_us(us['score'])} ({res['score_tflops']:.0f} TFLOP/s)  "
                f"topk {common.fmt_us(us['topk'])}  two {common.fmt_us(us['two_kernels'])}  "
                f"stream {common.fmt_us(us['stream'])} ({res['stream_tflops']:.0f} TFLOP/s)  "
                f"table[{res['table_path']}] {common.fmt_us(us['table'])}  "
                f"scratch {res['scratch_bytes']['two_kernels'] / 2**20:.1f} MiB / 0  "
                f"check {'ok' if res['check']['ok'] else res['check']['problems']}")
        if res.get("vllm_us"):
            line += (f"  vLLM both {res['vllm_us'][2]:.0f}: two {res['vs_vllm_both']['two_kernels']:.2f}×"
                     f" table {res['vs_vllm_both']['table']:.2f}× "
                     + " ".join(("PASS" if v["pass"] else "FAIL") for v in res["targets"]))
        common.say(line)
        results.append(res)
        # after every row: a run cut short by the device's time limit keeps what it measured
        common.write_json(os.path.join(args.out, "bench_prefill.json"),
                          {"env": env, "rows": results})
    failed = [r for r in results if "error" in r or not r["check"]["ok"]]
    common.say(f"prefill: {len(results) - len(failed)}/{len(results)} rows ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
