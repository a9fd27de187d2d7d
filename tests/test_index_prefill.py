"""Prefill indexer (docs/KERNELS.md §7) against an independent float64 reference: scores within
1e-6 · Σ|q·k|, ids by the §4.1 order (exactly, from the kernel's own fp32 scores; against
float64 where the k-th / (k+1)-th gap exceeds 1e-5), the streaming path equal to the two-call
path, every KV split bitwise equal, forcing, ties, strided inputs and outputs, T = 0, garbage
lengths, and rejections naming the argument. CPU interpreter on small shapes; the GPU at full
sizes (marked gpu).
"""
from __future__ import annotations

import pytest
import torch

import generated
from decode_inputs import DEVICE
from generated import prefill_indexer as pi
from reference_prefill import kth_gap, ref_prefill_scores, ref_prefill_topk
from reference_topk import cdiv

FP8 = torch.float8_e4m3fn
TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": FP8}
SCORE_REL = 1e-6
GAP_REL = 1e-5
TWO = {"variant": "index_prefill", "score": None, "topk": None}


def stream(block_m, topk_tile=16, num_warps=4, num_stages=2):
    return {"variant": "index_prefill_stream", "block_m": block_m, "topk_tile": topk_tile,
            "num_warps": num_warps, "num_stages": num_stages}


def make_inputs(prefix, qlen, H=1, D=16, q="bf16", cache="bf16", seed=0, device=DEVICE,
                extra=0):
    """index_prefill keyword inputs: requests with these prefix and query lengths, pages
    scattered; ``extra`` spare tokens of capacity (max_seq_len) beyond the longest request."""
    g = torch.Generator().manual_seed(seed)
    R = len(prefix)
    seq = [p + n for p, n in zip(prefix, qlen)]
    max_seq_len = max(seq) + extra
    mb = cdiv(max_seq_len, 128)
    pages = R * mb + 3
    cu = [0]
    for n in qlen:
        cu.append(cu[-1] + n)
    return dict(
        idx_q=(torch.randn((cu[-1], H, D), generator=g)).to(TYPES[q]).to(device),
        index_kv_cache=(torch.randn((pages, 128, D), generator=g) * 2).to(TYPES[cache])
        .to(device),
        block_table=torch.randperm(pages, generator=g)[:R * mb].view(R, mb).to(torch.int32)
        .to(device),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq, dtype=torch.int32, device=device),
        prefix_lens=torch.tensor(prefix, dtype=torch.int32, device=device),
        max_query_len=max(qlen), max_seq_len=max_seq_len, num_kv_heads=H)


def score_args(inp):
    return {k: inp[k] for k in ("idx_q", "index_kv_cache", "block_table", "cu_seqlens_q",
                                "seq_lens", "prefix_lens")}


def check_scores(inp, score):
    ref = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"])
    scale = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"],
                               absolute=True)
    known = ~torch.isnan(ref)
    got = score[:, :, :ref.shape[2]].double()
    err = (got - ref).abs()[known]
    assert known.any()
    assert bool((err <= SCORE_REL * scale[known] + 1e-30).all()), float(err.max())
    return ref


def sel(inp):
    return dict(cu_seqlens_q=inp["cu_seqlens_q"], prefix_lens=inp["prefix_lens"],
                max_query_len=inp["max_query_len"])


# ---- scores ----------------------------------------------------------------------------------

@pytest.mark.parametrize("prefix,qlen,H", [
    ([0], [70], 1),                    # one chunk crossing query tiles, no prefix
    ([127, 128, 129], [3, 20, 40], 2),  # prefixes at and around a block edge
    ([250, 0], [9, 130], 4),           # a chunk crossing a block edge; H 4
])
def test_scores_match_float64(prefix, qlen, H):
    inp = make_inputs(prefix, qlen, H=H, seed=len(qlen) + H)
    check_scores(inp, generated.index_prefill_score(**inp))


@pytest.mark.parametrize("q,cache", [("fp16", "fp16"), ("fp32", "fp32"), ("bf16", "fp8"),
                                     ("fp8", "fp8")])
def test_scores_every_dtype_pair(q, cache):
    inp = make_inputs([100, 0], [40, 20], H=2, q=q, cache=cache, seed=7)
    check_scores(inp, generated.index_prefill_score(**inp))


def test_kv_splits_and_tiles_give_bitwise_equal_scores():
    inp = make_inputs([300, 5], [60, 33], H=1, extra=200, seed=3)
    scores = []
    for block_m, splits in ((16, 1), (16, 4), (32, 2), (64, 8)):
        launch = dict(block_m=block_m, kv_splits=splits, num_warps=4, num_stages=2)
        shape, run = pi._plan_scores(**inp, hardware=None, launch=launch)
        s = torch.full(shape, float("nan"), device=DEVICE)
        run(*score_args(inp).values(), s)
        scores.append(s)
    ref = check_scores(inp, scores[0])
    known = ~torch.isnan(ref)
    for s in scores[1:]:
        assert torch.equal(s[:, :, :ref.shape[2]][known], scores[0][:, :, :ref.shape[2]][known])


# ---- selection -------------------------------------------------------------------------------

@pytest.mark.parametrize("topk,init,local", [(4, 0, 1), (3, 2, 2), (8, 5, 0), (1, 0, 0)])
def test_topk_matches_reference_from_the_same_scores(topk, init, local):
    inp = make_inputs([0, 300, 129], [40, 10, 20], H=2, extra=130, seed=topk)
    score = generated.index_prefill_score(**inp)
    ids = generated.index_prefill_topk(score, **sel(inp), topk=topk, init_blocks=init,
                                       local_blocks=local)
    ref = ref_prefill_topk(score, inp["cu_seqlens_q"], inp["prefix_lens"], topk, init, local)
    assert torch.equal(ids.cpu(), ref)


def test_topk_ties_nan_and_strided_out():
    """Equal scores rank by block id, NaN as -1e30, -0.0 as +0.0; ``out`` is the transpose of
    a token-major [T, H, topk] buffer, as vLLM passes it."""
    H, T, S = 2, 12, 32
    cu = torch.tensor([0, 5, 12], dtype=torch.int32, device=DEVICE)
    prefix = torch.tensor([2000, 900], dtype=torch.int32, device=DEVICE)
    g = torch.Generator().manual_seed(1)
    score = torch.randint(-2, 3, (H, T, S), generator=g).float()
    score[0, 0, 3] = float("nan")
    score[1, 2, :] = -0.0
    score[0, 4, 5:9] = float("nan")
    score = score.to(DEVICE)
    buf = torch.full((T, H, 6), -7, dtype=torch.int32, device=DEVICE)
    out = buf.transpose(0, 1)
    got = generated.index_prefill_topk(score, cu, prefix, 7, 6, 1, 2, out=out)
    assert got.data_ptr() == out.data_ptr()
    ref = ref_prefill_topk(score, cu, prefix, 6, 1, 2)
    assert torch.equal(out.cpu(), ref)


def _strided(t):
    """The same values in a non-contiguous view: every other element of each dimension of a
    larger buffer, at a nonzero storage offset."""
    big = torch.zeros([2 * n + 1 for n in t.shape], dtype=t.dtype, device=t.device)
    view = big[tuple(slice(1, 1 + 2 * n, 2) for n in t.shape)]
    view.copy_(t)
    assert not view.is_contiguous() and view.storage_offset() > 0
    return view


def test_strided_inputs_and_outputs_equal_the_contiguous_call():
    """Every tensor argument as a padded, offset view (the cache with its D axis strided too)
    gives the ids and scores of the contiguous call, on both one-call paths."""
    inp = make_inputs([130, 0], [20, 37], H=2, seed=4)
    want_scores = generated.index_prefill_score(**inp)
    want = {}
    for name, launch in (("two", TWO), ("stream", stream(16))):
        want[name] = pi.index_prefill_with_launch(launch, **inp, topk=4, init_blocks=1,
                                                  local_blocks=1)
    strided = dict(inp)
    for k in ("idx_q", "index_kv_cache", "cu_seqlens_q", "seq_lens", "prefix_lens"):
        strided[k] = _strided(inp[k])
    table = torch.zeros((inp["block_table"].shape[0] + 2, inp["block_table"].shape[1] + 5),
                        dtype=torch.int32, device=DEVICE)
    table[1:-1, :inp["block_table"].shape[1]] = inp["block_table"]
    strided["block_table"] = table[1:-1]  # rows of a wider table (unit column stride)
    got_scores = generated.index_prefill_score(**strided)
    known = ~torch.isnan(ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"]))
    mb = known.shape[2]
    assert torch.equal(got_scores[:, :, :mb][known], want_scores[:, :, :mb][known])
    T = inp["idx_q"].shape[0]
    for name, launch in (("two", TWO), ("stream", stream(16))):
        out = torch.full((T + 3, 2, 6), -7, dtype=torch.int32, device=DEVICE)[1:-2, :, 1:5]
        out = out.transpose(0, 1)  # [H, T, topk], token-major underneath, offset
        pi.index_prefill_with_launch(launch, **strided, topk=4, init_blocks=1, local_blocks=1,
                                     out=out)
        assert torch.equal(out, want[name]), name
    ids = generated.index_prefill_topk(_strided(want_scores), _strided(inp["cu_seqlens_q"]),
                                       _strided(inp["prefix_lens"]), inp["max_query_len"], 4, 1,
                                       1)
    assert torch.equal(ids, want["two"])


def test_rows_outside_every_request_are_left_alone():
    inp = make_inputs([0], [20], seed=2)
    # cu[1] = 14 < T = 20, and max_query_len 10 cuts the request further
    inp["cu_seqlens_q"] = torch.tensor([0, 14], dtype=torch.int32, device=DEVICE)
    out = torch.full((1, 20, 4), -7, dtype=torch.int32, device=DEVICE)
    for launch in (TWO, stream(16)):
        out.fill_(-7)
        pi.index_prefill_with_launch(launch, **{**inp, "max_query_len": 10}, topk=4,
                                     init_blocks=0, local_blocks=1, out=out)
        assert bool((out[:, 10:] == -7).all()) and bool((out[:, :10] >= -1).all())


# ---- one call --------------------------------------------------------------------------------

@pytest.mark.parametrize("q,cache,H", [("bf16", "bf16", 1), ("bf16", "fp8", 2),
                                       ("fp32", "fp32", 4)])
def test_stream_equals_two_kernels_and_float64(q, cache, H):
    inp = make_inputs([0, 257, 128], [50, 17, 30], H=H, q=q, cache=cache, extra=100, seed=11)
    topk, init, local = 4, 1, 1
    two = pi.index_prefill_with_launch(TWO, **inp, topk=topk, init_blocks=init,
                                       local_blocks=local)
    for block_m in sorted({16 // H if H < 16 else 1, 32 // H, 64 // H}):
        if block_m * H < 16:
            continue
        got = pi.index_prefill_with_launch(stream(block_m), **inp, topk=topk, init_blocks=init,
                                           local_blocks=local)
        assert torch.equal(got, two), block_m
    assert torch.equal(generated.index_prefill(**inp, topk=topk, init_blocks=init,
                                               local_blocks=local), two)
    ref = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"])
    ref_ids = ref_prefill_topk(ref.float(), inp["cu_seqlens_q"], inp["prefix_lens"], topk,
                               init, local)
    T = inp["idx_q"].shape[0]
    cu = inp["cu_seqlens_q"].tolist()
    for r in range(len(cu) - 1):
        for row in range(cu[r], cu[r + 1]):
            nb = (inp["prefix_lens"][r].item() + row - cu[r]) // 128 + 1
            for h in range(H):
                vals = ref[h, row, :nb].float()
                vals[:init] = float("inf")
                vals[max(nb - local, 0):] = float("inf")
                if kth_gap(vals, nb, topk) > GAP_REL:
                    assert torch.equal(two[h, row].cpu(), ref_ids[h, row]), (h, row)
    assert T == cu[-1]


def test_topk_larger_than_the_streaming_list_takes_two_kernels():
    inp = make_inputs([1000], [8], seed=5)
    info = generated.explain_index_prefill("sm_90", "bf16", "bf16", 16, 1, 8, 8, 100)
    assert info["path"] == "two_kernels"
    ids = generated.index_prefill(**inp, topk=100, init_blocks=0, local_blocks=0,
                                  hardware="sm_90")
    assert ids.shape == (1, 8, 100) and bool((ids[:, :, 8:] == -1).all())


def test_empty_batches_launch_nothing():
    inp = make_inputs([5], [3], seed=0)
    inp["idx_q"] = inp["idx_q"][:0]
    inp["cu_seqlens_q"] = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    assert generated.index_prefill_score(**inp).shape == (1, 0, 16)
    assert generated.index_prefill(**inp, topk=4, init_blocks=0, local_blocks=1).shape == \
        (1, 0, 4)
    assert generated.explain_index_prefill("sm_90", "bf16", "bf16", 16, 1, 0, 1, 4)["path"] \
        is None


def test_capacity_zero_gives_padding_ids():
    inp = make_inputs([0], [4], seed=0)
    inp.update(max_seq_len=0, prefix_lens=torch.zeros(1, dtype=torch.int32, device=DEVICE))
    for launch in (TWO, stream(16)):
        ids = pi.index_prefill_with_launch(launch, **inp, topk=3, init_blocks=1,
                                           local_blocks=1)
        assert bool((ids == -1).all())


def test_garbage_lengths_and_page_ids_stay_in_bounds():
    """Lengths past the capacity, negative prefixes, non-monotone cu and page ids outside the
    cache: nothing is read outside a tensor (the capacity clamps blocks, bad pages score -inf),
    every call returns, and every id written names a block below the capacity."""
    inp = make_inputs([130, 10], [20, 12], seed=9, extra=0)
    inp["prefix_lens"] = torch.tensor([10**6, -50], dtype=torch.int32, device=DEVICE)
    inp["seq_lens"] = torch.tensor([-3, 10**9], dtype=torch.int32, device=DEVICE)
    inp["cu_seqlens_q"] = torch.tensor([0, 25, 7], dtype=torch.int32, device=DEVICE)
    inp["block_table"][0, 0] = 10**6
    inp["block_table"][1, 1] = -4
    mb = cdiv(inp["max_seq_len"], 128)
    out = torch.empty((1, 32, 4), dtype=torch.int32, device=DEVICE)
    for launch in (TWO, stream(16)):
        out.fill_(-7)  # rows a non-monotone cu leaves to no request stay as they are
        pi.index_prefill_with_launch(launch, **inp, topk=4, init_blocks=1, local_blocks=1,
                                     out=out)
        assert bool(((out == -7) | ((out >= -1) & (out < mb))).all())
        assert bool((out[:, :7] >= -1).all())  # rows of request 0 before cu[2] are written


@pytest.mark.parametrize("change,error,match", [
    (dict(idx_q="bad"), TypeError, "idx_q"),
    (dict(num_kv_heads=2), ValueError, "num_kv_heads"),
    (dict(max_query_len=-1), ValueError, "max_query_len"),
    (dict(max_seq_len=10**8), ValueError, "max_seq_len"),
    (dict(max_seq_len=400), ValueError, "block_table"),
    (dict(cu_seqlens_q=torch.zeros(2, dtype=torch.int32)), ValueError, "cu_seqlens_q"),
    (dict(prefix_lens=torch.zeros(2, dtype=torch.int64)), ValueError, "prefix_lens"),
    (dict(seq_lens=torch.zeros(1, dtype=torch.int32)), ValueError, "seq_lens"),
    (dict(index_kv_cache=torch.zeros(4, 64, 16)), ValueError, "index_kv_cache"),
    (dict(topk=0), ValueError, "topk"),
    (dict(topk=513), ValueError, "topk"),
    (dict(local_blocks=-1), ValueError, "local_blocks"),
    (dict(out=torch.zeros(1, 5, 4, dtype=torch.int32)), ValueError, "out"),
])
def test_rejections_name_the_argument(change, error, match):
    inp = make_inputs([0, 100], [20, 10], seed=1)
    kw = dict(inp, topk=4, init_blocks=0, local_blocks=1)
    for k, v in change.items():
        kw[k] = v.to(DEVICE) if isinstance(v, torch.Tensor) else v
    with pytest.raises(error, match=match):
        generated.index_prefill(**kw)


def test_fp8_query_needs_an_fp8_cache():
    inp = make_inputs([0], [20], q="fp8", cache="bf16")
    with pytest.raises(ValueError, match="idx_q"):
        generated.index_prefill_score(**inp)


def test_explain_reports_the_matching_rows():
    info = generated.explain_index_prefill("gfx950", "bf16", "bf16", 128, 4, 8192, 64, 16)
    assert info["path"] == "two_kernels" and info["block_m"] == 16 and info["kv_splits"] == 1
    assert "index_prefill_score row" in info["score_rule"]
    info = generated.explain_index_prefill("sm_90", "bf16", "bf16", 128, 1, 8192, 1024, 16)
    assert info["path"] == "two_kernels" and info["block_m"] == 128 and info["block_k"] == 256
    info = generated.explain_index_prefill("sm_90", "bf16", "bf16", 128, 4, 8192, 64, 16)
    assert info["path"] == "stream" and info["block_m"] == 16 and info["topk_tile"] == 64
    info = generated.explain_index_prefill("sm_90", "fp32", "fp32", 128, 2, 100, 64, 16)
    assert info["path"] == "two_kernels" and info["num_stages"] == 1
    # 3xTF32 at head_dim 256: a 32-lane tile (64 lanes need more shared memory than sm_90 has)
    info = generated.explain_index_prefill("sm_90", "fp32", "fp32", 256, 1, 100, 64, 16)
    assert info["block_m"] == 32


# ---- GPU, full sizes -------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("prefix,qlen,H,q,cache", [
    ([0], [8192], 4, "bf16", "bf16"),
    ([32768] * 4, [2048] * 4, 1, "bf16", "bf16"),
    ([122880], [8192], 1, "bf16", "fp8"),
    ([1024] * 8, [128] * 8, 4, "fp32", "fp32"),
    ([8192] * 16, [512] * 16, 1, "fp8", "fp8"),
])
def test_gpu_full_size(prefix, qlen, H, q, cache):
    inp = make_inputs(prefix, qlen, H=H, D=128, q=q, cache=cache, seed=21)
    topk = 16
    two = pi.index_prefill_with_launch(TWO, **inp, topk=topk, init_blocks=0, local_blocks=1)
    # streaming tiles of 64 and 128 lanes (fp32 products: 64 lanes, unpipelined, as its rows)
    tiles = ((64, 4, 1),) if "fp32" in (q, cache) else ((64, 4, 3), (128, 8, 2))
    for lanes, warps, stages in tiles:
        got = pi.index_prefill_with_launch(stream(lanes // H, num_warps=warps,
                                                  num_stages=stages), **inp, topk=topk,
                                           init_blocks=0, local_blocks=1)
        assert torch.equal(got, two), lanes
    assert torch.equal(generated.index_prefill(**inp, topk=topk, init_blocks=0,
                                               local_blocks=1), two)
    score = generated.index_prefill_score(**inp)
    T = inp["idx_q"].shape[0]
    rows = sorted({0, 1, T - 1, T // 2, 127, 128, 129} | set(range(5, T, max(1, T // 40))))
    rows = [r for r in rows if r < T]
    ref = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"], rows=rows)
    scale = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"], rows=rows,
                               absolute=True)
    known = ~torch.isnan(ref)
    err = (score[:, :, :ref.shape[2]].double() - ref).abs()[known]
    assert bool((err <= SCORE_REL * scale[known] + 1e-30).all())
    ref_ids = ref_prefill_topk(ref.float(), inp["cu_seqlens_q"], inp["prefix_lens"], topk, 0, 1,
                               rows=rows)
    cu = inp["cu_seqlens_q"].tolist()
    for row in rows:
        r = max(i for i in range(len(cu) - 1) if cu[i] <= row)
        nb = (prefix[r] + row - cu[r]) // 128 + 1
        for h in range(H):
            vals = ref[h, row, :nb].float().cpu()
            vals[max(nb - 1, 0):] = float("inf")
            if kth_gap(vals, nb, topk) > GAP_REL:
                assert torch.equal(two[h, row].cpu(), ref_ids[h, row]), (h, row)


def test_a_max_query_len_past_the_tokens_is_the_token_count():
    """No request has more rows than the batch has tokens: a larger max_query_len (2³¹ − 1
    here) gives the same scores and ids as the true one, without a grid that large."""
    inp = make_inputs([130, 10], [5, 3], seed=11)
    want = generated.index_prefill(**inp, topk=4, init_blocks=0, local_blocks=1)
    want_score = generated.index_prefill_score(**inp)
    huge = dict(inp, max_query_len=(1 << 31) - 1)
    assert torch.equal(generated.index_prefill(**huge, topk=4, init_blocks=0, local_blocks=1),
                       want)
    for launch in (TWO, stream(16)):
        assert torch.equal(pi.index_prefill_with_launch(launch, **huge, topk=4, init_blocks=0,
                                                        local_blocks=1), want)
    score = generated.index_prefill_score(**huge)
    known = ~torch.isnan(ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"]))
    width = known.shape[2]  # (the columns §7 leaves unspecified hold anything)
    assert known.any() and torch.equal(score[:, :, :width][known], want_score[:, :, :width][known])
    assert torch.equal(generated.index_prefill_topk(score, inp["cu_seqlens_q"],
                                                    inp["prefix_lens"], (1 << 31) - 1, 4, 0, 1),
                       want)


def test_positions_past_int32_see_the_whole_capacity():
    """prefix_lens[r] + row past 2³¹ − 1 (an inconsistent prefix: int32 seq_lens cannot hold
    such a position) saturates instead of wrapping to a negative, empty row: the rows select
    exactly as with any prefix past the capacity."""
    inp = make_inputs([130, 10], [5, 3], seed=12)
    lens = torch.tensor([(1 << 31) - 1, 13], dtype=torch.int32, device=DEVICE)
    got, want = ({"prefix_lens": torch.tensor([p, 10], dtype=torch.int32, device=DEVICE)}
                 for p in ((1 << 31) - 3, 10 ** 6))
    for launch in (TWO, stream(16)):
        ids = [pi.index_prefill_with_launch(launch, **dict(inp, seq_lens=lens, **d), topk=4,
                                            init_blocks=0, local_blocks=1)
               for d in (got, want)]
        assert torch.equal(ids[0], ids[1]) and bool((ids[0][:, :5] >= 0).any())


@pytest.mark.parametrize("cu", [[0, 4, 2, 2], [0, 4, 2, 4]])
def test_a_decreasing_cu_seqlens_q_takes_each_row_for_one_request_or_none(cu):
    """Where cu_seqlens_q decreases, a row is request r's (r = the requests that end at or
    before it) only where r's range holds it, in the scorer, the selector and the streaming
    kernel alike: [0, 4, 2, 2] puts rows 2 and 3 in request 0's range but counts them into
    request 2's empty one, [0, 4, 2, 4] puts them in two ranges; either way they are no
    request's, and every id equals the call with cu [0, 2, 2, 2] (rows 2, 3 past cu[R])."""
    inp = make_inputs([0, 300, 600], [4, 0, 0], seed=40)
    want_cu = torch.tensor([0, 2, 2, 2], dtype=torch.int32, device=DEVICE)
    got_cu = torch.tensor(cu, dtype=torch.int32, device=DEVICE)
    for launch in (TWO, stream(16)):
        outs = []
        for cu_t in (want_cu, got_cu):
            out = torch.full((1, 4, 4), -7, dtype=torch.int32, device=DEVICE)
            pi.index_prefill_with_launch(launch, **{**inp, "cu_seqlens_q": cu_t}, topk=4,
                                         init_blocks=0, local_blocks=1, out=out)
            outs.append(out)
        assert torch.equal(outs[0], outs[1]), (launch, outs)
        assert bool((outs[1][:, 2:] == -7).all()) and bool((outs[1][:, :2] >= -1).all())


def test_a_request_range_past_int32_keeps_its_rows():
    """cu_seqlens_q [-1, 2³¹ − 1]: the request's length passes int32 (in int32 it wraps to a
    negative, empty request); its rows 0..3 (j = 1..4 < max_query_len 5) score and select
    exactly as with cu [-1, 5], in the scorer, the selector and the streaming kernel alike,
    and row 4 (j = 5) is left alone by both."""
    inp = make_inputs([300], [5], seed=41)
    args = [{**inp, "cu_seqlens_q": torch.tensor([-1, end], dtype=torch.int32, device=DEVICE)}
            for end in (5, (1 << 31) - 1)]
    scores = [generated.index_prefill_score(**a)[:, :4, :3] for a in args]
    ref = ref_prefill_scores(**score_args(args[0]), max_seq_len=inp["max_seq_len"])[:, :4]
    known = ~torch.isnan(ref)
    assert bool(known[:, :, 0].all()) and torch.equal(scores[1][known], scores[0][known])
    for launch in (TWO, stream(16)):
        outs = []
        for a in args:
            out = torch.full((1, 5, 4), -7, dtype=torch.int32, device=DEVICE)
            pi.index_prefill_with_launch(launch, **a, topk=4, init_blocks=0, local_blocks=1,
                                         out=out)
            outs.append(out)
        assert torch.equal(outs[0], outs[1]), (launch, outs)
        assert bool((outs[0][:, :4] >= -1).all()) and bool((outs[0][:, 4] == -7).all())
