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


def assert_scores_near(score, ref, scale, written):
    """Written entries: NaN and ±inf exactly where the reference has them, finite ones within
    SCORE_REL · Σ|q·k| of float64."""
    got = score[:, :, :ref.shape[2]].double().to(ref.device)
    assert bool(written.any())
    odd = written & ~torch.isfinite(ref)
    assert torch.equal(torch.isnan(got[odd]), torch.isnan(ref[odd]))
    assert torch.equal(got[odd & ~torch.isnan(ref)], ref[odd & ~torch.isnan(ref)])
    fin = written & torch.isfinite(ref)
    err = (got - ref).abs()[fin]
    assert bool((err <= SCORE_REL * scale[fin] + 1e-30).all()), float(err.max())


def check_scores(inp, score, max_query_len=False):
    """The scorer's output against the float64 reference on every entry §7 writes. With
    ``max_query_len``, the reference leaves rows past the call's max_query_len to no request."""
    mql = inp["max_query_len"] if max_query_len else None
    ref, written = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"],
                                      max_query_len=mql, return_written=True)
    scale = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"],
                               absolute=True, max_query_len=mql)
    assert_scores_near(score, ref, scale, written)
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
    every call returns, and scores and ids are the reference's (§13 rules 2, 3, 4, 8, 10):
    rows 0..6 are request 0's (a position past the capacity, no key below its seq_len), every
    other row is no request's and keeps its -7."""
    inp = make_inputs([130, 10], [20, 12], seed=9, extra=0)
    inp["prefix_lens"] = torch.tensor([10**6, -50], dtype=torch.int32, device=DEVICE)
    inp["seq_lens"] = torch.tensor([-3, 10**9], dtype=torch.int32, device=DEVICE)
    inp["cu_seqlens_q"] = torch.tensor([0, 25, 7], dtype=torch.int32, device=DEVICE)
    inp["block_table"][0, 0] = 10**6
    inp["block_table"][1, 1] = -4
    mb = cdiv(inp["max_seq_len"], 128)
    ref = check_scores(inp, generated.index_prefill_score(**inp), max_query_len=True)
    assert bool((ref[:, :7] == float("-inf")).all()) and bool(ref[:, 7:].isnan().all())
    want = ref_prefill_topk(ref.float(), inp["cu_seqlens_q"], inp["prefix_lens"], 4, 1, 1,
                            capacity=mb, max_query_len=inp["max_query_len"])
    assert want[0, 0].tolist() == [0, 1, -1, -1] and bool((want[:, 7:] == -2).all())
    out = torch.empty((1, 32, 4), dtype=torch.int32, device=DEVICE)
    for launch in (TWO, stream(16)):
        out.fill_(-7)  # rows a non-monotone cu leaves to no request stay as they are
        pi.index_prefill_with_launch(launch, **inp, topk=4, init_blocks=1, local_blocks=1,
                                     out=out)
        assert torch.equal(out.cpu(), torch.where(want == -2, -7, want)), launch


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
    with pytest.raises(error, match=f"^{match}: "):
        generated.index_prefill(**kw)


def test_fp8_query_needs_an_fp8_cache():
    inp = make_inputs([0], [20], q="fp8", cache="bf16")
    with pytest.raises(ValueError, match="^idx_q: "):
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
    ref, written = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"],
                                      rows=rows, return_written=True)
    scale = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"], rows=rows,
                               absolute=True)
    assert_scores_near(score, ref, scale, written)
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


def _past_the_capacity(inp, prefixes, topk, local_blocks):
    """Rows whose positions lie past the capacity (prefix_lens[0] in ``prefixes``, seq_lens
    2³¹ − 1): scores and ids of both index_prefill paths equal the reference's, which sees
    every block below the capacity and forces the local blocks at its end (§13 rules 2, 8)."""
    mb = cdiv(inp["max_seq_len"], 128)
    T = inp["idx_q"].shape[0]
    lens = torch.tensor([(1 << 31) - 1, 13], dtype=torch.int32, device=DEVICE)
    ids = []
    for p in prefixes:
        a = dict(inp, seq_lens=lens,
                 prefix_lens=torch.tensor([p, 10], dtype=torch.int32, device=DEVICE))
        score = generated.index_prefill_score(**a)
        ref = check_scores(a, score)
        assert bool(torch.isfinite(ref[:, :5]).all())  # every block of the capacity, whole
        want = ref_prefill_topk(score[:, :, :mb], a["cu_seqlens_q"], a["prefix_lens"], topk, 0,
                                local_blocks, capacity=mb)
        if local_blocks:
            assert bool((want[:, :5, 0] == mb - 1).all())
        for launch in (TWO, stream(16)):
            out = torch.full((1, T, topk), -7, dtype=torch.int32, device=DEVICE)
            pi.index_prefill_with_launch(launch, **a, topk=topk, init_blocks=0,
                                         local_blocks=local_blocks, out=out)
            assert torch.equal(out.cpu(), want), (p, launch)
            ids.append(out)
    return ids


@pytest.mark.parametrize("local_blocks", [0, 1])
def test_positions_past_int32_see_the_whole_capacity(local_blocks):
    """prefix_lens[r] + row past 2³¹ − 1 (an inconsistent prefix: int32 seq_lens cannot hold
    such a position) saturates instead of wrapping to a negative, empty row: the rows select
    as the reference's rows past the capacity, in both paths, and as with a prefix of 10⁶."""
    inp = make_inputs([130, 10], [5, 3], seed=12)
    ids = _past_the_capacity(inp, ((1 << 31) - 3, 10 ** 6), 4, local_blocks)
    assert all(torch.equal(ids[0], x) for x in ids[1:])


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


# ---- paths the tests above leave unobserved (mutation audit) ---------------------------------

def _spread_out(H, T, topk):
    """An ``out`` [H, T, topk] with column stride 2 inside a -7 filled buffer (wider than
    next_pow2(topk) · 2), and the buffer: everything but the view must stay -7."""
    buf = torch.full((H, T, 16 + 2 * topk), -7, dtype=torch.int32, device=DEVICE)
    return buf[:, :, 1:1 + 2 * topk:2], buf


def _untouched(buf, out):
    mask = torch.ones_like(buf, dtype=torch.bool)
    mask[:, :, 1:1 + 2 * out.shape[2]:2] = False
    return bool((buf[mask] == -7).all())


def test_stream_folds_many_groups_as_the_two_kernels():
    """Rows with many more visible blocks than next_pow2(topk): the streaming kernel merges
    several groups of T blocks (skipping groups no key of which beats a row's T-th key); its ids
    equal the two kernels' and the §4.1 order of the kernel's own scores, where the scores
    decide (topk 2, no forcing) and with init / local forcing. ``out`` has column stride 2 and
    nothing past topk is written."""
    inp = make_inputs([1500, 700, 0], [20, 13, 9], H=2, seed=50)
    T = inp["idx_q"].shape[0]
    score = generated.index_prefill_score(**inp)
    for topk, init, local in ((2, 0, 0), (3, 2, 2), (5, 1, 1)):
        ref = ref_prefill_topk(score, inp["cu_seqlens_q"], inp["prefix_lens"], topk, init,
                               local)
        for launch in (TWO, stream(8), stream(16)):
            out, buf = _spread_out(2, T, topk)
            pi.index_prefill_with_launch(launch, **inp, topk=topk, init_blocks=init,
                                         local_blocks=local, out=out)
            assert torch.equal(out.cpu(), ref), (topk, launch)
            assert _untouched(buf, out), (topk, launch)


def test_selector_folds_many_tiles():
    """Rows with more blocks than the selector's tile (block_k 16, up to 4 tiles): later tiles
    merge into the running top-T, ties (small integer scores) and NaN keep the §4.1 order
    across tiles; ``out`` has column stride 2 and nothing past topk is written."""
    H, T, S = 2, 24, 64
    cu = torch.tensor([0, 10, 24], dtype=torch.int32, device=DEVICE)
    prefix = torch.tensor([8000, 2040], dtype=torch.int32, device=DEVICE)  # nb 63, 16 → 17
    g = torch.Generator().manual_seed(51)
    score = torch.randint(-3, 4, (H, T, S), generator=g).float()
    score[0, 3, 40:44] = float("nan")
    score[1, 12, 16] = 100.0
    score = score.to(DEVICE)
    launch = {"block_k": 16, "block_rows": 4, "num_warps": 4, "num_stages": None}
    for topk, init, local in ((4, 0, 1), (3, 2, 2), (16, 1, 3)):
        out, buf = _spread_out(H, T, topk)
        _, run, _ = pi._plan_topk(score, cu, prefix, 14, topk, init, local, out, None,
                                  launch=launch)
        run(score, cu, prefix, out)
        ref = ref_prefill_topk(score, cu, prefix, topk, init, local)
        assert torch.equal(out.cpu(), ref), (topk, init, local)
        assert _untouched(buf, out)


def test_raw_scores_between_the_forced_values_rank_between_them():
    """Forcing sets values (init 1e30, local 1e29), it does not put forced blocks first: a raw
    block score in (1e29, 1e30) ranks after init blocks and before local ones, one above 1e30
    before both (§3, §7). One-hot queries make every score an exact key value."""
    inp = make_inputs([1000, 400], [12, 10], H=1, seed=52)
    q = torch.zeros_like(inp["idx_q"].float())
    q[:, :, 0] = 1.0
    inp["idx_q"] = q.to(inp["idx_q"].dtype)
    g = torch.Generator().manual_seed(52)
    cache = inp["index_kv_cache"].float()
    cache[:, :, 0] = torch.randn(cache.shape[:2], generator=g).to(cache.device) * 2.0 ** 97
    pages = inp["block_table"].long()
    cache[pages[0, 3], 5, 0] = 2.0 ** 100  # 1.27e30: above the init score
    cache[pages[1, 1], 7, 0] = 2.0 ** 101
    inp["index_kv_cache"] = cache.to(inp["index_kv_cache"].dtype)
    ref = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"])
    known = ~torch.isnan(ref)
    assert bool(((ref[known] > 1e29) & (ref[known] < 1e30)).any())
    assert bool((ref[known] > 1e30).any())
    for topk, init, local in ((5, 1, 1), (8, 2, 2)):
        want = ref_prefill_topk(ref.float(), inp["cu_seqlens_q"], inp["prefix_lens"], topk,
                                init, local)
        for launch in (TWO, stream(16)):
            got = pi.index_prefill_with_launch(launch, **inp, topk=topk, init_blocks=init,
                                               local_blocks=local)
            assert torch.equal(got.cpu(), want), (topk, launch)


def test_page_ids_outside_the_cache_score_minus_inf():
    """§13 rule 4: a block whose page id is outside [0, num_pages) scores -inf (never page 0's
    keys, nor the memory just past the cache); forcing still applies to it."""
    inp = make_inputs([300, 0], [20, 10], H=1, seed=53)
    cache = inp["index_kv_cache"]
    pages = cache.shape[0]
    big = torch.randn((pages + 1,) + tuple(cache.shape[1:]),
                      generator=torch.Generator().manual_seed(53)).to(cache.dtype).to(DEVICE)
    big[:pages] = cache
    unedited = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"])
    inp["index_kv_cache"] = big[:pages]  # the page past the cache holds finite keys
    inp["block_table"] = inp["block_table"].clone()
    inp["block_table"][0, 0] = pages
    inp["block_table"][0, 1] = -1
    score = generated.index_prefill_score(**inp)
    ref = check_scores(inp, score)  # the reference reads the edited table: no key there
    assert bool((ref[:, :20, :2] == float("-inf")).all())  # request 0's rows see both
    assert bool(torch.isfinite(unedited[:, :20, :2]).all())  # (the pages' keys are finite)
    assert torch.equal(ref[:, :, 2:].nan_to_num(), unedited[:, :, 2:].nan_to_num())
    mb = cdiv(inp["max_seq_len"], 128)
    for topk, init, local in ((3, 0, 0), (3, 1, 1)):
        want = ref_prefill_topk(score, inp["cu_seqlens_q"], inp["prefix_lens"], topk, init,
                                local, capacity=mb)
        assert want[0, 0].tolist() == ([2, 0, 1] if init == 0 else [0, 2, 1])
        for launch in (TWO, stream(16)):
            got_ids = torch.full((1, 30, topk), -7, dtype=torch.int32, device=DEVICE)
            pi.index_prefill_with_launch(launch, **inp, topk=topk, init_blocks=init,
                                         local_blocks=local, out=got_ids)
            assert torch.equal(got_ids.cpu(), want), (topk, init, launch)


def test_a_nan_key_is_skipped_by_the_block_max():
    """§3 / §7 / §14.4: the block maximum skips NaN products. One NaN key in block 0, which every
    row sees whole (the scorer's unmasked path), one in block 2, which every row sees in part
    (p = 300..319, key 276 visible to all): both blocks keep the max of their other keys,
    finite, as the float64 reference says; both paths select the reference's ids."""
    inp = make_inputs([300], [20], H=2, seed=65)
    pages = inp["block_table"][0].long()
    cache = inp["index_kv_cache"].clone()
    cache[pages[0], 5] = float("nan")
    cache[pages[2], 20] = float("nan")
    inp["index_kv_cache"] = cache
    score = generated.index_prefill_score(**inp)
    ref = check_scores(inp, score)
    assert bool(torch.isfinite(ref[:, :, :3]).all())
    mb = cdiv(inp["max_seq_len"], 128)
    for topk, local in ((1, 0), (2, 1)):
        want = ref_prefill_topk(score, inp["cu_seqlens_q"], inp["prefix_lens"], topk, 0, local,
                                capacity=mb)
        for launch in (TWO, stream(16)):
            out = torch.full((2, 20, topk), -7, dtype=torch.int32, device=DEVICE)
            pi.index_prefill_with_launch(launch, **inp, topk=topk, init_blocks=0,
                                         local_blocks=local, out=out)
            assert torch.equal(out.cpu(), want), (topk, launch)


def test_scores_only_where_written_negative_and_short_lengths():
    """The scorer writes exactly the entries §7 defines, NaN elsewhere survives: blocks
    b ≥ nb(p), rows with a negative position p (nb 0: their ids are all -1) and the columns
    past the capacity. Keys at or past seq_lens[r] are invisible even where p is larger (a
    block with no visible key scores -inf)."""
    inp = make_inputs([-40, 250, 100], [60, 20, 30], H=2, extra=300, seed=54)
    inp["seq_lens"] = torch.tensor([20, 200, 130], dtype=torch.int32, device=DEVICE)
    mb = cdiv(inp["max_seq_len"], 128)
    ref = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"])
    # request 1 (rows 60..79, p = 250..269): block 2 holds no key below seq_len 200
    rows2 = [60 + j for j in range(20) if (250 + j) // 128 >= 2]
    assert bool((ref[:, rows2, 2] == float("-inf")).all())
    for block_m, splits in ((16, 1), (16, 2)):
        launch = dict(block_m=block_m, kv_splits=splits, num_warps=4, num_stages=2)
        shape, run = pi._plan_scores(**inp, hardware=None, launch=launch)
        s = torch.full(shape, float("nan"), device=DEVICE)
        run(*score_args(inp).values(), s)
        assert torch.equal(torch.isnan(s[:, :, :mb]).cpu(), torch.isnan(ref).cpu())
        assert bool(torch.isnan(s[:, :, mb:]).all())
        check_scores(inp, s)
        assert bool((s[:, rows2, 2] == float("-inf")).all())
    score = s
    for topk, init, local in ((2, 0, 0), (3, 1, 1)):
        want = ref_prefill_topk(score, inp["cu_seqlens_q"], inp["prefix_lens"], topk, init,
                                local)
        assert bool((want[:, :40] == -1).all())  # p < 0
        for launch in (TWO, stream(16)):
            got = pi.index_prefill_with_launch(launch, **inp, topk=topk, init_blocks=init,
                                               local_blocks=local)
            assert torch.equal(got.cpu(), want), (topk, launch)


@pytest.mark.parametrize("local_blocks", [0, 1])
def test_saturated_positions_score_every_key_of_the_capacity(local_blocks):
    """§13 rule 8 for the scores: a position saturated at 2³¹ − 2 sees every key of the
    capacity (position + 1 must not wrap), as the reference's position past the capacity and
    bitwise as a position of 10⁶ does; both paths select the reference's ids."""
    inp = make_inputs([130, 10], [5, 3], seed=55, extra=500)  # capacity 6 blocks
    mb = cdiv(inp["max_seq_len"], 128)
    lens = torch.tensor([(1 << 31) - 1, 13], dtype=torch.int32, device=DEVICE)
    scores = []
    for p in ((1 << 31) - 3, 10 ** 6):
        a = dict(inp, seq_lens=lens,
                 prefix_lens=torch.tensor([p, 10], dtype=torch.int32, device=DEVICE))
        scores.append(generated.index_prefill_score(**a)[:, :5, :mb])
    assert bool(torch.isfinite(scores[1]).all()) and torch.equal(scores[0], scores[1])
    ids = _past_the_capacity(inp, ((1 << 31) - 3, 10 ** 6), 2, local_blocks)
    assert all(torch.equal(ids[0], x) for x in ids[1:])


def test_rows_outside_a_range_past_the_batch_are_left_alone():
    """cu_seqlens_q [5, 35] over T = 20 tokens: rows 0..4 precede the range and rows ≥ 20 are
    past the batch, so only rows 5..19 are request 0's (j = 0..14). Nothing is written outside
    ``out`` (a view of a larger -7 buffer) or before row 5; rows 5..19 equal the call with the
    same tokens at cu [0, 15]."""
    inp = make_inputs([300], [20], seed=56)
    q = torch.zeros((40,) + tuple(inp["idx_q"].shape[1:]), dtype=inp["idx_q"].dtype,
                    device=DEVICE)
    q[:20] = inp["idx_q"]
    want_inp = dict(inp, idx_q=q[5:20],
                    cu_seqlens_q=torch.tensor([0, 15], dtype=torch.int32, device=DEVICE),
                    max_query_len=15)
    got_inp = dict(inp, idx_q=q[:20],
                   cu_seqlens_q=torch.tensor([5, 35], dtype=torch.int32, device=DEVICE))
    for launch in (TWO, stream(16)):
        want = pi.index_prefill_with_launch(launch, **want_inp, topk=3, init_blocks=0,
                                            local_blocks=0)
        buf = torch.full((1, 40, 3), -7, dtype=torch.int32, device=DEVICE)
        pi.index_prefill_with_launch(launch, **got_inp, topk=3, init_blocks=0, local_blocks=0,
                                     out=buf[:, :20])
        assert bool((buf[:, :5] == -7).all()) and bool((buf[:, 20:] == -7).all()), launch
        assert torch.equal(buf[:, 5:20], want), launch


def test_more_requests_than_one_request_search_tile():
    """140 requests of 0–2 tokens: more than one tile of the row → request search (32 requests
    in the scorer's and streaming kernels, 128 in the selector); every row finds its own."""
    g = torch.Generator().manual_seed(57)
    qlen = torch.randint(0, 3, (140,), generator=g).tolist()
    qlen[-1] = 2
    prefix = torch.randint(0, 400, (140,), generator=g).tolist()
    inp = make_inputs(prefix, qlen, seed=57)
    score = generated.index_prefill_score(**inp)
    check_scores(inp, score)
    want = ref_prefill_topk(score, inp["cu_seqlens_q"], inp["prefix_lens"], 2, 0, 1)
    assert torch.equal(generated.index_prefill_topk(score, **sel(inp), topk=2, init_blocks=0,
                                                    local_blocks=1).cpu(), want)
    got = pi.index_prefill_with_launch(stream(16), **inp, topk=2, init_blocks=0, local_blocks=1)
    assert torch.equal(got.cpu(), want)


def test_the_standalone_selector_stops_below_the_tie_field():
    """A score tensor wider than MAX_SPARSE_BLOCKS columns: the selector never ranks a block
    whose id does not fit the 16-bit tie field (§4.1: b + 1 ≤ 65534), however high its score."""
    score = torch.full((1, 1, 65536), -1.0, device=DEVICE)
    score[0, 0, 7] = 3.0
    score[0, 0, 65535] = 9.0
    cu = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    prefix = torch.tensor([65536 * 128 - 1], dtype=torch.int32, device=DEVICE)
    ids = generated.index_prefill_topk(score, cu, prefix, 1, 2, 0, 0)
    assert ids.cpu().tolist() == [[[7, 0]]]


@pytest.mark.parametrize("entry,change", [
    ("score", "max_query_len"), ("topk", "init_blocks"), ("prefill", "local_blocks")])
def test_a_changed_scalar_is_a_new_plan(entry, change):
    """Each entry caches a plan per call key: a call differing from a cached one only in a
    scalar argument computes with its own value."""
    from generated import _runtime as rt
    rt.clear_plans()
    inp = make_inputs([300, 5], [40, 30], H=1, seed=58)
    if entry == "score":
        generated.index_prefill_score(**dict(inp, max_query_len=3))
        check_scores(inp, generated.index_prefill_score(**inp))
        return
    score = generated.index_prefill_score(**inp)
    if entry == "topk":
        for init in (0, 2):
            got = generated.index_prefill_topk(score, **sel(inp), topk=3, init_blocks=init,
                                               local_blocks=0)
            assert torch.equal(got.cpu(), ref_prefill_topk(
                score, inp["cu_seqlens_q"], inp["prefix_lens"], 3, init, 0)), init
        return
    for local in (1, 3):
        got = generated.index_prefill(**inp, topk=3, init_blocks=0, local_blocks=local)
        assert torch.equal(got, pi.index_prefill_with_launch(TWO, **inp, topk=3, init_blocks=0,
                                                             local_blocks=local)), local


def _column_strided_table(t):
    wide = torch.zeros((t.shape[1] + 1, t.shape[0]), dtype=t.dtype, device=t.device).t()
    wide[:, :t.shape[1]] = t
    assert wide.stride(1) != 1
    return wide


@pytest.mark.parametrize("change,error,match", [
    (dict(block_table=lambda t: torch.cat([t, t[:1]])), ValueError, "block_table"),
    (dict(block_table=_column_strided_table), ValueError, "block_table"),
    (dict(index_kv_cache=lambda t: t[:0]), ValueError, "index_kv_cache"),
    (dict(seq_lens=lambda t: torch.cat([t, t[:1]])), ValueError, "seq_lens"),
    (dict(max_seq_len=-1), ValueError, "max_seq_len"),
    (dict(init_blocks=-1), ValueError, "init_blocks"),
    (dict(out=lambda t: torch.zeros((1, 1, 4), dtype=torch.int32, device=DEVICE)
          .expand(1, 30, 4)), ValueError, "out"),
])
def test_more_rejections_name_the_argument(change, error, match):
    inp = make_inputs([0, 100], [20, 10], seed=1, extra=200)
    kw = dict(inp, topk=4, init_blocks=0, local_blocks=1, out=None)
    for k, v in change.items():
        kw[k] = v(kw[k]) if callable(v) else v
    with pytest.raises(error, match=f"^{match}"):
        generated.index_prefill(**kw)


def test_stream_launch_refuses_a_topk_past_its_tile():
    """The streaming kernel keeps next_pow2(topk) keys per row: a hand-given launch whose
    topk_tile is smaller is refused naming topk (the table then takes the two kernels)."""
    inp = make_inputs([0], [20], seed=59)
    with pytest.raises(ValueError, match="^topk"):
        pi.index_prefill_with_launch(stream(16, topk_tile=16), **inp, topk=17, init_blocks=0,
                                     local_blocks=0)


def test_topk_out_over_its_scores_is_refused_on_a_cached_plan():
    """The plan's check that ``out`` shares no memory with the inputs runs on every call, not
    only when the plan is made: a second call with the same layouts but ``out`` over its own
    score tensor is refused."""
    H, T, S, topk = 1, 4, 16, 3
    cu = torch.tensor([0, T], dtype=torch.int32, device=DEVICE)
    pre = torch.tensor([1000], dtype=torch.int32, device=DEVICE)
    g = torch.Generator().manual_seed(60)
    score = torch.randn((H, T, S), generator=g).to(DEVICE)
    other = torch.zeros((H, T, S), device=DEVICE)
    generated.index_prefill_topk(score, cu, pre, T, topk, 0, 0,
                                 out=other.view(torch.int32)[:, :, :topk])
    with pytest.raises(ValueError, match="^out: shares memory with score"):
        generated.index_prefill_topk(score, cu, pre, T, topk, 0, 0,
                                     out=score.view(torch.int32)[:, :, :topk])


def test_the_selector_counts_a_max_query_len_past_the_tokens_as_the_token_count():
    """§13 rule 8 where cu_seqlens_q starts below 0 (row x is token j = x + 1): over T = 5
    rows, max_query_len 2³¹ − 1 counts as 5, so row 4 (j = 5) is left alone in the standalone
    selector, exactly as with max_query_len 5."""
    g = torch.Generator().manual_seed(61)
    score = torch.randn((1, 5, 16), generator=g).to(DEVICE)
    cu = torch.tensor([-1, (1 << 31) - 1], dtype=torch.int32, device=DEVICE)
    pre = torch.tensor([300], dtype=torch.int32, device=DEVICE)
    outs = []
    for mql in (5, (1 << 31) - 1):
        out = torch.full((1, 5, 3), -7, dtype=torch.int32, device=DEVICE)
        generated.index_prefill_topk(score, cu, pre, mql, 3, 0, 1, out=out)
        outs.append(out)
    assert bool((outs[0][:, :4] >= 0).all()) and bool((outs[0][:, 4] == -7).all())
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("name", ["cu_seqlens_q", "prefix_lens", "seq_lens"])
def test_length_views_strided_past_int32_are_refused(name):
    """§13 rule 1: the kernels take offsets along cu_seqlens_q, prefix_lens and seq_lens in
    int32, so views whose elements lie 2³¹ or more apart are refused naming them."""
    from decode_inputs import virtual_tensor
    inp = make_inputs([0, 5], [4, 2], seed=62)
    n = inp[name].shape[0]
    S = cdiv(1 << 31, n - 1)  # the last element 2³¹ elements past the first
    inp[name] = virtual_tensor((n - 1) * S + 1, torch.int32).as_strided((n,), (S,))
    with pytest.raises(ValueError, match=f"^{name}"):
        generated.index_prefill(**inp, topk=2, init_blocks=0, local_blocks=1)
    if name != "seq_lens":
        score = torch.zeros((1, 6, 16), device=DEVICE)
        with pytest.raises(ValueError, match=f"^{name}"):
            generated.index_prefill_topk(score, **sel(inp), topk=2, init_blocks=0,
                                         local_blocks=1)


def test_more_requests_than_a_grid_dimension_holds_are_refused():
    """The scorers' grids put the requests in their second dimension (at most 65535 programs
    on CUDA and HIP): 65536 requests are refused naming seq_lens (65535 pass the checks)."""
    one = make_inputs([300], [3], seed=64)
    for R in (65536, 65535):
        pad = R - 1
        inp = dict(one, **{name: torch.cat([one[name].new_zeros((pad,) + one[name].shape[1:]),
                                            one[name]])
                           for name in ("block_table", "cu_seqlens_q", "seq_lens",
                                        "prefix_lens")})
        args = [inp[k] for k in ("idx_q", "index_kv_cache", "block_table", "cu_seqlens_q",
                                 "seq_lens", "prefix_lens", "max_query_len", "max_seq_len",
                                 "num_kv_heads")]
        if R == 65535:
            assert pi._check_score_inputs(*args) == 3
            continue
        with pytest.raises(ValueError, match="^seq_lens: at most 65535 requests"):
            generated.index_prefill(**inp, topk=2, init_blocks=0, local_blocks=1)
        with pytest.raises(ValueError, match="^seq_lens: at most 65535 requests"):
            generated.index_prefill_score(*args)


def test_the_selector_reads_score_rows_past_int32_offsets():
    """``score`` is the caller's: a view whose row stride puts row 2 past 2³¹ elements (each
    stride below 2³¹) is read at its own rows, giving the ids of a contiguous copy."""
    from decode_inputs import virtual_tensor
    stride = (1 << 30) + 64
    score = virtual_tensor(2 * stride + 16, torch.float32).as_strided((1, 3, 16),
                                                                      (3 * stride, stride, 1))
    g = torch.Generator().manual_seed(63)
    want_score = torch.randn((1, 3, 16), generator=g).to(DEVICE)
    score.copy_(want_score)
    cu = torch.tensor([0, 3], dtype=torch.int32, device=DEVICE)
    pre = torch.tensor([1500], dtype=torch.int32, device=DEVICE)
    want = ref_prefill_topk(want_score, cu, pre, 4, 0, 1)
    assert torch.equal(generated.index_prefill_topk(score, cu, pre, 3, 4, 0, 1).cpu(), want)
