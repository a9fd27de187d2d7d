"""Every input dtype pair of the decode indexer (docs/KERNELS.md §14.4) against an independent
float64 reference: fresh random inputs on the CPU interpreter (small shapes) and the GPU (full
sizes), near-ties a plain TF32 dot mis-orders, fp8 queries, the scaled bf16-query path at
extreme magnitudes, NaN keys, and the pairs that must be rejected.

Bounds: every score within 1e-6 · Σ_d |q_d · k_d| of the float64 value (the max over a block
moves by at most the largest per-token error, so the bound is the block-max of the absolute
dot products); ids equal the exact selection on every row whose k-th and (k+1)-th best
reference scores differ by more than 1e-5 relative; forced blocks and -1 padding exactly.
"""
from __future__ import annotations

import pytest
import torch

import generated
from decode_inputs import DEVICE
from reference_index import ref_decode_scores
from reference_topk import assert_topk_sets_match, cdiv, reference_topk

FP8 = torch.float8_e4m3fn
TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": FP8}
# (query, cache): §14.4's pairs, and mixed 16-bit pairs, which compute in fp32 (fp32 with a
# 16-bit side: tests/test_dropin.py)
PAIRS = [("bf16", "bf16"), ("fp16", "fp16"), ("bf16", "fp8"), ("fp16", "fp8"), ("fp8", "fp8"),
         ("fp32", "fp32"), ("bf16", "fp16"), ("fp16", "bf16"), ("fp32", "fp8")]
SCORE_REL = 1e-6  # of Σ|q·k|
GAP_REL = 1e-5  # rows whose k-th / (k+1)-th reference scores are closer may swap
NAN = float("nan")


def _inputs(q_name, cache_name, lens, Q, H, D, seed, device=DEVICE):
    """index_decode keyword inputs with every page distinct (fp8 values drawn in its range)."""
    g = torch.Generator().manual_seed(seed)
    R = len(lens)
    max_seq_len = max(lens)
    max_block = cdiv(max_seq_len, 128)
    pages = R * max_block + 2
    cache = torch.randn((pages, 128, D), generator=g) * 2
    q = torch.randn((R * Q, H, D), generator=g)
    table = torch.randperm(pages, generator=g)[: R * max_block].view(R, max_block)
    return dict(idx_q=q.to(TYPES[q_name]).to(device),
                index_kv_cache=cache.to(TYPES[cache_name]).to(device),
                block_table=table.to(torch.int32).to(device),
                seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),
                max_seq_len=max_seq_len)


def _reference(inputs, Q, init_blocks=0, local_blocks=1, absolute=False):
    """float64-exact block scores (rounded once to fp32), or with ``absolute`` the block-max of
    Σ|q·k|, the scale of the allowed error."""
    q, cache = inputs["idx_q"], inputs["index_kv_cache"]
    if absolute:
        q, cache = q.double().abs(), cache.double().abs()
    device = "cuda" if q.is_cuda else "cpu"
    return ref_decode_scores(q, cache, inputs["block_table"], inputs["seq_lens"], init_blocks,
                             local_blocks, Q, inputs["max_seq_len"], device=device)


def _scores(inputs, Q, Qmax, **kw):
    return generated.index_decode_scores(**inputs, init_blocks=0, local_blocks=1,
                                         decode_query_len=Q, max_decode_query_len=Qmax, **kw)


def _check_scores(got, inputs, Q):
    ref = _reference(inputs, Q)
    scale = _reference(inputs, Q, absolute=True)
    ref_d, got = ref.to(got.device), got
    # forced blocks (1e29 / 1e30) and invisible ones (-inf) exactly; raw scores within the bound
    exact = ~torch.isnan(ref_d) & (~torch.isfinite(ref_d) | (ref_d >= 1e29))
    assert torch.equal(got[exact], ref_d[exact])
    raw = ~torch.isnan(ref_d) & ~exact
    err = (got[raw].double() - ref_d[raw].double()).abs()
    bound = SCORE_REL * scale.to(got.device)[raw].double() + 1e-30
    worst = (err / bound).max().item() if raw.any() else 0.0
    assert worst <= 1.0, f"score error {worst:.3g} × the bound"
    return ref


def _check_ids(ids, ref, seq_lens, Q, topk, exact_order):
    """§14.4's rule; with ``exact_order`` (scores equal to the reference bit for bit) the ids
    must be the reference selection in its order."""
    dense = torch.where(torch.isnan(ref), torch.tensor(float("-inf"), device=ref.device), ref)
    if exact_order:
        assert torch.equal(ids.cpu(), reference_topk(dense, seq_lens, Q, topk))
    else:
        assert_topk_sets_match(ids, dense, seq_lens, Q, topk, tol=GAP_REL)


@pytest.mark.parametrize("q_name,cache_name", PAIRS)
def test_scores_and_ids_every_pair(q_name, cache_name):
    Q, Qmax, H, D, topk = 2, 4, 2, 16, 5
    lens = [7, 300, 1025, 0]
    inputs = _inputs(q_name, cache_name, lens, Q, H, D, seed=len(q_name) * 7 + len(cache_name))
    ref = _check_scores(_scores(inputs, Q, Qmax), inputs, Q)
    ids = generated.index_decode(**inputs, topk=topk, init_blocks=0, local_blocks=1,
                                 num_kv_heads=H, decode_query_len=Q, max_decode_query_len=Qmax)
    # 16-bit and fp8 dots: exact products the interpreter sums in fp64, bitwise the reference
    exact = DEVICE == "cpu" and q_name != "fp32" and cache_name in (q_name, "fp8")
    _check_ids(ids, ref, inputs["seq_lens"], Q, topk, exact_order=exact)


def _widened(inputs, q_dtype, cache_dtype):
    return dict(inputs, idx_q=inputs["idx_q"].to(q_dtype),
                index_kv_cache=inputs["index_kv_cache"].to(cache_dtype))


def _bits(t):
    return t.view(torch.int32)


@pytest.mark.parametrize("q_name", ["bf16", "fp8"])
def test_fp8_cache_bitwise_equals_bf16_copy(q_name):
    """fp8 keys (and an fp8 query) widen exactly: the scores equal, bit for bit, those of the
    same call on bf16 copies (every e4m3 value is exact in bf16), where sums are exact (the
    interpreter; the GPU's may differ in the last bit: test_gpu_every_pair_full_size bounds
    them). Both scorers call one per-block helper (test_index_score.py: bitwise equal)."""
    Q, H = 1, 1
    inputs = _inputs(q_name, "fp8", [1000, 129, 0, 513], Q, H, 16, seed=3)
    wide = _widened(inputs, torch.bfloat16, torch.bfloat16)
    got, want = _scores(inputs, Q, Q, variant="split"), _scores(wide, Q, Q, variant="split")
    written = ~torch.isnan(_reference(inputs, Q))
    assert torch.equal(_bits(got)[written.to(got.device)], _bits(want)[written.to(got.device)])


def test_bf16_query_magnitudes_with_fp8_cache():
    """The bf16 query is scaled per lane into fp16 range: rows at 2^±100 and 2^-120, a zero row
    and a row spanning 2^-20..2^20 all give the bf16 path's scores bit for bit. (Scores below
    fp32's normal range are out of scope: tensor cores may flush them.)"""
    Q, H, D = 1, 1, 16
    lens = [256] * 6
    inputs = _inputs("bf16", "fp8", lens, Q, H, D, seed=5)
    q = inputs["idx_q"].float()
    q[0] *= 2.0 ** 100
    q[1] *= 2.0 ** -100
    q[2] *= 2.0 ** -120
    q[3] = 0.0
    q[4, 0] = 2.0 ** torch.linspace(-20, 20, D, device=q.device)
    inputs["idx_q"] = q.to(torch.bfloat16)
    wide = _widened(inputs, torch.bfloat16, torch.bfloat16)
    got, want = _scores(inputs, Q, Q), _scores(wide, Q, Q)
    written = ~torch.isnan(_reference(inputs, Q)).to(got.device)
    assert torch.equal(_bits(got)[written], _bits(want)[written])
    _check_scores(got, inputs, Q)


def test_bf16_query_elements_down_to_2_to_the_minus_31_of_the_largest_are_exact():
    """§14.4: a bf16 query over an fp8 cache keeps every element down to 2^-32 of its lane's
    largest exact. Keys that pick out one element (1 in its column, 0 elsewhere) score it
    alone: a full-mantissa element 2^-31 below the largest (1.0) comes back bit for bit, as
    in float64."""
    D = 16
    x = (1 + 127 / 128) * 2.0 ** -31
    q = torch.zeros((1, 1, D))
    q[0, 0, 0], q[0, 0, 1] = 1.0, x
    cache = torch.zeros((2, 128, D))
    cache[:, :, 1] = 1.0
    inputs = dict(idx_q=q.to(torch.bfloat16).to(DEVICE),
                  index_kv_cache=cache.to(torch.float8_e4m3fn).to(DEVICE),
                  block_table=torch.tensor([[0, 1]], dtype=torch.int32, device=DEVICE),
                  seq_lens=torch.tensor([256], dtype=torch.int32, device=DEVICE),
                  max_seq_len=256)
    got = generated.index_decode_scores(**inputs, init_blocks=0, local_blocks=0,
                                        decode_query_len=1, max_decode_query_len=1)
    ref = ref_decode_scores(inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"],
                            inputs["seq_lens"], 0, 0, 1, 256)
    assert ref[0, 0, 0].item() == x
    assert torch.equal(got[0, 0, :2].cpu(), ref[0, 0, :2].cpu())


@pytest.mark.parametrize("q_name", ["bf16", "fp8"])
def test_nan_key_in_fp8_cache(q_name):
    """An fp8 NaN key widens to NaN: its token's product is NaN, which the block max skips (§3,
    §14.4). Block 2 of request 0 (seen whole) and of request 1 (seen in part) each hold one NaN
    key: both score the float64 max of their other keys, finite, as the reference says (a NaN
    that won its block, or one widened to a finite value, would not); and bit for bit the
    scores of a bf16 copy of the cache."""
    Q, H = 1, 1
    inputs = _inputs(q_name, "fp8", [640, 300], Q, H, 16, seed=9)
    for req, token in ((0, 5), (1, 20)):  # request 1 sees keys 256..299 of block 2
        page = int(inputs["block_table"][req, 2])
        inputs["index_kv_cache"].view(torch.uint8)[page, token, :] = 0x7F  # e4m3fn NaN
    got = _scores(inputs, Q, Q)
    ref = _check_scores(got, inputs, Q)
    assert bool(torch.isfinite(ref[0, :, 2]).all()) and bool(torch.isfinite(got[0, :, 2]).all())
    want = _scores(_widened(inputs, torch.bfloat16, torch.bfloat16), Q, Q)
    written = ~torch.isnan(ref).to(got.device)
    assert torch.equal(_bits(got)[written], _bits(want)[written])


@pytest.mark.parametrize("q_dtype,cache_dtype,match", [
    (FP8, torch.bfloat16, "idx_q"),
    (FP8, torch.float32, "idx_q"),
    (torch.float8_e5m2, torch.float8_e5m2, "idx_q"),
    (torch.float8_e5m2, FP8, "idx_q"),
    (torch.bfloat16, torch.float8_e5m2, "index_kv_cache"),
])
def test_rejected_pairs_name_the_argument(q_dtype, cache_dtype, match):
    """§14.4: a ValueError whose message starts with the argument's name."""
    inputs = _inputs("fp32", "fp32", [300], 1, 1, 16, seed=1)
    bad = _widened(inputs, q_dtype, cache_dtype)
    with pytest.raises(ValueError, match=f"^{match}: "):
        _scores(bad, 1, 1)
    with pytest.raises(ValueError, match=f"^{match}: "):
        generated.index_decode(**bad, topk=4, init_blocks=0, local_blocks=1, num_kv_heads=1,
                               decode_query_len=1, max_decode_query_len=1)


def _tf32(x):
    """x rounded to TF32 (10 explicit mantissa bits, nearest even), as a plain TF32 dot reads it."""
    bits = x.float().contiguous().view(torch.int32)
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF
    return rounded.view(torch.float32)


def _near_tie_inputs(D, rows, seed, device=DEVICE):
    """fp32 inputs where, for every row, a later block beats an earlier one by 1e-4 relative
    through mantissa bits a TF32 operand drops: a TF32 dot scores them equal and the lower id
    wins, the exact ranking picks the later block."""
    g = torch.Generator().manual_seed(seed)
    blocks = 4
    pages = blocks + 1
    cache = torch.empty((pages, 128, D))
    cache[0] = 0.25  # block 0
    cache[1] = 0.5  # block 1
    base = 1.0 + torch.rand((128, D), generator=g) * 2.0 ** -12  # below TF32's resolution
    cache[2] = base * (1 + 1e-4)  # block 2: the near-tie loser
    cache[3] = base * (1 + 2e-4)  # block 3: the winner, 1e-4 relative higher
    cache[4] = 9.0  # never referenced
    q = (1.0 + torch.rand((rows, 1, D), generator=g) * 2.0 ** -12)
    table = torch.arange(blocks, dtype=torch.int32).view(1, blocks).repeat(rows, 1)
    return dict(idx_q=q.to(device), index_kv_cache=cache.to(device), block_table=table.to(device),
                seq_lens=torch.full((rows,), blocks * 128, dtype=torch.int32, device=device),
                max_seq_len=blocks * 128)


def _near_tie_check(D, rows):
    inputs = _near_tie_inputs(D, rows, seed=D + rows)
    ids = generated.index_decode(**inputs, topk=1, init_blocks=0, local_blocks=0,
                                 num_kv_heads=1, decode_query_len=1, max_decode_query_len=1)
    ref = _reference(inputs, 1, local_blocks=0)
    assert (ref[0, :, 3] > ref[0, :, 2]).all()
    assert torch.equal(ids.cpu().flatten(), torch.full((rows,), 3, dtype=torch.int32))
    # the test is meaningful: a plain TF32 dot ties blocks 2 and 3, so the lower id would win
    tf32 = dict(inputs, idx_q=_tf32(inputs["idx_q"]), index_kv_cache=_tf32(inputs["index_kv_cache"]))
    tf32_ref = _reference(tf32, 1, local_blocks=0)
    assert (tf32_ref[0, :, 3] <= tf32_ref[0, :, 2]).all()


def test_fp32_near_ties_a_tf32_dot_misorders():
    _near_tie_check(D=16, rows=2)


# ---- GPU: full sizes ---------------------------------------------------------------------------

GPU_SHAPES = [([32768] * 4, 4, 1), ([131072, 70000, 1, 0, 4097], 1, 1), ([8192] * 16, 2, 4)]


@pytest.mark.gpu
@pytest.mark.parametrize("q_name,cache_name",
                         [p for p in PAIRS if p in (("bf16", "fp8"), ("fp8", "fp8"),
                                                    ("fp32", "fp32"), ("bf16", "bf16"),
                                                    ("fp16", "fp8"))])
@pytest.mark.parametrize("shape", range(len(GPU_SHAPES)))
def test_gpu_every_pair_full_size(q_name, cache_name, shape):
    lens, Q, H = GPU_SHAPES[shape]
    inputs = _inputs(q_name, cache_name, lens, Q, H, 128, seed=shape, device="cuda")
    ref = _check_scores(_scores(inputs, Q, Q), inputs, Q)
    for variant in (None, {"variant": "index_score_balanced", "program_budget": 264,
                           "num_warps": 4, "num_stages": 2}):
        ids = generated.index_decode_with_launch(
            variant, None, **inputs, topk=16, init_blocks=0, local_blocks=1, num_kv_heads=H,
            decode_query_len=Q, max_decode_query_len=Q)
        _check_ids(ids, ref, inputs["seq_lens"], Q, 16, exact_order=False)
    # (Against a 16-bit copy of an fp8 cache the GPU's sums may differ in the last bit: the
    # tensor cores add the same exact products in another order once an operand is fp8.)


@pytest.mark.gpu
def test_gpu_fp32_near_ties_full_head_dim():
    _near_tie_check(D=128, rows=8)


@pytest.mark.gpu
def test_gpu_fp8_conversion_every_byte():
    """All 254 finite e4m3 values as keys, one value per block (every token of page p holds
    value p in dimension 0) against a one-hot query: block p scores exactly value p, for bf16
    and fp8 queries (the last page is the forced local block)."""
    codes = torch.arange(256, dtype=torch.uint8)
    codes = codes[(codes & 0x7F) != 0x7F]  # the two NaN encodings
    D, pages = 16, len(codes) + 1
    cache = torch.zeros((pages, 128, D), dtype=torch.uint8)
    cache[: len(codes), :, 0] = codes[:, None]
    for q_dtype in (torch.bfloat16, FP8):
        q = torch.zeros((1, 1, D))
        q[0, 0, 0] = 1.0
        inputs = dict(idx_q=q.to(q_dtype).cuda(), index_kv_cache=cache.view(FP8).cuda(),
                      block_table=torch.arange(pages, dtype=torch.int32).view(1, pages).cuda(),
                      seq_lens=torch.tensor([pages * 128], dtype=torch.int32).cuda(),
                      max_seq_len=pages * 128)
        got = _scores(inputs, 1, 1)[0, 0, : len(codes)].cpu()
        assert torch.equal(got, codes.view(FP8).float())
