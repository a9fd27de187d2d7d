"""Device study: where the time of the latency-bound decode-indexer rows goes (the small
contexts, R1 8k Q4 and R4 32k Q4, with the page-16 table). Each variant is a copy of the
generated package with one piece of kernel source replaced (no K traffic, no table gather, no
wait for the scorer, no L2 prefetch); every variant runs the row's table launch and is timed
interleaved with the package as generated, its two kernels alone, the same two without the
programmatic launch, the single-launch variant, an empty kernel and two empty kernels chained
by a programmatic launch (graph replay, L2 flushed). The variants' outputs are wrong by design
(timing only), but int32_rows's: the selector before a change, the same results.

    python3 tools/decode_ablation.py OUTDIR            # H200: OUTDIR/decode_ablation.json
    python3 tools/decode_ablation.py OUTDIR --smoke    # CPU interpreter, one tiny row
    python3 tools/decode_ablation.py OUTDIR --rows 1:8192:1,16:8192:4
"""
import importlib
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]
import common  # noqa: E402

if __name__ == "__main__":
    common.usage_unless_out_dir(__doc__)  # (before the setup below)
SMOKE = "--smoke" in sys.argv
common.setup(SMOKE)
import torch  # noqa: E402

import bench  # noqa: E402
import generated  # noqa: E402
from specs.index_decode import SPECS as DECODE_SPECS  # noqa: E402

# name -> {file of generated/: [(old text, new text)]}
VARIANTS = {
    "base": {},
    # the scorer multiplies zeros instead of reading the index-K pages
    "no_k": {"index_score.py": [
        ("    k_tile = tl.load(k_ptrs)  # pages are always fully allocated: no mask\n",
         "    k_tile = tl.zeros([_BLOCK, D], kv_ptr.dtype.element_ty)\n")]},
    # the page-16 table takes the block id as its page (no dependent attention-table load)
    "no_gather": {"index_topk.py": [
        ("    if PAGES_IN_REGS:\n        page = tl.where(valid, tl.gather(row_pages, "
         "tl.where(valid, ids, 0), 0), 0)\n    else:\n        page = tl.load(attn_row_ptr + "
         "ids, mask=valid, other=0)\n", "    page = ids\n")]},
    # the selector before its table and scratch rows took int64 offsets (2026-12-05; the same
    # results wherever those offsets fit int32)
    "int32_rows": {"index_topk.py": [
        ("    row64 = row.to(tl.int64)\n    head64 = head.to(tl.int64)\n"
         "    attn_row_ptr = attn_table_ptr + req.to(tl.int64) * stride_ar\n",
         "    row64 = row\n    head64 = head\n    attn_row_ptr = attn_table_ptr + req * stride_ar\n")]},
    # the selector does not wait for the scorer's grid (reads scores mid-write)
    "no_wait": {"index_topk.py": [("        gdc_wait()\n", "        pass\n")]},
    # the selector reads its attention-table entries neither into registers nor into L2
    # before the wait (the winners' entries come from memory after the selection)
    "no_prefetch": {"index_topk.py": [
        ("    PAGES_IN_REGS: tl.constexpr = EMIT_SPARSE_TABLE and SINGLE_TILE and NUM_CHUNKS == 1\n",
         "    PAGES_IN_REGS: tl.constexpr = False\n"),
        ("    if EMIT_SPARSE_TABLE and PREFETCH_L2 and not PAGES_IN_REGS:\n", "    if False:\n")]},
}
SCORE_KEYS = ("kv_chunks", "high_batch", "static_chunks", "num_warps", "num_stages")
# index_decode_fused's largest topk_tile (its spec's parameter)
FUSED_MAX_TILE = next(p.maximum for v in DECODE_SPECS if getattr(v, "name", "") ==
                      "index_decode_fused" for p in v.params if p.name == "topk_tile")


def build(name, edits, tmp):
    """A copy of the generated package named ``abl_<name>`` with ``edits`` applied."""
    pkg = f"abl_{name}"
    dst = os.path.join(tmp, pkg)
    shutil.copytree(os.path.dirname(generated.__file__), dst,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for fname, pairs in edits.items():
        path = os.path.join(dst, fname)
        src = open(path).read()
        for old, new in pairs:
            assert src.count(old) == 1, (name, fname, old)
            src = src.replace(old, new)
        with open(path, "w") as f:
            f.write(src)
    return importlib.import_module(pkg)


def launches(R, Q, sc):
    """The row's table launch, as index_decode_with_launch takes it."""
    ex = generated.explain_index_decode(common.detected_hardware(SMOKE), sc.q, sc.cache,
                                        bench.D, R, sc.max_block, R * Q, 1, bench.TOPK, Q)
    if ex["fused"]:
        score = {"variant": "index_decode_fused", "kv_chunks": ex["kv_chunks"],
                 "topk_tile": ex["topk_tile"], "num_warps": ex["num_warps"],
                 "num_stages": ex["num_stages"]}
        return ex, score, None
    if ex["scorer"] == "split":
        score = {"variant": "index_score_split", **{k: ex[k] for k in SCORE_KEYS}}
    else:
        score = {"variant": "index_score_balanced", "program_budget": ex["program_budget"],
                 "num_warps": ex["num_warps"], "num_stages": ex["num_stages"]}
    topk = {"topk_chunks": ex["topk_chunks"], "topk_tile": ex["topk_tile"],
            "single_tile": ex["single_tile"], "adaptive_merge": ex["adaptive_merge"],
            "pdl": ex["pdl"], "num_warps": ex["topk_num_warps"],
            "num_stages": ex["topk_num_stages"]}
    return ex, score, topk


def decode_call(mod, sc, inp, score, topk):
    def fn():
        mod.index_decode_with_launch(
            score, topk, inp["idx_q"], inp["cache"], inp["block_table"], inp["seq_lens"],
            sc.max_seq_len, bench.TOPK, bench.INIT_BLOCKS, bench.LOCAL_BLOCKS, 1, sc.Q, sc.Q,
            inp["out"], attention_block_table=inp["attn_table"],
            sparse_block_table_out=inp["table"], sparse_context_lens_out=inp["ctx_out"],
            block_page_stride=8, completion_counter=inp["counter"],
            hardware=common.detected_hardware(SMOKE))
    return fn


def selector_call(sc, inp, ex, topk):
    """The selector alone (no programmatic launch) on scores computed once beforehand."""
    scores = generated.index_decode_scores(
        inp["idx_q"], inp["cache"], inp["block_table"], inp["seq_lens"], sc.max_seq_len,
        bench.INIT_BLOCKS, bench.LOCAL_BLOCKS, sc.Q, sc.Q)
    from generated import index_topk
    partial = None if topk["topk_chunks"] == 1 else torch.empty(
        (topk["topk_chunks"], 1, sc.R * sc.Q, index_topk.key_width(bench.TOPK)),
        dtype=torch.int64, device=scores.device)
    out = inp["out"][0:1]
    run = index_topk.prepare_topk_fused(
        scores, inp["seq_lens"], out, sc.Q, bench.TOPK, max_block=sc.max_block,
        num_chunks=topk["topk_chunks"], block_k=topk["topk_tile"],
        num_warps=topk["num_warps"], num_stages=topk["num_stages"],
        single_tile=topk["single_tile"], adaptive_merge=topk["adaptive_merge"],
        completion_counter=inp["counter"], partial=partial,
        attention_block_table=inp["attn_table"], sparse_block_table_out=inp["table"],
        sparse_context_lens_out=inp["ctx_out"], block_page_stride=8)
    return lambda: run(scores, inp["seq_lens"], out, partial, inp["counter"],
                       inp["attn_table"], inp["table"], inp["ctx_out"])


def pdl_pair():
    """Two empty kernels, the second a programmatic dependent of the first (sm_90)."""
    import triton
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    @triton.jit
    def _first(ptr):
        gdc_launch_dependents()

    @triton.jit
    def _second(ptr):
        gdc_wait()

    dummy = torch.zeros(16, dtype=torch.int32, device="cuda")

    def fn():
        _first[(1,)](dummy)
        _second[(1,)](dummy, launch_pdl=True)
    return fn


def rows():
    if SMOKE:
        return [(1, 512, 2)]
    if "--rows" in sys.argv:
        return list(common.int_groups(sys.argv[sys.argv.index("--rows") + 1]))
    return [(1, 8192, 4), (4, 32768, 4)]


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp()
    sys.path.insert(0, tmp)
    mods = {n: build(n, e, tmp) for n, e in VARIANTS.items()}
    dev = "cpu" if SMOKE else "cuda"
    dummy = torch.zeros(16, dtype=torch.int32, device=dev)
    res = []
    for R, ctx, Q in rows():
        sc = bench.Scenario(R, ctx, Q)
        inp = bench.make_decode_inputs(sc, dev)
        ex, score, topk = launches(R, Q, sc)
        if SMOKE and "kv_chunks" in score:
            score["kv_chunks"] = 2  # the code paths only: a small grid for the interpreter
        calls = {"empty kernel": lambda: common.launch_empty(dummy)}
        if not SMOKE:
            calls["empty pair (pdl)"] = pdl_pair()
        for name, mod in mods.items():
            calls[name] = decode_call(mod, sc, inp, score, topk)
        if topk is not None:
            calls["scorer alone"] = lambda: generated.index_decode_scores(
                inp["idx_q"], inp["cache"], inp["block_table"], inp["seq_lens"],
                sc.max_seq_len, bench.INIT_BLOCKS, bench.LOCAL_BLOCKS, sc.Q, sc.Q)
            calls["selector alone"] = selector_call(sc, inp, ex, topk)
            calls["two launches, no pdl"] = decode_call(generated.decode_indexer, sc, inp, score,
                                                        {**topk, "pdl": False})
            tile = max(128, 1 << (sc.max_block - 1).bit_length())
            if tile <= FUSED_MAX_TILE:  # the single launch selects from one tile
                calls["single launch"] = decode_call(
                    generated.decode_indexer, sc, inp,
                    {"variant": "index_decode_fused", "kv_chunks": score.get("kv_chunks", 64),
                     "topk_tile": tile, "num_warps": 4, "num_stages": 2}, None)
        med = common.interleaved_medians(calls, SMOKE)
        launch = {k: v for k, v in ex.items() if not k.endswith("rule")}
        print(f"R{R} {ctx // 1024}k Q{Q} ({launch})", flush=True)
        for k, v in med.items():
            print(f"   {k:<24} {v:7.2f} µs", flush=True)
        res.append({"row": [R, ctx, Q], "launch": launch, "us": med})
        with open(os.path.join(out_dir, "decode_ablation.json"), "w") as f:
            json.dump(res, f, indent=1)
        del inp
        common.free_memory()


if __name__ == "__main__":
    main()
