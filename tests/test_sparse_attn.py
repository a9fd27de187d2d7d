"""Sparse attention over the indexer's selected blocks (docs/KERNELS.md §15) against an
independent float64 reference (softmax over exactly the listed, visible keys), with vLLM's
bounds for bf16 (mean abs error ≤ 2.5e-4, max ≤ 1.7e-2): G 4/8/16, Q 1/4, both cache layouts
(HND and an NHD view), fp8 KV with each scale mode, split lists merged by log-sum-exp, −1
holes, rows with no visible key, prefill rows, strided arguments, rejections. CPU interpreter
on small shapes; the GPU at MiniMax-M3 sizes (marked gpu).
"""
from __future__ import annotations

import inspect
import itertools
import math

import numpy as np
import pytest
import torch

import generated
from decode_inputs import DEVICE, virtual_tensor
from generated import sparse_attention as sa
from generated import sparse_attn as sk
from reference_attn import decode_positions, prefill_positions, ref_sparse_attn

BLOCK = 128
MEAN_ABS, MAX_ABS = 2.5e-4, 1.7e-2  # vLLM's bf16 bounds
FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def make_cache(pages, Hkv, D, layout, dtype, g):
    """(kv as the kernels take it, its 5-D [pages, 2, 128, Hkv, D] values for reference use)."""
    vals = (torch.randn((pages, 2, BLOCK, Hkv, D), generator=g) * 0.5)
    if layout == "5d":
        kv = vals.clone()
    elif layout == "hnd":  # [pages, Hkv, 128, 2D] contiguous
        kv = torch.cat([vals[:, 0], vals[:, 1]], dim=-1).permute(0, 2, 1, 3).contiguous()
    else:  # "nhd": storage [pages, 128, Hkv, 2D], seen as [pages, Hkv, 128, 2D]
        kv = torch.cat([vals[:, 0], vals[:, 1]], dim=-1).contiguous().permute(0, 2, 1, 3)
    return kv.to(dtype)


def block_lists(positions, Hkv, topk, W, g, holes=True):
    """[Hkv, T, topk] ids: each row's own block, earlier blocks at random (distinct), −1 holes."""
    T = len(positions)
    ids = torch.full((Hkv, T, topk), -1, dtype=torch.int32)
    for row, pos in enumerate(positions):
        if pos is None:
            continue
        own = max(pos[1], 0) // BLOCK
        for h in range(Hkv):
            earlier = torch.randperm(own, generator=g)[:topk - 1].tolist() if own else []
            row_ids = [own] + earlier
            if holes and len(row_ids) > 2:
                row_ids[1] = -1
            row_ids = row_ids[:topk]
            ids[h, row, :len(row_ids)] = torch.tensor(row_ids, dtype=torch.int32)
    return ids


def decode_case(lens, Q=1, Hkv=1, G=16, D=64, topk=4, layout="5d", kv_dtype=torch.bfloat16,
                q_dtype=torch.bfloat16, seed=0, extra_cols=2):
    g = torch.Generator().manual_seed(seed)
    R = len(lens)
    W = max(1, -(-max(lens) // BLOCK)) + extra_cols
    pages = R * W + 3
    kv = make_cache(pages, Hkv, D, layout, kv_dtype, g)
    table = torch.randperm(pages, generator=g)[:R * W].view(R, W).to(torch.int32)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    positions = decode_positions(seq_lens, Q)
    q = torch.randn((R * Q, Hkv * G, D), generator=g).to(q_dtype)
    ids = block_lists(positions, Hkv, topk, W, g)
    return dict(q=q.to(DEVICE), kv=kv.to(DEVICE), topk_idx=ids.to(DEVICE),
                block_table=table.to(DEVICE), seq_lens=seq_lens.to(DEVICE),
                num_kv_heads=Hkv, sm_scale=D ** -0.5, decode_query_len=Q), positions


def check(out, ref, bounds=(MEAN_ABS, MAX_ABS)):
    """Error against the float64 result rounded once to the output's dtype (the rounding every
    kernel writing that dtype must do), within vLLM's bounds."""
    err = (out.double() - ref.to(out.dtype).double()).abs()
    assert float(err.mean()) <= bounds[0] and float(err.max()) <= bounds[1], \
        (float(err.mean()), float(err.max()))


def scale_args(case, scales, seed):
    """k_scale / v_scale keywords of a scale mode over ``case``'s cache: none, one scalar
    each, or one per (KV head, slot) drawn from ``seed``."""
    if scales == "scalar":
        return dict(k_scale=torch.tensor(0.75, device=DEVICE),
                    v_scale=torch.tensor(1.25, device=DEVICE))
    if scales == "per_token":
        shape = (case["num_kv_heads"], case["kv"].shape[0] * BLOCK)
        g = torch.Generator().manual_seed(seed)
        return dict(k_scale=(torch.rand(shape, generator=g) + 0.5).to(DEVICE),
                    v_scale=(torch.rand(shape, generator=g) + 0.5).to(DEVICE))
    return {}


def run_decode(case, out_dtype=torch.bfloat16, splits=None, **scales):
    out = torch.full(case["q"].shape, float("nan"), dtype=out_dtype, device=DEVICE)
    if splits is None:
        return generated.sparse_attn_decode(**case, output=out, **scales)
    return sa.sparse_attn_with_launch(dict(splits=splits, num_warps=4, num_stages=2), "decode",
                                      **case, output=out, **scales)


def run_as_prefill_tiles(case, **scales):
    """A one-row-per-request decode ``case`` (Q 1) as prefill rows of one token each, through
    the query-tiled kernel (16 lanes); fp32 output."""
    assert case["decode_query_len"] == 1
    T = case["q"].shape[0]
    out = torch.full(case["q"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
    return sa.sparse_attn_with_launch(
        dict(variant="sparse_attn_tiled", lanes=16, num_warps=4, num_stages=2), "prefill",
        case["q"], case["kv"], case["topk_idx"], case["block_table"],
        torch.arange(T + 1, dtype=torch.int32, device=DEVICE), case["seq_lens"],
        case["seq_lens"] - 1, 1, case["num_kv_heads"], case["sm_scale"], out, **scales)


@pytest.mark.parametrize("G,Hkv,Q", [(16, 1, 1), (8, 2, 4), (4, 1, 4)])
def test_decode_matches_float64(G, Hkv, Q):
    case, pos = decode_case([300, 130, 1], Q=Q, Hkv=Hkv, G=G, seed=G + Q)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos,
                          Hkv, case["sm_scale"])
    check(run_decode(case), ref)


@pytest.mark.parametrize("layout", ["hnd", "nhd"])
def test_both_cache_layouts(layout):
    case, pos = decode_case([260, 90], Q=2, Hkv=2, G=4, layout=layout, seed=3)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 2,
                          case["sm_scale"])
    check(run_decode(case), ref)


@pytest.mark.parametrize("q_dtype", [torch.bfloat16, torch.float32])
def test_splits_merge_exactly(q_dtype):
    """Every split count matches float64 (the log-sum-exp merge is exact algebra: with fp32
    queries, whose probabilities are never rounded to 16 bits, every split count gives the
    one-split result within fp32 rounding); empty splits and rows without keys give zeros."""
    case, pos = decode_case([600, 0, 140], Q=1, Hkv=1, G=8, topk=8, seed=5, q_dtype=q_dtype)
    one = run_decode(case, torch.float32, splits=1)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 1,
                          case["sm_scale"])
    check(one, ref)
    assert bool((one[1] == 0).all())  # seq_len 0: no visible key
    for splits in (2, 4, 8):
        got = run_decode(case, torch.float32, splits=splits)
        check(got, ref)
        assert bool((got[1] == 0).all())
        if q_dtype == torch.float32:
            torch.testing.assert_close(got, one, rtol=1e-5, atol=1e-6)


def test_split_counters_are_left_at_zero_and_splits_are_deterministic(monkeypatch):
    """The last split of a (row, KV head) merges and resets its arrival counter: a second
    launch finds every counter at zero and gives the same bits (the merge runs in split
    order, whatever the arrival order)."""
    monkeypatch.setattr(sk, "_COUNTERS", {})
    case, _ = decode_case([600, 300], Q=2, Hkv=2, G=8, topk=8, seed=11)
    first = run_decode(case, torch.float32, splits=4)
    counters = sk._COUNTERS[case["q"].device]
    assert counters.dtype == torch.int32 and counters.numel() >= sk.MIN_COUNTER_SLOTS
    assert not counters.any()
    again = run_decode(case, torch.float32, splits=4)
    assert torch.equal(first, again) and not counters.any()
    assert list(sk._COUNTERS) == [case["q"].device]


def test_grown_counters_stay_alive_for_the_graphs_that_hold_them(monkeypatch):
    """A launch that needs more counters than the device has gets a buffer twice as large; the
    smaller one, which plans (and the CUDA graphs captured with them) still use, is kept, not
    freed, and both stay zero."""
    monkeypatch.setattr(sk, "_COUNTERS", {})
    monkeypatch.setattr(sk, "_RETIRED", [])
    monkeypatch.setattr(sk, "MIN_COUNTER_SLOTS", 4)
    small, _ = decode_case([300, 200], Q=1, Hkv=2, G=8, topk=4, seed=14)  # 2 · 2 programs
    run_decode(small, splits=2)
    first = sk._COUNTERS[small["q"].device]
    assert first.numel() == 4
    large, pos = decode_case([300, 200, 100], Q=2, Hkv=2, G=8, topk=4, seed=15)  # 12
    got = run_decode(large, torch.float32, splits=2)
    check(got, ref_sparse_attn(large["q"], large["kv"], large["topk_idx"],
                               large["block_table"], pos, 2, large["sm_scale"]))
    grown = sk._COUNTERS[small["q"].device]
    assert grown.numel() == 16 and len(sk._RETIRED) == 1 and sk._RETIRED[0] is first
    assert not first.any() and not grown.any()


def test_split_counters_are_not_allocated_during_capture(monkeypatch):
    """Allocating the counters inside a CUDA-graph capture is refused with a clear error (they
    would come from the graph's pool); capture is faked here. One split needs none."""
    monkeypatch.setattr(sk, "_COUNTERS", {})
    monkeypatch.setattr(sk, "_capturing", lambda device: True)
    case, pos = decode_case([300], Q=1, Hkv=1, G=8, topk=4, seed=12)
    with pytest.raises(RuntimeError, match="before capturing"):
        run_decode(case, splits=2)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 1,
                          case["sm_scale"])
    check(run_decode(case, splits=1), ref)
    assert sk._COUNTERS == {}


def test_split_partials_share_a_device_buffer_up_to_its_limit(monkeypatch):
    """Partials up to SHARED_PARTIALS floats live in one per-device buffer that later launches
    reuse; larger ones, or a buffer that would have to grow during capture (faked), are
    allocated per call; the results are the same bits either way."""
    monkeypatch.setattr(sk, "_PARTIALS", {})
    case, pos = decode_case([500, 260], Q=2, Hkv=2, G=8, topk=8, seed=13)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 2,
                          case["sm_scale"])
    shared = run_decode(case, torch.float32, splits=4)
    check(shared, ref)
    buf = sk._PARTIALS[case["q"].device]
    assert buf.dtype == torch.float32 and buf.numel() >= 4 * 4 * 16 * (64 + 1)
    check(run_decode(case, torch.float32, splits=2), ref)
    assert sk._PARTIALS[case["q"].device] is buf  # a smaller launch reuses it
    monkeypatch.setattr(sk, "SHARED_PARTIALS", 16)
    assert torch.equal(run_decode(case, torch.float32, splits=4), shared)
    monkeypatch.setattr(sk, "SHARED_PARTIALS", 1 << 22)
    monkeypatch.setattr(sk, "_PARTIALS", {})
    monkeypatch.setattr(sk, "_capturing", lambda device: True)  # (the counters exist)
    assert torch.equal(run_decode(case, torch.float32, splits=4), shared)
    assert sk._PARTIALS == {}


@pytest.mark.parametrize("fp8,scales", [("e4m3", "none"), ("e4m3", "scalar"),
                                        ("e5m2", "per_token")])
def test_fp8_kv_with_each_scale_mode(fp8, scales):
    case, pos = decode_case([270, 129], Q=1, Hkv=2, G=8, kv_dtype=FP8[fp8], seed=7)
    kw = {}
    if scales == "scalar":
        kw = dict(k_scale=torch.tensor(0.75, device=DEVICE),
                  v_scale=torch.tensor([1.5], device=DEVICE))
    elif scales == "per_token":
        slots = case["kv"].shape[0] * BLOCK
        g = torch.Generator().manual_seed(1)
        kw = dict(k_scale=(torch.rand((2, slots), generator=g) + 0.5).to(DEVICE),
                  v_scale=(torch.rand((2, slots), generator=g) + 0.5).to(DEVICE))
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 2,
                          case["sm_scale"], **kw)
    check(run_decode(case, torch.float32, **kw), ref)  # fp32 output: the kernel's error alone


@pytest.mark.parametrize("q_dtype,kv_dtype", [(torch.float32, torch.float8_e4m3fn),
                                              (torch.bfloat16, torch.bfloat16),
                                              (torch.float32, torch.bfloat16)])
def test_scalar_scales_where_products_are_not_fp16(q_dtype, kv_dtype):
    """Scalar scales where the probabilities do not enter P·V as fp16 (an fp32 q, or bf16
    products), so V's scale multiplies them before the product: the split kernel at one and
    two splits and the query tile match float64."""
    case, pos = decode_case([270, 129], Q=1, Hkv=2, G=8, kv_dtype=kv_dtype, q_dtype=q_dtype,
                            seed=7)
    kw = dict(k_scale=torch.tensor(0.75, device=DEVICE),
              v_scale=torch.tensor(1.5, device=DEVICE))
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 2,
                          case["sm_scale"], **kw)
    for splits in (1, 2):
        check(run_decode(case, torch.float32, splits=splits, **kw), ref)
    check(run_as_prefill_tiles(case, **kw), ref)


@pytest.mark.parametrize("q_dtype,mode,size", [
    (torch.float16, "per_token", 3e5), (torch.float16, "scalar", 3e5),
    (torch.bfloat16, "per_token", 3e5), (torch.float16, "per_token", 1e-6)])
def test_fp8_v_scales_far_from_one_stay_in_range(q_dtype, mode, size):
    """fp16 probabilities times a V scale far above one (beyond fp16's range together) or far
    below it (below its subnormals) neither overflow nor vanish: the output, divided by the
    scale's size, is within the bounds of the float64 one (per-token scales vary 3× within a
    page)."""
    case, pos = decode_case([270, 129], Q=1, Hkv=2, G=8, kv_dtype=torch.float8_e4m3fn,
                            q_dtype=q_dtype, seed=13)
    slots = case["kv"].shape[0] * BLOCK
    g = torch.Generator().manual_seed(2)
    if mode == "scalar":
        v_scale = torch.tensor([size], device=DEVICE)
    else:
        v_scale = ((torch.rand((2, slots), generator=g) * 2 + 0.5) * size).to(DEVICE)
    kw = dict(k_scale=torch.ones_like(v_scale), v_scale=v_scale)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 2,
                          case["sm_scale"], **kw)
    out = run_decode(case, torch.float32, **kw)
    assert bool(torch.isfinite(out).all())
    check(out / size, ref / size)


@pytest.mark.parametrize("q_dtype", [torch.float16, torch.bfloat16])
def test_per_token_v_scales_ranged_per_split_or_per_tile(q_dtype):
    """fp16 probabilities take per-token V scales into fp16's range once per split where a
    split may take several steps (one split here: three), by each tile's own where it takes
    one (four splits): with scales 2^-12 to 2^12 apart from page to page, and 2^18 on the
    page of row 0's own block (fp16 overflows past 2^16 unless they are ranged), both
    launches give the float64 result within its bounds (relative to the output's size)."""
    case, pos = decode_case([600, 270], Q=1, Hkv=2, G=8, kv_dtype=torch.float8_e4m3fn,
                            q_dtype=q_dtype, seed=23)
    pages = case["kv"].shape[0]
    g = torch.Generator().manual_seed(5)
    per_page = 2.0 ** torch.randint(-12, 13, (2, pages, 1), generator=g).double()
    per_page[:, int(case["block_table"][0, 599 // BLOCK])] = 2.0 ** 18
    v_scale = ((torch.rand((2, pages, BLOCK), generator=g) + 0.5) * per_page).float()
    kw = dict(k_scale=torch.ones((2, pages * BLOCK), device=DEVICE),
              v_scale=v_scale.reshape(2, pages * BLOCK).to(DEVICE))
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 2,
                          case["sm_scale"], **kw)
    size = ref.abs().amax(dim=-1, keepdim=True).clamp_min(1e-30)  # each head's output
    outs = [run_decode(case, torch.float32, splits=s, **kw) for s in (1, 4)]
    for out in outs:
        check(out / size, ref / size)


@pytest.mark.parametrize("q_dtype,kv_dtype", [(torch.bfloat16, torch.float8_e4m3fn),
                                             (torch.float16, torch.float16),
                                             (torch.bfloat16, torch.bfloat16)])
def test_per_token_v_scales_2_30_apart_keep_the_small_scales_share(q_dtype, kv_dtype):
    """The documented limit of fp16 probabilities (§15): a key of V scale 2^30 and weight
    ~2^-30 beside a key of V scale 1 and weight 1 (the largest scale sets the split's range,
    yet the other key carries half the output) gives the float64 output to within the
    probabilities' 16-bit rounding; the bf16 path (bf16 probabilities, no range) too."""
    Hkv, G, D, e = 1, 4, 64, 30
    kv = torch.zeros((1, 2, BLOCK, Hkv, D))
    kv[0, 0, 0, 0, 0] = -e * math.log(2)  # key 0 scores −e·ln 2 against key 1's 0
    kv[0, 1, :2] = 1.0
    kv = kv.to(kv_dtype)
    q = torch.zeros((1, Hkv * G, D))
    q[:, :, 0] = 1.0
    q = q.to(q_dtype)
    v_scale = torch.ones((Hkv, BLOCK))
    v_scale[0, 0] = 2.0 ** e
    kw = dict(k_scale=torch.ones((Hkv, BLOCK), device=DEVICE), v_scale=v_scale.to(DEVICE))
    ids, table = torch.zeros((Hkv, 1, 1), dtype=torch.int32), torch.zeros((1, 1),
                                                                           dtype=torch.int32)
    lens = torch.tensor([2], dtype=torch.int32)
    out = torch.full(q.shape, float("nan"), dtype=torch.float32, device=DEVICE)
    generated.sparse_attn_decode(*(t.to(DEVICE) for t in (q, kv, ids, table, lens)), Hkv, 1.0,
                                 out, 1, **kw)
    ref = ref_sparse_attn(q, kv, ids, table, [(0, 1, 2)], Hkv, 1.0,
                          **{k: v.cpu() for k, v in kw.items()})
    assert float(ref.abs().min()) > 1.5  # both keys' shares count
    # (two keys: each weight's 16-bit rounding sets the error, not vLLM's mean bound)
    torch.testing.assert_close(out.double().cpu(), ref, rtol=2 ** -7, atol=0)


@pytest.mark.parametrize("kv_dtype,mode", [(torch.float8_e4m3fn, "none"),
                                           (torch.float8_e4m3fn, "scalar"),
                                           (torch.float16, "none")])
def test_fp16_probabilities_far_below_the_largest_keep_their_bits(kv_dtype, mode):
    """fp16 probabilities enter P·V scaled into fp16's normal range: 127 keys of weight
    exp(-15.125) ≈ 4.5 · 2^-24 beside one of weight 1 (as they are, fp16 subnormals would hold
    them to within ±0.5 · 2^-24, 10 % here, the same for every key) give the float64 output
    to within 2^-10 of it (fp32 output: no rounding of its own): a bf16 q over an fp8 cache
    (scaled back after each product), an fp16 q over an fp16 cache (once, at the end)."""
    q_dtype = torch.float16 if kv_dtype == torch.float16 else torch.bfloat16
    case, pos = decode_case([128], Q=1, Hkv=1, G=16, D=64, kv_dtype=kv_dtype, q_dtype=q_dtype,
                            seed=19)
    page = int(case["block_table"][0, 0])
    kv = case["kv"].float()
    kv[page] = 0.0
    kv[page, 0, 0, 0, 0] = 120.0  # key 0 scores 120 / 8 = 15 ...
    kv[page, 0, 1:, 0, 0] = -1.0  # ... the others -1 / 8: 15.125 below it
    kv[page, 1, 1:, 0, :] = 448.0  # their V rows (key 0's is zero): the whole output
    case["kv"] = kv.to(kv_dtype)
    case["q"] = torch.zeros_like(case["q"])
    case["q"][..., 0] = 1.0
    scales = {} if mode == "none" else dict(k_scale=torch.tensor([1.0], device=DEVICE),
                                            v_scale=torch.tensor([1.0], device=DEVICE))
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 1,
                          case["sm_scale"], **scales)
    out = run_decode(case, torch.float32, **scales)
    assert float(ref.abs().min()) > 0.01  # (127 · 448 · 4.5 · 2^-24 ≈ 0.0153 per element)
    rel = ((out.double() - ref.double()).abs() / ref.double().abs()).max()
    assert float(rel) <= 2.0 ** -10, float(rel)


@pytest.mark.parametrize("kv_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_bf16_query_lanes_of_any_size_over_fp8_keys(kv_dtype):
    """A bf16 query over an fp8 cache is taken into fp16 per lane by a power of two: heads far
    beyond fp16's range (2^30: their softmax is one key's) or far below it (2^-30) score as the
    float64 reference does, in both kernels."""
    case, pos = decode_case([270, 129], Q=1, Hkv=2, G=8, kv_dtype=kv_dtype, seed=17)
    sizes = torch.tensor([2.0 ** 30, 2.0 ** -30, 1.0, 3.0] * 4, device=DEVICE)
    case["q"] = (case["q"].float() * sizes[None, :, None]).bfloat16()
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 2,
                          case["sm_scale"])
    check(run_decode(case, torch.float32), ref)
    check(run_as_prefill_tiles(case), ref)


@pytest.mark.parametrize("kv_tile,splits", [(64, 1), (64, 4), (32, 8), (32, 32)])
def test_smaller_kv_tiles_match_float64(kv_tile, splits):
    """A block walked in tiles of 64 or 32 keys (the splits sharing the tiles): positions
    inside a block cross tiles (Q 4), per-slot scales follow each tile's tokens, and more
    splits than tiles leave some empty."""
    # (one KV head: the tiles, their splits and scales are each head's alike)
    case, pos = decode_case([270, 129, 5], Q=4, Hkv=1, G=4, kv_dtype=FP8["e4m3"], seed=16,
                            q_dtype=torch.float32)  # fp32 q: only the kernel's own error
    slots = case["kv"].shape[0] * BLOCK
    g = torch.Generator().manual_seed(2)
    kw = dict(k_scale=(torch.rand((1, slots), generator=g) + 0.5).to(DEVICE),
              v_scale=(torch.rand((1, slots), generator=g) + 0.5).to(DEVICE))
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 1,
                          case["sm_scale"], **kw)
    out = torch.full(case["q"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
    got = sa.sparse_attn_with_launch(dict(splits=splits, kv_tile=kv_tile, num_warps=4,
                                          num_stages=2), "decode", **case, output=out, **kw)
    check(got, ref, (1e-5, 1e-4))
    with pytest.raises(ValueError, match="kv_tile"):
        sa.sparse_attn_with_launch(dict(splits=1, kv_tile=48, num_warps=4, num_stages=2),
                                   "decode", **case, output=out, **kw)


@pytest.mark.parametrize("G,head_split,splits", [(4, 2, 1), (4, 4, 4), (8, 2, 8), (2, 4, 2)])
def test_head_split_matches_float64(G, head_split, splits):
    """The G heads of a (row, KV head) shared by head_split programs (more than G: one head
    each), alone or with splits merging each share's partials."""
    # (one KV head: its G heads are the ones shared)
    case, pos = decode_case([270, 129, 5], Q=2, Hkv=1, G=G, seed=21, q_dtype=torch.float32)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 1,
                          case["sm_scale"])
    out = torch.full(case["q"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
    got = sa.sparse_attn_with_launch(dict(splits=splits, head_split=head_split, num_warps=4,
                                          num_stages=2), "decode", **case, output=out)
    check(got, ref, (1e-5, 1e-4))
    with pytest.raises(ValueError, match="head_split"):
        sa.sparse_attn_with_launch(dict(splits=1, head_split=3, num_warps=4, num_stages=2),
                                   "decode", **case, output=out)


@pytest.mark.parametrize("G,Q,head_split,splits", [(8, 1, 1, 4), (4, 2, 2, 8), (16, 2, 1, 2)])
def test_merge_kernel_gives_the_last_arrival_merge_bits(G, Q, head_split, splits, monkeypatch):
    """Partials merged by the second kernel (one program per row and query head) instead of
    the last split to finish: the same bits (the same arithmetic, in split order), float64
    agreement, zeros for a request without keys, and no arrival counter touched."""
    # (one KV head: the merge kernel's programs are rows × query heads either way)
    case, pos = decode_case([1100, 0, 900], Q=Q, Hkv=1, G=G, topk=8, seed=31 + G,
                            q_dtype=torch.float32)  # lists of 8 blocks: every split has work
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 1,
                          case["sm_scale"])
    got = {}
    for merge_kernel in (False, True):
        out = torch.full(case["q"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
        if merge_kernel:
            monkeypatch.setattr(sk, "arrival_counters", lambda *a: pytest.fail("counters"))
        got[merge_kernel] = sa.sparse_attn_with_launch(
            dict(splits=splits, head_split=head_split, merge_kernel=merge_kernel, num_warps=4,
                 num_stages=2), "decode", **case, output=out)
    assert torch.equal(got[True], got[False])
    check(got[True], ref, (1e-5, 1e-4))
    assert bool((got[True][Q:2 * Q] == 0).all())  # request 1: seq_len 0
    with pytest.raises(TypeError, match="merge_kernel"):
        sa.sparse_attn_with_launch(dict(splits=2, merge_kernel=1, num_warps=4, num_stages=2),
                                   "decode", **case, output=out)


def test_merge_kernel_in_prefill_rows():
    """Prefill rows split over their lists and merged by the second kernel: rows of no
    request are zeros, the rest equal the last-arrival merge."""
    g = torch.Generator().manual_seed(23)
    prefix, qlen = [700, 0], [6, 9]  # the first request's lists fill all four splits
    seq = [p + n for p, n in zip(prefix, qlen)]
    W, Hkv, G, D, topk = 7, 1, 4, 64, 4  # (one KV head: the merge is by rows × query heads)
    pages = 2 * W + 1
    kv = make_cache(pages, Hkv, D, "5d", torch.bfloat16, g)
    table = torch.randperm(pages, generator=g)[:2 * W].view(2, W).to(torch.int32)
    T = sum(qlen) + 2
    cu = torch.tensor([0, 6, 15], dtype=torch.int32)
    pre, lens = torch.tensor(prefix, dtype=torch.int32), torch.tensor(seq, dtype=torch.int32)
    pos = prefill_positions(cu, pre, lens, T, max(qlen))
    ids = block_lists(pos, Hkv, topk, W, g)
    q = torch.randn((T, Hkv * G, D), generator=g).float()
    args = [t.to(DEVICE) for t in (q, kv, ids, table, cu, lens, pre)]
    got = {}
    for merge_kernel in (False, True):
        out = torch.full((T, Hkv * G, D), float("nan"), dtype=torch.float32, device=DEVICE)
        got[merge_kernel] = sa.sparse_attn_with_launch(
            dict(splits=4, merge_kernel=merge_kernel, num_warps=4, num_stages=2), "prefill",
            *args, max(qlen), Hkv, D ** -0.5, out)
    assert torch.equal(got[True], got[False])
    check(got[True], ref_sparse_attn(args[0], args[1], args[2], args[3], pos, Hkv, D ** -0.5),
          (1e-5, 1e-4))
    assert bool((got[True][15:] == 0).all())


def test_fp32_query_and_output():
    case, pos = decode_case([300], Q=4, Hkv=1, G=4, q_dtype=torch.float32, seed=9)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 1,
                          case["sm_scale"])
    check(run_decode(case, torch.float32), ref, (1e-5, 1e-4))


def test_ids_outside_the_table_or_past_the_row_are_skipped():
    """Ids ≥ the table width, negative ids, blocks after the row's position and page ids outside
    the cache read nothing and add no key."""
    case, pos = decode_case([200, 200], Q=1, Hkv=1, G=4, topk=6, seed=11)
    ids = case["topk_idx"].clone()
    # 10^6: past the table (4 wide); 3: inside it, past the row (block 3 starts at 384)
    ids[0, 0, 2:] = torch.tensor([10 ** 6, -5, 3, -1], dtype=torch.int32)
    case["topk_idx"] = ids
    case["block_table"][1, 0] = 10 ** 7  # row 1's block 0: a page outside the cache
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 1,
                          case["sm_scale"])
    check(run_decode(case), ref)


def _garbage(dtype):
    """Values a cache slot past seq_len might hold: NaN, ±inf (fp8 e4m3fn has none: its
    largest values) and the type's largest finite values."""
    big = float(torch.finfo(dtype).max)
    return [float("nan"), float("inf"), -float("inf"), big, -big]


def _misaligned(kv):
    """``kv``'s values in storage one element past a 16-byte boundary: no bulk copies, no
    16-bit pairs over fp8 (the kernels read V as it is, by pointers)."""
    flat = torch.empty(kv.numel() + 1, dtype=kv.dtype, device=kv.device)[1:]
    return flat.view(kv.shape).copy_(kv)


def _poison_unseen_slots(kv, table, lens, values, half=1):
    """Each request's last page: its V (``half`` 1) or K (0) rows from slot seq_len % 128 on
    set to ``values`` (cycled), in a 5-D cache or a packed [pages, Hkv, 128, 2·D] one (either
    order: the copy keeps its strides). Those keys are no row's (key < seq_len), so no result
    may change."""
    kv = kv.clone()
    D = kv.shape[-1] // 2
    for r, n in enumerate(lens.tolist()):
        page, first = int(table[r, (n - 1) // BLOCK]), n % BLOCK
        for slot in range(first, BLOCK if first else 0):
            if kv.dim() == 5:
                kv[page, half, slot] = values[slot % len(values)]
            else:
                kv[page, :, slot, half * D:(half + 1) * D] = values[slot % len(values)]
    return kv


def _poison_unseen_scales(scale, table, lens, values):
    """A per-token [Hkv, pages · 128] scale with each request's slots past seq_len on its last
    page set to ``values`` (cycled)."""
    scale = scale.clone()
    view = scale.view(scale.shape[0], -1, BLOCK)
    for r, n in enumerate(lens.tolist()):
        page, first = int(table[r, (n - 1) // BLOCK]), n % BLOCK
        for slot in range(first, BLOCK if first else 0):
            view[:, page, slot] = values[slot % len(values)]
    return scale


@pytest.mark.filterwarnings("ignore:overflow encountered")  # (a huge K scale's unused scores)
@pytest.mark.parametrize("layout", ["5d", "hnd", "nhd"])
@pytest.mark.parametrize("kv_dtype,scales", [(torch.bfloat16, "none"),
                                             (torch.float8_e4m3fn, "per_token")])
def test_k_and_v_slots_past_seq_len_are_never_used_in_any_layout(layout, kv_dtype, scales):
    """§15: slots past seq_len on a listed page, in every cache layout, leave the decode
    output's bits as they are: K rows there holding the largest finite values, V rows any
    bits (NaN, ±inf, the largest finite values), per-token K scales there huge but finite,
    V scales there any value; by whole blocks or smaller tiles, one split or several."""
    case, _ = decode_case([200, 90], Q=2, Hkv=2, G=4, topk=3, layout=layout,
                          kv_dtype=kv_dtype, seed=44)
    kw = scale_args(case, scales, 45)
    big = float(torch.finfo(kv_dtype).max)
    table, lens = case["block_table"], case["seq_lens"]
    bad_kv = _poison_unseen_slots(case["kv"], table, lens, [big, -big], half=0)
    bad_kv = _poison_unseen_slots(bad_kv, table, lens, _garbage(kv_dtype), half=1)
    bad_kw = dict(kw)
    if scales == "per_token":
        bad_kw = dict(k_scale=_poison_unseen_scales(kw["k_scale"], table, lens, [1e30, 3e38]),
                      v_scale=_poison_unseen_scales(kw["v_scale"], table, lens,
                                                    [math.nan, math.inf, 1e30, 3e38]))
    for launch in (None, dict(splits=1), dict(splits=4), dict(splits=2, kv_tile=64)):
        outs = []
        for kv, scale_kw in ((case["kv"], kw), (bad_kv, bad_kw)):
            out = _poisoned(case["q"])
            if launch is None:
                generated.sparse_attn_decode(**dict(case, kv=kv), output=out, **scale_kw)
            else:
                sa.sparse_attn_with_launch(dict(launch, num_warps=4, num_stages=2), "decode",
                                           **dict(case, kv=kv), output=out, **scale_kw)
            outs.append(out)
        assert bool(torch.isfinite(outs[0]).all()), launch
        assert torch.equal(outs[0], outs[1]), launch


@pytest.mark.parametrize("kv_dtype,q_dtype,scales,launch", [
    (torch.bfloat16, torch.bfloat16, "none", None),
    (torch.float8_e4m3fn, torch.bfloat16, "none", dict(splits=2, kv_tile=64, tma=True,
                                                       num_warps=4, num_stages=2)),
    (torch.float8_e4m3fn, torch.bfloat16, "misaligned", dict(splits=1, num_warps=4,
                                                             num_stages=2)),
    (torch.float8_e5m2, torch.float16, "scalar", None),
    (torch.bfloat16, torch.bfloat16, "none", dict(splits=1, num_warps=4, num_stages=2)),
    (torch.float8_e4m3fn, torch.bfloat16, "none", dict(splits=4, num_warps=4, num_stages=2)),
    (torch.float8_e5m2, torch.float16, "per_token", dict(splits=1, num_warps=4, num_stages=2)),
    (torch.float8_e4m3fn, torch.float16, "per_token", dict(splits=16, num_warps=4,
                                                            num_stages=2)),
    (torch.float8_e4m3fn, torch.float32, "per_token", None),
    (torch.bfloat16, torch.bfloat16, "none", dict(splits=2, kv_tile=64, tma=True, num_warps=4,
                                                  num_stages=2)),
    (torch.float8_e5m2, torch.bfloat16, "scalar", dict(splits=4, kv_tile=32, num_warps=4,
                                                       num_stages=2)),
    # (fp8 V through TMA: only an fp32 q reads it so, not as 16-bit pairs by pointers)
    (torch.float8_e4m3fn, torch.float32, "per_token", dict(splits=2, kv_tile=64, tma=True,
                                                           num_warps=4, num_stages=2)),
])
def test_v_rows_and_scales_past_seq_len_are_never_used(kv_dtype, q_dtype, scales, launch):
    """Cache slots past seq_len may hold anything (pages are reused): V rows there (NaN, inf,
    the largest finite values) and per-token V scales there (NaN, inf, huge) leave the decode
    output's bits as they are, with V read as it is by pointers (fp8 rows past the last
    visible key read from its row), as fp8 pairs, or through the tensor memory accelerator
    (fp8 rows there selected to zeros), by whole blocks or smaller tiles, one split or many,
    scales ranged per split or per tile (a range over them would take every visible
    probability to 0)."""
    case, _ = decode_case([200, 90], Q=2, Hkv=2, G=4, topk=3, kv_dtype=kv_dtype,
                          q_dtype=q_dtype, seed=41)
    misaligned = scales == "misaligned"
    kw = scale_args(case, "none" if misaligned else scales, 42)
    out_dtype = torch.float32 if q_dtype == torch.float32 else torch.bfloat16

    def run(case, kw):
        if misaligned:
            case = dict(case, kv=_misaligned(case["kv"]))
        out = torch.full(case["q"].shape, float("nan"), dtype=out_dtype, device=DEVICE)
        if launch is None:
            return generated.sparse_attn_decode(**case, output=out, **kw)
        return sa.sparse_attn_with_launch(launch, "decode", **case, output=out, **kw)

    want = run(case, kw).clone()
    assert bool(torch.isfinite(want).all())
    bad = dict(case, kv=_poison_unseen_slots(case["kv"], case["block_table"], case["seq_lens"],
                                             _garbage(kv_dtype)))
    if scales == "per_token":
        v_scale = kw["v_scale"].clone().view(2, -1, BLOCK)
        for r, n in enumerate(case["seq_lens"].tolist()):
            page = int(case["block_table"][r, (n - 1) // BLOCK])
            v_scale[:, page, n % BLOCK:] = torch.tensor(
                [float("nan"), float("inf"), 1e30, 3e38]).repeat(BLOCK)[:BLOCK - n % BLOCK]
        kw = dict(kw, v_scale=v_scale.view(2, -1))
    assert torch.equal(run(bad, kw), want)


@pytest.mark.parametrize("sorted_union,tma,kv_dtype,q_dtype,scales", [
    (True, False, torch.bfloat16, torch.bfloat16, "none"),
    (False, False, torch.bfloat16, torch.bfloat16, "none"),
    (True, True, torch.bfloat16, torch.bfloat16, "none"),
    (True, True, torch.float8_e4m3fn, torch.bfloat16, "none"),
    (False, False, torch.float8_e5m2, torch.float16, "per_token"),
    (True, False, torch.float8_e4m3fn, torch.float16, "per_token"),
    (True, False, torch.float8_e4m3fn, torch.float32, "per_token"),
    (True, False, torch.bfloat16, torch.bfloat16, "per_token"),
    (False, False, torch.float16, torch.float16, "per_token"),
])
def test_query_tiles_never_use_v_rows_or_scales_past_seq_len(sorted_union, tma, kv_dtype,
                                                             q_dtype, scales):
    """The query-tiled kernel: V rows past a request's seq_len (NaN, inf and the largest
    finite values, not used: over a 16-bit cache each step's tile ends at its last key; over
    fp8 by pointers the last visible key's row is read instead, through TMA they are selected
    to zeros) and per-token V scales there (NaN, inf, huge, over any cache) leave its bits as
    they are, with the tile's pages walked sorted or by minima, through
    the tensor memory accelerator or by pointers. Requests 0 and 1 share the page of block 0,
    of which request 1 sees 46 keys and request 0 all (a tile of rows of both reads the
    longer row's: checked against float64)."""
    g = torch.Generator().manual_seed(43)
    Hkv, G, D, W, topk = 1, 4, 64, 3, 3
    prefix, qlen = [180, 40, 100], [9, 6, 5]
    T = sum(qlen)
    cu = torch.tensor([0, 9, 15, 20], dtype=torch.int32)
    pre = torch.tensor(prefix, dtype=torch.int32)
    lens = torch.tensor([p + n for p, n in zip(prefix, qlen)], dtype=torch.int32)
    pages = 3 * W + 1
    kv = make_cache(pages, Hkv, D, "5d", kv_dtype, g)
    table = torch.randperm(pages, generator=g)[:3 * W].view(3, W).to(torch.int32)
    table[1, 0] = table[0, 0]
    pos = prefill_positions(cu, pre, lens, T, max(qlen))
    ids = block_lists(pos, Hkv, topk, W, g)
    ids[:, 8] = torch.tensor([1, 0, -1], dtype=torch.int32)  # (row 8 shares a tile with 9-11)
    q = torch.randn((T, Hkv * G, D), generator=g).to(q_dtype)
    out_dtype = torch.float32 if q_dtype == torch.float32 else torch.bfloat16
    kw = scale_args(dict(num_kv_heads=Hkv, kv=kv), scales, 44)
    launch = dict(variant="sparse_attn_tiled", lanes=16, sorted_union=sorted_union, tma=tma,
                  num_warps=4, num_stages=2)

    def run(kv, kw):
        args = [t.to(DEVICE) for t in (q, kv, ids, table, cu, lens, pre)]
        out = torch.full(q.shape, float("nan"), dtype=out_dtype, device=DEVICE)
        return sa.sparse_attn_with_launch(launch, "prefill", *args, max(qlen), Hkv, D ** -0.5,
                                          out, **kw)

    want = run(kv, kw).clone()
    ref = ref_sparse_attn(q.to(DEVICE), kv.to(DEVICE), ids.to(DEVICE), table.to(DEVICE), pos,
                          Hkv, D ** -0.5, **kw)
    check(want, ref, (1e-3, 1.7e-2))  # rows here see few keys: larger 16-bit P rounding
    unshared = [0, 2]  # (slots of the shared page past request 1's length are request 0's)
    bad_kv = _poison_unseen_slots(kv, table[unshared], lens[unshared],
                                  _garbage(kv_dtype))
    if scales == "per_token":
        v_scale = kw["v_scale"].clone().view(-1, BLOCK)
        for r in unshared:
            n = int(lens[r])
            v_scale[int(table[r, (n - 1) // BLOCK]), n % BLOCK:] = torch.tensor(
                [float("nan"), float("inf"), 1e30, 3e38]).repeat(BLOCK)[:BLOCK - n % BLOCK]
        kw = dict(kw, v_scale=v_scale.view(1, -1))
    assert torch.equal(run(bad_kv, kw), want)


def test_block_ids_whose_keys_pass_int32_are_skipped():
    """A block id ≥ 2^24 (a table that wide) starts past every int32 position: it adds no key
    (its first key computed without wrapping)."""
    case, _ = decode_case([100], Q=1, Hkv=1, G=4, topk=2, seed=44)
    W = (1 << 24) + 2
    table = torch.zeros((1, W), dtype=torch.int32, device=DEVICE)
    table[0, 0], table[0, W - 1] = case["block_table"][0, 0], 1
    case["block_table"] = table
    outs = []
    for listed in ([0, W - 1], [0, -1]):
        case["topk_idx"] = torch.tensor([[listed]], dtype=torch.int32, device=DEVICE)
        outs.append(run_decode(case).clone())
    assert torch.equal(outs[0], outs[1])


def test_prefill_rows_of_extreme_cu_seqlens_are_zero():
    """cu_seqlens_q[0] = −2^31: a row's offset in its request (row − cu[r]) is taken in int64,
    so rows 0 and 1 lie 2^31 into the request, past max_query_len: zeros (in int32 they would
    wrap to a small position and attend)."""
    g = torch.Generator().manual_seed(45)
    kv = make_cache(3, 1, 64, "5d", torch.bfloat16, g)
    q = torch.randn((2, 16, 64), generator=g).bfloat16()
    args = [t.to(DEVICE) for t in (
        q, kv, torch.tensor([[[0, 1, 2]] * 2], dtype=torch.int32),
        torch.tensor([[0, 1, 2]], dtype=torch.int32),
        torch.tensor([-2 ** 31, 2], dtype=torch.int32), torch.tensor([300], dtype=torch.int32),
        torch.tensor([2 ** 31 - 1], dtype=torch.int32))]
    out = torch.full((2, 16, 64), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    generated.sparse_attn_prefill(*args, 2, 1, 0.125, out)
    assert bool((out == 0).all())


@pytest.mark.parametrize("launch", [None, dict(splits=1, num_warps=4, num_stages=2),
                                    dict(variant="sparse_attn_tiled", lanes=16, num_warps=4,
                                         num_stages=2)])
def test_prefill_max_query_len_above_the_batch_counts_as_the_batch(launch):
    """§13.8: a max_query_len above T counts as T. With cu_seqlens_q[0] = −100 the three rows
    lie 100–102 rows into their request, past T: no request's rows (zeros) whatever
    max_query_len says, as the prefill indexer leaves their ids; the same call with the cu
    starting at 0 attends (the rows are real)."""
    g = torch.Generator().manual_seed(46)
    kv = make_cache(4, 1, 64, "5d", torch.bfloat16, g)
    q = torch.randn((3, 4, 64), generator=g).bfloat16()
    ids = torch.tensor([[[0, 1, 2]] * 3], dtype=torch.int32)
    table = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    lens, pre = torch.tensor([300], dtype=torch.int32), torch.tensor([150], dtype=torch.int32)
    for cu, mql, zero in (([-100, 3], 200, True), ([-100, 3], 3, True), ([0, 3], 200, False)):
        cu = torch.tensor(cu, dtype=torch.int32)
        args = [t.to(DEVICE) for t in (q, kv, ids, table, cu, lens, pre)]
        out = torch.full((3, 4, 64), float("nan"), dtype=torch.float32, device=DEVICE)
        if launch is None:
            generated.sparse_attn_prefill(*args, mql, 1, 0.125, out)
        else:
            sa.sparse_attn_with_launch(launch, "prefill", *args, mql, 1, 0.125, out)
        ref = ref_sparse_attn(q, kv, ids, table, prefill_positions(cu, pre, lens, 3, mql), 1,
                              0.125)
        assert bool((ref == 0).all()) == zero
        if zero:
            assert bool((out == 0).all())
        else:
            check(out.cpu(), ref)


def test_strides_past_int32_address_right_or_are_refused():
    """Element offsets of q (head stride · heads past 2^31) are taken in int64: the call gives
    the contiguous call's bits. A cache whose strides put one page's keys of a KV head more than
    2^31 − 1 elements apart (the kernels address within a page in int32) is refused naming kv."""
    case, _ = decode_case([150], Q=1, Hkv=1, G=16, topk=2, seed=46)
    want = run_decode(case).clone()
    S = (1 << 28) + 16  # 15 · S > 2^31
    storage = virtual_tensor(15 * S + 64, torch.bfloat16)
    q = storage.as_strided((1, 16, 64), (64, S, 1))
    for h in range(16):
        q[0, h] = case["q"][0, h]
    assert torch.equal(run_decode(dict(case, q=q)), want)
    del q, storage
    kt = 17_000_000  # 127 · kt > 2^31
    storage = virtual_tensor(127 * kt + 256, torch.float8_e4m3fn)
    kv = storage.as_strided((1, 1, BLOCK, 128), (0, 0, kt, 1))
    with pytest.raises(ValueError, match="^kv: "):
        generated.sparse_attn_decode(case["q"], kv, case["topk_idx"], case["block_table"][:, :1],
                                     case["seq_lens"], 1, 0.125,
                                     torch.zeros_like(case["q"]), 1)


def test_prefill_rows_match_float64_and_rows_of_no_request_are_zero():
    g = torch.Generator().manual_seed(13)
    # (rows with only a few keys carry large probabilities, whose 16-bit rounding in the P·V
    # product then dominates the error: every row here sees ≥ 41 keys)
    prefix, qlen = [130, 40], [20, 9]
    seq = [p + n for p, n in zip(prefix, qlen)]
    W, Hkv, G, D, topk = 3, 2, 4, 64, 4
    pages = 2 * W + 1
    kv = make_cache(pages, Hkv, D, "5d", torch.bfloat16, g)
    table = torch.randperm(pages, generator=g)[:2 * W].view(2, W).to(torch.int32)
    T = sum(qlen) + 3  # three padding rows past cu[R]
    cu = torch.tensor([0, 20, 29], dtype=torch.int32)
    pre, lens = torch.tensor(prefix, dtype=torch.int32), torch.tensor(seq, dtype=torch.int32)
    pos = prefill_positions(cu, pre, lens, T, max(qlen))
    ids = block_lists(pos, Hkv, topk, W, g)
    q = torch.randn((T, Hkv * G, D), generator=g).bfloat16()
    args = [t.to(DEVICE) for t in (q, kv, ids, table, cu, lens, pre)]
    out = torch.full((T, Hkv * G, D), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    generated.sparse_attn_prefill(*args, max(qlen), Hkv, D ** -0.5, out)
    ref = ref_sparse_attn(args[0], args[1], args[2], args[3], pos, Hkv, D ** -0.5)
    check(out, ref)
    assert bool((out[29:] == 0).all())


@pytest.mark.parametrize("G,lanes,dtype", [(4, 16, torch.bfloat16), (8, 64, torch.bfloat16),
                                            (16, 32, torch.bfloat16), (8, 64, torch.float16)])
def test_prefill_query_tiles_match_float64(G, lanes, dtype):
    """The query-tiled kernel: tiles crossing request boundaries, neighbouring rows sharing
    blocks, −1 holes, padding rows (zeros) — against float64, and (one G; the per-token
    kernel's own tests check it against float64) equal to the per-token kernel within the
    16-bit rounding of probabilities; q and cache in bf16 or fp16 (whose probabilities' P·V
    accumulates times 2^14 until the end)."""
    g = torch.Generator().manual_seed(G + lanes)
    prefix, qlen = [300, 100, 0], [13, 22, 7]
    seq = [p + n for p, n in zip(prefix, qlen)]
    # one KV head: every property here is a tile's (its rows, their requests and lists); a
    # second head only doubles the programs (test_decode_query_tiles_match_float64 and
    # test_tma_tiles_of_the_query_tiled_kernel_give_the_pointer_bits take two)
    W, Hkv, D, topk = 4, 1, 64, 4
    pages = 3 * W + 1
    kv = make_cache(pages, Hkv, D, "5d", dtype, g)
    table = torch.randperm(pages, generator=g)[:3 * W].view(3, W).to(torch.int32)
    T = sum(qlen) + 2
    cu = torch.tensor([0, 13, 35, 42], dtype=torch.int32)
    pre, lens = torch.tensor(prefix, dtype=torch.int32), torch.tensor(seq, dtype=torch.int32)
    pos = prefill_positions(cu, pre, lens, T, max(qlen))
    ids = block_lists(pos, Hkv, topk, W, g)
    q = torch.randn((T, Hkv * G, D), generator=g).to(dtype)
    args = [t.to(DEVICE) for t in (q, kv, ids, table, cu, lens, pre)]
    walks = {}
    for sorted_union in (False, True):
        tiled = torch.full((T, Hkv * G, D), float("nan"), dtype=torch.float32, device=DEVICE)
        sa.sparse_attn_with_launch(dict(variant="sparse_attn_tiled", lanes=lanes,
                                        sorted_union=sorted_union, num_warps=4, num_stages=2),
                                   "prefill", *args, max(qlen), Hkv, D ** -0.5, tiled)
        walks[sorted_union] = tiled
    ref = ref_sparse_attn(args[0], args[1], args[2], args[3], pos, Hkv, D ** -0.5)
    check(tiled, ref, (1e-3, 1.7e-2))  # rows here see few keys: larger 16-bit P rounding
    assert bool((tiled[42:] == 0).all())
    # each row's blocks in ascending order either way: at one launch, the same bits
    assert torch.equal(walks[True], walks[False])
    # the sorted union in four shares (tiles crossing requests: a share's steps may belong to
    # one request's rows only), merged by log-sum-exp; padding rows still zero
    shares = torch.full_like(tiled, float("nan"))
    sa.sparse_attn_with_launch(dict(variant="sparse_attn_tiled", lanes=lanes, splits=4,
                                    sorted_union=True, num_warps=4, num_stages=2),
                               "prefill", *args, max(qlen), Hkv, D ** -0.5, shares)
    check(shares, ref, (1e-3, 1.7e-2))
    assert bool((shares[42:] == 0).all())
    if G != 8 or dtype != torch.bfloat16:
        return
    per_token = torch.zeros_like(tiled)
    generated.sparse_attn_prefill(*args, max(qlen), Hkv, D ** -0.5, per_token,
                                  hardware="generic")
    torch.testing.assert_close(tiled, per_token, rtol=0, atol=2e-2)


@pytest.mark.parametrize("sorted_union", [True, False])
def test_tiled_per_token_v_scales_take_every_rows_pages_into_range(sorted_union):
    """The query tile brings per-token V scales into fp16's range once for the whole tile (the
    sorted walk) or by each step's own (by minima): a page listed by one row of a tile and not
    by its first holds V scales 2^18 times the others' (beyond fp16's range under a range taken
    from the first row's pages alone), others 2^-12 to 2^12 apart from page to page; the output
    is float64's within its bounds relative to each head's size, and finite."""
    g = torch.Generator().manual_seed(31)
    Hkv, G, D, W, topk, lanes = 1, 4, 64, 5, 4, 16  # 4 rows of 4 heads per tile
    prefix, qlen = [520], [12]
    seq = [p + n for p, n in zip(prefix, qlen)]
    pages = W + 2
    kv = make_cache(pages, Hkv, D, "5d", torch.float8_e4m3fn, g)
    table = torch.randperm(pages, generator=g)[:W].view(1, W).to(torch.int32)
    cu = torch.tensor([0, 12], dtype=torch.int32)
    pre, lens = torch.tensor(prefix, dtype=torch.int32), torch.tensor(seq, dtype=torch.int32)
    T = 12
    pos = prefill_positions(cu, pre, lens, T, max(qlen))
    ids = block_lists(pos, Hkv, topk, W, g, holes=False)
    ids[0, 0] = torch.tensor([4, 0, -1, -1], dtype=torch.int32)  # tile 0's first row: 4, 0
    ids[0, 3] = torch.tensor([4, 2, -1, -1], dtype=torch.int32)  # its last: block 2 as well
    per_page = 2.0 ** torch.randint(-12, 13, (Hkv, pages, 1), generator=g).double()
    big = int(table[0, 2])
    per_page[:, big] = 2.0 ** 18
    v_scale = ((torch.rand((Hkv, pages, BLOCK), generator=g) + 0.5) * per_page).float()
    kw = dict(k_scale=torch.ones((Hkv, pages * BLOCK), device=DEVICE),
              v_scale=v_scale.reshape(Hkv, pages * BLOCK).to(DEVICE))
    q = torch.randn((T, Hkv * G, D), generator=g).bfloat16()
    args = [t.to(DEVICE) for t in (q, kv, ids, table, cu, lens, pre)]
    out = torch.full((T, Hkv * G, D), float("nan"), dtype=torch.float32, device=DEVICE)
    sa.sparse_attn_with_launch(dict(variant="sparse_attn_tiled", lanes=lanes,
                                    sorted_union=sorted_union, num_warps=4, num_stages=2),
                               "prefill", *args, max(qlen), Hkv, D ** -0.5, out, **kw)
    ref = ref_sparse_attn(args[0], args[1], args[2], args[3], pos, Hkv, D ** -0.5, **kw)
    assert bool(torch.isfinite(out).all())
    size = ref.abs().amax(dim=-1, keepdim=True).clamp_min(1e-30)  # each head's output
    check(out / size, ref / size)


def test_tiled_walks_agree_where_requests_share_pages(monkeypatch):
    """Tiles holding rows of two requests whose tables give some blocks the same page (a
    shared prefix: one step of the sorted walk serves both, the walk by minima loads it once
    per request), blocks listed twice and −1 holes: both walks of the query-tiled kernel give
    float64's result and, at one launch, the same bits; a tile of more keys than
    SORTED_UNION_MAX_KEYS walks by minima."""
    g = torch.Generator().manual_seed(5)
    W, Hkv, G, D, topk = 5, 1, 8, 64, 4
    prefix, qlen = [520, 515], [6, 10]
    seq = [p + n for p, n in zip(prefix, qlen)]
    pages = 2 * W + 1
    kv = make_cache(pages, Hkv, D, "5d", torch.bfloat16, g)
    shared = torch.randperm(pages, generator=g)[:2 * W]
    table = torch.stack([shared[:W], torch.cat([shared[:3], shared[W:W + 2]])]).to(torch.int32)
    cu = torch.tensor([0, 6, 16], dtype=torch.int32)
    pre, lens = torch.tensor(prefix, dtype=torch.int32), torch.tensor(seq, dtype=torch.int32)
    T = 16
    pos = prefill_positions(cu, pre, lens, T, max(qlen))
    ids = block_lists(pos, Hkv, topk, W, g)
    ids[0, ::3, 1] = ids[0, ::3, 0]  # listed twice
    ids[0, 1::4, 2] = -1
    q = torch.randn((T, Hkv * G, D), generator=g).bfloat16()
    args = [t.to(DEVICE) for t in (q, kv, ids, table, cu, lens, pre)]
    ref = ref_sparse_attn(args[0], args[1], args[2], args[3], pos, Hkv, D ** -0.5)
    walked = []
    real = sk._rt.KernelLaunch

    def launch(kernel, grid, options, **kw):  # the walk each launch takes (SORTED_UNION)
        run = real(kernel, grid, options, **kw)
        return lambda *a: walked.append(a[-4]) or run(*a)  # (then tma, splits, merge_pdl)

    monkeypatch.setattr(sk._rt, "KernelLaunch", launch)
    outs = []
    for sorted_union, most in ((False, 1024), (True, 1024), (True, 8 * 4 - 1)):
        monkeypatch.setattr(sk, "SORTED_UNION_MAX_KEYS", most)
        out = torch.full(q.shape, float("nan"), dtype=torch.float32, device=DEVICE)
        sa.sparse_attn_with_launch(dict(variant="sparse_attn_tiled", lanes=64,
                                        sorted_union=sorted_union, num_warps=4, num_stages=2),
                                   "prefill", *args, max(qlen), Hkv, D ** -0.5, out)
        check(out, ref, (1e-3, 1.7e-2))
        outs.append(out)
    assert walked == [False, True, False]  # 8 rows × 4 ids: 32 keys past 31
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def _shared_lists(case, pos, g, share=0.75):
    """A decode ``case``'s lists redrawn so that a request's rows mostly list the same blocks
    (as an indexer's rows of one request do): each row its own block, then a share of the
    request's common earlier blocks, then its own; a −1 hole and a block listed twice."""
    Hkv, T, topk = case["topk_idx"].shape
    ids = torch.full((Hkv, T, topk), -1, dtype=torch.int32)
    common = {}
    for row, (r, p, _) in enumerate(pos):
        own = max(p, 0) // BLOCK
        for h in range(Hkv):
            if (r, h) not in common:
                common[(r, h)] = torch.randperm(max(own, 1), generator=g).tolist()
            mine = torch.randperm(max(own, 1), generator=g).tolist()
            take = common[(r, h)][:int(share * (topk - 1))]
            row_ids = [own] + take + [b for b in mine if b not in take]
            row_ids = [b for b in row_ids if b <= own][:topk]
            if len(row_ids) > 3:
                row_ids[2], row_ids[3] = -1, row_ids[1]
            ids[h, row, :len(row_ids)] = torch.tensor(row_ids, dtype=torch.int32)
    case["topk_idx"] = ids.to(DEVICE)


def _decode_tiles(case, lanes, sorted_union, out_dtype=torch.float32, splits=1, **scales):
    out = torch.full(case["q"].shape, float("nan"), dtype=out_dtype, device=DEVICE)
    return sa.sparse_attn_with_launch(
        dict(variant="sparse_attn_tiled", lanes=lanes, sorted_union=sorted_union,
             splits=splits, num_warps=4, num_stages=2), "decode", **case, output=out, **scales)


@pytest.mark.parametrize("G,Hkv,Q,lanes", [(16, 1, 4, 64), (8, 2, 4, 32), (4, 1, 8, 32),
                                           (4, 2, 2, 16), (16, 1, 1, 32), (8, 1, 3, 32)])
def test_decode_query_tiles_match_float64(G, Hkv, Q, lanes):
    """Decode rows through the query-tiled kernel (a request's Q rows in one tile where lanes
    = Q · G, tiles crossing requests otherwise, rows past the batch in the last tile): rows
    sharing most blocks, −1 holes, a block listed twice, a request shorter than Q (rows before
    its first key are zero); both walks give the same bits, within vLLM's bounds of float64."""
    g = torch.Generator().manual_seed(G * 10 + Q)
    # three requests (3 · Q rows; four filled every tile): the last tile runs past the batch
    # where a tile holds 4 rows at Q 2 or 3, or 2 rows at Q 1
    case, pos = decode_case([300, 2, 520], Q=Q, Hkv=Hkv, G=G, topk=6, seed=G + Q)
    _shared_lists(case, pos, g)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos,
                          Hkv, case["sm_scale"])
    walks = [_decode_tiles(case, lanes, su) for su in (False, True)]
    check(walks[0], ref, (1e-3, 1.7e-2))
    assert torch.equal(walks[0], walks[1])
    # the sorted union in contiguous shares, merged by log-sum-exp (a share may hold no step
    # of a row, or none at all); the walk by minima takes one share
    for splits in (2, 4):
        check(_decode_tiles(case, lanes, True, splits=splits), ref, (1e-3, 1.7e-2))
        # each share walked its own steps: the shares' partials (in the device's buffer)
        # differ, and some (row, head) saw no key in some share
        T, Hq, D = case["q"].shape
        part = sk.shared_partials(case["q"].device, 0)[:splits * T * Hq * (D + 1)]
        o = part[:splits * T * Hq * D].view(splits, T, Hq, D)
        lse = part[splits * T * Hq * D:].view(splits, T, Hq)
        assert not torch.equal(o[0], o[1])
        assert bool((lse == float("-inf")).any())
    assert torch.equal(_decode_tiles(case, lanes, False, splits=4), walks[0])
    # the split kernel's result over the same rows (bf16 output: within its rounding)
    check(run_decode(case), ref)
    blank = [row for row, (_, p, _) in enumerate(pos) if p < 0]
    assert all(bool((walks[0][row] == 0).all()) for row in blank)


@pytest.mark.parametrize("layout,kv_dtype,scales", [
    ("hnd", torch.bfloat16, "none"), ("nhd", torch.float16, "none"),
    ("5d", torch.float8_e4m3fn, "none"), ("nhd", torch.float8_e4m3fn, "scalar"),
    ("hnd", torch.float8_e5m2, "per_token")])
def test_decode_query_tiles_of_each_cache_and_scale_mode(layout, kv_dtype, scales):
    """The query-tiled decode over both cache layouts and fp8 caches with each scale mode,
    against float64 of the dequantised cache."""
    q_dtype = torch.float16 if kv_dtype == torch.float16 else torch.bfloat16
    case, pos = decode_case([260, 90], Q=4, Hkv=2, G=4, layout=layout, kv_dtype=kv_dtype,
                            q_dtype=q_dtype, topk=5, seed=7)
    _shared_lists(case, pos, torch.Generator().manual_seed(7))
    extra = scale_args(case, scales, 7)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos,
                          2, case["sm_scale"], **extra)
    for su, splits in ((False, 1), (True, 1), (True, 2)):
        check(_decode_tiles(case, 16, su, splits=splits, **extra), ref, (1e-3, 1.7e-2))


def test_a_tiled_decode_row_runs_from_the_table_and_inside_the_step(monkeypatch):
    """A decode table row naming the query-tiled kernel (a tune may choose one at Q ≥ 2):
    sparse_attn_decode launches it (the explicit launch's bits) and sparse_decode_step's
    attention gives the two calls' bits, with the row's launch given or from the table (two
    shares of the tile's union, merged by the merge kernel)."""
    g = torch.Generator().manual_seed(29)
    R, Q, Hkv, G, D, Didx, topk, W = 2, 4, 1, 4, 64, 16, 4, 4
    launch = dict(variant="sparse_attn_tiled", lanes=16, sorted_union=True, splits=2,
                  tma=False, num_warps=4, num_stages=2)
    idx_q = torch.randn((R * Q, Hkv, Didx), generator=g).bfloat16().to(DEVICE)
    idx_cache = torch.randn((R * W + 1, BLOCK, Didx), generator=g).bfloat16().to(DEVICE)
    idx_table = torch.randperm(R * W + 1, generator=g)[:R * W].view(R, W).int().to(DEVICE)
    kv = make_cache(R * W + 2, Hkv, D, "5d", torch.bfloat16, g).to(DEVICE)
    table = torch.randperm(R * W + 2, generator=g)[:R * W].view(R, W).int().to(DEVICE)
    seq_lens = torch.tensor([450, 200], dtype=torch.int32, device=DEVICE)
    q = torch.randn((R * Q, Hkv * G, D), generator=g).bfloat16().to(DEVICE)
    ids = generated.index_decode(idx_q, idx_cache, idx_table, seq_lens, W * BLOCK, topk, 0, 1,
                                 Hkv, Q, Q)
    want = sa.sparse_attn_with_launch(launch, "decode", q, kv, ids, table, seq_lens, Hkv,
                                      D ** -0.5, torch.zeros_like(q), Q)
    pos = decode_positions(seq_lens, Q)
    check(want, ref_sparse_attn(q, kv, ids, table, pos, Hkv, D ** -0.5))
    row = sa._row("decode", "generic", dict(q_dtype="bf16", kv_dtype="bf16", scales="none",
                                            group=G, head_dim=D, query_len=Q,
                                            programs=R * Q * Hkv))
    tiled_row = row._replace(variant=sa.TILED, params=launch)
    monkeypatch.setattr(sa, "_row", lambda mode, hw, key: tiled_row)
    monkeypatch.setattr(sa, "_PLANS", sa._rt.PlanCache())
    monkeypatch.setattr(sa, "_STEP_PLANS", sa._rt.PlanCache())
    got = generated.sparse_attn_decode(q, kv, ids, table, seq_lens, Hkv, D ** -0.5,
                                       torch.full_like(q, float("nan")), Q)
    assert torch.equal(got, want)
    args = (idx_q, idx_cache, idx_table, q, kv, table, seq_lens, W * BLOCK, topk, 0, 1, Hkv, Q,
            Q, D ** -0.5)
    step, step_ids = generated.sparse_decode_step(*args, torch.full_like(q, float("nan")))
    assert torch.equal(step_ids, ids) and torch.equal(step, want)
    given, _ = sa.sparse_decode_step_with_launch(launch, *args, torch.full_like(q, float("nan")))
    assert torch.equal(given, want)


def test_a_block_listed_twice_counts_once_in_every_kernel():
    case, pos = decode_case([400], Q=2, Hkv=1, G=8, topk=6, seed=19)
    ids = case["topk_idx"].clone()
    ids[0, 0] = torch.tensor([3, 0, 3, 1, 0, -1], dtype=torch.int32)  # repeats across splits
    ids[0, 1] = torch.tensor([3, 3, 3, 2, 2, 2], dtype=torch.int32)
    case["topk_idx"] = ids
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 1,
                          case["sm_scale"])
    for splits in (1, 2, 4):
        check(run_decode(case, torch.float32, splits=splits), ref)
    # the same rows through the prefill kernels (one request, rows at the same positions)
    cu = torch.tensor([0, 2], dtype=torch.int32, device=DEVICE)
    pre = torch.tensor([398], dtype=torch.int32, device=DEVICE)
    for launch in (dict(splits=2, num_warps=4, num_stages=2),
                   dict(variant="sparse_attn_tiled", lanes=16, num_warps=4, num_stages=2),
                   dict(variant="sparse_attn_tiled", lanes=16, sorted_union=True, num_warps=4,
                        num_stages=2)):
        out = torch.full(case["q"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
        sa.sparse_attn_with_launch(launch, "prefill", case["q"], case["kv"], ids,
                                   case["block_table"], cu, case["seq_lens"], pre, 2, 1,
                                   case["sm_scale"], out)
        check(out, ref)


def test_keys_scoring_minus_inf_weigh_nothing_in_every_kernel():
    """A key scoring −inf (q > 0 against a −inf K element) weighs nothing: a row and head
    whose visible keys all score −inf writes zeros (softmax is undefined there: float64 gives
    NaN), one with some such keys gives the float64 softmax over the others (docs/KERNELS.md
    §15), in the split kernel at one and several splits and in both query-tiled walks."""
    case, pos = decode_case([200, 200], Q=2, Hkv=1, G=4, topk=3, seed=23)
    q, kv, table = case["q"].clone(), case["kv"].clone(), case["block_table"]
    q[..., 0] = 1.0
    kv[table[0, :2].long(), 0, :, :, 0] = float("-inf")  # request 0: every key it can see
    kv[table[1, 1].long(), 0, :40, :, 0] = float("-inf")  # request 1: some of its own block's
    case.update(q=q, kv=kv)
    ref = ref_sparse_attn(q, kv, case["topk_idx"], table, pos, 1, case["sm_scale"])
    assert bool(ref[:2].isnan().all()) and not bool(ref[2:].isnan().any())
    ref[:2] = 0.0
    outs = [run_decode(case, torch.float32, splits=splits) for splits in (1, 2)]
    cu = torch.tensor([0, 2, 4], dtype=torch.int32, device=DEVICE)
    pre = case["seq_lens"] - 2
    for sorted_union in (False, True):
        out = torch.full(q.shape, float("nan"), dtype=torch.float32, device=DEVICE)
        sa.sparse_attn_with_launch(
            dict(variant="sparse_attn_tiled", lanes=16, sorted_union=sorted_union, num_warps=4,
                 num_stages=2), "prefill", q, kv, case["topk_idx"], table, cu,
            case["seq_lens"], pre, 2, 1, case["sm_scale"], out)
        outs.append(out)
    for out in outs:
        assert bool((out[:2] == 0).all())
        check(out, ref)


def test_rows_without_any_request_are_zero_and_nothing_is_read():
    """R = 0 with padded rows: empty length tensors are never read; every row is zero."""
    q = torch.randn((5, 8, 64)).bfloat16().to(DEVICE)
    kv = torch.randn((2, 2, BLOCK, 1, 64)).bfloat16().to(DEVICE)
    ids = torch.zeros((1, 5, 4), dtype=torch.int32, device=DEVICE)
    empty = torch.zeros((0,), dtype=torch.int32, device=DEVICE)
    table = torch.zeros((0, 2), dtype=torch.int32, device=DEVICE)
    cu = torch.zeros((1,), dtype=torch.int32, device=DEVICE)
    for launch in (dict(splits=1, num_warps=4, num_stages=2),
                   dict(variant="sparse_attn_tiled", lanes=16, num_warps=4, num_stages=2)):
        out = torch.full(q.shape, float("nan"), dtype=torch.bfloat16, device=DEVICE)
        sa.sparse_attn_with_launch(launch, "prefill", q, kv, ids, table, cu, empty, empty, 4,
                                   1, 0.125, out)
        assert bool((out == 0).all())


@pytest.mark.parametrize("q_dtype,kv_dtype", [(torch.float16, torch.bfloat16),
                                              (torch.bfloat16, torch.float16)])
def test_mixed_16_bit_pairs_are_rejected(q_dtype, kv_dtype):
    case, _ = decode_case([200], Q=1, Hkv=1, G=16, q_dtype=q_dtype, kv_dtype=kv_dtype)
    out = torch.zeros(case["q"].shape, dtype=q_dtype, device=DEVICE)
    with pytest.raises(ValueError, match="^kv: "):
        generated.sparse_attn_decode(**case, output=out)


# every prefill kernel: the split kernel at one and two splits (merged by a second kernel),
# the query tile's two walks
PREFILL_LAUNCHES = (
    dict(splits=1, num_warps=4, num_stages=2),
    dict(splits=2, num_warps=4, num_stages=2, merge_kernel=True),
    dict(variant="sparse_attn_tiled", lanes=16, num_warps=4, num_stages=2),
    dict(variant="sparse_attn_tiled", lanes=16, sorted_union=True, num_warps=4, num_stages=2))


@pytest.mark.parametrize("kv_dtype", [torch.float8_e4m3fn, torch.bfloat16])
@pytest.mark.parametrize("launch", range(len(PREFILL_LAUNCHES)))
def test_prefill_rows_past_seq_len_see_only_keys_before_it(kv_dtype, launch):
    """Prefill rows whose position is at or past seq_len (prefix + j ≥ seq_len: inputs the
    contract takes) see the keys below seq_len only, whatever the slots from seq_len on hold:
    requests 0 and 1 share block 0's page (one sorted step serves rows of both), and request
    2's V rows from seq_len on hold NaN, inf and the largest values (the bits unchanged)."""
    g = torch.Generator().manual_seed(3)
    Hkv, G, D, W, topk = 1, 4, 64, 3, 3
    qlen = [6, 4, 5]
    cu = torch.tensor([0, 6, 10, 15], dtype=torch.int32)
    pre = torch.tensor([40, 100, 200], dtype=torch.int32)
    lens = torch.tensor([20, 104, 150], dtype=torch.int32)
    T, pages = sum(qlen), 3 * W + 1
    kv = make_cache(pages, Hkv, D, "5d", kv_dtype, g)
    table = torch.randperm(pages, generator=g)[:3 * W].view(3, W).to(torch.int32)
    table[1, 0] = table[0, 0]
    pos = prefill_positions(cu, pre, lens, T, max(qlen))
    ids = torch.full((Hkv, T, topk), -1, dtype=torch.int32)
    for t, (_, p, n) in enumerate(pos):
        own = min(p, n - 1) // BLOCK
        ids[0, t, :own + 1] = torch.arange(own, -1, -1)[:topk]
    q = torch.randn((T, Hkv * G, D), generator=g)

    def run(kv):
        out = torch.full(q.shape, float("nan"), dtype=torch.float32, device=DEVICE)
        return sa.sparse_attn_with_launch(
            PREFILL_LAUNCHES[launch], "prefill", *(t.to(DEVICE) for t in (q, kv, ids, table, cu,
                                                                           lens, pre)),
            max(qlen), Hkv, D ** -0.5, out)

    want = run(kv).clone()
    ref = ref_sparse_attn(q, kv, ids, table, pos, Hkv, D ** -0.5)
    torch.testing.assert_close(want.double().cpu(), ref, rtol=0, atol=1e-4)
    # (request 2's last page: requests 0 and 1 share theirs, and 1 sees 0's slots past 20)
    poisoned = _poison_unseen_slots(kv, table[2:], lens[2:], _garbage(kv_dtype))
    assert torch.equal(run(poisoned), want)


@pytest.mark.parametrize("launch", range(len(PREFILL_LAUNCHES)))
def test_ids_past_a_narrow_table_add_no_key(launch):
    """A table 2 wide (256 keys) for rows at position 299: id 2 lies before the position but
    past the table, so it adds no key (and nothing past the table is read)."""
    g = torch.Generator().manual_seed(5)
    Hkv, G, D = 1, 4, 64
    kv = make_cache(6, Hkv, D, "5d", torch.bfloat16, g)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    lens = torch.tensor([300, 300], dtype=torch.int32)
    ids = torch.tensor([[[2, 1, 0], [2, 1, 0]]], dtype=torch.int32)
    q = torch.randn((2, Hkv * G, D), generator=g)
    cu, pre = torch.tensor([0, 1, 2], dtype=torch.int32), lens - 1
    ref = ref_sparse_attn(q, kv, ids, table, prefill_positions(cu, pre, lens, 2, 1), Hkv,
                          D ** -0.5)
    out = torch.full(q.shape, float("nan"), dtype=torch.float32, device=DEVICE)
    sa.sparse_attn_with_launch(PREFILL_LAUNCHES[launch], "prefill",
                               *(t.to(DEVICE) for t in (q, kv, ids, table, cu, lens, pre)), 1,
                               Hkv, D ** -0.5, out)
    torch.testing.assert_close(out.double().cpu(), ref, rtol=0, atol=1e-4)


def _garbage_prefill_case(rnd, g):
    """One draw of test_prefill_garbage_lengths_ids_and_pages_match_the_contract's inputs."""
    Hkv, G, D, R, W = rnd.choice([1, 2]), rnd.choice([1, 4, 16]), 64, rnd.randint(1, 3), 4
    qlen = [rnd.choice([0, 1, 5, 17]) for _ in range(R)]
    prefix = [rnd.choice([0, 127, 128, 300, 600]) for _ in range(R)]
    prefix[0] = -rnd.choice([3, 200]) if rnd.random() < 0.3 else prefix[0]
    seq = [p + n + rnd.choice([0, -2, 7, -150]) for p, n in zip(prefix, qlen)]
    cu = [rnd.choice([0, 0, 0, 2])]  # leading rows of no request
    for n in qlen:
        cu.append(cu[-1] + n)
    T = max(cu[-1] + rnd.choice([0, 3, -2]), 1)  # padding rows, or a last range past T
    if R > 1 and rnd.random() < 0.3:  # a decreasing cu (§13 rule 10)
        i = rnd.randint(1, R - 1)
        cu[i], cu[i + 1] = cu[i + 1], cu[i]
    mql = max(0, max(qlen) + rnd.choice([0, -2, 3]))
    pages = R * W + 2
    kv = make_cache(pages, Hkv, D, rnd.choice(["5d", "hnd", "nhd"]), torch.bfloat16, g)
    table = torch.randint(-1, pages + 1, (R, W), generator=g).int()
    topk = rnd.choice([1, 3, 6])
    ids = torch.full((Hkv, T, topk), -1, dtype=torch.int32)
    for h in range(Hkv):
        for t in range(T):
            cand = list(range(-1, W + 2))
            rnd.shuffle(cand)
            ids[h, t] = torch.tensor(cand[:topk], dtype=torch.int32)
    q = torch.randn((T, Hkv * G, D), generator=g)
    cut, pre, lens = (torch.tensor(x, dtype=torch.int32) for x in (cu, prefix, seq))
    ref = ref_sparse_attn(q, kv, ids, table, prefill_positions(cut, pre, lens, T, mql), Hkv, 0.3)
    return q, kv, ids, table, cut, lens, pre, mql, Hkv, G, ref


@pytest.mark.parametrize("seed", range(12))
def test_prefill_garbage_lengths_ids_and_pages_match_the_contract(seed, monkeypatch):
    """Random lengths past the capacity (512 keys), negative prefixes, q_len above
    max_query_len, padding rows, leading rows of no request, a last range past the batch, a
    decreasing cu_seqlens_q, ids and page ids outside their tensors (ids past the table
    below a row's position among them): every kernel gives the contract's result
    (float64 reference over the usable keys, zeros for rows of no request) and reads nothing
    outside a tensor (a table_first launch holding the whole table row, or with odd seeds a
    table wider than it holds: read as without table_first). Every fourth seed may draw no
    visible key at all; the others draw again until some row has one."""
    import random

    if seed % 2:
        monkeypatch.setattr(sk, "TABLE_FIRST_MAX", 2)

    rnd, g = random.Random(seed), torch.Generator().manual_seed(seed)
    for _ in range(50):
        q, kv, ids, table, cut, lens, pre, mql, Hkv, G, ref = _garbage_prefill_case(rnd, g)
        if seed % 4 == 3 or bool((ref != 0).any()):
            break
    else:
        raise AssertionError("no draw with a visible key")
    args = [t.to(DEVICE) for t in (q, kv, ids, table, cut, lens, pre)]
    for launch in (dict(splits=1, num_warps=4, num_stages=2),
                   dict(splits=4, num_warps=4, num_stages=2),
                   dict(splits=rnd.choice([2, 8]), kv_tile=rnd.choice([32, 64]),
                        head_split=rnd.choice([1, 2, 4]), num_warps=4, num_stages=2),
                   dict(splits=2, table_first=True, num_warps=4, num_stages=2),
                   dict(variant="sparse_attn_tiled", lanes=max(16, G) * 2, num_warps=4,
                        num_stages=2),
                   dict(variant="sparse_attn_tiled", lanes=max(16, G) * 2, sorted_union=True,
                        num_warps=4, num_stages=2)):
        out = torch.full(q.shape, float("nan"), device=DEVICE)
        sa.sparse_attn_with_launch(launch, "prefill", *args, mql, Hkv, 0.3, out)
        assert bool(torch.isfinite(out).all()), launch
        torch.testing.assert_close(out.double().cpu(), ref.cpu(), rtol=0, atol=1e-4,
                                   msg=lambda m, launch=launch: f"{launch}: {m}")


def _counted_descriptors(monkeypatch) -> list:
    """Descriptors the launches make from now on (`sk.kv_descriptor` wrapped)."""
    made, real = [], sk.kv_descriptor
    monkeypatch.setattr(sk, "kv_descriptor", lambda kv, layout: made.append(layout) or
                        real(kv, layout))
    return made


@pytest.mark.parametrize("layout,kv_dtype,scales,kv_tile,splits", [
    ("5d", torch.bfloat16, "none", 128, 2), ("hnd", FP8["e4m3"], "per_token", 64, 4),
    ("nhd", FP8["e5m2"], "scalar", 32, 1), ("nhd", torch.float16, "none", 64, 8)])
def test_tma_tiles_give_the_pointer_bits(layout, kv_dtype, scales, kv_tile, splits,
                                         monkeypatch):
    """K and V tiles through the cache's tensor descriptor (the interpreter emulates the
    copies) give the bits of the pointer loads, with every layout, fp8 scale mode and tile
    size, several splits (empty ones too) and Q 2 (positions inside a block)."""
    q_dtype = torch.float16 if kv_dtype == torch.float16 else torch.bfloat16
    case, pos = decode_case([270, 129, 0], Q=2, Hkv=2, G=4, layout=layout, kv_dtype=kv_dtype,
                            q_dtype=q_dtype, seed=61)
    kw = scale_args(case, scales, seed=3)
    made = _counted_descriptors(monkeypatch)
    got = {}
    for tma in (False, True):
        out = torch.full(case["q"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
        got[tma] = sa.sparse_attn_with_launch(
            dict(splits=splits, kv_tile=kv_tile, tma=tma, num_warps=4, num_stages=2), "decode",
            **case, output=out, **kw)
        assert len(made) == int(tma)  # the tma launch did take its tiles through a descriptor
    assert torch.equal(got[True], got[False])
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 2,
                          case["sm_scale"], **kw)
    check(got[True], ref)
    assert bool((got[True][4:] == 0).all())  # request 2: seq_len 0


@pytest.mark.parametrize("layout,kv_dtype,scales", [
    ("5d", torch.bfloat16, "none"), ("hnd", FP8["e4m3"], "per_token")])
def test_tma_tiles_of_the_query_tiled_kernel_give_the_pointer_bits(layout, kv_dtype, scales,
                                                                   monkeypatch):
    """The query-tiled kernel's K and V tiles through the cache's tensor descriptor give the
    bits of its pointer loads, with either walk of the tile's union, a tile crossing two
    requests and rows of no request (zeros)."""
    g = torch.Generator().manual_seed(9)
    Hkv, G, D, W, topk = 2, 4, 64, 4, 3
    prefix, qlen = [300, 0], [5, 6]
    seq = [p + n for p, n in zip(prefix, qlen)]
    pages = 2 * W + 1
    kv = make_cache(pages, Hkv, D, layout, kv_dtype, g)
    table = torch.randperm(pages, generator=g)[:2 * W].view(2, W).to(torch.int32)
    cu = torch.tensor([0, 5, 11], dtype=torch.int32)
    pre, lens = torch.tensor(prefix, dtype=torch.int32), torch.tensor(seq, dtype=torch.int32)
    T = 12
    pos = prefill_positions(cu, pre, lens, T, max(qlen))
    ids = block_lists(pos, Hkv, topk, W, g)
    q = torch.randn((T, Hkv * G, D), generator=g).bfloat16()
    case = dict(q=q.to(DEVICE), kv=kv.to(DEVICE), topk_idx=ids.to(DEVICE),
                block_table=table.to(DEVICE), cu_seqlens_q=cu.to(DEVICE),
                seq_lens=lens.to(DEVICE), prefix_lens=pre.to(DEVICE), max_query_len=max(qlen),
                num_kv_heads=Hkv, sm_scale=D ** -0.5)
    kw = scale_args(case, scales, seed=5)
    made = _counted_descriptors(monkeypatch)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos,
                          Hkv, case["sm_scale"], **kw)
    for sorted_union in (False, True):
        got = {}
        for tma in (False, True):
            out = torch.full(q.shape, float("nan"), dtype=torch.float32, device=DEVICE)
            got[tma] = sa.sparse_attn_with_launch(
                dict(variant="sparse_attn_tiled", lanes=16, sorted_union=sorted_union, tma=tma,
                     num_warps=4, num_stages=2), "prefill", **case, output=out, **kw)
        assert torch.equal(got[True], got[False]), sorted_union
        check(got[True], ref, (1e-3, 1.7e-2))
        assert bool((got[True][11:] == 0).all())
    assert len(made) == 2  # each tma launch took its tiles through a descriptor


@pytest.mark.parametrize("widest", [None, 2])
def test_table_first_gives_the_bits_of_the_table_loads(widest, monkeypatch):
    """A table_first launch (the row's table read before its ids, the listed blocks' pages
    taken from it) gives the bits of the plain launch, or with TABLE_FIRST_MAX below the table's
    width is read as the plain launch: ids past the table, −1 holes and repeats, page ids
    outside the cache, Q 2 and a request with no key, one split, several (last arrival) and a
    merge kernel."""
    if widest:
        monkeypatch.setattr(sk, "TABLE_FIRST_MAX", widest)
    case, pos = decode_case([600, 300, 0], Q=2, Hkv=2, G=4, topk=6, seed=71)
    ids, table = case["topk_idx"].clone(), case["block_table"].clone()
    W = table.shape[1]
    ids[0, 0, 0], ids[0, 2, 1] = W + 3, -1
    ids[1, 1, :2] = ids[1, 1, 2]
    # a page past the cache for a listed, visible block of request 0 past the first two
    far = next(b for b in ids[0, 1].tolist() if 2 <= b and b * BLOCK <= pos[1][1])
    table[0, far], table[1, 0] = case["kv"].shape[0] + 5, -7
    case = dict(case, topk_idx=ids, block_table=table)
    assert widest is None or widest < W  # widest: a table too wide to hold
    ref = ref_sparse_attn(case["q"], case["kv"], ids, table, pos, 2, case["sm_scale"])
    for launch in (dict(splits=1), dict(splits=4, kv_tile=64), dict(splits=2, merge_kernel=True)):
        got = {tf: sa.sparse_attn_with_launch(
            dict(launch, table_first=tf, num_warps=4, num_stages=2), "decode", **case,
            output=torch.full(case["q"].shape, float("nan"), dtype=torch.float32,
                              device=DEVICE)) for tf in (False, True)}
        assert torch.equal(got[True], got[False]), launch
        check(got[True], ref)
        assert bool((got[True][4:] == 0).all())  # request 2: seq_len 0


def test_tma_layout_of_each_cache_and_where_it_cannot_address_one():
    """The descriptor's view [pages, 2, 128, Hkv, D] of both layouts, strides of one-element
    dimensions replaced by one 16-byte granule; None where the accelerator cannot address the
    cache (d not contiguous, base or a stride not a multiple of 16 bytes, no page)."""
    kv = torch.zeros((3, 2, BLOCK, 2, 64), dtype=torch.bfloat16)
    assert sk.kv_tma_layout(kv, 2, 64, 64) == (
        [3, 2, BLOCK, 2, 64], [2 * BLOCK * 2 * 64, BLOCK * 2 * 64, 2 * 64, 64, 1],
        [1, 1, 64, 1, 64])
    hnd = torch.zeros((3, 2, BLOCK, 128), dtype=torch.float8_e4m3fn)  # [pages, Hkv, 128, 2D]
    assert sk.kv_tma_layout(hnd, 2, 64, 128) == (
        [3, 2, BLOCK, 2, 64], [2 * BLOCK * 128, 64, 128, BLOCK * 128, 1], [1, 1, 128, 1, 64])
    one_head = torch.zeros((1, 2, BLOCK, 1, 64), dtype=torch.bfloat16).as_strided(
        (1, 2, BLOCK, 1, 64), (7, BLOCK * 64, 64, 3, 1))  # odd strides on one-element axes
    assert sk.kv_tma_layout(one_head, 1, 64, 128)[1] == [8, BLOCK * 64, 64, 8, 1]
    big = torch.zeros((3, 2, BLOCK, 2, 66), dtype=torch.bfloat16)
    for name, cache in (("d not contiguous", big[..., :64:2]),
                        ("KV-head stride of 66 bf16 (132 bytes)", big[..., :64]),
                        ("base 2 bytes past a granule", torch.zeros(
                            3 * 2 * BLOCK * 2 * 64 + 1, dtype=torch.bfloat16)[1:].view(
                                3, 2, BLOCK, 2, 64)),
                        ("no page", kv[:0])):
        assert sk.kv_tma_layout(cache, 2, cache.shape[-1], 64) is None, name


def test_tma_launch_loads_by_pointers_where_the_cache_is_not_addressable(monkeypatch):
    """A tma launch on a cache the accelerator cannot address (odd token stride, a base off
    the 16-byte granule, d not contiguous) makes no descriptor and gives the contiguous call's
    bits."""
    case, _ = decode_case([300, 140], Q=1, Hkv=2, G=4, seed=63)
    launch = dict(splits=2, num_warps=4, num_stages=2)
    want = sa.sparse_attn_with_launch(launch, "decode", **case, output=torch.empty(
        case["q"].shape, dtype=torch.float32, device=DEVICE)).clone()
    kv = case["kv"]
    padded = torch.zeros(kv.shape[:-1] + (kv.shape[-1] + 2,), dtype=kv.dtype, device=DEVICE)
    padded[..., :kv.shape[-1]] = kv
    shifted = torch.zeros(kv.numel() + 1, dtype=kv.dtype, device=DEVICE)
    shifted[1:] = kv.flatten()
    spread = torch.zeros(kv.shape + (2,), dtype=kv.dtype, device=DEVICE)
    spread[..., 0] = kv
    made = _counted_descriptors(monkeypatch)
    for cache in (padded[..., :kv.shape[-1]], shifted[1:].view(kv.shape), spread[..., 0]):
        out = torch.full(case["q"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
        got = sa.sparse_attn_with_launch(dict(launch, tma=True), "decode",
                                         **dict(case, kv=cache), output=out)
        assert torch.equal(got, want)
    assert made == []


def test_v_pairs_of_each_cache_and_where_they_cannot_be_read():
    """An fp8 cache's V is read as 16-bit pairs under 16-bit products in both layouts (odd
    strides of one-element dimensions address nothing), and as it is with fp32 q, a 16-bit
    cache, a base off the 16-byte granule, an odd token or page stride, d not contiguous."""
    e4m3, bf16 = torch.float8_e4m3fn, torch.bfloat16
    q = torch.zeros((1, 8, 64), dtype=bf16)
    five = torch.zeros((3, 2, BLOCK, 2, 64), dtype=e4m3)
    hnd = torch.zeros((3, 2, BLOCK, 128), dtype=torch.float8_e5m2)
    nhd = torch.zeros((3, BLOCK, 2, 128), dtype=e4m3).permute(0, 2, 1, 3)
    one_head = torch.zeros((1, 2, BLOCK, 1, 64), dtype=e4m3).as_strided(
        (1, 2, BLOCK, 1, 64), (7, BLOCK * 64, 64, 3, 1))
    for cache in (five, hnd, nhd, one_head):
        assert sk.v_pairs(q, cache, 64) and sk.v_pairs(q.half(), cache, 64)
    assert not sk.v_pairs(q.float(), five, 64)
    assert not sk.v_pairs(q, five.to(bf16), 64)
    wide = torch.zeros((3, 2, BLOCK, 2, 65), dtype=e4m3)
    flat = torch.zeros(five.numel() + 16, dtype=e4m3)
    for name, cache in (("base 2 bytes past a granule", flat[2:2 + five.numel()].view(
                            five.shape)),
                        ("odd token and page strides", wide[..., :64]),
                        ("d not contiguous", torch.zeros((3, 2, BLOCK, 2, 128),
                                                         dtype=e4m3)[..., ::2])):
        assert not sk.v_pairs(q, cache, 64), name


@pytest.mark.parametrize("kv_dtype,q_dtype,scales", [
    (FP8["e4m3"], torch.bfloat16, "none"), (FP8["e4m3"], torch.float16, "scalar"),
    (FP8["e5m2"], torch.bfloat16, "per_token")])
def test_fp8_v_read_as_pairs_gives_the_bits_of_the_plain_read(kv_dtype, q_dtype, scales,
                                                               monkeypatch):
    """V read as 16-bit pairs (two products of half the columns each) gives the bits of the
    same launch over a copy of the cache that cannot be read so (its base one byte past a
    granule): one split, several (64-key tiles; Q 2) and tma."""
    case, pos = decode_case([270, 129, 0], Q=2, Hkv=2, G=4, layout="hnd", kv_dtype=kv_dtype,
                            q_dtype=q_dtype, seed=67)
    kw = scale_args(case, scales, seed=5)
    kv = case["kv"]
    shifted = torch.zeros(kv.numel() + 1, dtype=kv.dtype, device=DEVICE)
    shifted[1:] = kv.flatten()
    taken = []
    monkeypatch.setattr(sk, "v_pairs", lambda *a, f=sk.v_pairs: taken.append(f(*a)) or taken[-1])
    ref = ref_sparse_attn(case["q"], kv, case["topk_idx"], case["block_table"], pos, 2,
                          case["sm_scale"], **kw)
    for launch in (dict(splits=1), dict(splits=4, kv_tile=64), dict(splits=2, tma=True)):
        got = []
        for cache in (kv, shifted[1:].view(kv.shape)):
            out = torch.full(case["q"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
            got.append(sa.sparse_attn_with_launch(dict(launch, num_warps=4, num_stages=2),
                                                  "decode", **dict(case, kv=cache),
                                                  output=out, **kw))
        assert taken[-2:] == [True, False], launch
        assert torch.equal(got[0], got[1]), launch
        check(got[0], ref)


def test_strided_arguments_equal_the_contiguous_call():
    case, pos = decode_case([300, 140], Q=2, Hkv=2, G=8, seed=17)
    want = run_decode(case, torch.float32)

    def strided(t):
        big = torch.zeros([2 * n + 1 for n in t.shape], dtype=t.dtype, device=t.device)
        view = big[tuple(slice(1, 1 + 2 * n, 2) for n in t.shape)]
        view.copy_(t)
        return view

    odd = dict(case, q=strided(case["q"]), kv=strided(case["kv"]),
               topk_idx=strided(case["topk_idx"]), seq_lens=strided(case["seq_lens"]))
    out = strided(torch.zeros_like(want))
    generated.sparse_attn_decode(**odd, output=out)
    torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_decode_step_equals_the_two_calls():
    """sparse_decode_step: the indexer's ids (index heads = KV heads) and the attention over
    them, the same as calling index_decode then sparse_attn_decode."""
    g = torch.Generator().manual_seed(23)
    R, Q, Hkv, G, D, Didx, topk = 2, 2, 2, 4, 64, 16, 4
    lens = [400, 150]
    W = 4
    idx_pages, pages = R * W + 1, R * W + 2
    idx_q = torch.randn((R * Q, Hkv, Didx), generator=g).bfloat16().to(DEVICE)
    idx_cache = torch.randn((idx_pages, BLOCK, Didx), generator=g).bfloat16().to(DEVICE)
    idx_table = torch.randperm(idx_pages, generator=g)[:R * W].view(R, W).int().to(DEVICE)
    kv = make_cache(pages, Hkv, D, "5d", torch.bfloat16, g).to(DEVICE)
    table = torch.randperm(pages, generator=g)[:R * W].view(R, W).int().to(DEVICE)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    q = torch.randn((R * Q, Hkv * G, D), generator=g).bfloat16().to(DEVICE)
    out = torch.full((R * Q, Hkv * G, D), math.nan, dtype=torch.bfloat16, device=DEVICE)
    ids_out = torch.full((Hkv, R * Q, topk), -7, dtype=torch.int32, device=DEVICE)
    counter = torch.zeros((Hkv, R * Q), dtype=torch.int32, device=DEVICE)
    got, ids = generated.sparse_decode_step(
        idx_q, idx_cache, idx_table, q, kv, table, seq_lens, W * BLOCK, topk, 0, 1, Hkv, Q, Q,
        D ** -0.5, out, topk_out=ids_out, completion_counter=counter)
    assert got.data_ptr() == out.data_ptr() and ids.data_ptr() == ids_out.data_ptr()
    want_ids = generated.index_decode(idx_q, idx_cache, idx_table, seq_lens, W * BLOCK, topk,
                                      0, 1, Hkv, Q, Q)
    assert torch.equal(ids, want_ids)
    want = torch.full_like(out, math.nan)
    generated.sparse_attn_decode(q, kv, want_ids, table, seq_lens, Hkv, D ** -0.5, want, Q)
    assert torch.equal(got, want) and not bool(want.isnan().any())
    assert not bool(counter.any())  # (no launch leaves its completion counter set)
    # a repeated step takes its one cached plan (neither entry's own cache is consulted);
    # without topk_out and a counter it returns fresh ids, still equal
    from generated import decode_indexer, sparse_attention
    sizes = (len(decode_indexer._DECODE_PLANS), len(sparse_attention._PLANS),
             len(sparse_attention._STEP_PLANS))
    again, _ = generated.sparse_decode_step(
        idx_q, idx_cache, idx_table, q, kv, table, seq_lens, W * BLOCK, topk, 0, 1, Hkv, Q, Q,
        D ** -0.5, torch.full_like(out, math.nan), topk_out=ids_out, completion_counter=counter)
    assert torch.equal(again, want)
    assert (len(decode_indexer._DECODE_PLANS), len(sparse_attention._PLANS),
            len(sparse_attention._STEP_PLANS)) == sizes
    fresh, fresh_ids = generated.sparse_decode_step(
        idx_q, idx_cache, idx_table, q, kv, table, seq_lens, W * BLOCK, topk, 0, 1, Hkv, Q, Q,
        D ** -0.5, torch.full_like(out, math.nan))
    assert torch.equal(fresh_ids, want_ids) and torch.equal(fresh, want)
    assert not bool(counter.any())
    # the tuner's entry: the step with the attention's launch given (here not the table's)
    launch = {"splits": 1, "num_warps": 4, "num_stages": 2}
    from generated import _runtime
    chosen = sparse_attention.explain_sparse_attn(
        "decode", _runtime.detect_hardware(q.device), q.dtype, kv.dtype, "none", G, D,
        R * Q * Hkv, Q)
    assert chosen["splits"] != 1, chosen
    want_one = torch.zeros_like(out)
    sparse_attention.sparse_attn_with_launch(launch, "decode", q, kv, want_ids, table, seq_lens,
                                             Hkv, D ** -0.5, want_one, Q)
    got_one, one_ids = sparse_attention.sparse_decode_step_with_launch(
        launch, idx_q, idx_cache, idx_table, q, kv, table, seq_lens, W * BLOCK, topk, 0, 1, Hkv,
        Q, Q, D ** -0.5, torch.zeros_like(out), topk_out=ids_out, completion_counter=counter)
    assert torch.equal(one_ids, want_ids) and torch.equal(got_one, want_one)


def _small_step_args(seed):
    """sparse_decode_step's positional arguments for one request, one row, one KV head of G 4
    (topk 4), and (rows, topk)."""
    g = torch.Generator().manual_seed(seed)
    R, Q, Hkv, G, D, Didx, topk, W = 1, 1, 1, 4, 64, 16, 4, 4
    idx_q = torch.randn((R * Q, Hkv, Didx), generator=g).bfloat16().to(DEVICE)
    idx_cache = torch.randn((W + 1, BLOCK, Didx), generator=g).bfloat16().to(DEVICE)
    table = torch.arange(W, dtype=torch.int32, device=DEVICE).view(1, W)
    kv = make_cache(W + 1, Hkv, D, "5d", torch.bfloat16, g).to(DEVICE)
    lens = torch.tensor([300], dtype=torch.int32, device=DEVICE)
    q = torch.randn((R * Q, Hkv * G, D), generator=g).bfloat16().to(DEVICE)
    args = [idx_q, idx_cache, table, q, kv, table, lens, W * BLOCK, topk, 0, 1, Hkv, Q, Q,
            D ** -0.5, torch.zeros_like(q)]
    return args, R * Q, topk


def _step_point_cap(hw, q, kv, scales, group, head_dim, programs, Q=1):
    """The step table's cap at a point."""
    from generated.dispatch import SPARSE_DECODE_STEP as table
    return table.lookup(*table.point(hardware=hw, q_dtype=q, kv_dtype=kv, scales=scales,
                                     group=group, head_dim=head_dim, query_len=Q,
                                     programs=programs)).params["attention_per_sm"]


def _studied(inputs, launch, Q, programs) -> bool:
    """Whether the sm_90 decode table gives ``inputs`` at (Q, programs) the studied launch."""
    row = sa._row("decode", "sm_90", dict(inputs, query_len=Q, programs=programs))
    return row.variant == sa.SPLIT and dict(row.params) == launch


def test_decode_step_table_caps_the_attention_only_where_measured_faster():
    """sparse_decode_step's table (specs STEP_CAPPED): on sm_90 at most two of the attention's
    programs share an SM at STEP_CAPPED's programs, for its measured inputs, exactly where the
    decode table gives the input the launch the study measured (at every query length); as
    many as fit at every other point and on every other target."""
    from specs.sparse_attn import STEP_CAPPED

    programs, per_sm, measured = STEP_CAPPED["sm_90"]
    around = (1, programs.lo - 1, programs.lo, (programs.lo + programs.hi) // 2, programs.hi,
              programs.hi + 1, 65536)
    assert measured and per_sm == 2
    capped = 0
    for (inputs, launch), Q in itertools.product(measured, (1, 2, 8)):
        got = [_step_point_cap("sm_90", *inputs.values(), p, Q) for p in around]
        want = [per_sm if programs.lo <= p <= programs.hi and _studied(inputs, launch, Q, p)
                else 0 for p in around]
        assert got == want, (inputs, Q)
        capped += sum(map(bool, got))
    assert capped  # the tables as checked in give the studied launches somewhere
    # scaled fp8 caches (at most two per SM by registers), inputs not measured (an fp16 q over
    # fp8, mixed 16-bit types, other groups and head dims, an fp32 q), other targets
    for point in (("sm_90", "bf16", "fp8e4m3", "per_token", 16, 128),
                  ("sm_90", "bf16", "fp8e4m3", "scalar", 16, 128),
                  ("sm_90", "bf16", "fp8e5m2", "scalar", 8, 128),
                  ("sm_90", "fp16", "fp8e4m3", "none", 16, 128),
                  ("sm_90", "bf16", "fp16", "none", 16, 128),
                  ("sm_90", "bf16", "bf16", "none", 4, 128),
                  ("sm_90", "bf16", "bf16", "none", 16, 64),
                  ("sm_90", "fp32", "bf16", "none", 16, 128),
                  ("generic", "bf16", "bf16", "none", 16, 128),
                  ("gfx950", "bf16", "fp8e4m3", "none", 8, 128)):
        assert not any(_step_point_cap(*point, p, Q) for p in around for Q in (1, 4)), point


def test_decode_step_cap_follows_a_retuned_launch():
    """A re-tune that gives a capped input's 129-256-program Q >= 2 row another launch leaves
    the step uncapped there (and there only) until the study measures that launch; an input's
    launch split over two rows inside the range is capped on the studied row's part only."""
    import json
    import os

    from codegen import measured
    from specs.sparse_attn import STEP_CAPPED, step_cap_rules

    programs, per_sm, studied = STEP_CAPPED["sm_90"]
    path = os.path.join(os.path.dirname(__file__), os.pardir, "specs", "measured",
                        "sm_90.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    bf16 = dict(studied[0][0])
    rows = data["sparse_attn_decode"]

    def at(q_len):
        return next(i for i, r in enumerate(rows) if {k: r[k] for k in bf16} == bf16
                    and r["query_len"] == q_len and r["programs"] == [129, 256])

    q4 = at([2, None])
    rows[q4] = dict(rows[q4], params=dict(rows[q4]["params"], num_stages=3))
    # the Q 1 row split at 192: 129-192 the studied launch, 193-256 another
    q1 = at([1, 1])
    low, high = dict(rows[q1], programs=[129, 192]), dict(rows[q1], programs=[193, 256])
    high["params"] = dict(high["params"], num_warps=8)
    rows[q1:q1 + 1] = [low, high]
    target = measured.loads(measured.dumps(data), path)

    def cap(Q, p):
        hits = [r for r in step_cap_rules(target, programs, per_sm, studied[:1])
                if r.when["query_len"].lo <= Q <= (r.when["query_len"].hi or Q)
                and r.when["programs"].lo <= p <= (r.when["programs"].hi or p)]
        assert len(hits) == 1, (Q, p, hits)
        return hits[0].params["attention_per_sm"]

    assert [cap(1, p) for p in (128, 129, 192, 193, 256, 257)] == [0, 2, 2, 0, 0, 0]
    assert [cap(4, p) for p in (128, 129, 256, 257)] == [0, 0, 0, 0]


def test_decode_step_capped_inputs_are_the_ones_the_study_found_faster():
    """STEP_CAPPED agrees with the step study's results of record (docs/results/*_step_pdl_*):
    the inputs timed at its programs, capped at its programs per SM, on two H200s or more are
    capped there exactly when the capped dependent was faster than both the uncapped
    dependent and the plain launch at every such row; on either side of its programs some
    capped row was not (the range could not simply be wider)."""
    import glob
    import json
    import os

    from specs.sparse_attn import STEP_CAPPED

    programs, per_sm, declared = STEP_CAPPED["sm_90"]
    timed, outside = {}, {"below": [], "above": []}
    paths = glob.glob(os.path.join(os.path.dirname(__file__), os.pardir, "docs", "results",
                                   "*_h200_step_pdl_*.json"))
    assert paths
    for path in paths:
        with open(path, encoding="utf-8") as f:
            study = json.load(f)
        machine = study.get("machine") or study["env"]["machine"]
        for row in study["rows"]:
            hq, hkv, reqs, _, q_len = row["row"]
            us = row["us"]
            if row.get("cap_per_sm") != per_sm:
                continue
            faster = us["dependent cap"] < min(us["dependent"], us["plain"])
            n = reqs * q_len * hkv
            if not programs.lo <= n <= programs.hi:
                outside["below" if n < programs.lo else "above"].append(faster)
                continue
            dtype, _, scales = row.get("kv", "bf16").partition(":")
            inputs = (("fp16" if dtype == "fp16" else "bf16"), dtype, scales or "none",
                      hq // hkv, 128)
            timed.setdefault(inputs, []).append((machine, faster))
    assert all(rows and not all(rows) for rows in outside.values()), outside
    measured = {i for i, rows in timed.items() if len({m for m, _ in rows}) >= 2}
    faster = {i for i in measured if all(ok for _, ok in timed[i])}
    assert {tuple(i.values()) for i, _ in declared} == faster


@pytest.mark.parametrize("R,Q,forced,want", [(64, 1, None, 0), (65, 1, None, "cap"),
                                             (64, 2, None, "cap"), (43, 3, None, 0),
                                             (64, 2, 0, 0), (64, 1, 3, 3)])
def test_decode_step_attention_follows_its_table(R, Q, forced, want):
    """The step's attention plan asks for as many programs per SM as its table gives the
    step's point (sm_90, bf16, G 16, D 128: T · Hkv = R · Q · 2 programs), or as forced
    (tools' study). "cap": STEP_CAPPED's two per SM (129–256 programs) where the decode row
    there launches the studied launch, else none."""
    from specs.sparse_attn import STEP_CAPPED
    g = torch.Generator().manual_seed(3)
    Hkv, G, D, topk, W = 2, 16, 128, 4, 2
    T = R * Q
    idx_q = torch.randn((T, Hkv, 16), generator=g).bfloat16().to(DEVICE)
    idx_cache = torch.randn((R * W + 1, BLOCK, 16), generator=g).bfloat16().to(DEVICE)
    idx_table = torch.arange(R * W, dtype=torch.int32, device=DEVICE).view(R, W)
    kv = torch.zeros((R * W, 2, BLOCK, Hkv, D), dtype=torch.bfloat16, device=DEVICE)
    seq_lens = torch.full((R,), W * BLOCK, dtype=torch.int32, device=DEVICE)
    q = torch.zeros((T, Hkv * G, D), dtype=torch.bfloat16, device=DEVICE)
    plan = sa._StepPlan(idx_q, idx_cache, idx_table, q, kv, idx_table, seq_lens, W * BLOCK,
                        topk, 0, 1, Hkv, Q, Q, D ** -0.5, torch.empty_like(q), None, None,
                        None, None, "sm_90", attention_per_sm=forced)
    if want == "cap":
        programs, per_sm, measured = STEP_CAPPED["sm_90"]
        key = dict(q_dtype="bf16", kv_dtype="bf16", scales="none", group=G, head_dim=D)
        row = sa._row("decode", "sm_90", dict(key, query_len=Q, programs=T * Hkv))
        studied = [launch for inputs, launch in measured if inputs == key]
        assert programs.lo <= T * Hkv <= programs.hi and len(studied) == 1
        want = per_sm if (row.variant, dict(row.params)) == ("sparse_attn_split", studied[0]) \
            else 0
    assert plan.attend.asked_per_sm == want


def test_residency_floor_leaves_no_room_for_one_more_program():
    """`_runtime.residency_floor`: the shared memory per program that lets at most n share an
    SM (H200: 228 KiB per SM, 227 per program; A100: 164 and 163), none where no size does."""
    from generated import _runtime

    for per_sm_bytes, per_block in ((233472, 232448), (167936, 166912)):
        reserve = per_sm_bytes - per_block
        for n in (1, 2, 3, 8):
            floor = _runtime.residency_floor(per_sm_bytes, per_block, n)
            assert n * (floor + reserve) <= per_sm_bytes < (n + 1) * (floor + reserve), n
        assert _runtime.residency_floor(per_sm_bytes, per_block, 0) == 0
        assert _runtime.residency_floor(per_sm_bytes, per_block, 1000) == 0
    assert _runtime.residency_floor(0, 0, 2) == 0  # (sizes not reported)
    assert _runtime.residency_floor(233472, 232448, 2) == 76801


def test_decode_step_of_no_rows_returns_empty_results():
    """R = 0: no programs, no launch (the step's table has no point for zero programs, and is
    not asked)."""
    Hkv, G, D, topk, W = 2, 4, 64, 4, 2
    table = torch.zeros((0, W), dtype=torch.int32, device=DEVICE)
    seq_lens = torch.zeros((0,), dtype=torch.int32, device=DEVICE)
    q = torch.zeros((0, Hkv * G, D), dtype=torch.bfloat16, device=DEVICE)
    out, ids = generated.sparse_decode_step(
        torch.zeros((0, Hkv, 16), dtype=torch.bfloat16, device=DEVICE),
        torch.zeros((3, BLOCK, 16), dtype=torch.bfloat16, device=DEVICE), table, q,
        torch.zeros((4, 2, BLOCK, Hkv, D), dtype=torch.bfloat16, device=DEVICE), table,
        seq_lens, W * BLOCK, topk, 0, 1, Hkv, 1, 1, D ** -0.5, torch.zeros_like(q))
    assert out.shape == (0, Hkv * G, D) and ids.shape == (Hkv, 0, topk)


def test_decode_step_rejections_name_the_argument():
    """The step validates both halves before launching anything: a bad attention argument or a
    bad indexer argument raises naming it, and nothing is cached for that call."""
    args, _, _ = _small_step_args(24)
    idx_cache, out = args[1], args[15]
    from generated import sparse_attention
    before = len(sparse_attention._STEP_PLANS)
    for pos, bad, match in ((15, out[:, :, :32], "output"), (1, idx_cache.float()[..., :8],
                                                              "index_kv_cache"),
                            (8, 0, "topk"),
                            # the ids the step makes are bounded by what it checked first:
                            # at most q's heads, as many rows as an output the caller holds
                            (11, 1 << 40, "^num_kv_heads: q has 4 heads"),
                            (11, 1 << 62, "^num_kv_heads: q has 4 heads"),
                            (3, args[3][:1].expand(1 << 40, -1, -1), "^output: shape must be")):
        with pytest.raises((ValueError, TypeError), match=match):
            generated.sparse_decode_step(*args[:pos], bad, *args[pos + 1:])
    assert len(sparse_attention._STEP_PLANS) == before


def test_decode_step_refuses_buffers_it_writes_over_what_it_reads():
    """The indexer's ids (topk_out) and completion counter are written by the step: sharing
    memory with the attention's block table, q or kv (which the attention may read before
    the indexer ends) or with each other is refused naming the written one."""
    args, rows, topk = _small_step_args(47)
    table, q = args[5], args[3]
    buf = torch.zeros(64, dtype=torch.int32, device=DEVICE)
    buf[:table.numel()] = table.flatten()
    shared = buf[:table.numel()].view(table.shape)
    args = args[:5] + [shared] + args[6:]
    with pytest.raises(ValueError, match="^topk_out: "):
        generated.sparse_decode_step(*args, topk_out=buf[2:2 + rows * topk].view(1, rows, topk))
    q_ids = q.view(torch.int32).flatten()[:rows * topk].view(1, rows, topk)
    with pytest.raises(ValueError, match="^topk_out: "):
        generated.sparse_decode_step(*args, topk_out=q_ids)


def test_decode_pdl_switch_is_a_checked_bool():
    """sparse_attn_decode(pdl=False) launches plainly (same results); anything but a bool is
    refused naming it."""
    case, _ = decode_case([300, 90], Q=1, Hkv=2, G=8, seed=25)
    out = torch.zeros(case["q"].shape, dtype=torch.bfloat16, device=DEVICE)
    want = generated.sparse_attn_decode(**case, output=out).clone()
    got = generated.sparse_attn_decode(**case, output=torch.zeros_like(out), pdl=False)
    assert torch.equal(got, want)
    with pytest.raises(TypeError, match="pdl"):
        generated.sparse_attn_decode(**case, output=out, pdl=1)


def test_indexer_launch_dependents_is_a_checked_bool():
    """index_decode(launch_dependents=True), which sparse_decode_step passes, selects the same
    ids (only the launch changes, and only where the device has programmatic launches); any
    other type than bool is refused naming it."""
    g = torch.Generator().manual_seed(24)
    R, Q, H, Didx, W = 2, 1, 2, 16, 3
    idx_q = torch.randn((R * Q, H, Didx), generator=g).bfloat16().to(DEVICE)
    idx_cache = torch.randn((R * W + 1, BLOCK, Didx), generator=g).bfloat16().to(DEVICE)
    idx_table = torch.randperm(R * W + 1, generator=g)[:R * W].view(R, W).int().to(DEVICE)
    seq_lens = torch.tensor([300, 130], dtype=torch.int32, device=DEVICE)
    args = (idx_q, idx_cache, idx_table, seq_lens, W * BLOCK, 2, 0, 1, H, Q, Q)
    want = generated.index_decode(*args)
    assert torch.equal(generated.index_decode(*args, launch_dependents=True), want)
    with pytest.raises(TypeError, match="launch_dependents"):
        generated.index_decode(*args, launch_dependents=1)


@pytest.mark.parametrize("change,error,match", [
    (dict(q="x"), TypeError, "^q: "),
    (dict(num_kv_heads=3), ValueError, "^num_kv_heads: "),
    (dict(sm_scale="0.1"), TypeError, "^sm_scale: "),
    (dict(decode_query_len=3), ValueError, "^q: T = 4 rows"),
    (dict(topk_idx=torch.zeros((1, 4, 4), dtype=torch.int64)), ValueError, "^topk_idx: "),
    (dict(kv=torch.zeros((4, 2, 64, 1, 64), dtype=torch.bfloat16)), ValueError, "^kv: "),
    (dict(k_scale=torch.tensor(1.0)), ValueError, "^v_scale: "),
    (dict(output=torch.zeros((4, 16, 32), dtype=torch.bfloat16)), ValueError, "^output: "),
])
def test_rejections_name_the_argument(change, error, match):
    case, _ = decode_case([200, 10], Q=2, Hkv=1, G=16, seed=1)
    kw = dict(case, output=torch.zeros(case["q"].shape, dtype=torch.bfloat16, device=DEVICE))
    for k, v in change.items():
        kw[k] = v.to(DEVICE) if isinstance(v, torch.Tensor) else v
    with pytest.raises(error, match=match):
        generated.sparse_attn_decode(**kw)


def test_explain_names_the_row():
    info = generated.explain_sparse_attn("decode", "generic", "bf16", "bf16", "none", 16, 128, 32)
    assert info["splits"] == 8 and "sparse_attn_decode row" in info["rule"]  # portable rows


def test_decode_launches_are_looked_up_at_the_query_length(monkeypatch, caplog):
    """Decode rows are by query length: on sm_90 a Q 1 call takes its data file's Q 1 row, any
    longer query (speculative decoding) the Q ≥ 2 row of the same programs; the entry looks its
    launch up at its own decode_query_len (its logged key holds it)."""
    from generated import _runtime

    for Q, bucket in ((1, "query_len 1,"), (2, "query_len ≥ 2,"), (8, "query_len ≥ 2,")):
        for programs in (1, 64, 512):
            info = generated.explain_sparse_attn("decode", "sm_90", "bf16", "bf16", "none", 16,
                                                 128, programs, query_len=Q)
            assert "measured/sm_90.json" in info["rule"] and bucket in info["rule"], info
    monkeypatch.setenv("KSPEC_LOG_DISPATCH", "1")
    monkeypatch.setattr(_runtime, "_seen_keys", set())
    case, _ = decode_case([200, 10], Q=2, Hkv=1, G=16, seed=3)
    with caplog.at_level("INFO"):
        run_decode(case)
    keys = [r.getMessage() for r in caplog.records if "sparse_attn_decode" in r.getMessage()]
    # (hardware, q, kv, scales, G, D, Q, programs): Q 2, two requests' four rows
    assert len(keys) == 1 and ", 16, 64, 2, 4)" in keys[0], keys


# ---- GPU, MiniMax-M3 sizes -------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("Hkv,G,Q,R", [(4, 16, 1, 8), (2, 16, 4, 4), (1, 8, 1, 32)])
def test_gpu_decode_full_size(Hkv, G, Q, R):
    case, pos = decode_case([32768 - 17 * r for r in range(R)], Q=Q, Hkv=Hkv, G=G, D=128,
                            topk=16, seed=R)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos,
                          Hkv, case["sm_scale"])
    check(run_decode(case), ref)
    for splits in (1, 4):
        check(run_decode(case, splits=splits), ref)
    out = torch.full(case["q"].shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    check(sa.sparse_attn_with_launch(dict(splits=16, head_split=4, num_warps=8, num_stages=2),
                                     "decode", **case, output=out), ref)
    # the partials merged by the second kernel (a programmatic dependent): the same bits
    last = sa.sparse_attn_with_launch(dict(splits=8, head_split=2, num_warps=4, num_stages=2),
                                      "decode", **case, output=torch.full_like(out, math.nan))
    merged = sa.sparse_attn_with_launch(dict(splits=8, head_split=2, merge_kernel=True,
                                             num_warps=4, num_stages=2), "decode", **case,
                                        output=torch.full_like(out, math.nan))
    check(last, ref)
    assert torch.equal(merged, last)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_gpu_decode_query_tiles_full_size(kv_dtype):
    """The query-tiled kernel on decode rows at MiniMax-M3 sizes (64/4, Q 4, 32k, lists mostly
    shared within a request): against float64, both walks and tma the same bits; as the
    indexer's programmatic dependent inside sparse_decode_step, in a CUDA graph, the bits of
    the two calls."""
    from graph_capture import capture

    R, Q, Hkv, G, D, topk = 8, 4, 4, 16, 128, 16
    case, pos = decode_case([32768 - 17 * r for r in range(R)], Q=Q, Hkv=Hkv, G=G, D=D,
                            topk=topk, kv_dtype=kv_dtype, seed=5)
    _shared_lists(case, pos, torch.Generator().manual_seed(5))
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos,
                          Hkv, case["sm_scale"])
    outs = []
    for su, tma, w in ((False, False, 4), (True, False, 8), (True, True, 4)):
        launch = dict(variant="sparse_attn_tiled", lanes=Q * G, sorted_union=su, tma=tma,
                      num_warps=w, num_stages=2)
        out = torch.full(case["q"].shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        outs.append(sa.sparse_attn_with_launch(launch, "decode", **case, output=out))
        check(outs[-1], ref)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2])
    for splits in (2, 4):  # shares of the union merged by the merge kernel
        launch = dict(variant="sparse_attn_tiled", lanes=Q * G, sorted_union=True,
                      splits=splits, num_warps=4, num_stages=2)
        check(sa.sparse_attn_with_launch(launch, "decode", **case,
                                         output=torch.full_like(outs[0], float("nan"))), ref)
    # inside the step: the attention reads the ids the indexer writes just before it
    g = torch.Generator().manual_seed(6)
    W = case["block_table"].shape[1]
    idx_q = torch.randn((R * Q, Hkv, 128), generator=g).bfloat16().cuda()
    idx_cache = torch.randn((R * W + 1, BLOCK, 128), generator=g).bfloat16().cuda()
    idx_table = torch.randperm(R * W + 1, generator=g)[:R * W].view(R, W).int().cuda()
    out = torch.zeros_like(case["q"])
    ids_out = torch.empty((Hkv, R * Q, topk), dtype=torch.int32, device="cuda")
    counter = torch.zeros((Hkv, R * Q), dtype=torch.int32, device="cuda")
    launch = dict(variant="sparse_attn_tiled", lanes=Q * G, sorted_union=True, splits=2,
                  num_warps=4, num_stages=2)
    args = (idx_q, idx_cache, idx_table, case["q"], case["kv"], case["block_table"],
            case["seq_lens"], W * BLOCK, topk, 0, 1, Hkv, Q, Q, case["sm_scale"], out)
    graph, _ = capture(lambda: sa.sparse_decode_step_with_launch(
        launch, *args, topk_out=ids_out, completion_counter=counter,
        k_scale=None, v_scale=None))
    _replays_read_their_own_selection(
        graph, idx_q, ids_out, out, g,
        lambda: generated.index_decode(idx_q, idx_cache, idx_table, case["seq_lens"], W * BLOCK,
                                       topk, 0, 1, Hkv, Q, Q),
        lambda ids: sa.sparse_attn_with_launch(launch, "decode", case["q"], case["kv"], ids,
                                               case["block_table"], case["seq_lens"], Hkv,
                                               case["sm_scale"], torch.full_like(out, math.nan),
                                               Q))


def _replays_read_their_own_selection(graph, idx_q, ids_out, out, g, indexer, attention):
    """Replay a captured sparse_decode_step three times, each with new index queries, so the
    ids the last replay left in ids_out are valid but stale, and the output NaN: each replay
    gives the two calls' ids (``indexer()``) and output (``attention(ids)``), so its attention
    read the ids its own indexer wrote, after it wrote them."""
    for replay in range(3):
        stale = ids_out.clone()
        idx_q.copy_(torch.randn(idx_q.shape, generator=g))
        out.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        want_ids = indexer()
        assert not torch.equal(want_ids, stale), replay  # (a new selection)
        assert torch.equal(ids_out, want_ids), replay
        assert torch.equal(out, attention(want_ids)), replay


@pytest.mark.gpu
@pytest.mark.parametrize("merge_kernel", [False, True])
def test_gpu_split_merge_in_a_graph_replays_exactly(merge_kernel):
    """Several splits captured in a CUDA graph: every replay (new q values in place) gives the
    bits of an eager call, so the arrival counters are back at zero after each launch (or, with
    the merge kernel, the two kernels chain correctly in a graph)."""
    from graph_capture import capture

    case, _ = decode_case([32768 - 9 * r for r in range(8)], Q=1, Hkv=4, G=16, D=128,
                          topk=16, seed=41)
    launch = dict(splits=8, merge_kernel=merge_kernel, num_warps=4, num_stages=2)
    out = torch.empty(case["q"].shape, dtype=torch.bfloat16, device="cuda")
    graph, _ = capture(lambda: sa.sparse_attn_with_launch(launch, "decode", **case, output=out))
    g = torch.Generator().manual_seed(42)
    for _ in range(3):
        case["q"].copy_(torch.randn(case["q"].shape, generator=g).bfloat16())
        graph.replay()
        want = sa.sparse_attn_with_launch(launch, "decode", **case,
                                          output=torch.empty_like(out))
        torch.cuda.synchronize()
        assert torch.equal(out, want)
    if not merge_kernel:  # (the merge kernel uses no counters)
        assert not sk._COUNTERS[out.device].any()


@pytest.mark.gpu
def test_gpu_tma_tiles_give_the_pointer_bits():
    """At MiniMax-M3 sizes on the GPU, tiles by the tensor memory accelerator give the pointer
    loads' bits: both layouts (and the NHD view, whose strides do not grow with the axes), bf16
    and fp8 with per-token scales, head_dim 64, 128 and 256, whole and half blocks, last-arrival
    and kernel merges, one and four KV heads; and a CUDA graph of a tma launch replays it."""
    from graph_capture import capture

    for layout, kv_dtype, D, Hkv, launch in (
            ("5d", torch.bfloat16, 128, 4, dict(splits=8, merge_kernel=True)),
            ("5d", torch.bfloat16, 128, 1, dict(splits=2, num_stages=3)),
            ("hnd", torch.bfloat16, 64, 2, dict(splits=4, kv_tile=64, num_stages=3)),
            ("nhd", FP8["e4m3"], 128, 2, dict(splits=1)),
            ("5d", torch.bfloat16, 256, 1, dict(splits=4, kv_tile=64)),
            ("nhd", torch.bfloat16, 256, 4, dict(splits=16, merge_kernel=True))):
        case, pos = decode_case([32768 - 13 * r for r in range(8)], Q=1, Hkv=Hkv, G=16 // Hkv,
                                D=D, topk=16, layout=layout, kv_dtype=kv_dtype, seed=D + Hkv)
        kw = {}
        if kv_dtype != torch.bfloat16:
            slots = case["kv"].shape[0] * BLOCK
            g = torch.Generator().manual_seed(D + Hkv)
            kw = dict(k_scale=(torch.rand((Hkv, slots), generator=g) + 0.5).cuda(),
                      v_scale=(torch.rand((Hkv, slots), generator=g) + 0.5).cuda())
        launch = dict(dict(num_warps=4, num_stages=2), **launch)
        assert sk.kv_tma_layout(case["kv"], Hkv, D, launch.get("kv_tile", 128)) is not None
        got = {tma: sa.sparse_attn_with_launch(
            dict(launch, tma=tma), "decode", **case, **kw,
            output=torch.full(case["q"].shape, float("nan"), dtype=torch.bfloat16,
                              device="cuda")) for tma in (False, True)}
        assert torch.equal(got[True], got[False]), (layout, kv_dtype, D, Hkv, launch)
        ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"],
                              pos, Hkv, case["sm_scale"], **kw)
        check(got[True], ref)
    # a cached plan: its later calls launch through `DescriptorLaunch` (the descriptor's
    # arguments kept per cache address), eagerly and captured in a CUDA graph
    import inspect

    out = torch.empty_like(got[True])
    plan = sa._AttnPlan("decode", case["q"], case["kv"], case["topk_idx"], case["block_table"],
                        case["seq_lens"], case["num_kv_heads"], case["sm_scale"], out, None,
                        None, None, decode_query_len=1,
                        launch=sa._check_launch(dict(launch, tma=True), "decode"))

    def call():
        plan(case["q"], case["kv"], case["topk_idx"], case["block_table"], case["seq_lens"],
             None, None, None, None, out)
    call()
    attn = inspect.getclosurevars(plan.run).nonlocals["attn"]
    assert isinstance(attn.direct, generated._runtime.DescriptorLaunch)
    for _ in range(2):
        out.fill_(float("nan"))
        call()
        assert torch.equal(out, got[False])
    graph, _ = capture(call)
    case["q"].copy_(torch.randn(case["q"].shape, generator=torch.Generator().manual_seed(3)))
    out.fill_(float("nan"))
    graph.replay()
    want = sa.sparse_attn_with_launch(dict(launch, tma=False), "decode", **case,
                                      output=torch.empty_like(out))
    torch.cuda.synchronize()
    assert torch.equal(out, want)
    assert len(attn.direct.cache) == 1  # one cache, one descriptor


@pytest.mark.gpu
def test_gpu_table_first_gives_the_bits_of_the_table_loads():
    """At MiniMax-M3 sizes on the GPU, table_first launches give the plain launches' bits: 32k
    and 128k contexts (tables of 256 and 1024 entries, the widest held), pointer and tma
    tiles, last-arrival and kernel merges (the step as the indexer's dependent: the next
    test)."""
    for ctx, R, Hkv, launch in ((32768, 16, 1, dict(splits=8, merge_kernel=True, tma=True)),
                                (32768, 16, 2, dict(splits=2, num_stages=3)),
                                (131072, 4, 2, dict(splits=4, tma=True)),
                                (131072, 4, 1, dict(splits=8, kv_tile=64, num_stages=3))):
        case, pos = decode_case([ctx - 13 * r for r in range(R)], Q=1, Hkv=Hkv, G=16 // Hkv,
                                D=128, topk=16, seed=ctx // 1024 + Hkv, extra_cols=0)
        assert case["block_table"].shape[1] == ctx // BLOCK
        launch = dict(dict(num_warps=4, num_stages=2), **launch)
        got = {tf: sa.sparse_attn_with_launch(
            dict(launch, table_first=tf), "decode", **case,
            output=torch.full(case["q"].shape, float("nan"), dtype=torch.bfloat16,
                              device="cuda")) for tf in (False, True)}
        assert torch.equal(got[True], got[False]), (ctx, Hkv, launch)
        check(got[True], ref_sparse_attn(case["q"], case["kv"], case["topk_idx"],
                                         case["block_table"], pos, Hkv, case["sm_scale"]))


@pytest.mark.gpu
def test_gpu_decode_step_with_table_first_equals_the_two_calls(monkeypatch):
    """A decode table row with table_first (and tma, a merge kernel): the attention reads its
    table rows before its wait for the indexer, inside a CUDA graph, and gives the bits of the
    two calls (where it reads them after the indexer has completed)."""
    _step_with_decode_rows(monkeypatch, splits=8, merge_kernel=True, tma=True, table_first=True)


@pytest.mark.gpu
def test_gpu_split_merge_is_deterministic_over_many_launches():
    """Hundreds of back-to-back launches of two inputs at several split counts (the arrival
    order differs from launch to launch): every result has the bits of that input's first
    one, and the counters end at zero."""
    cases = [decode_case([32768 - 7 * r for r in range(R)], Q=1, Hkv=2, G=16, D=128, topk=16,
                         seed=50 + R)[0] for R in (1, 8)]
    for splits, head_split in ((2, 1), (4, 1), (16, 1), (16, 4)):
        launch = dict(splits=splits, head_split=head_split, num_warps=4, num_stages=2)
        firsts = [sa.sparse_attn_with_launch(launch, "decode", **c, output=torch.full(
            c["q"].shape, math.nan, dtype=torch.bfloat16, device="cuda")).clone() for c in cases]
        assert not any(bool(f.isnan().any()) for f in firsts), launch
        outs = [torch.empty_like(f) for f in firsts]
        for i in range(200):
            c = i % 2
            outs[c].fill_(math.nan)  # (a launch that writes nothing must not pass)
            sa.sparse_attn_with_launch(launch, "decode", **cases[c], output=outs[c])
            if i % 20 == c:
                assert torch.equal(outs[c], firsts[c]), (launch, i)
        assert torch.equal(outs[0], firsts[0]) and torch.equal(outs[1], firsts[1])
    torch.cuda.synchronize()
    assert not sk._COUNTERS[torch.device("cuda", torch.cuda.current_device())].any()


@pytest.mark.gpu
@pytest.mark.parametrize("R,ctx", [(16, 32768), (64, 8192)])
def test_gpu_decode_step_in_a_graph_equals_the_two_calls(R, ctx):
    """The attention a programmatic dependent of the indexer: at 64 programs as many per SM as
    fit; at 256 at most two (the sm_90 step table), its launch asking for the shared memory
    that leaves room for no third."""
    import inspect

    from generated import _runtime

    plan, run = _step_in_a_graph(R, ctx)
    if _runtime.detect_hardware(torch.device("cuda")) == "sm_90":
        assert plan.attend.asked_per_sm == (0 if R * 4 <= 128 else 2)
        run()  # (the plan's own launch, outside the graph)
        attn = inspect.getclosurevars(plan.attend.run).nonlocals["attn"]
        shared = attn.compiled.metadata.shared
        if plan.attend.asked_per_sm:
            floor = _runtime.residency_shared(torch.cuda.current_device(), 2)
            assert floor > shared and attn.metadata[2] == floor
        else:
            assert attn.metadata[2] == shared


def _step_in_a_graph(R, ctx):
    """sparse_decode_step of R requests of ctx tokens (4 KV heads, G 16) captured in a CUDA
    graph and replayed: the ids and output of the two calls."""
    from graph_capture import capture

    g = torch.Generator().manual_seed(29)
    Q, Hkv, G, D, topk = 1, 4, 16, 128, 16
    W = ctx // BLOCK
    idx_q = torch.randn((R * Q, Hkv, 128), generator=g).bfloat16().cuda()
    idx_cache = torch.randn((R * W + 1, BLOCK, 128), generator=g).bfloat16().cuda()
    idx_table = torch.randperm(R * W + 1, generator=g)[:R * W].view(R, W).int().cuda()
    kv = make_cache(R * W + 2, Hkv, D, "5d", torch.bfloat16, g).cuda()
    table = torch.randperm(R * W + 2, generator=g)[:R * W].view(R, W).int().cuda()
    seq_lens = torch.full((R,), ctx, dtype=torch.int32, device="cuda")
    q = torch.randn((R * Q, Hkv * G, D), generator=g).bfloat16().cuda()
    out = torch.zeros((R * Q, Hkv * G, D), dtype=torch.bfloat16, device="cuda")
    ids_out = torch.empty((Hkv, R * Q, topk), dtype=torch.int32, device="cuda")
    counter = torch.zeros((Hkv, R * Q), dtype=torch.int32, device="cuda")

    def step():
        generated.sparse_decode_step(idx_q, idx_cache, idx_table, q, kv, table, seq_lens, ctx,
                                     topk, 0, 1, Hkv, Q, Q, D ** -0.5, out, topk_out=ids_out,
                                     completion_counter=counter)
    graph, _ = capture(step)
    _replays_read_their_own_selection(
        graph, idx_q, ids_out, out, g,
        lambda: generated.index_decode(idx_q, idx_cache, idx_table, seq_lens, ctx, topk, 0, 1,
                                       Hkv, Q, Q),
        lambda ids: generated.sparse_attn_decode(q, kv, ids, table, seq_lens, Hkv, D ** -0.5,
                                                 torch.full_like(out, math.nan), Q))
    # (a plan as the step made its own, and its call: how it launches the attention)
    plan = sa._StepPlan(idx_q, idx_cache, idx_table, q, kv, table, seq_lens, ctx, topk, 0, 1,
                        Hkv, Q, Q, D ** -0.5, out, None, None, ids_out, counter, None)
    return plan, lambda: plan(idx_q, idx_cache, idx_table, q, kv, table, seq_lens, None, None,
                              out, ids_out, counter)


@pytest.mark.gpu
def test_gpu_decode_step_with_a_merge_kernel_equals_the_two_calls(monkeypatch):
    """A decode table row that merges in a second kernel: indexer, split kernel and merge
    kernel chained by programmatic launches inside a CUDA graph give the two calls' bits."""
    _step_with_decode_rows(monkeypatch, splits=8, merge_kernel=True)


def _step_with_decode_rows(monkeypatch, **params):
    """_step_in_a_graph(16, 32768) with every decode table row's
    launch changed by ``params`` (fresh plan caches)."""
    from types import SimpleNamespace

    from generated import _runtime

    row = sa._row

    def changed(mode, hw, key):
        got = row(mode, hw, key)
        if mode != "decode":
            return got
        return SimpleNamespace(variant=got.variant, where=got.where, index=got.index,
                               params={**got.params, **params})
    monkeypatch.setattr(sa, "_row", changed)
    monkeypatch.setattr(sa, "_PLANS", _runtime.PlanCache())
    monkeypatch.setattr(sa, "_STEP_PLANS", _runtime.PlanCache())
    _step_in_a_graph(16, 32768)


@pytest.mark.gpu
@pytest.mark.parametrize("Hkv,G", [(4, 16), (1, 8)])
def test_gpu_prefill_both_variants_full_size(Hkv, G):
    """1 × (8192 + 2048) tokens, topk 16: lists shared by runs of 64 neighbouring tokens (as
    an indexer's are); per-token and query-tiled (either walk, tma) against float64 on
    sampled rows, the two walks bit for bit at one launch."""
    g = torch.Generator().manual_seed(31)
    prefix, chunk, D, topk = 8192, 2048, 128, 16
    W = (prefix + chunk) // BLOCK
    kv = make_cache(W + 4, Hkv, D, "5d", torch.bfloat16, g).cuda()
    table = torch.randperm(W + 4, generator=g)[:W].view(1, W).int().cuda()
    cu = torch.tensor([0, chunk], dtype=torch.int32, device="cuda")
    pre = torch.tensor([prefix], dtype=torch.int32, device="cuda")
    lens = torch.tensor([prefix + chunk], dtype=torch.int32, device="cuda")
    pos = prefill_positions(cu, pre, lens, chunk, chunk)
    ids = torch.full((Hkv, chunk, topk), -1, dtype=torch.int32)
    for t0 in range(0, chunk, 64):
        own = (prefix + t0) // BLOCK
        shared = torch.randperm(own, generator=g)[:topk - 2].int()
        for t in range(t0, min(t0 + 64, chunk)):
            mine = (prefix + t) // BLOCK
            row = torch.cat([torch.tensor([mine], dtype=torch.int32), shared,
                             torch.tensor([own], dtype=torch.int32)])
            row = torch.unique(row)[:topk]
            ids[:, t, :row.numel()] = row
    ids = ids.cuda()
    q = torch.randn((chunk, Hkv * G, D), generator=g).bfloat16().cuda()
    rows = list(range(0, chunk, 97)) + [chunk - 1]
    ref = ref_sparse_attn(q[rows], kv, ids[:, rows], table, [pos[r] for r in rows], Hkv,
                          D ** -0.5)
    tiled = {}
    for launch in (dict(splits=1, num_warps=4, num_stages=2),
                   dict(variant="sparse_attn_tiled", lanes=64, num_warps=8, num_stages=2),
                   dict(variant="sparse_attn_tiled", lanes=64, sorted_union=True, num_warps=8,
                        num_stages=2),
                   dict(variant="sparse_attn_tiled", lanes=128, sorted_union=True, tma=True,
                        num_warps=8, num_stages=3)):
        out = torch.full(q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        sa.sparse_attn_with_launch(launch, "prefill", q, kv, ids, table, cu, lens, pre, chunk,
                                   Hkv, D ** -0.5, out)
        check(out[rows], ref)
        if launch.get("lanes") == 64:
            tiled[launch.get("sorted_union", False)] = out
    assert torch.equal(tiled[True], tiled[False])  # the two walks at one launch


@pytest.mark.gpu
@pytest.mark.parametrize("kv_dtype,mode", [(torch.float8_e4m3fn, "none"),
                                           (torch.float8_e4m3fn, "per_token"),
                                           (torch.float8_e5m2, "scalar")])
def test_gpu_fp8_decode_and_prefill_full_size(kv_dtype, mode):
    """fp8 caches at MiniMax-M3 sizes (bf16 q, fp16 products, V widened by the pair
    conversion) against float64: the dispatched launch, several split and tma launches and
    the query-tiled prefill kernel over the same rows."""
    case, pos = decode_case([32768 - 17 * r for r in range(8)], Q=1, Hkv=2, G=16, D=128,
                            topk=16, kv_dtype=kv_dtype, seed=5)
    g = torch.Generator().manual_seed(6)
    slots = case["kv"].shape[0] * BLOCK
    kw = {}
    if mode == "scalar":
        kw = dict(k_scale=torch.tensor([0.8], device="cuda"),
                  v_scale=torch.tensor([1.7], device="cuda"))
    elif mode == "per_token":
        kw = dict(k_scale=(torch.rand((2, slots), generator=g) + 0.5).cuda(),
                  v_scale=(torch.rand((2, slots), generator=g) + 0.5).cuda())
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos,
                          2, case["sm_scale"], **kw)
    check(run_decode(case, **kw), ref)
    for launch in (dict(splits=1, num_warps=4, num_stages=3, tma=True),
                   dict(splits=4, num_warps=8, num_stages=2),
                   dict(splits=8, kv_tile=64, num_warps=4, num_stages=3, merge_kernel=True,
                        tma=True, table_first=True)):
        out = torch.full(case["q"].shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        check(sa.sparse_attn_with_launch(launch, "decode", **case, output=out, **kw), ref)
    T = case["q"].shape[0]
    for launch in (dict(variant="sparse_attn_tiled", lanes=64, num_warps=8, num_stages=2),
                   dict(variant="sparse_attn_tiled", lanes=128, sorted_union=True, tma=True,
                        num_warps=8, num_stages=3)):
        out = torch.full(case["q"].shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        sa.sparse_attn_with_launch(
            launch, "prefill", case["q"], case["kv"], case["topk_idx"], case["block_table"],
            torch.arange(T + 1, dtype=torch.int32, device="cuda"), case["seq_lens"],
            case["seq_lens"] - 1, 1, 2, case["sm_scale"], out, **kw)
        check(out, ref)


def _sm90_table_launches() -> dict:
    """(mode, q dtype, kv dtype, scales, G, head_dim) → the distinct launches the sm_90 data
    file's attention rows name for that input."""
    import os

    from codegen import measured
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    data = measured.load_file(os.path.join(root, "specs", "measured", "sm_90.json"))
    out: dict = {}
    for mode in ("decode", "prefill"):
        for row in data.rows(f"sparse_attn_{mode}"):
            v = row.values()
            launch = {"variant": row.choice, **row.params}
            key = (mode, v["q_dtype"], v["kv_dtype"], v["scales"], v["group"], v["head_dim"])
            if launch not in out.setdefault(key, []):
                out[key].append(launch)
    return out


def test_the_sm90_tables_give_the_gpu_tests_launches():
    """The GPU tests run every launch `_sm90_table_launches` names: it must find the measured
    inputs' rows (an empty data file would leave those tests with nothing to run)."""
    keys = set(_sm90_table_launches())
    for mode in ("decode", "prefill"):
        for kv, scales in (("bf16", "none"), ("fp8e4m3", "none"), ("fp8e4m3", "per_token")):
            for G in (8, 16):
                assert (mode, "bf16", kv, scales, G, 128) in keys, (mode, kv, scales, G)


@pytest.mark.gpu
@pytest.mark.parametrize("as_fp16", [False, True])
@pytest.mark.parametrize("mode,q_dtype,kv,scales,G,D", sorted(_sm90_table_launches()))
def test_gpu_every_launch_of_the_sm90_tables_matches_float64(mode, q_dtype, kv, scales, G, D,
                                                             as_fp16):
    """Each launch an sm_90 table row names, on that row's inputs (two KV heads, four
    requests of four query tokens at 4–9k keys, 16 listed blocks) and, ``as_fp16``, on the
    fp16 inputs the row serves (a bf16 q's rows: MEASURED_AS): within vLLM's bounds of
    float64, as a decode call or as the prefill of those tokens after their prefix (the
    same positions)."""
    from specs.sparse_attn import MEASURED_AS

    Q, Hkv = 4, 2
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
              "fp8e4m3": torch.float8_e4m3fn, "fp8e5m2": torch.float8_e5m2}
    run_q, run_kv = q_dtype, kv
    if as_fp16:
        run_q, run_kv = "fp16", "fp16" if kv == "bf16" else kv
        assert MEASURED_AS[(run_q, run_kv, scales)] == (q_dtype, kv, scales)
    case, pos = decode_case([4096 + 1711 * r for r in range(4)], Q=Q, Hkv=Hkv, G=G, D=D,
                            topk=16, kv_dtype=dtypes[run_kv], q_dtype=dtypes[run_q], seed=G)
    kw = scale_args(case, scales, seed=G + 1)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos,
                          Hkv, case["sm_scale"], **kw)
    R = case["seq_lens"].shape[0]
    cu = torch.arange(0, R * Q + 1, Q, dtype=torch.int32, device=DEVICE)
    for launch in _sm90_table_launches()[(mode, q_dtype, kv, scales, G, D)]:
        out = torch.full(case["q"].shape, float("nan"), dtype=torch.bfloat16, device=DEVICE)
        if mode == "decode":
            sa.sparse_attn_with_launch(launch, "decode", **case, output=out, **kw)
        else:
            sa.sparse_attn_with_launch(launch, "prefill", case["q"], case["kv"],
                                       case["topk_idx"], case["block_table"], cu,
                                       case["seq_lens"], case["seq_lens"] - Q, Q, Hkv,
                                       case["sm_scale"], out, **kw)
        try:
            check(out, ref)
        except AssertionError as e:
            raise AssertionError(f"{launch}: {e}") from None


def test_topk_wider_than_the_indexer_selects_is_refused_by_name():
    """A block list wider than MAX_TOPK (the split kernel compares a row's ids pairwise) is a
    ValueError naming topk_idx, in both entries; MAX_TOPK itself is served: ids anywhere in
    the list (its first and last slots, either side of the middle), a duplicate 511 slots
    from its first, split in several ways, against float64."""
    case, pos = decode_case([300, 140], Q=1, Hkv=1, G=4, topk=4, seed=31)
    out = _poisoned(case["q"])
    for width, ok in ((sk.MAX_TOPK, True), (sk.MAX_TOPK + 1, False)):
        ids = torch.full((1, 2, width), -1, dtype=torch.int32)
        if ok:
            ids[0, 0, [0, 255, 256, 511]] = torch.tensor([2, 0, 1, 2], dtype=torch.int32)
            ids[0, 1, [3, 300, 511]] = torch.tensor([1, 1, 0], dtype=torch.int32)
            wide = dict(case, topk_idx=ids.to(DEVICE))
            ref = ref_sparse_attn(case["q"], case["kv"], wide["topk_idx"], case["block_table"],
                                  pos, 1, case["sm_scale"])
            check(generated.sparse_attn_decode(**wide, output=_poisoned(case["q"])), ref)
            for launch in (dict(splits=1), dict(splits=8), dict(splits=4, merge_kernel=True)):
                check(sa.sparse_attn_with_launch(dict(launch, num_warps=4, num_stages=2),
                                                 "decode", **wide,
                                                 output=_poisoned(case["q"])), ref)
            continue
        ids = ids.to(DEVICE)
        with pytest.raises(ValueError, match=r"^topk_idx: .*topk in 1\.\.512"):
            generated.sparse_attn_decode(**dict(case, topk_idx=ids), output=out)
        cu = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
        with pytest.raises(ValueError, match=r"^topk_idx: "):
            generated.sparse_attn_prefill(case["q"], case["kv"], ids, case["block_table"], cu,
                                          case["seq_lens"], case["seq_lens"] - 1, 1, 1, 0.125,
                                          out)


def test_sm_scale_is_validated_whatever_the_plan_cache_holds():
    """A refused sm_scale stays refused after a call with the same number (the plan key
    spells the float out, so it must never stand for a value of another type), and an int too
    large for a float is a ValueError naming it."""
    case, _ = decode_case([200, 10], Q=1, Hkv=1, G=4, seed=32)
    out = torch.zeros(case["q"].shape, dtype=torch.bfloat16, device=DEVICE)
    generated.sparse_attn_decode(**dict(case, sm_scale=0.125), output=out)
    for bad in ("0.125", np.float32(0.125), np.int64(1), torch.tensor([0.125])):
        with pytest.raises(TypeError, match="^sm_scale: must be a Python int or float"):
            generated.sparse_attn_decode(**dict(case, sm_scale=bad), output=out)
    with pytest.raises(ValueError, match="^sm_scale: "):
        generated.sparse_attn_decode(**dict(case, sm_scale=10 ** 400), output=out)


def test_decode_step_names_its_own_arguments():
    """Errors about the ids name the step's topk_out (or idx_q, whose device the ids take when
    no topk_out is given), not the two calls' topk_idx / out."""
    args, rows, topk = _small_step_args(33)
    for bad in (torch.zeros((1, rows, topk), dtype=torch.int64, device=DEVICE),
                torch.zeros((2, rows, topk), dtype=torch.int32, device=DEVICE),
                torch.zeros((1, rows, topk + 1), dtype=torch.int32, device=DEVICE),
                torch.zeros((rows, topk), dtype=torch.int32, device=DEVICE),
                torch.zeros((1, rows, topk), dtype=torch.int32, device="meta"),
                torch.zeros((1, rows, 1), dtype=torch.int32, device=DEVICE).expand(1, rows,
                                                                                   topk)):
        with pytest.raises((TypeError, ValueError), match="^topk_out: "):
            generated.sparse_decode_step(*args, topk_out=bad)
    with pytest.raises(ValueError, match="^idx_q: "):
        generated.sparse_decode_step(args[0].to("meta"), *args[1:])


def test_prefill_positions_past_int32_see_every_key():
    """A prefix that puts prefix + row past 2³¹ − 1 saturates (it cannot wrap to a negative
    position and an empty row): the rows attend as with any prefix past their keys, in both
    prefill kernels."""
    g = torch.Generator().manual_seed(34)
    W, Hkv, G, D, topk, T = 3, 1, 4, 64, 3, 6
    kv = make_cache(W + 1, Hkv, D, "5d", torch.bfloat16, g).to(DEVICE)
    table = torch.randperm(W + 1, generator=g)[:W].view(1, W).int().to(DEVICE)
    ids = torch.randint(0, W, (Hkv, T, topk), generator=g).int().to(DEVICE)
    q = torch.randn((T, Hkv * G, D), generator=g).bfloat16().to(DEVICE)
    cu = torch.tensor([0, T], dtype=torch.int32, device=DEVICE)
    lens = torch.tensor([(1 << 31) - 1], dtype=torch.int32, device=DEVICE)
    for launch in ({"splits": 2, "num_warps": 4, "num_stages": 2},
                   {"variant": "sparse_attn_tiled", "lanes": 16, "num_warps": 4,
                    "num_stages": 2}):
        outs = []
        for prefix in ((1 << 31) - 3, 10 ** 6):
            out = torch.full_like(q, float("nan"))
            pre = torch.tensor([prefix], dtype=torch.int32, device=DEVICE)
            sa.sparse_attn_with_launch(launch, "prefill", q, kv, ids, table, cu, lens, pre, T,
                                       Hkv, 0.125, out)
            outs.append(out)
        assert torch.equal(outs[0], outs[1]) and bool((outs[0] != 0).any()), launch


def test_decode_step_buffers_sharing_memory_are_refused_by_name():
    args, rows, topk = _small_step_args(35)
    buf = torch.zeros((1, rows * topk + 8), dtype=torch.int32, device=DEVICE)
    ids_out = buf[:, :rows * topk].view(1, rows, topk)
    with pytest.raises(ValueError, match="^topk_out: shares memory with completion_counter"):
        generated.sparse_decode_step(*args, topk_out=ids_out, completion_counter=buf[:, :8])
    # the same on a cached plan (separate buffers first)
    generated.sparse_decode_step(*args, topk_out=torch.zeros_like(ids_out),
                                 completion_counter=torch.zeros_like(buf[:, :8]))
    with pytest.raises(ValueError, match="^topk_out: shares memory with completion_counter"):
        generated.sparse_decode_step(*args, topk_out=ids_out, completion_counter=buf[:, :8])


@pytest.mark.parametrize("mode", ["decode", "prefill", "step"])
def test_more_query_heads_than_a_grid_dimension_holds_are_refused(mode):
    """The merge kernel's grid is (T, Hq), the query tile's (row tiles, Hkv): 65536 query
    heads (G 16 over 4096 KV heads; the cache and ids broadcast) are refused naming q, in
    every entry, before anything runs."""
    G, Hkv, D = 16, 4096, 64
    q = torch.zeros((1, G * Hkv, D), dtype=torch.bfloat16, device=DEVICE)
    kv = torch.zeros((1, 2, BLOCK, 1, D), dtype=torch.bfloat16, device=DEVICE).expand(
        1, 2, BLOCK, Hkv, D)
    ids = torch.zeros((1, 1, 1), dtype=torch.int32, device=DEVICE).expand(Hkv, 1, 1)
    table = torch.zeros((1, 1), dtype=torch.int32, device=DEVICE)
    lens = torch.tensor([5], dtype=torch.int32, device=DEVICE)
    out = torch.full_like(q, 7.0)
    with pytest.raises(ValueError, match="^q: at most 65535 query heads"):
        if mode == "decode":
            generated.sparse_attn_decode(q, kv, ids, table, lens, Hkv, 0.1, out, 1)
        elif mode == "prefill":
            cu, pre = (torch.tensor(x, dtype=torch.int32, device=DEVICE) for x in ([0, 1], [4]))
            generated.sparse_attn_prefill(q, kv, ids, table, cu, lens, pre, 1, Hkv, 0.1, out)
        else:
            idx_q = torch.zeros((1, Hkv, 16), dtype=torch.bfloat16, device=DEVICE)
            cache = torch.zeros((1, BLOCK, 16), dtype=torch.bfloat16, device=DEVICE)
            generated.sparse_decode_step(idx_q, cache, table, q, kv, table, lens, BLOCK, 1, 0,
                                         1, Hkv, 1, 1, 0.1, out)
    assert bool((out == 7).all())


def test_decode_step_buffers_sharing_the_index_table_name_it():
    """A topk_out or completion_counter sharing memory with index_block_table (the step's
    attention table apart) is refused naming index_block_table, not the indexer's own name
    for it (block_table: the step's attention table), and the buffer by its step name."""
    args, rows, topk = _small_step_args(36)
    buf = torch.zeros(64, dtype=torch.int32, device=DEVICE)
    n = args[2].numel()
    buf[:n] = args[2].flatten()
    args = args[:2] + [buf[:n].view(args[2].shape)] + args[3:5] + [args[5].clone()] + args[6:]
    for name, kw in (("topk_out", dict(topk_out=buf[2:2 + rows * topk].view(1, rows, topk))),
                     ("completion_counter", dict(completion_counter=buf[1:1 + rows].view(
                         1, rows)))):
        with pytest.raises(ValueError, match=f"^{name}: shares memory with index_block_table "
                                             f"\\(the call writes {name}\\)"):
            generated.sparse_decode_step(*args, **kw)


@pytest.mark.parametrize("cu", [[0, 4, 2, 2], [0, 4, 2, 4]])
def test_a_decreasing_cu_seqlens_q_takes_each_row_for_one_request_or_none(cu):
    """Where cu_seqlens_q decreases, a row is request r's (r = the requests that end at or
    before it) only where r's range holds it, as in the prefill indexer: rows 2 and 3 are no
    request's here (zeros), in every prefill kernel; the output equals the call with cu
    [0, 2, 2, 2]."""
    g = torch.Generator().manual_seed(41)
    W, Hkv, G, D, topk, T, R = 3, 1, 4, 64, 3, 4, 3
    kv = make_cache(R * W + 1, Hkv, D, "5d", torch.bfloat16, g).to(DEVICE)
    table = torch.randperm(R * W + 1, generator=g)[:R * W].view(R, W).int().to(DEVICE)
    ids = torch.randint(0, W, (Hkv, T, topk), generator=g).int().to(DEVICE)
    q = torch.randn((T, Hkv * G, D), generator=g).bfloat16().to(DEVICE)
    pre = torch.tensor([200, 100, 50], dtype=torch.int32, device=DEVICE)
    lens = pre + 4
    cu_t = torch.tensor(cu, dtype=torch.int32, device=DEVICE)
    ref = ref_sparse_attn(q, kv, ids, table, prefill_positions(cu_t, pre, lens, T, T), Hkv, 0.125)
    assert bool((ref[2:] == 0).all()) and bool((ref[:2] != 0).any())
    for launch in PREFILL_LAUNCHES:
        outs = []
        for cu_rows in ([0, 2, 2, 2], cu):
            out = torch.full_like(q, float("nan"))
            cu_t = torch.tensor(cu_rows, dtype=torch.int32, device=DEVICE)
            sa.sparse_attn_with_launch(launch, "prefill", q, kv, ids, table, cu_t, lens, pre, T,
                                       Hkv, 0.125, out)
            outs.append(out)
        assert torch.equal(outs[0], outs[1]), launch
        check(outs[1], ref)
        assert bool((outs[1][2:] == 0).all()), launch


@pytest.mark.filterwarnings("ignore:All-NaN slice")  # (the interpreter's max of a NaN row)
def test_nan_scores_give_nan_rows_in_every_kernel():
    """A NaN in q (so in its head's scores) makes that row and head NaN, as the float64
    reference does, not zeros (only a row with no visible key is zeros); the other heads and
    rows are the call without it, bit for bit: one split, splits merged by the last split or
    by the merge kernel, and the prefill kernels."""
    case, _ = decode_case([300, 200], Q=1, Hkv=1, G=4, seed=42)
    bad_q = case["q"].clone()
    bad_q[0, 1, 3] = float("nan")
    launches = [dict(splits=s, num_warps=4, num_stages=2, merge_kernel=m)
                for s, m in ((1, False), (4, False), (4, True))]
    for launch in launches:
        outs = []
        for q in (case["q"], bad_q):
            out = _poisoned(q)
            sa.sparse_attn_with_launch(launch, "decode", **dict(case, q=q), output=out)
            outs.append(out)
        assert not bool(outs[0].isnan().any()), launch
        assert bool(outs[1][0, 1].isnan().all()), launch
        keep = torch.ones(outs[0].shape[:2], dtype=torch.bool, device=DEVICE)
        keep[0, 1] = False
        assert torch.equal(outs[0][keep], outs[1][keep]), launch
    cu = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
    pre = case["seq_lens"] - 1
    for launch in PREFILL_LAUNCHES:
        outs = []
        for q in (case["q"], bad_q):
            outs.append(sa.sparse_attn_with_launch(
                launch, "prefill", q, case["kv"], case["topk_idx"], case["block_table"], cu,
                case["seq_lens"], pre, 1, 1, 0.125, _poisoned(q)))
        assert not bool(outs[0].isnan().any()), launch
        assert bool(outs[1][0, 1].isnan().all()), launch
        keep = torch.ones(outs[0].shape[:2], dtype=torch.bool, device=DEVICE)
        keep[0, 1] = False
        assert torch.equal(outs[0][keep], outs[1][keep]), launch


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 1e39, -1e39])
def test_sm_scale_outside_fp32_is_refused_by_name(bad):
    """The kernels take sm_scale as fp32: NaN, infinities and values past fp32's range would
    turn every score into NaN or ±inf; each entry refuses them naming sm_scale."""
    case, _ = decode_case([200, 10], Q=1, Hkv=1, G=4, seed=43)
    out = torch.zeros(case["q"].shape, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(ValueError, match="^sm_scale: "):
        generated.sparse_attn_decode(**dict(case, sm_scale=bad), output=out)
    cu = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="^sm_scale: "):
        generated.sparse_attn_prefill(case["q"], case["kv"], case["topk_idx"],
                                      case["block_table"], cu, case["seq_lens"],
                                      case["seq_lens"] - 1, 1, 1, bad, out)
    args, _, _ = _small_step_args(43)
    with pytest.raises(ValueError, match="^sm_scale: "):
        generated.sparse_decode_step(*args[:14], bad, *args[15:])


def test_decode_step_with_launch_refuses_bad_launch_ways_by_name():
    """sparse_decode_step_with_launch: ``attention_pdl`` a bool, ``attention_per_sm`` None or
    an int ≥ 0; both forced ways give the step's results."""
    args, _, _ = _small_step_args(45)
    step = sa.sparse_decode_step_with_launch
    want, want_ids = (t.clone() for t in generated.sparse_decode_step(*args))
    for bad, error in (({"attention_pdl": None}, TypeError), ({"attention_pdl": 1}, TypeError),
                       ({"attention_per_sm": 2.0}, TypeError),
                       ({"attention_per_sm": -1}, ValueError)):
        with pytest.raises(error, match=f"^{next(iter(bad))}: "):
            step(None, *args, **bad)
    for way in ({"attention_pdl": False}, {"attention_per_sm": 2}):
        args[-1].zero_()
        out, ids = step(None, *args, **way)
        assert torch.equal(out, want) and torch.equal(ids, want_ids), way


def test_an_output_sharing_memory_with_an_input_is_refused_by_name():
    """The output's memory meets no input's (programs would read what others wrote), in both
    entries, on a new plan and on a cached one; the same output elsewhere is served."""
    case, _ = decode_case([300, 140], Q=1, Hkv=1, G=4, seed=44)
    T, Hq, D = case["q"].shape
    out = torch.zeros((T, Hq, D), dtype=torch.bfloat16, device=DEVICE)
    want = generated.sparse_attn_decode(**case, output=out).clone()
    # an int32 input in the output's memory: seq_lens, then the block table
    buf = torch.zeros(T * Hq * D, dtype=torch.bfloat16, device=DEVICE)
    lens_in = buf.view(torch.int32)[:2]
    lens_in.copy_(case["seq_lens"])
    table_in = buf.view(torch.int32)[8:8 + case["block_table"].numel()]
    table_in.copy_(case["block_table"].flatten())
    for name, value in (("seq_lens", lens_in),
                        ("block_table", table_in.view(case["block_table"].shape)),
                        ("q", None), ("kv", None)):
        output = buf.view(T, Hq, D)
        if name == "q":
            value = output
            value.copy_(case["q"])
        elif name == "kv":
            output = case["kv"].view(-1)[:T * Hq * D].view(T, Hq, D)
            value = case["kv"]
        with pytest.raises(ValueError, match=f"^output: shares memory with {name}"):
            generated.sparse_attn_decode(**dict(case, **{name: value}), output=output)
    cu_in = buf.view(torch.int32)[:3]
    cu_in.copy_(torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE))
    with pytest.raises(ValueError, match="^output: shares memory with cu_seqlens_q"):
        generated.sparse_attn_prefill(case["q"], case["kv"], case["topk_idx"],
                                      case["block_table"], cu_in, case["seq_lens"],
                                      case["seq_lens"] - 1, 1, 1, 0.125, buf.view(T, Hq, D))
    # the cached plan checks each call's addresses
    assert torch.equal(generated.sparse_attn_decode(**case, output=out), want)
    with pytest.raises(ValueError, match="^output: shares memory with topk_idx"):
        generated.sparse_attn_decode(**dict(case, topk_idx=out.view(-1).view(torch.int32)[
            :case["topk_idx"].numel()].view(case["topk_idx"].shape)), output=out)


def test_decode_step_output_sharing_memory_with_an_input_is_refused_by_name():
    """sparse_decode_step's output meets none of its int32 inputs (§13.1), nor q, kv or the
    indexer's inputs; errors about the indexer's table name index_block_table and a topk out
    of range names topk."""
    args, rows, topk = _small_step_args(45)
    out = args[15]
    for pos, name in ((6, "seq_lens"), (5, "block_table"), (2, "index_block_table")):
        bad = list(args)
        inside = out.view(-1).view(torch.int32)[:args[pos].numel()]
        inside.copy_(args[pos].flatten())
        bad[pos] = inside.view(args[pos].shape)
        if pos == 5:  # (the indexer's table stays elsewhere, and the other way round)
            bad[2] = args[2].clone()
        with pytest.raises(ValueError, match=f"^output: shares memory with {name}"):
            generated.sparse_decode_step(*bad)
    for bad_table, match in ((args[2].long(), "^index_block_table: "),
                             (args[2][:, :1], "^index_block_table: ")):
        with pytest.raises(ValueError, match=match):
            generated.sparse_decode_step(*args[:2], bad_table, *args[3:])
    with pytest.raises(ValueError, match="^topk: "):
        generated.sparse_decode_step(*args[:8], sk.MAX_TOPK + 1, *args[9:])


def test_a_one_element_scale_of_any_rank_is_a_scalar():
    """k_scale / v_scale of one element are scalars whatever their rank (§15: 0-d or one
    element): [1, 1] gives the 0-d scale's bits."""
    case, pos = decode_case([300, 130], Q=1, Hkv=1, G=4, kv_dtype=FP8["e4m3"], seed=46)
    outs = []
    for shape in ((), (1,), (1, 1)):
        k = torch.full(shape, 0.5, dtype=torch.float32, device=DEVICE)
        v = torch.full(shape, 2.0, dtype=torch.float32, device=DEVICE)
        outs.append(generated.sparse_attn_decode(**case, output=_poisoned(case["q"]),
                                                 k_scale=k, v_scale=v))
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    check(outs[0], ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"],
                                   pos, 1, case["sm_scale"],
                                   k_scale=torch.tensor(0.5, device=DEVICE),
                                   v_scale=torch.tensor(2.0, device=DEVICE)))


# ---- host side: validation, plan keys, the step, shared buffers ---------------------------------

def _poisoned(q, dtype=torch.bfloat16):
    return torch.full(q.shape, float("nan"), dtype=dtype, device=DEVICE)


def _small_prefill(seed, Hkv=1, G=4, kv_dtype=torch.bfloat16):
    """Two requests (prefix 140 and 3 rows, prefix 60 and 2 rows) and a row of no request:
    (q, kv, topk_idx, block_table, cu_seqlens_q, seq_lens, prefix_lens), max_query_len 3 and
    the rows' positions."""
    g = torch.Generator().manual_seed(seed)
    D, topk, W, T = 64, 3, 3, 6
    kv = make_cache(2 * W + 1, Hkv, D, "5d", kv_dtype, g)
    table = torch.randperm(2 * W + 1, generator=g)[:2 * W].view(2, W).int()
    cu = torch.tensor([0, 3, 5], dtype=torch.int32)
    pre = torch.tensor([140, 60], dtype=torch.int32)
    lens = pre + torch.tensor([3, 2], dtype=torch.int32)
    pos = prefill_positions(cu, pre, lens, T, 3)
    ids = block_lists(pos, Hkv, topk, W, g)
    q = torch.randn((T, Hkv * G, D), generator=g).bfloat16()
    return [t.to(DEVICE) for t in (q, kv, ids, table, cu, lens, pre)], 3, pos


def test_scales_of_the_wrong_form_are_refused_naming_the_one_at_fault():
    """§15: k_scale and v_scale come together, both scalars or both fp32 [Hkv, pages · 128]
    with unit stride along slots and one KV-head stride; any other pair is a ValueError whose
    message starts with the name of the scale at fault."""
    case, _ = decode_case([300, 140], Q=1, Hkv=2, G=4, kv_dtype=FP8["e4m3"], seed=51)
    shape = (2, case["kv"].shape[0] * BLOCK)
    k, v = (scale_args(case, "per_token", 51)[n] for n in ("k_scale", "v_scale"))
    out = torch.zeros(case["q"].shape, dtype=torch.bfloat16, device=DEVICE)
    generated.sparse_attn_decode(**case, output=out, k_scale=k, v_scale=v)  # served
    ones = torch.ones((3, 2 * shape[1] + 4), device=DEVICE)
    scalar = torch.tensor(1.0, device=DEVICE)
    for k_scale, v_scale, name in (
            (None, v, "k_scale"), (k, None, "v_scale"),
            (ones[:3, :shape[1]], v, "k_scale"),  # three KV heads for two
            (k, ones[:2, :shape[1] + BLOCK], "v_scale"),  # a page too many
            (ones[:2, :2 * shape[1]:2], v, "k_scale"),  # slot stride 2
            (k, ones[:2, :2 * shape[1]:2], "v_scale"),
            (scalar, v, "v_scale"), (k, scalar, "v_scale"),  # a scalar with per-token scales
            (k, ones[:2, :shape[1]], "v_scale")):  # KV-head strides slots and 2 · slots + 4
        with pytest.raises(ValueError, match=f"^{name}: "):
            generated.sparse_attn_decode(**case, output=out, k_scale=k_scale, v_scale=v_scale)


def _decode_rejections():
    T, Hq, D = 4, 16, 64
    i32 = dict(dtype=torch.int32, device=DEVICE)
    out = torch.zeros((T, Hq, D), dtype=torch.bfloat16, device=DEVICE)
    return [  # (change, the argument named)
        (dict(q=torch.zeros((T, Hq, 32), dtype=torch.bfloat16, device=DEVICE),
              output=out[..., :32]), "q"),  # head dim outside the table's
        (dict(q=torch.zeros((T, 64, D), dtype=torch.bfloat16, device=DEVICE),
              output=torch.zeros((T, 64, D), dtype=torch.bfloat16, device=DEVICE)), "q"),  # G 64
        (dict(kv=torch.zeros((8, 2, BLOCK, 2, D), dtype=torch.bfloat16, device=DEVICE)), "kv"),
        (dict(kv=torch.zeros((8, 1, BLOCK, D), dtype=torch.bfloat16, device=DEVICE)), "kv"),
        (dict(topk_idx=torch.zeros((2, T, 4), **i32)), "topk_idx"),  # two KV heads for one
        (dict(topk_idx=torch.zeros((1, T, 0), **i32)), "topk_idx"),  # topk 0
        (dict(block_table=torch.zeros((3, 4), **i32)), "block_table"),  # 3 rows for 2 requests
        (dict(block_table=torch.zeros((2, 8), **i32)[:, ::2]), "block_table"),  # column stride
        (dict(output=out.to(torch.float64)), "output"),
        (dict(output=torch.zeros((T + 1, Hq, D), dtype=torch.bfloat16, device=DEVICE)), "output"),
        (dict(output=torch.zeros((1, Hq, D), dtype=torch.bfloat16, device=DEVICE).expand(
            T, Hq, D)), "output"),  # rows sharing memory
        (dict(decode_query_len=0), "decode_query_len"),
    ]


@pytest.mark.parametrize("case_index", range(len(_decode_rejections())))
def test_decode_rejections_name_the_argument_at_fault(case_index):
    """Each malformed argument of sparse_attn_decode is refused with an error whose message
    starts with its name (not another argument's check failing later, nor a launch)."""
    change, name = _decode_rejections()[case_index]
    case, _ = decode_case([200, 10], Q=2, Hkv=1, G=16, seed=53)
    kw = dict(case, output=torch.zeros(case["q"].shape, dtype=torch.bfloat16, device=DEVICE))
    kw.update(change)
    with pytest.raises((ValueError, TypeError), match=f"^{name}: "):
        generated.sparse_attn_decode(**kw)


def test_prefill_rejections_name_the_argument_at_fault():
    """sparse_attn_prefill's own arguments: cu_seqlens_q of R + 1 entries, prefix_lens of R,
    max_query_len ≥ 0, each refused by name."""
    args, max_q, _ = _small_prefill(54)
    q, kv, ids, table, cu, lens, pre = args
    out = torch.zeros(q.shape, dtype=torch.bfloat16, device=DEVICE)
    longer = torch.tensor([0, 3, 5, 6], dtype=torch.int32, device=DEVICE)
    for bad, name in (((q, kv, ids, table, longer, lens, pre, max_q), "cu_seqlens_q"),
                      ((q, kv, ids, table, cu, lens, torch.cat([pre, pre[:1]]), max_q),
                       "prefix_lens"),
                      ((q, kv, ids, table, cu, lens, pre, -1), "max_query_len")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            generated.sparse_attn_prefill(*bad, 1, 0.125, out)


def test_cache_offsets_up_to_int32_are_served_and_past_it_refused():
    """A page's last V element of a KV head exactly 2³¹ − 1 elements from its first K element
    is addressed (in-page offsets are int32) and matches float64; one element further the
    cache is refused naming kv (V's offset from K counts)."""
    case, pos = decode_case([200], Q=1, Hkv=1, G=4, topk=2, kv_dtype=FP8["e4m3"], seed=55,
                            extra_cols=0)
    D = 64
    v_off = (1 << 31) - 1 - (BLOCK - 1) * D - (D - 1)
    storage = virtual_tensor(v_off + BLOCK * D + 16, torch.float8_e4m3fn)
    vals = case["kv"][:1].contiguous()  # [1, 2, 128, 1, 64]: the only page of a 1 × 2 table
    table = torch.zeros((1, 2), dtype=torch.int32, device=DEVICE)
    ids = torch.tensor([[[0, -1]]], dtype=torch.int32, device=DEVICE)
    kv = storage.as_strided((1, 2, BLOCK, 1, D), (0, v_off, D, D, 1))
    kv[0, 0] = vals[0, 0]
    kv[0, 1] = vals[0, 1]
    out = _poisoned(case["q"], torch.float32)
    generated.sparse_attn_decode(case["q"], kv, ids, table, case["seq_lens"], 1, 0.125, out, 1)
    check(out, ref_sparse_attn(case["q"], vals, ids, table, pos, 1, 0.125))
    past = storage.as_strided((1, 2, BLOCK, 1, D), (0, v_off + 1, D, D, 1))
    with pytest.raises(ValueError, match="^kv: "):
        generated.sparse_attn_decode(case["q"], past, ids, table, case["seq_lens"], 1, 0.125,
                                     out, 1)


def _on_a_new_plan(fn, *args, **kwargs):
    from generated import _runtime
    _runtime.clear_plans()
    return fn(*args, **kwargs)


def test_every_scalar_of_an_attention_call_keys_its_plan():
    """A call that changes only a scalar (sm_scale by one fp32 ulp's worth, pdl, max_query_len,
    hardware) takes a new plan and gives the results a new plan gives; one that changes
    decode_query_len to a value the tensors do not fit is refused on every call."""
    case, _ = decode_case([300, 140], Q=1, Hkv=1, G=4, seed=56)
    out = lambda: torch.zeros(case["q"].shape, dtype=torch.float32, device=DEVICE)  # noqa: E731
    a, b = 0.125, 0.12506
    got_a = generated.sparse_attn_decode(**dict(case, sm_scale=a), output=out()).clone()
    got_b = generated.sparse_attn_decode(**dict(case, sm_scale=b), output=out()).clone()
    want_b = _on_a_new_plan(generated.sparse_attn_decode, **dict(case, sm_scale=b), output=out())
    assert torch.equal(got_b, want_b) and not torch.equal(got_a, got_b)
    generated.sparse_attn_decode(**case, output=out())  # (a plan of this key exists now)
    before = len(sa._PLANS)
    generated.sparse_attn_decode(**case, output=out(), pdl=False)
    assert len(sa._PLANS) == before + 1
    with pytest.raises(ValueError, match="^q: "):  # T = 2 rows are not 2 requests · 2
        generated.sparse_attn_decode(**dict(case, decode_query_len=2), output=out())
    # prefill: a smaller max_query_len leaves the later rows of each request zero
    args, max_q, _ = _small_prefill(56)
    full = generated.sparse_attn_prefill(*args, max_q, 1, 0.125, _poisoned(args[0])).clone()
    got = generated.sparse_attn_prefill(*args, 1, 1, 0.125, _poisoned(args[0]))
    assert bool((got[[1, 2, 4, 5]] == 0).all()) and torch.equal(got[[0, 3]], full[[0, 3]])
    assert bool((full[[1, 2, 4]] != 0).any())
    before = len(sa._PLANS)
    for hardware in ("generic", "sm_90"):
        generated.sparse_attn_prefill(*args, max_q, 1, 0.125, _poisoned(args[0]),
                                      hardware=hardware)
    assert len(sa._PLANS) == before + 2


def _step_args(seed, lens=(700,), topk=2, W=6, Hkv=1, G=4, kv_dtype=torch.bfloat16):
    """sparse_decode_step's positional arguments (Q 1, index head dim 16, head dim 64), the
    block tables distinct: the attention's pages are not the index cache's."""
    g = torch.Generator().manual_seed(seed)
    R, D, Didx = len(lens), 64, 16
    idx_q = torch.randn((R, Hkv, Didx), generator=g).bfloat16().to(DEVICE)
    idx_cache = torch.randn((R * W + 1, BLOCK, Didx), generator=g).bfloat16().to(DEVICE)
    idx_table = torch.randperm(R * W + 1, generator=g)[:R * W].view(R, W).int().to(DEVICE)
    kv = make_cache(R * W + 2, Hkv, D, "5d", kv_dtype, g).to(DEVICE)
    table = torch.randperm(R * W + 2, generator=g)[:R * W].view(R, W).int().to(DEVICE)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    q = torch.randn((R, Hkv * G, D), generator=g).bfloat16().to(DEVICE)
    return [idx_q, idx_cache, idx_table, q, kv, table, seq_lens, W * BLOCK, topk, 0, 1, Hkv, 1,
            1, D ** -0.5, torch.zeros_like(q)]


@pytest.mark.parametrize("sign", [1, -1])
def test_scalars_too_long_to_print_are_refused_by_name(sign):
    """An int of more than 4300 digits (which Python will not print) given as any scalar of
    the three entries is a ValueError or TypeError whose message starts with that argument's
    name (the message shows the int by its size)."""
    huge = sign * 10 ** 5000
    case, _ = decode_case([300], seed=3)
    out = torch.zeros_like(case["q"])
    (q, kv, ids, table, cu, lens, pre), max_q, _ = _small_prefill(3)
    prefill = dict(q=q, kv=kv, topk_idx=ids, block_table=table, cu_seqlens_q=cu, seq_lens=lens,
                   prefix_lens=pre, max_query_len=max_q, num_kv_heads=1, sm_scale=0.125,
                   output=torch.zeros_like(q))
    step = dict(zip(inspect.signature(generated.sparse_decode_step).parameters, _step_args(3)))
    calls = [(generated.sparse_attn_decode, dict(case, output=out),
              ("num_kv_heads", "sm_scale", "decode_query_len")),
             (generated.sparse_attn_prefill, prefill,
              ("max_query_len", "num_kv_heads", "sm_scale")),
             (generated.sparse_decode_step, step,
              ("max_seq_len", "topk", "init_blocks", "local_blocks", "num_kv_heads",
               "decode_query_len", "max_decode_query_len", "sm_scale"))]
    for entry, kwargs, names in calls:
        for name in names:
            with pytest.raises((ValueError, TypeError)) as info:
                entry(**{**kwargs, name: huge})
            assert str(info.value).startswith(f"{name}: "), (entry.__name__, str(info.value))
            assert "int of 16610 bits" in str(info.value), str(info.value)


def test_every_scalar_of_a_decode_step_keys_its_plan():
    """sparse_decode_step's plan key holds each scalar: a step that changes only max_seq_len,
    topk, init_blocks, local_blocks or sm_scale gives what a new plan gives (ids and output),
    which differs from the first step's."""
    args = _step_args(57)  # one request of 6 blocks, topk 2, init 0, local 1
    base = [t.clone() for t in generated.sparse_decode_step(*args)]
    for pos, value in ((7, 3 * BLOCK), (8, 3), (9, 1), (10, 2), (14, 0.0625)):
        changed = list(args)
        changed[pos] = value
        changed[15] = torch.zeros_like(args[15])
        generated.sparse_decode_step(*args)  # (the first plan, cached)
        got = [t.clone() for t in generated.sparse_decode_step(*changed)]
        changed[15] = torch.zeros_like(args[15])
        want = _on_a_new_plan(generated.sparse_decode_step, *changed)
        assert got[1].shape == want[1].shape and torch.equal(got[1], want[1]), pos
        assert torch.equal(got[0], want[0]), pos
        assert not (torch.equal(want[0], base[0]) and torch.equal(want[1], base[1])), pos


def test_decode_step_takes_ids_buffers_with_more_rows():
    """topk_out may have more rows than the step's T (index_decode's ``out`` [H, ≥ T, topk]):
    the ids are its first T rows, the attention reads those, the rest stay as they were."""
    args = _step_args(58, lens=(700, 300))
    want_out, want_ids = (t.clone() for t in generated.sparse_decode_step(*args))
    ids_out = torch.full((1, 5, 2), -7, dtype=torch.int32, device=DEVICE)
    out, ids = generated.sparse_decode_step(*args[:15], torch.zeros_like(args[15]),
                                            topk_out=ids_out)
    assert ids.data_ptr() == ids_out.data_ptr() and torch.equal(ids, want_ids)
    assert torch.equal(out, want_out) and bool((ids_out[:, 2:] == -7).all())


def test_decode_step_output_meeting_any_input_is_refused_on_every_call():
    """The step's output shares no memory with idx_q, the scales or q, on a new plan and on
    the cached one (a first step with its own output makes the plan)."""
    args = _step_args(59, kv_dtype=FP8["e4m3"])
    q, out = args[3], args[15]
    scales = dict(k_scale=torch.tensor([0.5], device=DEVICE),
                  v_scale=torch.tensor([2.0], device=DEVICE))
    generated.sparse_decode_step(*args, **scales)
    inside = out.view(-1).view(torch.float32)
    idx_q = inside[:8].view(torch.bfloat16).view(args[0].shape)
    idx_q.copy_(args[0])
    with pytest.raises(ValueError, match="^output: shares memory with idx_q"):
        generated.sparse_decode_step(idx_q, *args[1:], **scales)
    for name in ("k_scale", "v_scale"):
        inside[:1].copy_(scales[name])
        with pytest.raises(ValueError, match=f"^output: shares memory with {name}"):
            generated.sparse_decode_step(*args, **dict(scales, **{name: inside[:1]}))
    with pytest.raises(ValueError, match="^output: shares memory with q"):  # cached plan
        generated.sparse_decode_step(*args[:15], q, **scales)


def test_attention_output_meeting_a_scale_is_refused_by_name():
    case, _ = decode_case([300, 140], Q=1, Hkv=1, G=4, kv_dtype=FP8["e4m3"], seed=60)
    out = torch.zeros(case["q"].shape, dtype=torch.bfloat16, device=DEVICE)
    scales = dict(k_scale=torch.tensor([0.5], device=DEVICE),
                  v_scale=torch.tensor([2.0], device=DEVICE))
    generated.sparse_attn_decode(**case, output=out, **scales)
    inside = out.view(-1).view(torch.float32)[:1]
    for name in ("k_scale", "v_scale"):
        inside.copy_(scales[name])
        with pytest.raises(ValueError, match=f"^output: shares memory with {name}"):
            generated.sparse_attn_decode(**case, output=out, **dict(scales, **{name: inside}))


def test_decode_step_attention_per_sm_is_held_to_its_range():
    from generated import _runtime
    cap = _runtime.LAUNCH_PARAMS["sparse_attn"]["attention_per_sm"]
    args = _step_args(61)
    for bad in (cap.minimum - 1, cap.maximum + 1):
        with pytest.raises(ValueError, match="^attention_per_sm: "):
            sa.sparse_decode_step_with_launch(None, *args, attention_per_sm=bad)


@pytest.mark.parametrize("scales", ["scalar", "per_token"])
def test_prefill_entry_with_scales_matches_float64(scales):
    """sparse_attn_prefill (the table's launch) over an fp8 cache with scalar or per-token
    scales, k_scale and v_scale unlike each other: float64 with K scaled by k_scale and V by
    v_scale."""
    args, max_q, pos = _small_prefill(62, Hkv=2, kv_dtype=FP8["e4m3"])
    q, kv, ids, table = args[:4]
    case = dict(num_kv_heads=2, kv=kv)
    kw = scale_args(case, scales, 62)
    if scales == "scalar":
        kw = dict(k_scale=torch.tensor(0.5, device=DEVICE),
                  v_scale=torch.tensor(3.0, device=DEVICE))
    else:
        kw["v_scale"] = kw["v_scale"] * 4
    out = generated.sparse_attn_prefill(*args, max_q, 2, 0.125, _poisoned(q, torch.float32), **kw)
    check(out, ref_sparse_attn(q, kv, ids, table, pos, 2, 0.125, **kw))


def _strided(t, step=2, extra=3):
    """``t``'s values in a view whose every stride is ``step`` times its contiguous one, a few
    elements into a larger buffer (the same dtype and shape, another layout)."""
    big = torch.zeros(t.numel() * step + extra + 8, dtype=t.dtype, device=t.device)
    view = big[extra:extra + t.numel() * step].view(*t.shape, step)[..., 0]
    view.copy_(t)
    return view


PREFILL_WAYS = [dict(splits=2, num_warps=4, num_stages=2),
                dict(splits=2, merge_kernel=True, num_warps=4, num_stages=2),
                dict(variant="sparse_attn_tiled", lanes=16, num_warps=4, num_stages=2)]


@pytest.mark.parametrize("launch", range(len(PREFILL_WAYS)))
def test_strided_prefill_arguments_equal_the_contiguous_call(launch):
    """Every host-side stride reaches the kernels (§13.1): a block table whose rows are wider
    than it, cu_seqlens_q / prefix_lens / seq_lens of stride 2, per-token scales whose KV-head
    stride is not pages · 128, a [pages, Hkv, 128, 2·D] cache whose d stride is 2 and a strided
    output give the contiguous call's bits, in the split kernel (merged by the last split or
    by the merge kernel) and the query-tiled one."""
    args, max_q, _ = _small_prefill(63, Hkv=2, kv_dtype=FP8["e4m3"])
    q, kv, ids, table, cu, lens, pre = args
    hnd = torch.cat([kv[:, 0], kv[:, 1]], dim=-1).permute(0, 2, 1, 3).contiguous()
    scales = scale_args(dict(num_kv_heads=2, kv=kv), "per_token", 63)
    way = PREFILL_WAYS[launch]
    want = sa.sparse_attn_with_launch(way, "prefill", q, hnd, ids, table, cu, lens, pre, max_q,
                                      2, 0.125, _poisoned(q, torch.float32), **scales)
    wide = torch.full((table.shape[0], table.shape[1] + 3), -1, dtype=torch.int32,
                      device=DEVICE)
    wide[:, :table.shape[1]] = table
    slots = scales["k_scale"].shape[1]
    heads = {n: torch.zeros((2, slots + 5), device=DEVICE) for n in scales}
    for n in scales:
        heads[n][:, :slots] = scales[n]
    out = _strided(_poisoned(q, torch.float32))
    got = sa.sparse_attn_with_launch(
        way, "prefill", q, _strided(hnd), ids, wide[:, :table.shape[1]], _strided(cu),
        _strided(lens), _strided(pre), max_q, 2, 0.125, out,
        **{n: heads[n][:, :slots] for n in scales})
    assert torch.equal(got, want)


def test_strided_output_of_the_merge_kernel_and_a_strided_decode_table():
    """Decode rows merged by the merge kernel into an output of non-contiguous strides, read
    through a block table whose rows are wider than it: the contiguous call's bits."""
    case, _ = decode_case([600, 300], Q=2, Hkv=2, G=4, topk=8, seed=64)
    way = dict(splits=4, merge_kernel=True, num_warps=4, num_stages=2)
    want = sa.sparse_attn_with_launch(way, "decode", **case,
                                      output=_poisoned(case["q"], torch.float32))
    table = case["block_table"]
    W = table.shape[1]
    wide = torch.full((table.shape[0], W + 3), -1, dtype=torch.int32, device=DEVICE)
    wide[:, :W] = table
    out = _strided(_poisoned(case["q"], torch.float32))
    got = sa.sparse_attn_with_launch(way, "decode", **dict(case, block_table=wide[:, :W]),
                                     output=out)
    assert torch.equal(got, want)


def test_arrival_counters_cover_every_program_of_a_launch(monkeypatch):
    """A launch of several splits has one arrival counter per (row, KV head, head share): the
    device's buffer grows to hold them all (head shares included) before the launch, and the
    rows match float64."""
    monkeypatch.setattr(sk, "_COUNTERS", {})
    monkeypatch.setattr(sk, "_RETIRED", [])
    monkeypatch.setattr(sk, "MIN_COUNTER_SLOTS", 1)
    case, pos = decode_case([600, 300, 200], Q=1, Hkv=2, G=4, topk=8, seed=65)
    ref = ref_sparse_attn(case["q"], case["kv"], case["topk_idx"], case["block_table"], pos, 2,
                          case["sm_scale"])
    for rows, head_split in ((1, 1), (2, 1), (3, 1), (3, 2)):  # 2, 4, 6 and 12 counters
        part = dict(case, q=case["q"][:rows], topk_idx=case["topk_idx"][:, :rows],
                    block_table=case["block_table"][:rows], seq_lens=case["seq_lens"][:rows])
        got = sa.sparse_attn_with_launch(
            dict(splits=4, head_split=head_split, num_warps=4, num_stages=2), "decode", **part,
            output=_poisoned(part["q"], torch.float32))
        check(got, ref[:rows])
        counters = sk._COUNTERS[case["q"].device]
        assert counters.numel() >= rows * 2 * head_split and not counters.any()


def test_a_merge_kernel_launch_of_one_split_writes_the_rows_itself():
    """merge_kernel with one split (asked for, or splits clamped to the list's one tile)
    launches no merge: the one-split bits."""
    case, _ = decode_case([300, 140], Q=1, Hkv=1, G=4, topk=1, seed=66)
    one = sa.sparse_attn_with_launch(dict(splits=1, num_warps=4, num_stages=2), "decode",
                                     **case, output=_poisoned(case["q"], torch.float32))
    for splits in (1, 4):
        got = sa.sparse_attn_with_launch(
            dict(splits=splits, merge_kernel=True, num_warps=4, num_stages=2), "decode",
            **case, output=_poisoned(case["q"], torch.float32))
        assert torch.equal(got, one), splits


def test_shared_partials_serve_up_to_their_size_exactly(monkeypatch):
    """shared_partials: a launch of up to SHARED_PARTIALS floats gets the device's buffer (of
    that size), a larger one None (it allocates its own)."""
    monkeypatch.setattr(sk, "_PARTIALS", {})
    monkeypatch.setattr(sk, "SHARED_PARTIALS", 64)
    device = torch.empty(0, device=DEVICE).device
    assert sk.shared_partials(device, 65) is None and sk._PARTIALS == {}
    buf = sk.shared_partials(device, 64)
    assert buf is not None and buf.numel() == 64 and buf.dtype == torch.float32
    assert sk.shared_partials(device, 1) is buf and sk.shared_partials(device, 65) is None


def test_explain_refusals_name_its_own_arguments():
    """§13.9: explain_sparse_attn names its own argument: kv_dtype for a 16-bit cache of the
    other 16-bit type, where the entries name kv."""
    for mode in ("decode", "prefill"):
        for q_dtype, kv_dtype in (("bf16", "fp16"), ("fp16", "bf16")):
            with pytest.raises(ValueError, match="^kv_dtype: "):
                sa.explain_sparse_attn(mode, "generic", q_dtype, kv_dtype, "none", 4, 64, 1)


@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value encountered")
def test_sm_scale_at_fp32s_largest_value_is_served():
    """sm_scale may be any finite value within fp32's range (§15), its largest included: the
    call is served (its scores overflow, which is the caller's business), and a row whose
    products are all zero scores 0 (no inf · 0), the plain average of its visible V rows, as
    the reference gives."""
    case, pos = decode_case([200, 10], Q=1, Hkv=1, G=4, seed=68)
    q = case["q"].clone()
    q[1] = 0.0  # row 1: every product 0
    big = float(torch.finfo(torch.float32).max)
    for scale in (big, -big):
        got = generated.sparse_attn_decode(**dict(case, q=q, sm_scale=scale), output=_poisoned(q))
        want = ref_sparse_attn(q, case["kv"], case["topk_idx"], case["block_table"], pos, 1,
                               scale)
        check(got[1:], want[1:])


@pytest.mark.parametrize("kv_dtype", [FP8["e4m3"], FP8["e5m2"]])
def test_a_bf16_q_past_fp16s_range_keeps_a_large_scores_scale_over_an_fp8_cache(kv_dtype):
    """A bf16 q over an fp8 cache is scaled per lane into fp16's range (down, for a lane whose
    largest element is 2^15 or more); an accepted scale near fp32's largest then must not
    overflow with the inverse power of two where the scores do not: here every key is 0 at
    the lanes' large element, so the scores are q·k times 1 (sm_scale 1e38 times k_scale
    1e-38: folded into the lanes' factors), or exactly 0 (no scales, sm_scale 1e37: the
    lanes' factors overflow folded, and the exponent takes the scale). Every kernel gives
    the float64 reference."""
    case, pos = decode_case([200, 10], Q=1, Hkv=1, G=4, seed=68, kv_dtype=kv_dtype)
    kv = case["kv"].float()
    kv[:, 0, :, :, 0] = 0.0  # K's element 0, in every slot
    kv = kv.to(kv_dtype)
    scaled = case["q"].float()
    scaled[:, :, 0] = 2.0 ** 16
    zero_products = torch.zeros_like(case["q"])
    zero_products[:, :, 0] = 2.0 ** 20
    launches = (None, dict(splits=1, num_warps=4, num_stages=2),
                dict(splits=4, num_warps=4, num_stages=2),
                dict(variant="sparse_attn_tiled", lanes=16, sorted_union=True, num_warps=4,
                     num_stages=2))
    for q, sm_scale, scales in ((scaled.bfloat16(), 1e38, (torch.tensor(1e-38),
                                                            torch.tensor(1.0))),
                                (zero_products, 1e37, (None, None))):
        args = dict(case, q=q, kv=kv, sm_scale=sm_scale, k_scale=scales[0], v_scale=scales[1])
        want = ref_sparse_attn(q, kv, case["topk_idx"], case["block_table"], pos, 1, sm_scale,
                               *scales)
        assert bool(torch.isfinite(want).all())
        for launch in launches:
            out = _poisoned(q, torch.float32)
            got = (generated.sparse_attn_decode(**args, output=out) if launch is None else
                   sa.sparse_attn_with_launch(launch, "decode", **args, output=out))
            check(got, want)


@pytest.mark.parametrize("kv_dtype", [FP8["e4m3"], FP8["e5m2"]])
@pytest.mark.parametrize("sm_scale", [1e37, -1e37])
def test_a_scale_that_overflows_folded_into_a_bf16_qs_lanes_scales_the_exponent(kv_dtype,
                                                                                sm_scale):
    """Where sm_scale times a lane's power of two (a bf16 q past fp16's range over an fp8
    cache) overflows, the kernels keep the powers of two as the lanes' factors and scale the
    exponent instead: scores of about ±1e37 (q·k of a few units; the lane's 2^20 meets keys
    that are 0 there) give the float64 result, the key of the largest score (the smallest q·k
    with a negative scale), through the splits' merge too."""
    case, pos = decode_case([200, 10], Q=1, Hkv=1, G=4, seed=69, kv_dtype=kv_dtype)
    kv = case["kv"].float()
    kv[:, 0, :, :, 0] = 0.0  # K's element 0, in every slot
    kv = kv.to(kv_dtype)
    q = (case["q"].float() * 0.1).bfloat16()
    q[:, :, 0] = 2.0 ** 20
    args = dict(case, q=q, kv=kv, sm_scale=sm_scale)
    want = ref_sparse_attn(q, kv, case["topk_idx"], case["block_table"], pos, 1, sm_scale)
    assert bool(torch.isfinite(want).all())
    for launch in (None, dict(splits=1, num_warps=4, num_stages=2),
                   dict(splits=4, num_warps=4, num_stages=2),
                   dict(variant="sparse_attn_tiled", lanes=16, sorted_union=True, splits=2,
                        num_warps=4, num_stages=2)):
        out = _poisoned(q, torch.float32)
        got = (generated.sparse_attn_decode(**args, output=out) if launch is None else
               sa.sparse_attn_with_launch(launch, "decode", **args, output=out))
        check(got, want)


def test_attention_with_launch_checks_pdl_as_the_entry_does():
    """sparse_attn_with_launch(..., pdl=) raises what sparse_attn_decode raises: a TypeError
    naming pdl for anything but a bool; pdl=False gives the same bits."""
    case, _ = decode_case([300, 90], Q=1, Hkv=1, G=4, seed=69)
    launch = dict(splits=2, num_warps=4, num_stages=2)
    want = sa.sparse_attn_with_launch(launch, "decode", **case, output=_poisoned(case["q"]))
    got = sa.sparse_attn_with_launch(launch, "decode", **case, output=_poisoned(case["q"]),
                                     pdl=False)
    assert torch.equal(got, want)
    for bad in (1, None, "yes"):
        with pytest.raises(TypeError, match="^pdl: "):
            sa.sparse_attn_with_launch(launch, "decode", **case, output=_poisoned(case["q"]),
                                       pdl=bad)


def test_tma_layout_refuses_zero_strides():
    """A cache whose pages or KV heads share memory (stride 0: an expanded view) is not one
    the accelerator addresses (kv_tma_layout None: read by pointers)."""
    one = torch.zeros((1, 2, BLOCK, 1, 64), dtype=torch.bfloat16)
    assert sk.kv_tma_layout(one.expand(3, 2, BLOCK, 1, 64), 1, 64, 64) is None
    assert sk.kv_tma_layout(one.expand(1, 2, BLOCK, 2, 64), 2, 64, 64) is None
    assert sk.kv_tma_layout(one.expand(3, 2, BLOCK, 1, 64).contiguous(), 1, 64, 64) is not None


def test_launch_grids_are_the_documented_ones(monkeypatch):
    """§15 grids: the split kernel (T · Hkv · head_split, splits) with splits at most the tiles
    of the list's power of two (next_pow2(topk) · 128 / kv_tile) and head_split at most G, the
    merge kernel (T, Hq), the query-tiled kernel (cdiv(T, lanes / G), Hkv), with splits of its
    sorted union (cdiv(T, lanes / G), Hkv, splits) then the merge kernel; by minima one."""
    from generated import _runtime
    grids, real = [], _runtime.KernelLaunch

    def spy(kernel, grid, *args, **kwargs):
        grids.append((kernel, tuple(grid)))
        return real(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(_runtime, "KernelLaunch", spy)
    case, _ = decode_case([300, 140], Q=1, Hkv=2, G=2, topk=3, seed=70)  # T 2, Hq 4
    for way, want in ((dict(splits=2), (4, 2)), (dict(splits=4), (4, 4)),
                      (dict(splits=8), (4, 4)), (dict(splits=8, kv_tile=64), (4, 8)),
                      (dict(splits=32, kv_tile=32), (4, 16)),
                      (dict(splits=2, head_split=2), (8, 2)),
                      (dict(splits=2, head_split=4), (8, 2))):
        grids.clear()
        sa.sparse_attn_with_launch(dict(way, num_warps=4, num_stages=2), "decode", **case,
                                   output=_poisoned(case["q"]))
        assert grids == [(sk._sparse_attn_kernel, want)], (way, grids)
    grids.clear()
    sa.sparse_attn_with_launch(dict(splits=4, merge_kernel=True, num_warps=4, num_stages=2),
                               "decode", **case, output=_poisoned(case["q"]))
    assert grids == [(sk._sparse_attn_kernel, (4, 4)), (sk._sparse_attn_merge_kernel, (2, 4))]
    args, max_q, _ = _small_prefill(70, Hkv=2)  # T 6, G 4: 4 rows a tile of 16 lanes
    for lanes, want in ((16, (2, 2)), (32, (1, 2))):
        grids.clear()
        sa.sparse_attn_with_launch(dict(variant="sparse_attn_tiled", lanes=lanes, num_warps=4,
                                        num_stages=2), "prefill", *args, max_q, 2, 0.125,
                                   _poisoned(args[0]))
        assert grids == [(sk._sparse_attn_tiled_kernel, want)], (lanes, grids)
    for sorted_union, want in ((True, [(sk._sparse_attn_tiled_kernel, (2, 2, 4)),
                                       (sk._sparse_attn_merge_kernel, (6, 8))]),
                               (False, [(sk._sparse_attn_tiled_kernel, (2, 2))])):
        grids.clear()
        sa.sparse_attn_with_launch(dict(variant="sparse_attn_tiled", lanes=16, splits=4,
                                        sorted_union=sorted_union, num_warps=4, num_stages=2),
                                   "prefill", *args, max_q, 2, 0.125, _poisoned(args[0]))
        assert grids == want, (sorted_union, grids)


def test_v_pairs_need_an_even_page_stride_alone_too():
    """An odd page stride alone (token, K-to-V and KV-head strides even, base aligned) keeps
    an fp8 cache's V from being read as 16-bit pairs, and the call gives the contiguous
    cache's bits."""
    case, _ = decode_case([300, 140], Q=1, Hkv=2, G=4, kv_dtype=FP8["e4m3"], seed=71)
    kv = case["kv"]
    padded = torch.zeros((kv.shape[0], kv[0].numel() + 1), dtype=kv.dtype, device=DEVICE)
    odd = padded[:, :kv[0].numel()].view(kv.shape)
    odd.copy_(kv)
    assert odd.stride(0) % 2 == 1 and odd.data_ptr() % 16 == 0
    assert sk.v_pairs(case["q"], kv, 64) and not sk.v_pairs(case["q"], odd, 64)
    want = generated.sparse_attn_decode(**case, output=_poisoned(case["q"], torch.float32))
    got = generated.sparse_attn_decode(**dict(case, kv=odd),
                                       output=_poisoned(case["q"], torch.float32))
    assert torch.equal(got, want)


def test_each_way_of_asking_for_pdl_reaches_the_launch(monkeypatch):
    """On a device with programmatic launches (faked; the launches recorded, not run) the
    decode attention is a programmatic dependent ("any"), the step's reads the ids only after
    its wait ("ids"), and pdl=False / attention_pdl=False launch plainly ("none"), through the
    entry, sparse_attn_with_launch and the step's plan alike; prefill launches plainly."""
    from generated import _runtime
    asked = []

    def spy(*args, pdl="none", **kwargs):
        asked.append(pdl)
        return lambda *a: None

    monkeypatch.setattr(_runtime, "programmatic_launch", lambda device: True)
    monkeypatch.setattr(sa, "prepare_sparse_attn", spy)
    _runtime.clear_plans()
    case, _ = decode_case([300, 140], Q=1, Hkv=1, G=4, seed=72)
    launch = dict(splits=2, num_warps=4, num_stages=2)
    for pdl in (True, False):
        generated.sparse_attn_decode(**case, output=_poisoned(case["q"]), pdl=pdl)
        sa.sparse_attn_with_launch(launch, "decode", **case, output=_poisoned(case["q"]),
                                   pdl=pdl)
    args, max_q, _ = _small_prefill(72)
    sa.sparse_attn_with_launch(launch, "prefill", *args, max_q, 1, 0.125, _poisoned(args[0]))
    step = _step_args(72)
    for attention_pdl in (True, False):
        sa._StepPlan(*step, None, None, None, None, None, attention_pdl=attention_pdl)
    assert asked == ["any", "any", "none", "none", "none", "ids", "none"]


def test_a_register_cap_reaches_the_split_kernel_only(monkeypatch):
    """max_registers: on NVIDIA (faked; the launches recorded, not run) the split kernel's
    launch asks the compiler for that cap (maxnreg), the merge kernel's does not, None (the
    tables' launches but where the tuner chose a cap) asks for none; elsewhere (the
    interpreter) no backend takes the option; either way the capped launch gives the uncapped
    one's bits; out of 64..255 (ptxas refuses the kernel below ~28) is a ValueError naming the key;
    a table row's cap and an explicit launch's reach the launcher from every entry."""
    from generated import _runtime
    options, real = [], _runtime.KernelLaunch

    def spy(kernel, grid, opts, *args, **kwargs):
        options.append((kernel, opts.get("maxnreg")))
        return real(kernel, grid, opts, *args, **kwargs)

    monkeypatch.setattr(_runtime, "KernelLaunch", spy)
    case, pos = decode_case([300, 140], Q=2, Hkv=2, G=4, topk=3, seed=73)

    def run(cap, merge):
        options.clear()
        return sa.sparse_attn_with_launch(
            dict(splits=2, merge_kernel=merge, max_registers=cap, num_warps=4, num_stages=2),
            "decode", **case, output=_poisoned(case["q"]))

    # this test's small shapes also run on a GPU (gpu_check.sh memcheck), where it is real
    asked_cap = 128 if _runtime.nvidia_ptx(case["q"].device) else None
    for merge in (False, True):
        plain = run(None, merge)
        capped = run(128, merge)
        assert [o for _, o in options] == [asked_cap] + [None] * merge
        assert torch.equal(capped, plain)
    check(capped, ref_sparse_attn(case["q"], case["kv"], case["topk_idx"],
                                  case["block_table"], pos, 2, case["sm_scale"]))
    with monkeypatch.context() as m:
        m.setattr(_runtime, "nvidia_ptx", lambda device: True)
        m.setattr(_runtime, "programmatic_launch", lambda device: False)
        for cap in (None, 64, 128, 168):
            for merge in (False, True):
                options.clear()
                sk.prepare_sparse_attn(
                    case["q"], case["kv"], case["topk_idx"], case["block_table"],
                    case["seq_lens"], _poisoned(case["q"]), mode="decode", num_kv_heads=2,
                    sm_scale=case["sm_scale"], scales="none", k_scale=None, v_scale=None,
                    splits=2, num_warps=4, num_stages=2, decode_query_len=2,
                    merge_kernel=merge, max_registers=cap)
                assert options == [(sk._sparse_attn_kernel, cap)] + (
                    [(sk._sparse_attn_merge_kernel, None)] if merge else []), (cap, merge)
    # a table row's cap and an explicit launch's reach the launcher from each entry: decode,
    # prefill's split rows and the decode step (fresh plan caches)
    from types import SimpleNamespace

    asked, prepare, row = [], sa.prepare_sparse_attn, sa._row

    def recorded(*args, max_registers=None, **kwargs):
        asked.append(max_registers)
        return prepare(*args, max_registers=max_registers, **kwargs)

    def capped(mode, hw, key):
        got = row(mode, hw, key)
        params = dict(got.params, max_registers=96) if got.variant == sa.SPLIT else got.params
        return SimpleNamespace(variant=got.variant, where=got.where, index=got.index,
                               params=params)

    monkeypatch.setattr(sa, "prepare_sparse_attn", recorded)
    monkeypatch.setattr(sa, "_row", capped)
    monkeypatch.setattr(sa, "_PLANS", _runtime.PlanCache())
    monkeypatch.setattr(sa, "_STEP_PLANS", _runtime.PlanCache())
    generated.sparse_attn_decode(**case, output=_poisoned(case["q"]))
    args, max_q, _ = _small_prefill(73)
    generated.sparse_attn_prefill(*args, max_q, 1, 0.125, _poisoned(args[0]))
    generated.sparse_decode_step(*_step_args(73))
    sa.sparse_decode_step_with_launch(dict(splits=2, max_registers=112, num_warps=4,
                                           num_stages=2), *_step_args(73))
    assert asked == [96, 96, 96, 112]
    for bad in (-1, 0, 63, 256):
        with pytest.raises(ValueError, match="launch: max_registers"):
            sa.sparse_attn_with_launch(dict(splits=2, max_registers=bad, num_warps=4,
                                            num_stages=2), "decode", **case,
                                       output=_poisoned(case["q"]))


@pytest.mark.gpu
def test_gpu_register_capped_launches_fit_the_cap_and_give_the_same_bits(monkeypatch):
    """At MiniMax-M3 sizes on the GPU (D 128, G 16, 32k contexts) a launch under a register cap
    compiles to at most that many registers per thread and gives the uncapped launch's bits:
    a bf16 cache at 168, an fp8 cache at 128 (the cap the tuner tries) and with per-token
    scales at 168, pointer and tma tiles."""
    from generated import _runtime
    made, real = [], _runtime.KernelLaunch

    def spy(kernel, *args, **kwargs):
        made.append(real(kernel, *args, **kwargs))
        return made[-1]

    monkeypatch.setattr(_runtime, "KernelLaunch", spy)
    for kv_dtype, scales, cap in ((torch.bfloat16, "none", 168),
                                  (torch.float8_e4m3fn, "none", 128),
                                  (torch.float8_e4m3fn, "per_token", 168)):
        case, pos = decode_case([32768 - 13 * r for r in range(8)], Q=1, Hkv=2, G=16,
                                D=128, topk=16, kv_dtype=kv_dtype, seed=74, extra_cols=0)
        case.update(scale_args(case, scales, 74))
        for launch in (dict(splits=1), dict(splits=2, tma=True)):
            got = {}
            for registers in (None, cap):
                made.clear()
                got[registers] = sa.sparse_attn_with_launch(
                    dict(launch, max_registers=registers, num_warps=4, num_stages=2),
                    "decode", **case, output=_poisoned(case["q"]))
                torch.cuda.synchronize()
                n_regs = made[0].compiled.n_regs
                assert registers is None or n_regs <= cap, (kv_dtype, scales, launch, n_regs)
            assert torch.equal(got[cap], got[None]), (kv_dtype, scales, launch)
        check(got[cap], ref_sparse_attn(case["q"], case["kv"], case["topk_idx"],
                                        case["block_table"], pos, 2, case["sm_scale"],
                                        case.get("k_scale"), case.get("v_scale")))


def _nested(t):
    """``t`` as a nested tensor of its first dimension's slices (strided layout, no shape)."""
    return torch.nested.nested_tensor(list(t.unbind(0)))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_nested_tensors_are_refused_by_name():
    """A nested tensor reports the strided layout but has no one shape: refused naming the
    argument in both attention entries and the step, also after a plan exists for the dense
    tensors of its shape."""
    case, _ = decode_case([300, 140], Q=1, Hkv=1, G=4, seed=48)
    out = torch.zeros_like(case["q"])
    generated.sparse_attn_decode(**case, output=out)
    for name in ("q", "kv", "topk_idx", "block_table", "seq_lens", "output"):
        args = dict(case, output=out)
        args[name] = _nested(args[name])
        with pytest.raises(ValueError, match=f"^{name}: must be a dense tensor"):
            generated.sparse_attn_decode(**args)
    cu = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
    prefill = [case["q"], case["kv"], case["topk_idx"], case["block_table"], cu,
               case["seq_lens"], case["seq_lens"] - 1, 1, 1, 0.125, out]
    generated.sparse_attn_prefill(*prefill)
    for i, name in ((0, "q"), (4, "cu_seqlens_q"), (6, "prefix_lens")):
        bad = list(prefill)
        bad[i] = _nested(prefill[i])
        with pytest.raises(ValueError, match=f"^{name}: must be a dense tensor"):
            generated.sparse_attn_prefill(*bad)
    args, _, _ = _small_step_args(49)
    generated.sparse_decode_step(*args)
    for i, name in ((0, "idx_q"), (1, "index_kv_cache"), (3, "q"), (15, "output")):
        bad = list(args)
        bad[i] = _nested(args[i])
        with pytest.raises(ValueError, match=f"^{name}: must be a dense tensor"):
            generated.sparse_decode_step(*bad)
