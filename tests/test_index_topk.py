"""Fused decode top-k selector, sparse-table builders, index_decode wrapper and launch policy.

docs/KERNELS.md §12 items 6-14. CPU tests run the kernels in Triton's interpreter with small shapes
(BLOCK_SIZE_K 128 variants stand in for 512 where many blocks are needed); ``gpu`` tests use
realistic sizes and CUDA graphs and are skipped without a GPU.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import reference_policy as policy  # noqa: E402
import triton  # noqa: E402

import generated  # noqa: E402
from generated import (  # noqa: E402
    alloc_sparse_block_table,
    build_sparse_block_table_decode,
    index_decode,
    index_decode_scores,
    sparse_block_page_stride,
)
from generated.index_topk import launch_sparse_table_decode, launch_topk_fused  # noqa: E402
from decode_inputs import make_decode_inputs  # noqa: E402
from graph_capture import capture, page16_outputs, replay_poisoned  # noqa: E402
from reference_topk import (  # noqa: E402
    NAN_SCORE_F32,
    assert_topk_sets_match,
    cdiv,
    dense_scores,
    reference_sparse_table,
    reference_topk,
    row_geometry,
    sparse_table_row,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
POISON_OUT = -7
POISON_TABLE = 0x7EADBEEF
gpu = pytest.mark.gpu


# ------------------------------------------------------------------------------------------------
# helpers


def seq_lens_for_blocks(nbs, Q=1):
    """seq_lens whose last row (q_offset Q-1) sees exactly nb blocks (nb 0 -> padding request)."""
    return torch.tensor([0 if nb == 0 else (nb - 1) * 128 + 1 for nb in nbs], dtype=torch.int32)


def run_selector(scores, seq_lens, Q, topk, cfg, *, emit_stride=None, attn=None, counter_pad=2,
                 out_view=None, num_warps=4, num_stages=1):
    """Launch the fused selector with poisoned outputs and stale partials; return out (+ table,
    ctx). Asserts the counter is all-zero afterwards and rows beyond total_q are untouched."""
    C, BK, single, adaptive = cfg
    H, total_q = scores.shape[0], scores.shape[1]
    T = 1 << (topk - 1).bit_length()
    dev = scores.device
    if out_view is None:
        out_buf = torch.full((H, total_q + 3, topk + 2), POISON_OUT, dtype=torch.int32, device=dev)
        out = out_buf[:, :total_q, :topk]
    else:
        out_buf, out = out_view
    counter = torch.zeros((H, total_q + counter_pad), dtype=torch.int32, device=dev)
    # stale, valid-looking partial keys: any read of an unused slot would win every merge
    partial = torch.full((C, H, total_q, T), (1 << 48) + (0xFFFFFFFF << 16) + 7,
                         dtype=torch.int64, device=dev)
    kwargs = {}
    if emit_stride is not None:
        table = torch.full((total_q, topk * 8), POISON_TABLE, dtype=torch.int32, device=dev)
        ctx = torch.full((total_q,), POISON_TABLE, dtype=torch.int32, device=dev)
        kwargs = dict(attention_block_table=attn, sparse_block_table_out=table,
                      sparse_context_lens_out=ctx, block_page_stride=emit_stride)
    launch_topk_fused(scores, seq_lens, out, Q, topk, max_block=scores.shape[2], num_chunks=C,
                      block_k=BK,
                      num_warps=num_warps, num_stages=num_stages, single_tile=single,
                      adaptive_merge=adaptive,
                      completion_counter=counter[:, :total_q], partial=partial, **kwargs)
    assert int(counter.abs().sum()) == 0, "completion counter not reset"
    if out_view is None:
        assert bool((out_buf[:, total_q:] == POISON_OUT).all()), "rows >= total_q written"
        assert bool((out_buf[:, :, topk:] == POISON_OUT).all()), "slots >= topk written"
    if emit_stride is not None:
        return out, kwargs["sparse_block_table_out"], kwargs["sparse_context_lens_out"]
    return out


def random_scores(H, total_q, S, seed, tie_every=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn((H, total_q, S), generator=g)
    if tie_every:
        s[:, :, ::tie_every] = 0.75  # large tie groups crossing tile/chunk boundaries
    return s.to(DEVICE)


def check_exact(out, scores, seq_lens, Q, topk):
    ref = reference_topk(scores, seq_lens, Q, topk)
    got = out.cpu()
    if not torch.equal(got, ref):
        bad = (got != ref).nonzero()[:5].tolist()
        raise AssertionError(f"ids differ at {bad}: got {got[tuple(bad[0][:2])].tolist()} "
                             f"ref {ref[tuple(bad[0][:2])].tolist()}")


# ------------------------------------------------------------------------------------------------
# §12.6 exact ids: ties at BLOCK_K/2 and BLOCK_K boundaries, special values


def _special_rows(S, g):
    """Score rows (length S) exercising NaN (both signs: inf - inf gives the negative one on
    x86), +-inf, +-0, -1e30 and tie groups; random values from the generator ``g``."""
    nan, inf = float("nan"), float("inf")
    neg_nan = torch.tensor([-(1 << 22)], dtype=torch.int32).view(torch.float32)[0]  # 0xFFC00000
    rows = []
    r = torch.randn(S, generator=g) * 0.1  # ties straddling 63/64, 127/128, 255/256, 99/100
    for lo, hi in ((60, 68), (96, 104), (124, 132), (196, 204), (252, 260)):
        r[lo:hi] = 2.0
    rows.append((r, 300))
    r = torch.full((S,), -inf)  # special values ranked among many -inf
    r[3], r[5], r[7], r[9], r[11] = nan, -1e30, 0.0, -0.0, inf
    r[13], r[15], r[17], r[40], r[63], r[64] = -0.0, neg_nan, -1e30, 1e30, 1e29, -0.0
    assert bool(torch.isnan(r[15])) and int(r[15:16].view(torch.int32)) < 0
    rows.append((r, 70))
    rows.append((torch.full((S,), nan), 130))  # all NaN -> ids ascending
    r = torch.full((S,), -inf)
    r[127], r[128], r[0] = 1.0, 1.0, -1e30
    rows.append((r, 129))  # all -inf but three; crosses the 128 tile edge
    rows.append((torch.randn(S, generator=g), 5))  # fewer blocks than topk
    rows.append((torch.zeros(S), 1))
    r = -torch.zeros(S)
    r[::2] = 0.0
    rows.append((r, 257))  # +0/-0 everywhere: pure id order
    return rows


EXACT_CASES = [
    # (C, BLOCK_K, single_tile, adaptive_merge), topk
    ((1, 128, True, True), 16),     # gfx950 <= 128-block branch
    ((4, 128, True, True), 13),     # gfx950 fast branch shape (tile 128 stand-in)
    ((4, 128, False, False), 16),   # general branch
    ((1, 128, False, False), 13),   # one chunk, several tiles
    ((2, 512, False, False), 16),   # real 512 tile: ties at 255/256 and 511/512
]


@pytest.mark.parametrize("cfg,topk", EXACT_CASES,
                         ids=[f"C{c[0]}_K{c[1]}_{'single' if c[2] else 'tiled'}_"
                              f"{'adapt' if c[3] else 'full'}_k{k}" for c, k in EXACT_CASES])
def test_exact_ids_ties_and_special_values(cfg, topk):
    C, BK, single = cfg[0], cfg[1], cfg[2]
    S = 640
    g = torch.Generator().manual_seed(C * 1000 + BK + topk)
    rows = [(r, nb) for r, nb in _special_rows(S, g) if not single or nb <= C * BK]
    if BK == 512:
        r = torch.randn(S, generator=g) * 0.1
        r[250:262] = 3.0
        r[506:518] = 3.0
        rows.append((r, 600))
    scores = torch.stack([r for r, _ in rows])[None].to(DEVICE)
    seq_lens = seq_lens_for_blocks([nb for _, nb in rows])
    out = run_selector(scores, seq_lens.to(DEVICE), 1, topk, cfg)
    check_exact(out, scores, seq_lens, 1, topk)


def test_reference_total_order_examples():
    """Pin the reference itself on a hand-written row (guards against a wrong reference)."""
    nan, inf = float("nan"), float("inf")
    vals = [0.0, -0.0, nan, -1e30, -inf, inf, 1e30, 1e29, 5.0, 5.0]
    vals = torch.tensor(vals, dtype=torch.float32).tolist()
    from reference_topk import row_topk
    assert row_topk(vals, 10, 12) == [5, 6, 7, 8, 9, 0, 1, 2, 3, 4, -1, -1]
    assert row_topk(vals, 3, 4) == [0, 1, 2, -1]
    assert NAN_SCORE_F32 == torch.tensor(-1e30).item()


# ------------------------------------------------------------------------------------------------
# §12.7 block counts at chunk boundaries, every policy branch; §12.8 counter; §12.9 empty rows


def _boundary_blocks(C, BK, single):
    nbs = {0, 1, 15, 16, 17, BK - 1, BK, BK + 1}
    for a in range(2, C + 1):
        if a in (2, 3, C) or a == C // 2 + 1:
            nbs.add((a - 1) * BK + 1)  # exactly a active chunks
    nbs.add(C * BK if single else C * BK + 3)  # capacity (non-single: chunks of > BK blocks)
    if not single:
        nbs.add(2 * BK + 1)
    return sorted(nbs)


BRANCH_CASES = [
    # (C, BK, single, adaptive, topk, H)
    (1, 128, True, True, 16, 4),
    (1, 128, False, False, 13, 2),
    (2, 128, False, False, 16, 1),
    (2, 128, True, True, 13, 2),
    (4, 128, False, True, 16, 1),
    (4, 128, True, False, 13, 1),
    (8, 128, True, True, 16, 1),
    (8, 128, False, False, 13, 1),
    (16, 128, True, True, 16, 1),
    (16, 128, False, False, 16, 1),
]


@pytest.mark.parametrize("C,BK,single,adaptive,topk,H", BRANCH_CASES,
                         ids=[f"C{c}_{'single' if s else 'tiled'}_{'adapt' if a else 'full'}_k{k}_H{h}"
                              for c, _, s, a, k, h in BRANCH_CASES])
def test_policy_branches_block_counts(C, BK, single, adaptive, topk, H):
    nbs = _boundary_blocks(C, BK, single)
    seq_lens = seq_lens_for_blocks(nbs)
    S = cdiv(max(nbs), 16) * 16
    scores = random_scores(H, len(nbs), S, seed=C * 100 + topk + H, tie_every=37)
    out = run_selector(scores, seq_lens.to(DEVICE), 1, topk, (C, BK, single, adaptive))
    check_exact(out, scores, seq_lens, 1, topk)


def test_counter_zero_across_alternating_launches():
    """Same persistent counter/partial buffers, seq_lens alternating between single- and
    multi-chunk rows: results exact and counter zero after every launch (§12.8)."""
    topk, H, Q = 16, 1, 2
    scores = random_scores(H, 6, 528, seed=5)
    patterns = [[513 * 128, 3 * 128, 0], [40, 300 * 128, 129 * 128], [0, 1, 2],
                [1, 200 * 128, 260], [513 * 128, 3 * 128, 0]]
    counter = torch.zeros((H, 8), dtype=torch.int32, device=DEVICE)
    partial = torch.empty((4, H, 6, 16), dtype=torch.int64, device=DEVICE)
    out = torch.empty((H, 6, topk), dtype=torch.int32, device=DEVICE)
    for pat in patterns:
        seq_lens = torch.tensor(pat, dtype=torch.int32)
        out.fill_(POISON_OUT)
        launch_topk_fused(scores, seq_lens.to(DEVICE), out, Q, topk, max_block=scores.shape[2],
                          num_chunks=4, block_k=128,
                          num_warps=4, num_stages=1, single_tile=False, adaptive_merge=True,
                          completion_counter=counter[:, :6], partial=partial)
        assert int(counter.abs().sum()) == 0
        check_exact(out, scores, seq_lens, Q, topk)


def test_empty_rows_all_minus_one():
    """Padding requests (seq_len 0) and speculative rows with query_pos < 0 (§12.9)."""
    Q, topk = 4, 16
    seq_lens = torch.tensor([0, 2, 3, 0, 600], dtype=torch.int32)  # req 1: rows 0,1 empty
    scores = random_scores(1, 20, 16, seed=3)
    for cfg in ((1, 128, True, True), (4, 128, False, False)):
        out = run_selector(scores, seq_lens.to(DEVICE), Q, topk, cfg)
        got = out.cpu()[0]
        for row in range(20):
            nb = row_geometry(seq_lens.tolist(), Q, row)[3]
            if nb == 0:
                assert got[row].tolist() == [-1] * topk, row
        check_exact(out, scores, seq_lens, Q, topk)


def test_strided_out_view():
    """out as a transposed view of a token-major [max_tokens, H, topk] buffer (CUDA layout)."""
    H, topk, Q = 2, 16, 1
    nbs = [3, 200, 0, 17]
    seq_lens = seq_lens_for_blocks(nbs)
    scores = random_scores(H, 4, 208, seed=11)
    buf = torch.full((6, H, topk), POISON_OUT, dtype=torch.int32, device=DEVICE)
    out = buf.permute(1, 0, 2)[:, :4]
    run_selector(scores, seq_lens.to(DEVICE), Q, topk, (2, 128, False, True), out_view=(buf, out))
    check_exact(out, scores, seq_lens, Q, topk)
    assert bool((buf[4:] == POISON_OUT).all())


# ------------------------------------------------------------------------------------------------
# §12.11 / §12.12 sparse table

SEQ_LENS_12_11 = [127, 128, 129, 255, 256, 257, 1, 4097, 65537, 0]


def _synthetic_decode_scores(seq_lens, Q, S, seed):
    """Scores shaped like the scorer's (local block forced to 1e29, one init block 1e30)."""
    g = torch.Generator().manual_seed(seed)
    total_q = len(seq_lens) * Q
    s = torch.randn((1, total_q, S), generator=g)
    for row in range(total_q):
        nb = row_geometry(seq_lens, Q, row)[3]
        if nb:
            s[0, row, 0] = 1e30
            s[0, row, nb - 1] = 1e29
    return s


def _attention_table(R, width, seed):
    g = torch.Generator().manual_seed(seed)
    # page ids disjoint from any index-table page id used in these tests (>= 100000)
    return (torch.randperm(R * width * 4, generator=g)[: R * width].reshape(R, width)
            + 100000).to(torch.int32)


@pytest.mark.parametrize("stride,cfg", [
    (8, (8, 128, True, True)),
    (16, (1, 128, False, False)),
    (8, (1, 512, True, False)),  # the row's attention-table entries read into registers
], ids=["stride8_C8_single_adapt", "stride16_C1_tiled", "stride8_C1_single_pages_in_registers"])
def test_fused_emission_matches_standalone_builder(stride, cfg):
    Q, topk = 4, 16
    C, BK, single = cfg[:3]
    # a single tile must hold every row: 65537 tokens (513 blocks) become 65535 there
    lens = [min(n, C * BK * 128 - 1) if single else n for n in SEQ_LENS_12_11]
    R = len(lens)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    max_block = cdiv(max(lens), 128)
    S = cdiv(max_block, 16) * 16
    scores = _synthetic_decode_scores(lens, Q, S, seed=stride).to(DEVICE)
    attn = _attention_table(R, max_block, seed=stride).to(DEVICE)
    out, table, ctx = run_selector(scores, seq_lens.to(DEVICE), Q, topk, cfg, emit_stride=stride,
                                   attn=attn)
    check_exact(out, scores, seq_lens, Q, topk)
    ref_table, ref_ctx = build_sparse_block_table_decode(out, attn, seq_lens.to(DEVICE), Q, stride)
    assert torch.equal(table.cpu(), ref_table.cpu())
    assert torch.equal(ctx.cpu(), ref_ctx.cpu())
    py_table, py_ctx = reference_sparse_table(out, attn, seq_lens, Q, stride)
    assert torch.equal(table.cpu(), py_table)
    assert torch.equal(ctx.cpu(), py_ctx)


def _run_builder_poisoned(ids, attn, seq_lens, Q, stride):
    total_q, topk = ids.shape[1], ids.shape[2]
    table = torch.full((total_q, topk * 8), POISON_TABLE, dtype=torch.int32, device=DEVICE)
    ctx = torch.full((total_q,), POISON_TABLE, dtype=torch.int32, device=DEVICE)
    launch_sparse_table_decode(ids.to(DEVICE), attn.to(DEVICE), seq_lens.to(DEVICE), Q, table, ctx,
                               stride)
    return table.cpu(), ctx.cpu()


def test_sparse_table_rules_hand_examples():
    """Full blocks in selector order, tail last, pages A[b]*stride + j, zero fill, ctx rule."""
    A = torch.tensor([[7, 3, 11, 5, 2]], dtype=torch.int32)
    topk = 4
    # abs_pos 299: self_blk 2 (tail), causal_len 300; 5 is a future block, -1 padding
    cases = [
        ([2, 4, 0, 1], 300, 8, [0, 1, 2], 2 * 128 + 44),
        ([1, 2, 0, -1], 300, 16, [1, 0, 2], 2 * 128 + 44),
        ([1, 0, -1, -1], 300, 16, [1, 0], 256),
        ([2, -1, -1, -1], 300, 8, [2], 44),
        ([0, -1, -1, -1], 100, 8, [0], 100),   # tail is block 0
        ([1, 0, -1, -1], 129, 8, [0, 1], 129),  # tail (1) comes first in ids, stored last
        ([-1, -1, -1, -1], 300, 8, [], 0),
        ([0, 1, 2, 3], 0, 8, [], 0),            # padding request
    ]
    for ids, seq_len, stride, order, ctx_want in cases:
        t, c = _run_builder_poisoned(torch.tensor([[ids]], dtype=torch.int32), A,
                                     torch.tensor([seq_len], dtype=torch.int32), 1, stride)
        want = [0] * (topk * 8)
        for k, b in enumerate(order):
            want[8 * k: 8 * k + 8] = [int(A[0, b]) * stride + j for j in range(8)]
        assert t[0].tolist() == want, (ids, seq_len)
        assert int(c[0]) == ctx_want, (ids, seq_len)
        assert (t[0].tolist(), int(c[0])) == sparse_table_row(ids, A[0].tolist(), seq_len - 1,
                                                              topk, stride)


@pytest.mark.parametrize("topk,stride", [(16, 8), (13, 16)])
def test_sparse_table_builder_random_vs_reference(topk, stride):
    """Random ids (future blocks, -1, tails, out-of-order) incl. empty speculative rows."""
    Q = 4
    lens = SEQ_LENS_12_11 + [2]
    R, total_q = len(lens), len(lens) * Q
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    width = cdiv(max(lens), 128) + 3
    attn = _attention_table(R, width, seed=topk)
    g = torch.Generator().manual_seed(topk + stride)
    ids = torch.full((1, total_q, topk), -1, dtype=torch.int32)
    for row in range(total_q):
        nb = max(row_geometry(lens, Q, row)[3], 1)
        pool = torch.randperm(min(nb + 2, width), generator=g)[:topk]  # may include future ids
        n = int(torch.randint(0, len(pool) + 1, (1,), generator=g))
        ids[0, row, :n] = pool[:n].to(torch.int32)
    table, ctx = _run_builder_poisoned(ids, attn, seq_lens, Q, stride)
    ref_table, ref_ctx = reference_sparse_table(ids, attn, seq_lens, Q, stride)
    assert torch.equal(table, ref_table)
    assert torch.equal(ctx, ref_ctx)
    for row in range(total_q):  # empty rows: all-zero, ctx 0
        if row_geometry(lens, Q, row)[2] == 0:
            assert int(ctx[row]) == 0 and not bool(table[row].any())


def test_alloc_and_page_stride_helpers():
    ids = torch.zeros((1, 5, 13), dtype=torch.int32, device=DEVICE)
    table, ctx = alloc_sparse_block_table(ids)
    assert table.shape == (5, 104) and ctx.shape == (5,)
    assert table.dtype == ctx.dtype == torch.int32 and table.device == ids.device
    with pytest.raises(ValueError,
                       match=r"^topk_idx: must be \[1, total_q, topk\] \(one index head\)"):
        alloc_sparse_block_table(torch.zeros((2, 5, 13), dtype=torch.int32))
    k = torch.empty((80, 16, 1, 8))
    assert sparse_block_page_stride(k, torch.empty((80, 16, 1, 8))) == 8
    assert sparse_block_page_stride(k, torch.empty((72, 16, 1, 8))) == 16
    with pytest.raises(ValueError, match="^v_cache: 70 pages"):
        sparse_block_page_stride(k, torch.empty((70, 16, 1, 8)))
    with pytest.raises(ValueError, match="^topk_idx: total_q = 5 rows must equal num_reqs · "
                                         "decode_query_len"):
        build_sparse_block_table_decode(torch.zeros((1, 5, 4), dtype=torch.int32, device=DEVICE),
                                        torch.zeros((2, 4), dtype=torch.int32, device=DEVICE),
                                        torch.ones(2, dtype=torch.int32, device=DEVICE), 2)


# ------------------------------------------------------------------------------------------------
# §12.10 end-to-end index_decode vs dense reference; emission through the wrapper


E2E_CASES = [
    # (H, Q, Qmax, lens, init_blocks, local_blocks, hardware)
    (1, 1, 1, [65537 + 60], 0, 1, None),     # > 512 blocks: crosses the atomic path
    (2, 1, 4, [1000, 300, 0], 1, 1, None),
    (4, 4, 4, [1500, 3], 2, 3, "gfx950"),
    (4, 3, 8, [1200, 2], 0, 1, None),
]


@pytest.mark.parametrize("H,Q,Qmax,lens,init_blocks,local_blocks,hardware", E2E_CASES,
                         ids=[f"H{c[0]}_Q{c[1]}_Qmax{c[2]}" for c in E2E_CASES])
def test_index_decode_matches_dense_reference(H, Q, Qmax, lens, init_blocks, local_blocks,
                                              hardware):
    inputs, max_block = make_decode_inputs(H, Q, lens, seed=H * 10 + Q)
    topk = 16
    out = torch.full((H, len(lens) * Q + 2, topk), POISON_OUT, dtype=torch.int32, device=DEVICE)
    counter = torch.zeros((H, len(lens) * Q + 2), dtype=torch.int32, device=DEVICE)
    got = index_decode(**inputs, topk=topk, init_blocks=init_blocks, local_blocks=local_blocks,
                       num_kv_heads=H, decode_query_len=Q, max_decode_query_len=Qmax, out=out,
                       completion_counter=counter, hardware=hardware)
    assert got.data_ptr() == out.data_ptr() and got.shape == (H, len(lens) * Q, topk)
    assert bool((out[:, len(lens) * Q:] == POISON_OUT).all())
    assert int(counter.abs().sum()) == 0
    ref = dense_scores(inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"],
                       inputs["seq_lens"], Q, max_block, init_blocks, local_blocks)
    assert_topk_sets_match(got, ref, inputs["seq_lens"], Q, topk, tol=1e-5)


@pytest.mark.parametrize("stride", [8, 16])
def test_index_decode_fused_emission(stride):
    """Wrapper emission == selector -> standalone builder; tables come from the attention table
    (disjoint from the index table); out address preserved (§12.11, §12.12)."""
    Q, topk = 4, 16
    # stride 8 through the gfx950 <= 128-block branch, stride 16 through the general branch
    lens = [127, 128, 129, 255, 1, 0, 4097] if stride == 8 else [256, 257, 2, 600]
    hardware = "gfx950" if stride == 8 else None
    inputs, max_block = make_decode_inputs(1, Q, lens, seed=stride)
    R, total_q = len(lens), len(lens) * Q
    attn = _attention_table(R, max_block + 1, seed=stride + 1).to(DEVICE)
    table = torch.full((total_q, topk * 8), POISON_TABLE, dtype=torch.int32, device=DEVICE)
    ctx = torch.full((total_q,), POISON_TABLE, dtype=torch.int32, device=DEVICE)
    out = torch.full((1, total_q + 4, topk), POISON_OUT, dtype=torch.int32, device=DEVICE)
    got = index_decode(**inputs, topk=topk, init_blocks=0, local_blocks=1, num_kv_heads=1,
                       decode_query_len=Q, max_decode_query_len=Q, out=out,
                       attention_block_table=attn, sparse_block_table_out=table,
                       sparse_context_lens_out=ctx, block_page_stride=stride, hardware=hardware)
    assert got.data_ptr() == out.data_ptr()
    ref_table, ref_ctx = build_sparse_block_table_decode(got, attn, inputs["seq_lens"], Q, stride)
    assert torch.equal(table.cpu(), ref_table.cpu()) and torch.equal(ctx.cpu(), ref_ctx.cpu())
    py_table, py_ctx = reference_sparse_table(got, attn, inputs["seq_lens"], Q, stride)
    assert torch.equal(table.cpu(), py_table) and torch.equal(ctx.cpu(), py_ctx)
    pages = set((attn.cpu().flatten() * stride).tolist())
    nz = table.cpu().flatten()
    nz = nz[nz != 0]
    assert all(int(v) - int(v) % 8 in pages for v in nz), "table entries not from attention table"
    for row in range(total_q):
        if row_geometry(lens, Q, row)[2] == 0:
            assert int(ctx[row]) == 0 and not bool(table[row].any())


def test_index_decode_missing_block_page_stride_is_rejected_and_fresh_outputs():
    """§5 item 3: block_page_stride is one of the four all-or-none sparse-table arguments;
    with stride 8 and no out/counter -> fresh tensors."""
    Q, topk = 1, 16
    lens = [300, 129]
    inputs, max_block = make_decode_inputs(1, Q, lens, seed=9)
    attn = _attention_table(2, max_block, seed=2).to(DEVICE)
    table = torch.full((2, 128), POISON_TABLE, dtype=torch.int32, device=DEVICE)
    ctx = torch.full((2,), POISON_TABLE, dtype=torch.int32, device=DEVICE)
    kw = dict(inputs, topk=topk, init_blocks=0, local_blocks=1, num_kv_heads=1,
              decode_query_len=Q, max_decode_query_len=1, attention_block_table=attn,
              sparse_block_table_out=table, sparse_context_lens_out=ctx)
    with pytest.raises(ValueError, match="^block_page_stride: missing"):
        index_decode(**kw)
    got = index_decode(**kw, block_page_stride=8)
    assert got.shape == (1, 2, topk) and got.dtype == torch.int32
    ref_table, ref_ctx = reference_sparse_table(got, attn, inputs["seq_lens"], Q, 8)
    assert torch.equal(table.cpu(), ref_table) and torch.equal(ctx.cpu(), ref_ctx)


def test_index_decode_scores_variants_bitwise_equal():
    inputs, _ = make_decode_inputs(2, 2, [260, 1, 0], D=16, seed=4)
    args = dict(inputs, init_blocks=1, local_blocks=1, decode_query_len=2, max_decode_query_len=4)
    a = index_decode_scores(**args, variant="split")
    b = index_decode_scores(**args, variant="balanced")
    assert a.shape == (2, 6, 16) and a.dtype == torch.float32
    for row in range(6):
        nb = cdiv(max(int(inputs["seq_lens"][row // 2]), 0), 128)
        assert torch.equal(a[:, row, :nb].view(torch.int32), b[:, row, :nb].view(torch.int32))
    with pytest.raises(ValueError, match="^variant: "):
        index_decode_scores(**args, variant="fast")


# ------------------------------------------------------------------------------------------------
# §12.13 validation


def _valid_call(H=1, Q=1, Qmax=1, emit=True, lens=(300, 129), topk=16):
    inputs, max_block = make_decode_inputs(H, Q, list(lens), seed=1)
    R, total_q = len(lens), len(lens) * Q
    kw = dict(inputs, topk=topk, init_blocks=0, local_blocks=1, num_kv_heads=H,
              decode_query_len=Q, max_decode_query_len=Qmax)
    if emit:
        kw.update(attention_block_table=torch.zeros((R, max_block), dtype=torch.int32,
                                                    device=DEVICE),
                  sparse_block_table_out=torch.zeros((total_q, topk * 8), dtype=torch.int32,
                                                     device=DEVICE),
                  sparse_context_lens_out=torch.zeros((total_q,), dtype=torch.int32,
                                                      device=DEVICE),
                  block_page_stride=8)
    return kw


def _i32(*shape):
    return torch.zeros(shape, dtype=torch.int32, device=DEVICE)


def _bad(name, value):
    def edit(kw):
        kw[name] = value(kw) if callable(value) else value
    return edit


def _drop(*names):
    def edit(kw):
        for n in names:
            kw.pop(n)
    return edit


VALIDATION_CASES = [
    # (id, call kwargs overrides for _valid_call, edit, message regex)
    ("heads", {}, _bad("num_kv_heads", 2), "^num_kv_heads: idx_q has H = 1"),
    ("q_zero", {}, _bad("decode_query_len", 0),
     "^decode_query_len: must satisfy 0 < decode_query_len ≤ max_decode_query_len, got 0"),
    ("q_over_max", {"Q": 2, "Qmax": 2}, _bad("max_decode_query_len", 1),
     "^decode_query_len: must satisfy 0 < decode_query_len ≤ max_decode_query_len, got 2 and 1"),
    ("total_q", {}, _bad("seq_lens", lambda kw: torch.tensor([300, 129, 5], dtype=torch.int32,
                                                             device=DEVICE)),
     "^idx_q: total_q = 2 rows must equal num_reqs · decode_query_len = 3 · 1"),
    ("only_attention", {}, _drop("sparse_block_table_out", "sparse_context_lens_out",
                                 "block_page_stride"),
     "^sparse_block_table_out, sparse_context_lens_out, block_page_stride: missing; "
     "attention_block_table was given"),
    ("no_ctx", {}, _drop("sparse_context_lens_out"),
     "^sparse_context_lens_out: missing; attention_block_table was given"),
    ("no_attention", {}, _drop("attention_block_table"),
     "^sparse_block_table_out, sparse_context_lens_out, block_page_stride: given without "
     "attention_block_table"),
    ("stride_without_table", {"emit": False}, _bad("block_page_stride", 8),
     "^block_page_stride: given without attention_block_table"),
    ("emit_h2", {"H": 2}, lambda kw: None,
     r"^attention_block_table: sparse-table emission needs one index head \(H == 1\)"),
    ("stride_4", {}, _bad("block_page_stride", 4), "^block_page_stride: must be 8 or 16"),
    ("stride_32", {}, _bad("block_page_stride", 32), "^block_page_stride: must be 8 or 16"),
    ("table_shape", {}, _bad("sparse_block_table_out", lambda kw: _i32(2, 129)),
     r"^sparse_block_table_out: shape must be \(total_q, topk·8\)"),
    ("table_rows", {}, _bad("sparse_block_table_out", lambda kw: _i32(3, 128)),
     r"^sparse_block_table_out: shape must be \(total_q, topk·8\)"),
    ("ctx_shape", {}, _bad("sparse_context_lens_out", lambda kw: _i32(2, 1)),
     r"^sparse_context_lens_out: (must be 1-D|shape must be)"),
    ("attn_rows", {}, _bad("attention_block_table", lambda kw: _i32(3, 3)),
     r"^attention_block_table: needs num_reqs"),
    ("attn_1d", {}, _bad("attention_block_table", lambda kw: _i32(6)),
     r"^attention_block_table: must be 2-D"),
    ("attn_dtype", {}, _bad("attention_block_table",
                            lambda kw: kw["attention_block_table"].long()),
     "^attention_block_table: dtype must be int32"),
    ("table_dtype", {}, _bad("sparse_block_table_out",
                             lambda kw: kw["sparse_block_table_out"].long()),
     "^sparse_block_table_out: dtype must be int32"),
    ("ctx_dtype", {}, _bad("sparse_context_lens_out",
                           lambda kw: kw["sparse_context_lens_out"].float()),
     "^sparse_context_lens_out: dtype must be int32"),
    ("attn_device", {}, _bad("attention_block_table",
                             lambda kw: torch.empty((2, 3), dtype=torch.int32, device="meta")),
     "^attention_block_table: must be on (the same device|a GPU)"),
    ("table_device", {}, _bad("sparse_block_table_out",
                              lambda kw: torch.empty((2, 128), dtype=torch.int32, device="meta")),
     "^sparse_block_table_out: must be on (the same device|a GPU)"),
    ("ctx_device", {}, _bad("sparse_context_lens_out",
                            lambda kw: torch.empty((2,), dtype=torch.int32, device="meta")),
     "^sparse_context_lens_out: must be on (the same device|a GPU)"),
    ("table_col_stride", {}, _bad("sparse_block_table_out", lambda kw: _i32(2, 256)[:, ::2]),
     "^sparse_block_table_out: rows must be contiguous"),
    ("attn_col_stride", {}, _bad("attention_block_table", lambda kw: _i32(2, 6)[:, ::2]),
     "^attention_block_table: rows must be contiguous"),
    ("ctx_stride", {}, _bad("sparse_context_lens_out", lambda kw: _i32(4)[::2]),
     "^sparse_context_lens_out: must have unit stride"),
    ("max_block", {}, _bad("max_seq_len", 65535 * 128 - 127),
     r"^max_seq_len: cdiv\(8388353, 128\) = 65535 sparse blocks; must be < 65535"),
    ("attn_narrow", {}, _bad("attention_block_table", lambda kw: _i32(2, 2)),
     r"^attention_block_table: has 2 columns; needs ≥ max_block"),
    ("counter_1d", {}, _bad("completion_counter", lambda kw: _i32(2)),
     "^completion_counter: must be 2-D"),
    ("counter_heads", {}, _bad("completion_counter", lambda kw: _i32(2, 2)),
     r"^completion_counter: shape must be \[H = 1, ≥ total_q = 2\], got \(2, 2\)"),
    ("counter_short", {}, _bad("completion_counter", lambda kw: _i32(1, 1)),
     r"^completion_counter: shape must be \[H = 1, ≥ total_q = 2\], got \(1, 1\)"),
    ("counter_dtype", {}, _bad("completion_counter",
                               lambda kw: torch.zeros((1, 2), dtype=torch.int64, device=DEVICE)),
     "^completion_counter: dtype must be int32"),
    ("counter_device", {}, _bad("completion_counter",
                                lambda kw: torch.zeros((1, 2), dtype=torch.int32, device="meta")),
     "^completion_counter: must be on (the same device|a GPU)"),
    ("counter_noncontig", {}, _bad("completion_counter", lambda kw: _i32(1, 4)[:, ::2]),
     "^completion_counter: must be contiguous"),
    ("out_shape", {}, _bad("out", lambda kw: _i32(1, 2, 8)), "^out: shape must be"),
    ("out_dtype", {}, _bad("out", lambda kw: torch.zeros((1, 2, 16), dtype=torch.int64,
                                                         device=DEVICE)),
     "^out: dtype must be int32"),
    ("hardware", {}, _bad("hardware", "sm_100"), "^hardware: unknown target"),
    # first failing check wins: partial sparse set (item 3) before max_block (item 5)
    ("order", {}, lambda kw: (kw.pop("sparse_context_lens_out"),
                              kw.__setitem__("max_seq_len", 65535 * 128)),
     "^sparse_context_lens_out: missing; attention_block_table was given"),
]


@pytest.mark.parametrize("case", VALIDATION_CASES, ids=[c[0] for c in VALIDATION_CASES])
def test_index_decode_rejects(case):
    """§5: a ValueError whose message starts with the argument's name (the first failing check
    wins)."""
    _, base, edit, pattern = case
    assert pattern.startswith("^"), "anchor every pattern at the start of the message"
    kw = _valid_call(**base)
    edit(kw)
    with pytest.raises(ValueError, match=pattern):
        index_decode(**kw)


@pytest.mark.skipif(DEVICE != "cpu", reason="CPU-tensor rule only matters without a GPU")
def test_cpu_tensors_need_interpreter(monkeypatch):
    """The device is checked where a plan is made: requesting ``monkeypatch`` makes conftest's
    _forget_patched_plans clear every plan first, so no earlier call of this key hides it.
    (Whether a cached plan must check TRITON_INTERPRET again on each call is a product
    question, not pinned here.)"""
    kw = _valid_call(emit=False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match=r"^idx_q: must be on a GPU device \(CPU tensors need "
                                         r"TRITON_INTERPRET=1\)"):
        index_decode(**kw)


# ------------------------------------------------------------------------------------------------
# §12.14 launch policies: the generated tables (explain_index_decode) against the pinned upstream
# values and against an independent formula implementation (tests/reference_policy.py).

BF16, FP16 = torch.bfloat16, torch.float16

TOPK_PINNED = [
    # (max_block, total_q, H, topk, gfx950) -> (chunks, tile, warps, stages, single, adaptive)
    ((0, 24, 1, 16, True), (2, 512, 8, 2, False, False)),
    ((1, 1, 1, 16, True), (1, 128, 2, 1, True, True)),
    ((74, 4, 1, 16, True), (1, 128, 2, 1, True, True)),
    ((128, 4, 1, 16, True), (1, 128, 2, 1, True, True)),
    ((129, 4, 1, 16, True), (16, 512, 4, 2, True, True)),
    ((512, 4, 1, 16, True), (16, 512, 4, 2, True, True)),
    ((513, 24, 4, 16, True), (16, 512, 4, 2, True, True)),
    ((2760, 5, 2, 16, True), (16, 512, 4, 2, True, True)),
    ((8192, 64, 4, 16, True), (16, 512, 4, 2, True, True)),
    ((8193, 4, 1, 16, True), (16, 512, 8, 2, False, False)),
    ((8193, 16, 1, 16, True), (4, 512, 8, 2, False, False)),
    ((65534, 64, 1, 16, True), (1, 512, 8, 2, False, False)),
    ((513, 16, 1, 13, True), (4, 512, 8, 2, False, False)),
    ((513, 16, 4, 16, False), (1, 512, 8, 2, False, False)),
    # boundaries: non-gfx950 never takes the fast rows; topk != 16 neither
    ((74, 4, 1, 16, False), (16, 512, 8, 2, False, False)),
    ((129, 4, 1, 16, False), (16, 512, 8, 2, False, False)),
    ((128, 4, 1, 8, True), (16, 512, 8, 2, False, False)),
    ((8192, 4, 1, 32, True), (16, 512, 8, 2, False, False)),
]


def generated_topk(max_block, total_q, H, topk, hw):
    # one row per request (the selector's row reads total_q · H; explain refuses a total_q
    # that is no num_reqs · decode_query_len, as index_decode does)
    e = generated.explain_index_decode(hw, "bf16", "bf16", 128, total_q, max_block, total_q, H,
                                       topk, 4)
    return (e["topk_chunks"], e["topk_tile"], e["topk_num_warps"], e["topk_num_stages"],
            e["single_tile"], e["adaptive_merge"])


@pytest.mark.parametrize("args,want", TOPK_PINNED, ids=[str(a) for a, _ in TOPK_PINNED])
def test_topk_policy_pinned(args, want):
    max_block, total_q, H, topk, gfx = args
    hw = "gfx950" if gfx else "generic"  # generic = upstream's non-gfx950 branch
    assert policy.decode_topk_launch_policy(max_block, total_q, H, topk, hw) == want
    assert generated_topk(max_block, total_q, H, topk, hw) == want


@pytest.mark.parametrize("P,chunks", [(1, 16), (4, 16), (5, 8), (8, 8), (9, 4), (16, 4),
                                      (17, 2), (32, 2), (33, 1), (64, 1), (65, 1), (1000, 1)])
def test_topk_policy_general_chunks(P, chunks):
    assert generated_topk(9000, P, 1, 16, "gfx950")[0] == chunks
    assert generated_topk(50, P, 1, 16, "generic")[0] == chunks
    assert policy.decode_topk_launch_policy(50, P, 1, 16, "generic")[0] == chunks


def test_nothing_launched_without_requests():
    e = generated.explain_index_decode("gfx950", BF16, BF16, 128, 0, 10, 0, 1, 16, 1)
    assert e["scorer"] is None and e["topk_chunks"] is None


BUDGET_CASES = [(1, 1024), (8, 1024), (9, 768), (11, 768), (12, None), (19, None), (20, None),
                (64, None), (65, None)]


def generated_score(hw, R, D=128, q=BF16, cache=BF16, H=1, Qmax=1):
    return generated.explain_index_decode(hw, q, cache, D, R, 100, R * Qmax, H, 16, Qmax)


@pytest.mark.parametrize("R,budget", BUDGET_CASES)
def test_score_budget_policy(R, budget):
    assert generated_score("gfx950", R)["program_budget"] == budget
    assert policy.decode_score_program_budget(R, 128, BF16, BF16, "gfx950") == budget
    for hw, D, q, cache in (("generic", 128, BF16, BF16), ("gfx950", 64, BF16, BF16),
                            ("gfx950", 128, FP16, BF16), ("gfx950", 128, BF16, FP16),
                            ("gfx950", 128, BF16, torch.float8_e4m3fn)):
        assert generated_score(hw, R, D, q, cache)["program_budget"] is None


SPLIT_TABLE = [  # (R, default chunks, gfx950 high-batch chunks or None)
    (1, 256, None), (2, 256, None), (3, 128, None), (4, 128, None), (5, 64, None),
    (8, 64, None), (9, 32, None), (16, 32, None), (17, 16, None), (19, 16, None), (20, 16, 32),
    (32, 16, 32), (33, 8, 16), (64, 8, 16), (65, 4, None), (128, 4, None), (129, 2, None),
    (256, 2, None), (257, 1, None), (1000, 1, None),
]


@pytest.mark.parametrize("R,default,high", SPLIT_TABLE)
def test_score_split_policy_table(R, default, high):
    e = generated_score("generic", R)
    assert (e["scorer"], e["kv_chunks"], e["high_batch"]) == ("split", default, False)
    if R >= 12:  # below, gfx950 bf16/D128 takes the balanced scorer
        e = generated_score("gfx950", R)
        want = (high, True) if high is not None else (default, False)
        assert (e["kv_chunks"], e["high_batch"]) == want
    e = generated_score("gfx950", R, D=64)  # not eligible for the fast rows: default grid
    assert (e["kv_chunks"], e["high_batch"]) == (default, False)


@pytest.mark.parametrize("R,D,q,cache,gfx,want", [
    (19, 128, BF16, BF16, True, (16, False)), (20, 128, BF16, BF16, True, (32, True)),
    (32, 128, BF16, BF16, True, (32, True)), (33, 128, BF16, BF16, True, (16, True)),
    (64, 128, BF16, BF16, True, (16, True)), (65, 128, BF16, BF16, True, (4, False)),
    (20, 128, BF16, BF16, False, (16, False)), (20, 64, BF16, BF16, True, (16, False)),
    (20, 128, FP16, BF16, True, (16, False)), (20, 128, BF16, FP16, True, (16, False)),
])
def test_score_split_policy_pinned(R, D, q, cache, gfx, want):
    e = generated_score("gfx950" if gfx else "generic", R, D, q, cache)
    assert (e["kv_chunks"], e["high_batch"]) == want


@pytest.mark.parametrize("R,scorer,warps,stages,H,Qmax", [
    (1, "balanced", 2, 1, 1, 4), (11, "balanced", 2, 1, 4, 4),
    (12, "split", None, None, 1, 4), (19, "split", None, None, 1, 1),
    (20, "split", 2, 1, 1, 4),      # high batch, H == 1
    (40, "split", 4, 2, 2, 4),      # H > 1 and Qmax > 1 wins over high batch
    (64, "split", 2, 1, 2, 1),      # Qmax == 1: high-batch options
    (65, "split", None, None, 1, 4),
])
def test_explain_index_decode_scorer_choice(R, scorer, warps, stages, H, Qmax):
    e = generated.explain_index_decode("gfx950", BF16, BF16, 128, R, 100, R * Qmax, H, 16, Qmax)
    assert {"scorer", "program_budget", "kv_chunks", "high_batch", "topk_chunks", "topk_tile",
            "single_tile", "adaptive_merge", "num_warps", "num_stages"} <= set(e)
    assert (e["scorer"], e["num_warps"], e["num_stages"]) == (scorer, warps, stages)
    if scorer == "balanced":
        assert e["program_budget"] == (1024 if R <= 8 else 768) and e["kv_chunks"] is None
    else:
        assert e["program_budget"] is None
    with pytest.raises(ValueError, match="^hardware: unknown target"):
        generated.explain_index_decode("gfx942", BF16, BF16, 128, R, 100, R, H, 16, Qmax)


def test_generated_policy_equals_reference_everywhere():
    """gfx950 and generic: the generated tables equal the upstream formulas on a dense sweep."""
    Rs = (1, 2, 3, 7, 8, 9, 11, 12, 16, 19, 20, 31, 32, 33, 64, 65, 128, 129, 256, 257, 4096)
    blocks = (0, 1, 74, 128, 129, 512, 513, 8192, 8193, 65534)
    for hw in ("gfx950", "generic"):
        for q, cache, D in ((BF16, BF16, 128), (BF16, BF16, 64), (FP16, BF16, 128),
                            (BF16, FP16, 128), (BF16, torch.float8_e4m3fn, 128)):
            for R in Rs:
                for H in (1, 2, 4):
                    for Qmax in (1, 2, 4, 8):
                        got = generated.explain_index_decode(hw, q, cache, D, R, 100, R, H, 16,
                                                             Qmax)
                        want = policy.explain_index_decode(hw, q, cache, D, R, 100, R, H, 16,
                                                           Qmax)
                        assert {k: got[k] for k in want} == want, (hw, q, cache, D, R, H, Qmax)
        for max_block in blocks:
            for P in (1, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64, 1000):
                for topk in (1, 8, 13, 15, 16, 17, 32, 512):
                    assert generated_topk(max_block, P, 1, topk, hw) == \
                        policy.decode_topk_launch_policy(max_block, P, 1, topk, hw)


def test_sm90_policy_is_feasible_everywhere():
    """Whatever the tuner wrote: single-tile only where safe, next_pow2(topk) fits the tile."""
    for max_block in (0, 1, 64, 65, 128, 129, 256, 257, 1024, 4096, 8192, 8193, 65534):
        for P in (1, 4, 16, 64, 256):
            for topk in (1, 16, 17, 128, 512):
                chunks, tile, _, _, single, _ = generated_topk(max_block, P, 1, topk, "sm_90")
                assert triton.next_power_of_2(topk) <= tile
                assert not single or max_block <= chunks * tile


# ------------------------------------------------------------------------------------------------
# GPU tests (realistic sizes, CUDA graphs). Skipped without a GPU.


def _gpu_decode_inputs(R, Q, H, max_seq_len, D=128, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    max_block = cdiv(max_seq_len, 128)
    num_pages = R * max_block + 7
    cache = torch.randn((num_pages, 128, D), generator=g, device="cuda").to(torch.bfloat16)
    block_table = torch.randperm(num_pages, generator=g, device="cuda")[: R * max_block]
    q = torch.randn((R * Q, H, D), generator=g, device="cuda").to(torch.bfloat16)
    return q, cache, block_table.reshape(R, max_block).to(torch.int32), max_block


def _gpu_seq_lens(R, max_seq_len, seed, Q, spread=False):
    """Random lengths with the capacity, a padding request, speculative rows with
    query_pos < 0 and a 130-block request among them: in requests 0..3, or with ``spread`` in
    requests that change with the seed (each request is padding for some seeds, not others)."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, max_seq_len + 1, (R,), generator=g)
    at = torch.randperm(R, generator=g).tolist() if spread else list(range(R))
    lens[at[0]] = max_seq_len  # capacity
    if R > 3:
        lens[at[1]] = 0  # padding request
        lens[at[2]] = Q - 2 if Q > 2 else 1  # speculative rows with query_pos < 0
        lens[at[3]] = 129 * 128 + 1
    return lens.clamp(max=max_seq_len).to(torch.int32).cuda()


@gpu
@pytest.mark.parametrize("cfg", [
    (16, 512, True, True), (16, 512, False, False), (4, 512, False, False),
    (1, 512, False, False), (2, 512, False, True), (1, 128, True, True),
])
def test_gpu_selector_exact_large(cfg):
    """128k-token rows (1025 blocks), 64 requests x Q 4, synthetic scores with ties/specials."""
    R, Q, H, topk = 64, 4, 1, 16
    max_block = 1025 if cfg[1] == 512 else 128
    if cfg[2]:
        max_block = min(max_block, cfg[0] * cfg[1])
    S = cdiv(max_block, 16) * 16
    g = torch.Generator(device="cuda").manual_seed(0)
    scores = torch.randn((H, R * Q, S), generator=g, device="cuda")
    scores[:, :, ::97] = 0.5
    scores[:, ::5, 3] = float("nan")
    scores[:, ::7, 5] = -0.0
    scores[:, ::7, 6] = 0.0
    scores[:, 1::3, 511:514] = float("inf")
    seq_lens = _gpu_seq_lens(R, max_block * 128, 1, Q)
    # launch options as the policy pairs them with each shape
    num_warps, num_stages = (2, 1) if cfg[1] == 128 else (4, 2) if cfg[2] else (8, 2)
    for topk in (16, 13):
        out = run_selector(scores, seq_lens, Q, topk, cfg, num_warps=num_warps,
                           num_stages=num_stages)
        check_exact(out, scores, seq_lens.cpu(), Q, topk)


@gpu
@pytest.mark.parametrize("H,Q,Qmax", [(1, 1, 1), (2, 1, 4), (4, 4, 4), (4, 3, 8), (1, 4, 4)])
def test_gpu_index_decode_dense_reference(H, Q, Qmax):
    R, max_seq_len = 64, 128 * 1024
    q, cache, block_table, max_block = _gpu_decode_inputs(R, Q, H, max_seq_len)
    seq_lens = _gpu_seq_lens(R, max_seq_len, 2, Q)
    for hardware in (None, "gfx950"):
        counter = torch.zeros((H, R * Q), dtype=torch.int32, device="cuda")
        got = index_decode(q, cache, block_table, seq_lens, max_seq_len, 16, 0, 1, H, Q, Qmax,
                           completion_counter=counter, hardware=hardware)
        torch.cuda.synchronize()
        assert int(counter.abs().sum()) == 0
        ref = dense_scores(q, cache, block_table, seq_lens, Q, max_block, 0, 1)
        assert_topk_sets_match(got, ref, seq_lens, Q, 16, tol=1e-3)


@gpu
@pytest.mark.parametrize("stride", [8, 16])
def test_gpu_fused_emission_matches_standalone(stride):
    Q, topk = 4, 16
    lens = SEQ_LENS_12_11 + [131072, 128 * 1024 - 1]
    R = len(lens)
    max_seq_len = 131072
    q, cache, block_table, max_block = _gpu_decode_inputs(R, Q, 1, max_seq_len)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    attn = _attention_table(R, max_block, seed=stride).cuda()
    table = torch.full((R * Q, topk * 8), POISON_TABLE, dtype=torch.int32, device="cuda")
    ctx = torch.full((R * Q,), POISON_TABLE, dtype=torch.int32, device="cuda")
    for hardware in (None, "gfx950"):
        got = index_decode(q, cache, block_table, seq_lens, max_seq_len, topk, 0, 1, 1, Q, Q,
                           attention_block_table=attn, sparse_block_table_out=table,
                           sparse_context_lens_out=ctx, block_page_stride=stride,
                           hardware=hardware)
        ref_table, ref_ctx = build_sparse_block_table_decode(got, attn, seq_lens, Q, stride)
        assert torch.equal(table, ref_table) and torch.equal(ctx, ref_ctx)
        py_table, py_ctx = reference_sparse_table(got, attn, seq_lens, Q, stride)
        assert torch.equal(table.cpu(), py_table) and torch.equal(ctx.cpu(), py_ctx)


class _GraphedDecode:
    """index_decode captured in a CUDA graph with static inputs/outputs (§10 graph rules)."""

    def __init__(self, R, Q, H, max_seq_len, hardware, emit, seed):
        self.Q, self.H, self.max_seq_len, self.hardware, self.emit = Q, H, max_seq_len, hardware, emit
        self.q, self.cache, self.block_table, self.max_block = _gpu_decode_inputs(
            R, Q, H, max_seq_len, seed=seed)
        self.seq_lens = _gpu_seq_lens(R, max_seq_len, seed, Q)
        self.out = torch.full((H, R * Q + 8, 16), POISON_OUT, dtype=torch.int32, device="cuda")
        self.counter = torch.zeros((H, R * Q + 8), dtype=torch.int32, device="cuda")
        self.kw = {}
        if emit:
            self.attn = _attention_table(R, self.max_block, seed=seed).cuda()
            self.kw = page16_outputs(self.attn, R * Q)
        self.graph, self.result = capture(self._call)
        assert self.result.data_ptr() == self.out.data_ptr()

    def replay(self):
        """Poison every output, then replay: a replay that skips a write leaves the poison."""
        tables = ((self.kw["sparse_block_table_out"], POISON_TABLE),
                  (self.kw["sparse_context_lens_out"], POISON_TABLE)) if self.emit else ()
        replay_poisoned(self.graph, ((self.out, POISON_OUT),) + tables)

    def _call(self, counter=None, out=None, kw=None):
        return index_decode(self.q, self.cache, self.block_table, self.seq_lens, self.max_seq_len,
                            16, 0, 1, self.H, self.Q, self.Q,
                            self.out if out is None else out,
                            completion_counter=self.counter if counter is None else counter,
                            hardware=self.hardware, **(self.kw if kw is None else kw))

    def check_against_eager(self):
        eager_kw = {}
        if self.emit:
            eager_kw = dict(self.kw, sparse_block_table_out=torch.full_like(
                self.kw["sparse_block_table_out"], POISON_TABLE),
                sparse_context_lens_out=torch.full_like(
                self.kw["sparse_context_lens_out"], POISON_TABLE))
        eager = self._call(counter=torch.zeros_like(self.counter),
                           out=torch.full_like(self.out, POISON_OUT), kw=eager_kw)
        torch.cuda.synchronize()
        assert torch.equal(self.result, eager)
        if self.emit:
            assert torch.equal(self.kw["sparse_block_table_out"], eager_kw["sparse_block_table_out"])
            assert torch.equal(self.kw["sparse_context_lens_out"],
                               eager_kw["sparse_context_lens_out"])


@gpu
@pytest.mark.parametrize("hardware", [None, "gfx950"])
def test_gpu_graph_replay_mutated_seq_lens(hardware):
    """Capture once, mutate seq_lens in place (single- and multi-chunk rows, padding, empty
    speculative rows, in requests that change between replays), replay into poisoned outputs:
    equals eager; counter zero after every replay (§12.8)."""
    R, Q, H, max_seq_len = 64, 4, 1, 128 * 1024
    gd = _GraphedDecode(R, Q, H, max_seq_len, hardware, emit=True, seed=3)
    # lengths other than the warm-ups' (which wrote the outputs the graph would leave alone)
    gd.seq_lens.copy_(_gpu_seq_lens(R, max_seq_len, 103, Q, spread=True))
    ref = dense_scores(gd.q, gd.cache, gd.block_table, gd.seq_lens, Q, gd.max_block, 0, 1)
    gd.replay()
    torch.cuda.synchronize()
    assert int(gd.counter.abs().sum()) == 0
    assert_topk_sets_match(gd.result, ref, gd.seq_lens, Q, 16, tol=1e-3)
    gd.check_against_eager()
    for seed in range(4, 10):
        gd.seq_lens.copy_(_gpu_seq_lens(R, max_seq_len if seed % 2 else 4000, seed, Q,
                                        spread=True))
        gd.replay()
        torch.cuda.synchronize()
        assert int(gd.counter.abs().sum()) == 0
        gd.check_against_eager()


@gpu
def test_gpu_many_alternating_replays_counter_zero():
    """Three graphs (different batch shapes and selector branches) sharing only the stream,
    replayed round-robin many times with changing seq_lens; every counter stays zero and the
    results stay equal to eager calls."""
    a = _GraphedDecode(8, 4, 1, 128 * 1024, None, emit=False, seed=11)  # general branch, C 2
    b = _GraphedDecode(5, 2, 1, 128 * 1024, "gfx950", emit=True, seed=12)  # C 16, adaptive
    c = _GraphedDecode(16, 1, 4, 64 * 1024, None, emit=False, seed=13)  # H 4, C 1
    graphs = (a, b, c)
    for i in range(300):
        g = graphs[i % 3]
        if i % 10 == 0:
            g.seq_lens.copy_(_gpu_seq_lens(g.seq_lens.shape[0], g.max_seq_len, 100 + i, g.Q,
                                           spread=True))
        g.replay()
        if i % 25 == 0:
            torch.cuda.synchronize()
            assert all(int(x.counter.abs().sum()) == 0 for x in graphs)
    torch.cuda.synchronize()
    assert all(int(x.counter.abs().sum()) == 0 for x in graphs)
    for x in graphs:
        x.check_against_eager()


PDL_CASES = [
    # (R, Q, max_seq_len, score_launch, topk_launch without pdl)
    (1, 4, 8192, dict(variant="index_score_split", kv_chunks=64, high_batch=False,
                      static_chunks=True, num_warps=4, num_stages=2),
     dict(topk_chunks=1, topk_tile=128, single_tile=True, adaptive_merge=False, num_warps=4,
          num_stages=2)),
    (11, 1, 131072, dict(variant="index_score_split", kv_chunks=512, high_batch=False,
                         num_warps=4, num_stages=2),
     dict(topk_chunks=8, topk_tile=128, single_tile=False, adaptive_merge=True, num_warps=4,
          num_stages=2)),
    (16, 4, 131072, dict(variant="index_score_balanced", program_budget=264, num_warps=4,
                         num_stages=3),
     dict(topk_chunks=4, topk_tile=512, single_tile=True, adaptive_merge=False, num_warps=8,
          num_stages=2)),
]


@gpu
@pytest.mark.parametrize("R,Q,max_seq_len,score_launch,topk_launch", PDL_CASES,
                         ids=["R1_8k_single_chunk", "R11_128k_multi_chunk", "R16_128k_balanced"])
def test_gpu_pdl_selector_is_exact_eager_and_graphed(R, Q, max_seq_len, score_launch,
                                                     topk_launch):
    """The selector launched as a programmatic dependent of the scorer gives bit-identical ids,
    page-16 tables and context lengths, eagerly and in CUDA-graph replays (seq_lens mutated
    between replays), and leaves the counter at zero."""
    from generated import _runtime

    if not _runtime.programmatic_launch(torch.device("cuda")):
        pytest.skip("needs programmatic dependent launch (NVIDIA compute capability ≥ 9.0)")
    q, cache, block_table, max_block = _gpu_decode_inputs(R, Q, 1, max_seq_len, seed=R)
    seq_lens = _gpu_seq_lens(R, max_seq_len, R, Q)
    attn = _attention_table(R, max_block, seed=3).cuda()
    total_q = R * Q
    bufs = {pdl: (torch.full((1, total_q, 16), POISON_OUT, dtype=torch.int32, device="cuda"),
                  torch.full((total_q, 128), POISON_TABLE, dtype=torch.int32, device="cuda"),
                  torch.full((total_q,), POISON_TABLE, dtype=torch.int32, device="cuda"),
                  torch.zeros((1, total_q), dtype=torch.int32, device="cuda"))
            for pdl in (False, True)}

    def call(pdl):
        out, table, ctx, counter = bufs[pdl]
        return generated.index_decode_with_launch(
            score_launch, {**topk_launch, "pdl": pdl}, q, cache, block_table, seq_lens,
            max_seq_len, 16, 0, 1, 1, Q, Q, out, attention_block_table=attn,
            sparse_block_table_out=table, sparse_context_lens_out=ctx, block_page_stride=8,
            completion_counter=counter, hardware="sm_90")

    def same():
        torch.cuda.synchronize()
        for a, b in zip(bufs[False], bufs[True]):
            assert torch.equal(a, b)
        assert int(bufs[True][3].abs().sum()) == 0
        assert not bool((bufs[True][0] == POISON_OUT).any())

    for pdl in (False, True):
        call(pdl)
    same()
    ref = dense_scores(q, cache, block_table, seq_lens, Q, max_block, 0, 1)
    assert_topk_sets_match(bufs[True][0], ref, seq_lens, Q, 16, tol=1e-3)
    graphs = {pdl: capture(lambda: call(pdl), warmups=0)[0] for pdl in (False, True)}
    g = torch.Generator().manual_seed(7)
    for _ in range(3):
        seq_lens.copy_(torch.randint(1, max_seq_len + 1, (R,), generator=g).to(torch.int32))
        for pdl in (False, True):
            for t in bufs[pdl][:3]:
                t.fill_(POISON_OUT)
            graphs[pdl].replay()
        same()


def test_pdl_row_runs_as_plain_launch_where_unavailable(monkeypatch, caplog):
    """A pdl selector row gives the same results without programmatic dependent launch (the
    interpreter has none) and the dispatch log says the launch was a plain one."""
    import logging

    from generated import _runtime

    monkeypatch.setenv("KSPEC_LOG_DISPATCH", "1")
    monkeypatch.setattr(_runtime, "_seen_keys", set())
    # a device without programmatic dependent launch (the interpreter; on a GPU, pretend)
    monkeypatch.setattr(_runtime, "programmatic_launch", lambda device: False)
    caplog.set_level(logging.INFO, logger="generated")
    inputs, max_block = make_decode_inputs(1, 1, [700, 129], seed=4)
    score = dict(variant="index_score_split", kv_chunks=4, high_batch=False, static_chunks=True,
                 num_warps=4, num_stages=2)
    sel = dict(topk_chunks=2, topk_tile=128, single_tile=False, adaptive_merge=True,
               num_warps=4, num_stages=1)
    outs = []
    for pdl in (True, False):  # the log holds the first launch of a dispatch key
        counter = torch.zeros((1, 2), dtype=torch.int32, device=DEVICE)
        outs.append(generated.index_decode_with_launch(
            score, {**sel, "pdl": pdl}, **inputs, topk=4, init_blocks=0, local_blocks=1,
            num_kv_heads=1, decode_query_len=1, max_decode_query_len=1,
            completion_counter=counter, hardware="sm_90"))
        assert int(counter.abs().sum()) == 0
    assert torch.equal(outs[0], outs[1])
    msgs = [r.getMessage() for r in caplog.records if "index_decode" in r.getMessage()]
    assert any("pdl unavailable on this device: plain launch" in m for m in msgs), msgs


def test_explain_reports_pdl_and_static_chunks():
    from generated import decode_indexer as di

    for R, mb, Q in ((16, 1024, 4), (4, 256, 4), (64, 1024, 1), (1, 64, 4)):
        e = generated.explain_index_decode("sm_90", "bf16", "bf16", 128, R, mb, R * Q, 1, 16, Q)
        score = di._score_row("sm_90", di._score_key("bf16", "bf16", 128, R, mb, 1, Q, 16))
        if score.variant == "index_score_split":
            assert e["static_chunks"] == score.params["static_chunks"]
        if not e["fused"]:
            assert e["pdl"] == di._topk_row("sm_90", 16, mb, R * Q).params["pdl"]
    for hw in ("gfx950", "generic"):  # upstream policies: neither
        e = generated.explain_index_decode(hw, "bf16", "bf16", 128, 16, 1024, 64, 1, 16, 4)
        assert e["pdl"] is False and e["static_chunks"] is False
