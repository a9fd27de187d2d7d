"""Sparse attention benchmark (issue 21): `sparse_attn_decode` on vLLM's rows
(tools/targets.py VLLM_ATTN_US), checked against float64 on sampled rows first.

    python3 tools/bench_attn.py --out DIR            # every row
    python3 tools/bench_attn.py --out DIR --quick    # four rows
    python3 tools/bench_attn.py --out DIR --smoke    # CPU interpreter, tiny rows
    python3 tools/bench_attn.py --out DIR --study    # also time launch candidates per row
    python3 tools/bench_attn.py --out DIR --only prefill   # (or decode) one half
    python3 tools/bench_attn.py --out DIR --kv fp8e4m3:per_token   # an fp8 cache (and scales)

Per row: our µs (CUDA-graph replay, L2 flushed; the median of rotating rounds in which the
plain read below is timed too: `common.time_graphs`), the floor (the KV bytes the rows must
read, topk · 128 · Hkv · 2 · D · 2 per row, at ATTN_COPY_TBPS), our share of it, the time a
plain streaming kernel takes to read as many bytes (`common.row_read_us`, one 64 KiB row per
listed block and KV head) and our share of the larger
of the two (the copy-rate target: at small sizes launch and memory latency are most of even a
plain read), vLLM's µs and the ratio; then the decode step of the scenario end to end: the indexer
(`index_decode`, index heads = KV heads, a bf16 128-token-page index cache) alone, the attention
over its ids alone, and `sparse_decode_step` (both, PDL-chained; its output checked bitwise
against the two calls). Prefill (PREFILL_ROWS, one request of prefix + chunk tokens whose lists
are shared by runs of 64 tokens, as an indexer's are): the table's launch, the per-token and
the query-tiled kernels (PREFILL_LAUNCHES), µs and TFLOP/s of the useful products (4 · D · Hq per visible listed
key: q·k and p·v). ``--kv DTYPE[:SCALES]``: the cache in another dtype (fp8e4m3, fp8e5m2) with
no scales, a scalar or per-token ones (random in [0.5, 1.5)), or fp16 (q and cache: the
rows a bf16 q's tables serve it with); the floor and the plain read
then count its bytes, vLLM's (bf16) times are not compared, and the same row with a bf16
cache is timed beside ours, decode and prefill (the ratio printed). ``--peer
FILE:FUNCTION[:packed]``: another implementation taking sparse_attn_decode's positional
arguments (vLLM's kernels from a local copy, say; the file's folder is added to sys.path)
runs each decode row too, its output checked against float64 as ours (``peer_check``: a
failed check withholds the comparison), and is timed in the same rounds (a peer that raises
or cannot be captured in a CUDA graph is left out, with ``peer_error``); ``:packed`` hands it
the cache as [pages, Hkv, 128, 2·D] (K then V along the last dim) and times ours on that
cache too, so that the two compare on the same tensors.
``--peer-prefill FILE:FUNCTION[:packed]`` does the same on the prefill rows with
sparse_attn_prefill's positional arguments (ours: the table's launch); their lists are then
full (`make_prefill_case`), as vLLM's prefill kernel needs. Writes
DIR/bench_attn.json after every row.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools import common, targets  # noqa: E402

BLOCK, D, TOPK = 128, 128, 16
CHECK_ROWS = 8  # rows per scenario checked against float64
SMOKE_ROWS = {(16, 1, 2, 1024, 1): None, (8, 2, 2, 512, 2): None}
QUICK = ((32, 2, 1, 32768, 1), (32, 2, 32, 32768, 4), (64, 4, 128, 32768, 1),
         (32, 2, 128, 131072, 4))
# prefill: (Hq, Hkv, prefix, chunk) of one request (MiniMax-M3's TP1, TP2, TP4, TP8 heads)
PREFILL_ROWS = ((64, 4, 8192, 2048), (32, 2, 8192, 2048), (16, 1, 8192, 2048),
                (8, 1, 8192, 2048), (64, 4, 0, 8192), (64, 4, 122880, 8192))
SMOKE_PREFILL_ROWS = ((16, 1, 246, 20),)  # its tokens cross a block boundary
# the per-token kernel at one split; the query-tiled one walking its union by minima, and as
# sorted keys over a pipeline (128 lanes of 8 warps, 3 stages: its fastest launch on
# 2026-12-04, GPU-279e5ac7)
PREFILL_LAUNCHES = {"per-token": dict(splits=1, num_warps=4, num_stages=2),
                    "tiled": dict(variant="sparse_attn_tiled", lanes=64, num_warps=4,
                                  num_stages=2),
                    "tiled sorted": dict(variant="sparse_attn_tiled", lanes=128,
                                         sorted_union=True, num_warps=8, num_stages=3)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny rows")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--study", action="store_true",
                   help="time splits × warps × stages candidates per row")
    p.add_argument("--only", choices=("decode", "prefill"), default=None)
    p.add_argument("--requests", type=common.int_list, default=None,
                   help="decode rows of these request counts only, e.g. 8,32")
    p.add_argument("--contexts", type=common.int_list, default=None,
                   help="decode rows of these contexts (tokens) only, e.g. 32768")
    p.add_argument("--kv", default="bf16", type=kv_option,
                   help="cache dtype and scale mode, e.g. fp8e4m3 or fp8e5m2:per_token; "
                        "fp16: q and cache")
    p.add_argument("--peer", type=peer_option, default=None, metavar="FILE:FUNCTION[:packed]",
                   help="another implementation of sparse_attn_decode's positional arguments, "
                        "timed beside ours on each decode row (':packed': the cache as "
                        "[pages, Hkv, 128, 2·D] for both)")
    p.add_argument("--peer-prefill", type=peer_option, default=None,
                   metavar="FILE:FUNCTION[:packed]",
                   help="the same for sparse_attn_prefill's arguments on the prefill rows")
    return p.parse_args(argv)


PEER_LAYOUTS = ("split", "packed")
PEER_CACHE_TABLE = "table on the peer's cache"  # (a prefill row's entry: ours, packed cache)
PEER_CACHE_OURS = "ours on the peer's cache"  # (a decode row's)


def peer_option(text):
    """'peer.py:fn:packed' -> ("peer.py", "fn", "packed"); the layout defaults to split (the
    bench's [pages, 2, 128, Hkv, D])."""
    path, _, rest = text.partition(":")
    function, _, layout = rest.partition(":")
    layout = layout or "split"
    if not path.endswith(".py") or not function.isidentifier() or layout not in PEER_LAYOUTS:
        raise argparse.ArgumentTypeError(f"{text!r}: give FILE.py:FUNCTION or "
                                         f"FILE.py:FUNCTION:packed")
    return path, function, layout


def load_peer(path, function):
    """(the function ``function`` of the Python file ``path``, what the report records of it:
    file name, function, sha256 of the file). The file's folder is appended to sys.path, so
    that modules beside it (stand-ins for its package's imports) resolve, never before ours."""
    import hashlib
    import importlib.util

    if not os.path.isfile(path):
        raise SystemExit(f"bench_attn: --peer: no file {path}")
    sys.path.append(os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location("bench_attn_peer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, function, None)
    if not callable(fn):
        raise SystemExit(f"bench_attn: --peer: {path} has no function {function}")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return fn, {"file": os.path.basename(path), "function": function, "sha256": digest}


def packed(kv):
    """The cache [pages, 2, 128, Hkv, D] as [pages, Hkv, 128, 2·D], K then V along the last
    dim: the same values."""
    pages, _, n, hkv, d = kv.shape
    return kv.permute(0, 3, 2, 1, 4).contiguous().view(pages, hkv, n, 2 * d)


def decode_call(fn, case, output):
    """A zero-argument call of ``fn`` on ``case`` in sparse_attn_decode's positional order
    (vLLM's too), the scales by name where the case has them."""
    args = (case["q"], case["kv"], case["topk_idx"], case["block_table"], case["seq_lens"],
            case["num_kv_heads"], case["sm_scale"], output, case["decode_query_len"])
    scales = {k: case[k] for k in ("k_scale", "v_scale") if case.get(k) is not None}
    return lambda: fn(*args, **scales)


def add_peer(generated, peer, layout, case, out, beside, label):
    """Put the peer's call on ``case`` (and with the packed layout ours on that cache) into
    ``beside`` after one call of each, checked against float64; return what the row records
    of them. A peer that raises is left out (``peer_error``); ours raising on the packed
    cache raises."""
    import torch

    res, peer_case = {}, case
    if layout == "packed":
        peer_case = dict(case, kv=packed(case["kv"]))
        ours_packed = torch.full_like(out, float("nan"))
        beside[PEER_CACHE_OURS] = decode_call(generated.sparse_attn_decode, peer_case,
                                              ours_packed)
        beside[PEER_CACHE_OURS]()
        res["check_on_peer_cache"] = check(generated, case, ours_packed)
        res["same_as_split"] = bool(torch.equal(ours_packed, out))
    peer_out = torch.full_like(out, float("nan"))
    beside["peer"] = decode_call(peer, peer_case, peer_out)
    try:
        beside["peer"]()
        res["peer_check"] = check(generated, case, peer_out)
    except Exception as e:  # noqa: BLE001 - ours still counts
        common.say(f"  {label}: peer ERROR {type(e).__name__}: {str(e)[:300]}")
        res["peer_error"] = f"{type(e).__name__}: {e}"
        drop_peer(beside)
    return res


def drop_peer(calls):
    """Take the peer's call and ours on its cache out of ``calls``."""
    for name in ("peer", PEER_CACHE_OURS, PEER_CACHE_TABLE):
        calls.pop(name, None)


def timed_beside(timing, calls, res, label, times=lambda got: got):
    """``timing(calls)``; where that fails with the peer among ``calls``, once more without it,
    the failure kept in ``res["peer_error"]``. The peer's calls that ran eagerly (not captured
    in a CUDA graph; ``times(got)``: name -> summary) where the others replayed graphs are set
    to None, the reason kept too."""
    peered = "peer" in calls
    try:
        got = timing(calls)
    except Exception as e:  # noqa: BLE001 - ours still counts
        if not peered:
            raise
        common.say(f"  {label}: peer ERROR while timed {type(e).__name__}: {str(e)[:300]}")
        res["peer_error"] = f"timed: {type(e).__name__}: {e}"
        drop_peer(calls)
        return timing(calls)
    summary = times(got)
    peers = ("peer", PEER_CACHE_OURS, PEER_CACHE_TABLE)
    graphed = any(t.get("graph", True) for name, t in summary.items() if name not in peers)
    eager = [name for name in peers if name in calls and not summary[name].get("graph", True)]
    if graphed and eager:  # (an eager time beside graph replays compares nothing)
        res["peer_error"] = f"not captured in a CUDA graph: {eager}: " + "; ".join(
            str(summary[name].get("capture_error", ""))[:200] for name in eager)
        for name in eager:
            summary[name] = None
    return got


def peer_compared(res):
    """Whether a prefill row's peer and ours on its cache (or the table) both have times."""
    return "us" in res.get("peer", {}) and "us" in res.get(PEER_CACHE_TABLE, res["table"])


def prefill_call(fn, case, output):
    """`decode_call` for sparse_attn_prefill's positional order (vLLM's too)."""
    args = (case["q"], case["kv"], case["topk_idx"], case["block_table"], case["cu_seqlens_q"],
            case["seq_lens"], case["prefix_lens"], case["max_query_len"], case["num_kv_heads"],
            case["sm_scale"], output)
    scales = {k: case[k] for k in ("k_scale", "v_scale") if case.get(k) is not None}
    return lambda: fn(*args, **scales)


KV_DTYPES = ("bf16", "fp16", "fp8e4m3", "fp8e5m2")
SCALE_MODES = ("none", "scalar", "per_token")


def kv_option(text):
    """'fp8e4m3:per_token' -> ("fp8e4m3", "per_token"); the scales default to none."""
    dtype, _, mode = text.partition(":")
    mode = mode or "none"
    if dtype not in KV_DTYPES or mode not in SCALE_MODES or (
            not dtype.startswith("fp8") and mode != "none"):
        raise argparse.ArgumentTypeError(f"{text!r}: give one of {', '.join(KV_DTYPES)}, fp8 "
                                         f"with :{', :'.join(SCALE_MODES)} or nothing")
    return dtype, mode


def with_kv(case, kv, seed=0):
    """``case`` with its cache in dtype ``kv[0]`` and scales of mode ``kv[1]`` (random in
    [0.5, 1.5): per KV head and cache slot, or one scalar each); fp16: q too (a cache of
    one 16-bit type takes a q of the same)."""
    import torch

    dtype, mode = kv
    if dtype == "bf16":
        return case
    cache = case["kv"].to(common.torch_dtype(dtype))
    out = dict(case, kv=cache)
    if dtype == "fp16":
        out["q"] = case["q"].half()
    dev = cache.device
    g = torch.Generator(dev).manual_seed(seed)
    if mode == "scalar":
        out.update(k_scale=torch.tensor([0.9], device=dev), v_scale=torch.tensor([1.1],
                                                                                 device=dev))
    elif mode == "per_token":
        shape = (case["num_kv_heads"], cache.shape[0] * BLOCK)
        out.update(k_scale=torch.rand(shape, generator=g, device=dev) + 0.5,
                   v_scale=torch.rand(shape, generator=g, device=dev) + 0.5)
    return out


STUDY = [dict(splits=s, num_warps=w, num_stages=st) for s in (1, 2, 4, 8, 16)
         for w, st in ((4, 2), (4, 3), (8, 2))]


def study_row(case, out, smoke, reps):
    """µs of every STUDY launch on this row (None where it failed)."""
    from generated import sparse_attention as sa

    got = []
    for launch in STUDY:
        try:
            us = common.time_op(lambda launch=launch: sa.sparse_attn_with_launch(
                launch, "decode", **case, output=out), smoke=smoke,
                reps=max(10, reps // 2))["median_us"]
        except Exception as e:  # noqa: BLE001 - a candidate that cannot compile or run
            common.say(f"    candidate {launch} failed: {type(e).__name__}: {str(e)[:200]}")
            us = None
        got.append({**launch, "us": us})
    best = min((c for c in got if c["us"] is not None), key=lambda c: c["us"], default=None)
    common.say(f"    study: best {best}")
    return got


def make_case(row, device, d=D, topk=TOPK, seed=0):
    """bf16 q and cache [pages, 2, 128, Hkv, D]; each row lists its own block and topk − 1
    earlier ones at random (as vLLM's measurement)."""
    import torch

    Hq, Hkv, R, ctx, Q = row
    g = torch.Generator().manual_seed(seed)
    mb = common.cdiv(ctx, BLOCK)
    pages = R * mb + 8
    # the cache on the device (R128 128k is 17 GB: minutes of CPU randn)
    gd = torch.Generator(device).manual_seed(seed)
    kv = torch.randn((pages, 2, BLOCK, Hkv, d), generator=gd, device=device,
                     dtype=torch.bfloat16).mul_(0.5)
    table = torch.randperm(pages, generator=g)[:R * mb].view(R, mb).to(torch.int32)
    T = R * Q
    ids = torch.full((Hkv, T, topk), -1, dtype=torch.int32)
    for t in range(T):
        own = (ctx - Q + t % Q) // BLOCK
        earlier = torch.randperm(own, generator=g)[:topk - 1] if own else torch.zeros(0)
        lst = torch.cat([torch.tensor([own]), earlier]).to(torch.int32)
        ids[:, t, :lst.numel()] = lst
    q = torch.randn((T, Hq, d), generator=g).bfloat16()
    return dict(q=q.to(device), kv=kv, topk_idx=ids.to(device),
                block_table=table.to(device),
                seq_lens=torch.full((R,), ctx, dtype=torch.int32, device=device),
                num_kv_heads=Hkv, sm_scale=d ** -0.5, decode_query_len=Q)


def step_calls(generated, case, row, device, seed=1):
    """(indexer, attention over its ids, `sparse_decode_step`, (output, step output)) of the
    scenario: zero-argument calls on a bf16 128-token-page index cache."""
    import torch

    Hq, Hkv, R, ctx, Q = row
    T, mb = R * Q, common.cdiv(ctx, BLOCK)
    topk = case["topk_idx"].shape[2]
    gd = torch.Generator(device).manual_seed(seed)
    d_idx = case["q"].shape[2]
    idx_q = torch.randn((T, Hkv, d_idx), generator=gd, device=device, dtype=torch.bfloat16)
    idx_cache = torch.randn((R * mb + 1, BLOCK, d_idx), generator=gd, device=device,
                            dtype=torch.bfloat16)
    idx_table = torch.randperm(R * mb + 1, generator=gd, device=device)[:R * mb].view(
        R, mb).to(torch.int32)
    ids = torch.empty((Hkv, T, topk), dtype=torch.int32, device=device)
    counter = torch.zeros((Hkv, T), dtype=torch.int32, device=device)
    out = torch.empty(case["q"].shape, dtype=torch.bfloat16, device=device)
    step_out = torch.empty_like(out)
    att = {k: case[k] for k in ("q", "kv", "block_table", "seq_lens", "num_kv_heads",
                                "sm_scale", "decode_query_len", "k_scale", "v_scale")
           if k in case}

    def indexer():
        generated.index_decode(idx_q, idx_cache, idx_table, case["seq_lens"], ctx, topk, 0, 1,
                               Hkv, Q, Q, ids, completion_counter=counter)

    def attention():
        generated.sparse_attn_decode(**att, topk_idx=ids, output=out)

    step_args = dict(idx_q=idx_q, index_kv_cache=idx_cache, index_block_table=idx_table,
                     q=case["q"], kv=case["kv"], block_table=case["block_table"],
                     seq_lens=case["seq_lens"], max_seq_len=ctx, topk=topk, init_blocks=0,
                     local_blocks=1, num_kv_heads=Hkv, decode_query_len=Q,
                     max_decode_query_len=Q, sm_scale=case["sm_scale"], output=step_out,
                     k_scale=case.get("k_scale"), v_scale=case.get("v_scale"),
                     topk_out=ids, completion_counter=counter)

    def step():
        generated.sparse_decode_step(**step_args)
    step.args = step_args  # (tools/step_study.py runs the step other ways on them)
    return indexer, attention, step, (out, step_out)


def time_step(generated, case, row, device, smoke, reps, seed=1):
    """µs of the scenario's indexer, of the attention over its ids and of `sparse_decode_step`
    (graph replay), and whether the step's output equals the two calls' bitwise."""
    import torch

    indexer, attention, step, (out, step_out) = step_calls(generated, case, row, device, seed)
    calls = (("indexer", indexer), ("attention", attention), ("step", step))
    # the interpreter (smoke) times these first calls themselves: a second round would only
    # double its slowest part
    first = {name: common.time_op(fn, smoke=True, reps=1)["median_us"] for name, fn in calls}
    if device != "cpu":
        torch.cuda.synchronize()
    same = bool(torch.equal(out, step_out))
    got = first if smoke else {name: t["median_us"] for name, t in
                               common.time_graphs(dict(calls), reps).items()}
    return {**got, "step_equals_two_calls": same}


def make_prefill_case(row, device, d=D, topk=TOPK, seed=0, full=False):
    """One request of ``prefix`` + ``chunk`` tokens: token t lists its own block, the block
    its run of 64 tokens starts in and topk − 2 earlier blocks shared by the run. ``full``:
    topk − 1 shared blocks, so that each list holds min(topk, own block + 1) ids and no −1
    among them (as an indexer's lists; vLLM's prefill kernel reads that many unchecked)."""
    import torch

    Hq, Hkv, prefix, chunk = row
    g = torch.Generator().manual_seed(seed)
    mb = common.cdiv(prefix + chunk, BLOCK)
    pages = mb + 8
    gd = torch.Generator(device).manual_seed(seed)
    kv = torch.randn((pages, 2, BLOCK, Hkv, d), generator=gd, device=device,
                     dtype=torch.bfloat16).mul_(0.5)
    table = torch.randperm(pages, generator=g)[:mb].view(1, mb).to(torch.int32)
    ids = torch.full((Hkv, chunk, topk), -1, dtype=torch.int32)
    for t0 in range(0, chunk, 64):
        first = (prefix + t0) // BLOCK
        shared = torch.randperm(first, generator=g)[:topk - (1 if full else 2)] if first \
            else torch.zeros(0)
        for t in range(t0, min(t0 + 64, chunk)):
            own = (prefix + t) // BLOCK
            if full:  # own block first, then the run's: never truncated away
                lst = torch.tensor([own, *[b for b in dict.fromkeys(
                    [first, *shared.long().tolist()]) if b != own]][:topk])
            else:
                lst = torch.unique(torch.cat([torch.tensor([own, first]),
                                              shared.long()]))[:topk]
            ids[:, t, :lst.numel()] = lst.to(torch.int32)
    q = torch.randn((chunk, Hq, d), generator=g).bfloat16()
    return dict(q=q.to(device), kv=kv, topk_idx=ids.to(device), block_table=table.to(device),
                cu_seqlens_q=torch.tensor([0, chunk], dtype=torch.int32, device=device),
                seq_lens=torch.tensor([prefix + chunk], dtype=torch.int32, device=device),
                prefix_lens=torch.tensor([prefix], dtype=torch.int32, device=device),
                max_query_len=chunk, num_kv_heads=Hkv, sm_scale=d ** -0.5)


def visible_keys(case, prefix):
    """Σ over rows and KV heads of the listed keys each row sees (key ≤ its position)."""
    import torch

    ids = case["topk_idx"].long()
    pos = prefix + torch.arange(ids.shape[1], device=ids.device)
    first = ids * BLOCK
    seen = (torch.minimum(pos[None, :, None] + 1, first + BLOCK) - first).clamp(min=0)
    return int(torch.where(ids >= 0, seen, 0).sum())


def prefill_row(generated, row, device, smoke, reps, kv=("bf16", "none"), peer=None):
    """The row's launches timed in rotating rounds, each checked against float64 on sampled
    rows; ``peer``: (function, layout) of `--peer-prefill`, timed beside as "peer" (and with
    the packed layout ours too, as "table on the peer's cache")."""
    import torch
    from generated import sparse_attention as sa
    from reference_attn import prefill_positions, ref_sparse_attn

    Hq, Hkv, prefix, chunk = row
    d, topk = (64, 4) if smoke else (D, TOPK)
    bf16_case = make_prefill_case(row, device, d, topk, full=peer is not None)
    case = with_kv(bf16_case, kv)
    G = Hq // Hkv
    flops = 4 * d * G * visible_keys(case, prefix)  # per KV head: its G query heads
    out = torch.empty(case["q"].shape, dtype=torch.bfloat16, device=device)
    rows = sorted(set(range(0, chunk, max(1, chunk // CHECK_ROWS))) | {chunk - 1})
    pos = prefill_positions(case["cu_seqlens_q"], case["prefix_lens"], case["seq_lens"], chunk,
                            chunk)
    ref = ref_sparse_attn(case["q"][rows], case["kv"], case["topk_idx"][:, rows],
                          case["block_table"], [pos[r] for r in rows], Hkv, case["sm_scale"],
                          case.get("k_scale"), case.get("v_scale"))
    calls = {"table": lambda: generated.sparse_attn_prefill(**case, output=out)}
    for name, launch in PREFILL_LAUNCHES.items():
        calls[name] = lambda launch=launch: sa.sparse_attn_with_launch(launch, "prefill",
                                                                       **case, output=out)
    if case is not bf16_case:  # the same row over a bf16 cache (and q), its table's launch
        calls["bf16 table"] = lambda: generated.sparse_attn_prefill(**bf16_case, output=out)
    if peer is not None:
        peer_fn, layout = peer
        peer_case = dict(case, kv=packed(case["kv"])) if layout == "packed" else case
        if layout == "packed":
            calls[PEER_CACHE_TABLE] = prefill_call(generated.sparse_attn_prefill, peer_case,
                                                   out)
        calls["peer"] = prefill_call(peer_fn, peer_case, out)
    res = {"row": list(row), "flops": flops}
    first = {}
    for name, fn in list(calls.items()):
        out.fill_(float("nan"))
        try:
            first[name] = common.time_op(fn, smoke=True, reps=1)["median_us"]  # smoke: its time
        except Exception as e:  # noqa: BLE001 - a peer that cannot run: ours still counts
            if name != "peer":
                raise
            common.say(f"  prefill {row}: peer ERROR {type(e).__name__}: {str(e)[:300]}")
            res["peer"] = {"error": f"{type(e).__name__}: {e}"}
            del calls["peer"]
            continue
        want = ref if name != "bf16 table" else ref_sparse_attn(
            bf16_case["q"][rows], bf16_case["kv"], bf16_case["topk_idx"][:, rows],
            bf16_case["block_table"], [pos[r] for r in rows], Hkv, bf16_case["sm_scale"])
        err = (out[rows].double() - want.to(torch.bfloat16).double()).abs()
        ok = bool(err.mean() <= 2.5e-4 and err.max() <= 1.7e-2)
        res[name] = {"check_ok": ok, "max_abs": float(err.max())}
    # the launches timed in the same rotating rounds
    if smoke:
        got = first
    else:
        peer_res = {}
        timed = timed_beside(lambda calls: common.time_graphs(calls, reps), calls, peer_res,
                             f"prefill {row}")
        got = {name: t["median_us"] for name, t in timed.items() if t is not None}
        if "peer_error" in peer_res:
            res["peer"]["error"] = peer_res["peer_error"]
    for name, us in got.items():
        res[name].update(us=us, tflops=flops / us / 1e6)
    res["explain"] = generated.explain_sparse_attn(
        "prefill", common.detected_hardware(smoke), "fp16" if kv[0] == "fp16" else "bf16",
        kv[0], kv[1], G, d, chunk * Hkv)
    return res


def check(generated, case, out):
    """Mean / max abs error against float64 on sampled rows (rounded to bf16 first)."""
    import torch
    from reference_attn import decode_positions, ref_sparse_attn

    T = case["q"].shape[0]
    rows = sorted(set(range(0, T, max(1, T // CHECK_ROWS))) | {T - 1})
    sub = dict(case)
    sub["q"] = case["q"][rows]
    sub["topk_idx"] = case["topk_idx"][:, rows]
    pos = [decode_positions(case["seq_lens"], case["decode_query_len"])[r] for r in rows]
    ref = ref_sparse_attn(sub["q"], case["kv"], sub["topk_idx"], case["block_table"], pos,
                          case["num_kv_heads"], case["sm_scale"], case.get("k_scale"),
                          case.get("v_scale"))
    err = (out[rows].double() - ref.to(torch.bfloat16).double()).abs()
    mean, worst = float(err.mean()), float(err.max())
    return {"ok": mean <= 2.5e-4 and worst <= 1.7e-2, "mean_abs": mean, "max_abs": worst,
            "rows_checked": len(rows)}


def main(argv=None):
    args = parse_args(argv)
    common.setup(args.smoke)
    sys.path.insert(0, os.path.join(common.ROOT, "tests"))
    import torch
    import generated

    device = "cpu" if args.smoke else "cuda"
    os.makedirs(args.out, exist_ok=True)
    rows = list(SMOKE_ROWS) if args.smoke else list(QUICK if args.quick else
                                                    targets.VLLM_ATTN_US)
    rows = [] if args.only == "prefill" else [
        r for r in rows if (args.requests is None or r[2] in args.requests)
        and (args.contexts is None or r[3] in args.contexts)]
    env, results, prefill = dict(common.env_info(args.smoke), kv=list(args.kv)), [], []
    peer = prefill_peer = None
    if args.peer is not None and rows:
        peer, env["peer"] = load_peer(*args.peer[:2])
        env["peer"]["layout"] = args.peer[2]
    if args.peer_prefill is not None and args.only != "decode":
        fn, env["peer_prefill"] = load_peer(*args.peer_prefill[:2])
        env["peer_prefill"]["layout"] = args.peer_prefill[2]
        prefill_peer = (fn, args.peer_prefill[2])
    for row in rows:
        case = out = bf16_case = beside = None  # (the row before's tensors, however it ended)
        common.free_memory()
        Hq, Hkv, R, ctx, Q = row
        d = 64 if args.smoke else D
        topk = 4 if args.smoke else TOPK
        label = f"{Hq}/{Hkv} R{R} {ctx // 1024}k Q{Q}"
        try:
            bf16_case = make_case(row, device, d, topk)
            case = with_kv(bf16_case, args.kv)
            if case is bf16_case:
                bf16_case = None  # (no second cache to time beside)
            out = torch.empty(case["q"].shape, dtype=torch.bfloat16, device=device)
            generated.sparse_attn_decode(**case, output=out)
            verdict = check(generated, case, out)
        except Exception as e:  # noqa: BLE001 - the other rows still count
            common.say(f"  {label}: ERROR {type(e).__name__}: {str(e)[:300]}")
            results.append({"row": list(row), "error": f"{type(e).__name__}: {e}"})
            continue
        T = R * Q
        esize = case["kv"].element_size()
        nbytes = T * topk * BLOCK * Hkv * 2 * d * esize
        floor = nbytes / (targets.ATTN_COPY_TBPS * 1e12) * 1e6

        def ours():
            generated.sparse_attn_decode(**case, output=out)
        beside = {"ours": ours}
        if bf16_case is not None:  # the same row over a bf16 cache
            beside["bf16"] = lambda: generated.sparse_attn_decode(**bf16_case, output=out)
        peer_res = {}
        if peer is not None:
            try:
                peer_res = add_peer(generated, peer, args.peer[2], case, out, beside, label)
            except Exception as e:  # noqa: BLE001 - (ours on the packed cache) other rows count
                common.say(f"  {label}: ERROR on the peer's cache {type(e).__name__}: "
                           f"{str(e)[:300]}")
                results.append({"row": list(row), "error": f"{type(e).__name__}: {e}"})
                continue
        # the same bytes read by a plain streaming kernel, timed in the same rotating rounds as
        # ours: at small sizes its launch and memory latency are most of the time, which no
        # kernel can avoid
        try:
            got = timed_beside(lambda calls: common.row_read_us(
                T * topk * Hkv, BLOCK * 2 * d * esize // 4, smoke=args.smoke, reps=args.reps,
                beside=calls), beside, peer_res, label, lambda got: got["beside"])
            read, us = got["median_us"], got["beside"]["ours"]["median_us"]
            bf16_us = got["beside"]["bf16"]["median_us"] if "bf16" in beside else None
            times = got["beside"]
            if times.get("peer") and times.get(PEER_CACHE_OURS, times["ours"]):
                peer_res["peer_us"] = times["peer"]["median_us"]
                peer_res["us_on_peer_cache"] = times.get(PEER_CACHE_OURS,
                                                         times["ours"])["median_us"]
                peer_res["vs_peer"] = peer_res["us_on_peer_cache"] / peer_res["peer_us"]
        except Exception as e:  # noqa: BLE001 - (out of memory beside the cache): the floor
            common.say(f"  {label}: no plain-read time ({type(e).__name__}: {str(e)[:200]})")
            read, bf16_us = 0.0, None
            try:
                us = common.time_op(ours, smoke=args.smoke, reps=args.reps)["median_us"]
            except Exception as e2:  # noqa: BLE001 - the other rows still count
                common.say(f"  {label}: ERROR {type(e2).__name__}: {str(e2)[:300]}")
                results.append({"row": list(row), "error": f"{type(e2).__name__}: {e2}"})
                continue
        best = max(floor, read)
        # (vLLM's times are over a bf16 cache)
        vllm = targets.VLLM_ATTN_US.get(row) if args.kv[0] == "bf16" else None
        res = {"row": list(row), "us": us, "floor_us": floor, "share_of_floor": floor / us,
               "read_us": read, "share_of_read": best / us,
               "vllm_us": vllm, "vs_vllm": us / vllm if vllm else None, "check": verdict,
               "bf16_us": bf16_us, **peer_res}
        judged = []
        if vllm:
            judged.append(targets.verdict(targets.ISSUE21, "≤ vLLM", us, targets.LE, vllm, "µs"))
        if "vs_peer" in peer_res and peer_res["peer_check"]["ok"] and \
                peer_res.get("check_on_peer_cache", {"ok": True})["ok"]:
            judged.append(targets.verdict(targets.ISSUE21, "≤ the peer beside",
                                          peer_res["us_on_peer_cache"], targets.LE,
                                          peer_res["peer_us"], "µs"))
        if T >= targets.ATTN_MIN_ROWS:
            judged.append(targets.verdict(targets.ISSUE21, "share of the copy rate", best / us,
                                          targets.GE, targets.ATTN_FLOOR_SHARE, "×"))
        res["targets"] = judged
        if args.study:
            res["study"] = study_row(case, out, args.smoke, args.reps)
        # (the interpreter runs the step on the first row only: it is slow there)
        step = time_step(generated, case, row, device, args.smoke, args.reps) \
            if not (args.smoke and results) else None
        res["step"] = step
        common.say(f"  {label:22s} {common.fmt_us(us):>8s} µs  floor {floor:7.1f}  "
                   f"{100 * floor / us:5.1f} %  read {read:7.1f} {100 * best / us:5.1f} %  "
                   f"vLLM {vllm if vllm else '-':>6}  "
                   + ("" if bf16_us is None else f"bf16 {common.fmt_us(bf16_us)} µs "
                      f"({us / bf16_us:.2f}×)  ")
                   + ("" if "vs_peer" not in peer_res else
                      f"peer {common.fmt_us(peer_res['peer_us'])} µs (ours on its cache "
                      f"{common.fmt_us(peer_res['us_on_peer_cache'])}, "
                      f"{peer_res['vs_peer']:.2f}×"
                      f"{'' if peer_res['peer_check']['ok'] else ', PEER CHECK FAILED'}"
                      f"{'' if peer_res.get('same_as_split', True) else ', other bits'})  ")
                   + " ".join("PASS" if v["pass"] else "FAIL" for v in judged)
                   + f"  check {'ok' if verdict['ok'] else verdict}"
                   + ("" if step is None else
                      f"\n  {'':22s} step {common.fmt_us(step['step']):>8s} µs = indexer "
                      f"{common.fmt_us(step['indexer'])} + attention "
                      f"{common.fmt_us(step['attention'])} as two calls "
                      f"({common.fmt_us(step['indexer'] + step['attention'])})"
                      + ("" if step["step_equals_two_calls"] else "  STEP DIFFERS")))
        results.append(res)
        common.write_json(os.path.join(args.out, "bench_attn.json"),
                          {"env": env, "rows": results, "prefill": prefill})
        common.free_memory()
    prefill_rows = [] if args.only == "decode" else (
        SMOKE_PREFILL_ROWS if args.smoke else PREFILL_ROWS[:2] if args.quick else PREFILL_ROWS)
    for row in prefill_rows:
        Hq, Hkv, prefix, chunk = row
        label = f"prefill {Hq}/{Hkv} 1 × ({prefix} + {chunk})"
        try:
            res = prefill_row(generated, row, device, args.smoke, args.reps, args.kv,
                              prefill_peer)
        except Exception as e:  # noqa: BLE001 - the other rows still count
            common.say(f"  {label}: ERROR {type(e).__name__}: {str(e)[:300]}")
            prefill.append({"row": list(row), "error": f"{type(e).__name__}: {e}"})
            continue
        common.say(f"  {label:34s} " + "  ".join(
            f"{name} {common.fmt_us(res[name]['us'])} µs ({res[name]['tflops']:.0f} TFLOP/s"
            f"{'' if res[name]['check_ok'] else ', CHECK FAILED'})"
            for name in ("table", *PREFILL_LAUNCHES)) + f"  [table: {res['explain']['variant']}]"
            + ("" if not peer_compared(res) else
               f"  peer {common.fmt_us(res['peer']['us'])} µs (ours on its cache "
               f"{common.fmt_us(res.get(PEER_CACHE_TABLE, res['table'])['us'])}, "
               f"{res.get(PEER_CACHE_TABLE, res['table'])['us'] / res['peer']['us']:.2f}×"
               f"{'' if res['peer']['check_ok'] else ', PEER CHECK FAILED'})")
            + ("" if "bf16 table" not in res else
               f"  bf16 table {common.fmt_us(res['bf16 table']['us'])} µs "
               f"({res['table']['us'] / res['bf16 table']['us']:.2f}×"
               f"{'' if res['bf16 table']['check_ok'] else ', CHECK FAILED'})"))
        prefill.append(res)
        common.write_json(os.path.join(args.out, "bench_attn.json"),
                          {"env": env, "rows": results, "prefill": prefill})
        common.free_memory()
    failed = [r for r in results if "error" in r or not r["check"]["ok"]
              or (r["step"] is not None and not r["step"]["step_equals_two_calls"])
              or not r.get("check_on_peer_cache", {"ok": True})["ok"]]
    failed += [r for r in prefill if "error" in r or not all(
        r[name]["check_ok"] for name in ("table", *PREFILL_LAUNCHES, "bf16 table",
                                         PEER_CACHE_TABLE) if name in r)]
    total = len(results) + len(prefill)
    common.say(f"attention: {total - len(failed)}/{total} rows ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
