"""No silent wrong result, no crash, on any input (docs/KERNELS.md, "Out-of-range inputs").

Property-style checks of every public entry:

* **Layouts.** Every tensor argument is redrawn in a random memory layout (permuted storage
  order, padding, steps, a storage offset) holding the same values. Where the contract accepts
  the layout the call must equal the contiguous call exactly; where it does not, it must raise a
  ValueError whose message starts with that argument's name. Never anything else.
* **Types.** A non-tensor for a tensor argument, or a non-integer for an integer argument, is a
  TypeError naming it; a wrong dtype is a ValueError naming it.
* **Values that index memory.** seq_lens beyond the capacity max_block·128, negative seq_lens,
  index-K page ids outside the cache and caller-given ids outside the attention table are
  computed as documented (compared with independent references) and never read outside a
  tensor (on the GPU an out-of-bounds read of a 2³¹-page id would fault).

CPU runs go through Triton's interpreter on small shapes; the same tests run on the GPU.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import generated
from decode_inputs import DEVICE, make_decode_inputs, virtual_tensor
from reference_index import ref_decode_scores
from reference_topk import assert_topk_sets_match, reference_sparse_table, reference_topk

HAS_CUDA = torch.cuda.is_available()
TRIALS = 3 if not HAS_CUDA else 12
# Scores against the fp64-summed reference: exact on the interpreter (its dot sums in fp64),
# within fp32 accumulation error on the GPU (tensor-core order). Same call, other layout: exact.
REF_TOL = dict(rtol=1e-5, atol=1e-4) if HAS_CUDA else dict(rtol=0, atol=0)
# Router: a storage offset changes the load vector width, and with it the FMA order on the GPU.
ROUTER_TOL = dict(rtol=0, atol=5e-4)


# ---- layouts ------------------------------------------------------------------------------------

def _poison(dtype):
    return float("nan") if dtype.is_floating_point else (1 << 30) - 7


def relayout(t: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """A view with ``t``'s values in a random layout: dims stored in a random order, each padded
    and/or stepped inside a larger poisoned buffer (so a storage offset and non-unit strides)."""
    if t.dim() == 0:
        return t.clone()
    dims = list(range(t.dim()))
    order = dims[:]
    rng.shuffle(order)
    step = [rng.choice((1, 1, 2)) for _ in dims]
    pad = [rng.choice((0, 0, 1, 3)) for _ in dims]
    start = [rng.randint(0, p) for p in pad]
    big_shape = [t.shape[d] * step[d] + pad[d] for d in order]
    big = torch.full(big_shape, _poison(t.dtype), dtype=t.dtype, device=t.device)
    big = big.permute([order.index(d) for d in dims])  # back to t's dim order
    view = big[tuple(slice(start[d], start[d] + t.shape[d] * step[d], step[d]) for d in dims)]
    view.copy_(t)
    return view


def unit_col(t):
    return t.dim() < 2 or t.shape[1] <= 1 or t.stride(1) == 1


def unit_stride(t):
    return t.shape[0] <= 1 or t.stride(0) == 1


ANY = None  # the contract accepts every (non-overlapping) layout


def check_call(fn, contract: dict, base: dict, changed: dict, expect):
    """Call ``fn(**{**base, **changed})``: it must either return what ``expect`` accepts (when
    every changed tensor meets its contract) or raise a ValueError naming one changed argument
    whose layout the contract rejects."""
    rejected = [name for name, t in changed.items()
                if contract[name] is not ANY and not contract[name](t)]
    try:
        result = fn(**{**base, **changed})
    except (ValueError, TypeError) as e:
        assert rejected, f"rejected an accepted layout: {e}"
        assert isinstance(e, ValueError) and any(str(e).startswith(n + ":") for n in rejected), e
        return
    assert not rejected, f"accepted {rejected} with a layout the contract rejects"
    expect(result)


def assert_named(exc_type, name, fn, **kwargs):
    with pytest.raises(exc_type) as info:
        fn(**kwargs)
    assert str(info.value).startswith(name + ":"), str(info.value)


# ---- decode entries -----------------------------------------------------------------------------

# a padding request (seq_len 0), and a request shorter than Q = 2: its first row has
# query_pos -1, an empty row of a request that is not padding
LENS = [0, 130, 301, 1]
Q = QMAX = 2
TOPK = 4


def _decode_case(H, seed, table):
    inputs, attn, max_block = make_decode_inputs(H, Q, LENS, seed=seed, attention_table=True)
    kwargs = dict(inputs, topk=TOPK, init_blocks=0, local_blocks=1, num_kv_heads=H,
                  decode_query_len=Q, max_decode_query_len=QMAX)
    total_q = len(LENS) * Q
    if table:
        kwargs.update(attention_block_table=attn, block_page_stride=8,
                      sparse_block_table_out=torch.full((total_q, TOPK * 8), -9, dtype=torch.int32,
                                                        device=DEVICE),
                      sparse_context_lens_out=torch.full((total_q,), -9, dtype=torch.int32,
                                                         device=DEVICE))
    kwargs["out"] = torch.full((H, total_q + 3, TOPK), -9, dtype=torch.int32, device=DEVICE)
    kwargs["completion_counter"] = torch.zeros((H, total_q + 1), dtype=torch.int32, device=DEVICE)
    return kwargs


def _decode_outputs(kwargs, result):
    outs = [result.clone()]
    if "sparse_block_table_out" in kwargs:
        outs += [kwargs["sparse_block_table_out"].clone(), kwargs["sparse_context_lens_out"].clone()]
    return outs


DECODE_CONTRACT = {
    "idx_q": ANY, "index_kv_cache": ANY, "seq_lens": ANY, "out": ANY,
    "block_table": unit_col, "attention_block_table": unit_col,
    "sparse_block_table_out": unit_col, "sparse_context_lens_out": unit_stride,
    "completion_counter": lambda t: t.is_contiguous(),
}


@pytest.mark.parametrize("H,table", [(1, True), (2, False)])
@pytest.mark.parametrize("seed", range(TRIALS))
def test_index_decode_any_layout(H, table, seed):
    rng = random.Random(seed * 7 + H)
    base = _decode_case(H, seed, table)
    expected = _decode_outputs(base, generated.index_decode(**base))
    tensors = [k for k, v in base.items() if isinstance(v, torch.Tensor)]
    changed = {k: relayout(base[k], rng) for k in tensors if rng.random() < 0.5}
    # the outputs are written: start them from the same poison as the contiguous call (a
    # relayout copies the values the contiguous call has already written)
    for k in ("out", "sparse_block_table_out", "sparse_context_lens_out"):
        if k in base:
            changed.get(k, base[k]).fill_(-9)
    changed.get("completion_counter", base["completion_counter"]).zero_()

    def expect(result):
        got = _decode_outputs({**base, **changed}, result)
        for a, b in zip(got, expected):
            assert torch.equal(a, b)
        counter = changed.get("completion_counter", base["completion_counter"])
        assert int(counter.abs().sum()) == 0

    check_call(generated.index_decode, DECODE_CONTRACT, base, changed, expect)


def _written(scores_ref):
    return ~torch.isnan(scores_ref)


# The balanced scorer's default budget is 1024 programs: GPU only (the interpreter runs them one
# by one); the CPU covers it through `scores` below with a budget of 3.
SCORE_VARIANTS = [None, "split"] + (["balanced"] if HAS_CUDA else [])


@pytest.mark.parametrize("variant", SCORE_VARIANTS)
@pytest.mark.parametrize("seed", range(TRIALS // 2))
def test_index_decode_scores_any_layout(variant, seed):
    rng = random.Random(100 + seed)
    inputs, _ = make_decode_inputs(2, Q, LENS, seed=seed)
    base = dict(inputs, init_blocks=1, local_blocks=1, decode_query_len=Q,
                max_decode_query_len=QMAX, variant=variant)
    ref = ref_decode_scores(inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"],
                            inputs["seq_lens"], 1, 1, Q, inputs["max_seq_len"])
    mask = _written(ref).to(DEVICE)
    expected = generated.index_decode_scores(**base)[mask]
    changed = {k: relayout(base[k], rng) for k in ("idx_q", "index_kv_cache", "block_table",
                                                  "seq_lens") if rng.random() < 0.6}
    check_call(generated.index_decode_scores, DECODE_CONTRACT, base, changed,
               lambda s: torch.testing.assert_close(s[mask], expected, rtol=0, atol=0))


@pytest.mark.parametrize("seed", range(TRIALS))
def test_build_sparse_block_table_any_layout(seed):
    rng = random.Random(200 + seed)
    g = torch.Generator().manual_seed(seed)
    R, width = len(LENS), 4
    ids = torch.randint(-1, width, (1, R * Q, TOPK), generator=g, dtype=torch.int32)
    attn = torch.randint(0, 10000, (R, width), generator=g, dtype=torch.int32)
    base = dict(topk_idx=ids.to(DEVICE), attention_block_table=attn.to(DEVICE),
                seq_lens=torch.tensor(LENS, dtype=torch.int32, device=DEVICE),
                decode_query_len=Q, block_page_stride=16)
    expected = generated.build_sparse_block_table_decode(**base)
    changed = {k: relayout(base[k], rng) for k in ("topk_idx", "attention_block_table",
                                                  "seq_lens") if rng.random() < 0.6}

    def expect(result):
        assert torch.equal(result[0], expected[0]) and torch.equal(result[1], expected[1])

    check_call(generated.build_sparse_block_table_decode,
               {"topk_idx": ANY, "seq_lens": ANY, "attention_block_table": unit_col},
               base, changed, expect)


def test_strided_seq_lens_regression():
    """Issue 11's example: seq_lens[:, 0] of a [[300, 7], [1000, 7]] tensor (stride 2) used to
    make the kernels read seq_lens[1] = 7 for request 1."""
    strided = torch.tensor([[300, 7], [1000, 7]], dtype=torch.int32, device=DEVICE)[:, 0]
    inputs, attn, _ = make_decode_inputs(1, 1, [300, 1000], seed=3, attention_table=True)
    plain = generated.index_decode(**inputs, topk=16, init_blocks=0, local_blocks=1,
                                   num_kv_heads=1, decode_query_len=1, max_decode_query_len=1)
    inputs["seq_lens"] = strided
    got = generated.index_decode(**inputs, topk=16, init_blocks=0, local_blocks=1,
                                 num_kv_heads=1, decode_query_len=1, max_decode_query_len=1)
    assert torch.equal(plain, got)
    ids = plain.clone()
    _, ctx = generated.build_sparse_block_table_decode(ids, attn, strided)
    _, ctx_plain = generated.build_sparse_block_table_decode(ids, attn, strided.contiguous())
    assert ctx.tolist() == ctx_plain.tolist() and int(ctx[1]) > 0


# ---- types -------------------------------------------------------------------------------------

NOT_TENSORS = (np.zeros((2, 2), dtype=np.float32), [1, 2], None, 3)
# (NumPy arrays other than one integer have __index__ but raise in it)
NOT_INTS = (4.0, "4", True, torch.tensor(4), None, np.float64(4.0), np.array(4.0),
            np.array([4]), np.array(True))


def test_decode_rejects_non_tensors_and_non_ints_by_name():
    base = _decode_case(1, 0, True)
    for name, value in base.items():
        bad_values = NOT_TENSORS if isinstance(value, torch.Tensor) else NOT_INTS
        for bad in bad_values:
            if bad is None and name in ("out", "completion_counter"):
                continue  # optional
            if bad is None and name in ("attention_block_table", "sparse_block_table_out",
                                        "sparse_context_lens_out", "block_page_stride"):
                continue  # all-or-none rule, tested elsewhere
            with pytest.raises((TypeError, ValueError)) as info:
                generated.index_decode(**{**base, name: bad})
            assert str(info.value).startswith(name + ":"), (name, bad, str(info.value))
            assert info.type is TypeError, (name, bad, info.value)
    assert_named(TypeError, "hardware", generated.index_decode, **base, hardware=["sm_90"])


def test_explain_index_decode_rejects_non_ints_by_name():
    args = dict(hardware="sm_90", q_dtype="bf16", cache_dtype="bf16", head_dim=128, num_reqs=2,
                max_block=9, total_q=2, num_heads=1, topk=16, max_decode_query_len=1)
    want = generated.explain_index_decode(**args)
    assert generated.explain_index_decode(**{**args, "head_dim": np.int64(128)}) == want
    for name in ("head_dim", "num_reqs", "max_block", "total_q", "num_heads", "topk",
                 "max_decode_query_len"):
        for bad in NOT_INTS:
            assert_named(TypeError, name, generated.explain_index_decode, **{**args, name: bad})


def test_decode_accepts_numpy_ints_and_rejects_wrong_dtypes():
    base = _decode_case(1, 1, True)
    expected = generated.index_decode(**base).clone()
    assert torch.equal(generated.index_decode(**{**base, "topk": np.int64(TOPK),
                                                 "decode_query_len": np.int32(Q)}), expected)
    for name, dtype in (("idx_q", torch.float64), ("index_kv_cache", torch.int8),
                        ("block_table", torch.int64), ("seq_lens", torch.int64),
                        ("out", torch.int64), ("attention_block_table", torch.float32),
                        ("sparse_context_lens_out", torch.int16),
                        ("completion_counter", torch.int64)):
        assert_named(ValueError, name, generated.index_decode,
                     **{**base, name: base[name].to(dtype)})


def test_decode_rejects_overlapping_outputs():
    base = _decode_case(1, 2, True)
    total_q = len(LENS) * Q
    out = torch.zeros((1, 1, TOPK), dtype=torch.int32, device=DEVICE).expand(1, total_q, TOPK)
    assert_named(ValueError, "out", generated.index_decode, **{**base, "out": out})
    table = torch.zeros((1, TOPK * 8), dtype=torch.int32, device=DEVICE).expand(total_q, -1)
    assert_named(ValueError, "sparse_block_table_out", generated.index_decode,
                 **{**base, "sparse_block_table_out": table})


def test_output_strides_must_nest():
    """`check_no_overlap` takes nested strides in any order and refuses the rest by name with a
    message that says what it checks: an expanded view (elements shared) and strides that
    interleave two dimensions without sharing any element (told apart only by a search)."""
    from generated import _runtime

    base = torch.empty(4096)
    for shape, strides in (((2, 3, 64), (192, 64, 1)), ((2, 3, 64), (64, 128, 1)),
                           ((1, 5, 7), (0, 7, 1)), ((3, 1, 4), (1, 99, 3))):
        _runtime.check_no_overlap("output", base.as_strided(shape, strides))
    interleaved = base.as_strided((2, 3, 64), (192, 128, 1))
    offsets = {192 * t + 128 * h + d for t in range(2) for h in range(3) for d in range(64)}
    assert len(offsets) == interleaved.numel()  # no element shared, yet strides do not nest
    for bad in (base.as_strided((2, 3, 64), (0, 64, 1)), interleaved):
        with pytest.raises(ValueError, match=r"^output: strides .* do not nest"):
            _runtime.check_no_overlap("output", bad)


def test_scalar_ranges_named():
    base = _decode_case(1, 0, False)
    for name, bad in (("topk", 0), ("init_blocks", -1), ("local_blocks", -2),
                      ("max_seq_len", -1), ("decode_query_len", 0)):
        assert_named(ValueError, name, generated.index_decode, **{**base, name: bad})
    # past int64 no kernel argument can hold the value (2⁶³ was taken as unsigned)
    for name in ("init_blocks", "local_blocks"):
        for bad in (1 << 63, (1 << 64) + 5):
            assert_named(ValueError, name, generated.index_decode, **{**base, name: bad})
    # an int Python will not print (over 4300 digits) is still refused by name
    for name in ("topk", "init_blocks", "local_blocks", "max_seq_len", "decode_query_len",
                 "max_decode_query_len", "num_kv_heads"):
        for bad in (10 ** 5000, -10 ** 5000):
            assert_named(ValueError, name, generated.index_decode, **{**base, name: bad})
    assert_named(ValueError, "init_blocks", generated.index_decode_scores,
                 **{k: base[k] for k in ("idx_q", "index_kv_cache", "block_table", "seq_lens",
                                         "max_seq_len", "local_blocks", "decode_query_len",
                                         "max_decode_query_len")}, init_blocks=1 << 63)


# ---- values that index memory ------------------------------------------------------------------

def _call(inputs, **extra):
    args = dict(inputs, topk=TOPK, init_blocks=0, local_blocks=1, num_kv_heads=1,
                decode_query_len=1, max_decode_query_len=1)
    args.update(extra)
    return generated.index_decode(**args)


SCORE_LAUNCHES = [
    None,
    {"variant": "index_score_split", "kv_chunks": 4, "high_batch": False, "static_chunks": True,
     "num_warps": 4, "num_stages": 2},
    {"variant": "index_score_balanced", "program_budget": 3, "num_warps": 2, "num_stages": 1},
    {"variant": "index_decode_fused", "kv_chunks": 2, "topk_tile": 128},
]


CAPACITY_CASES = [
    # (lengths the inputs are drawn for, spare tokens of max_seq_len, seq_lens of the call)
    ([300, 1000], 5, [300, 5000]),  # issue 11: max_seq_len 1005, capacity 8 blocks = 1024
    ([300, 1024], 0, [1024, 1025]),  # exactly at the capacity, and one token past it
]


@pytest.mark.parametrize("local_blocks", [0, 1])
@pytest.mark.parametrize("case", range(len(CAPACITY_CASES)))
@pytest.mark.parametrize("launch", range(len(SCORE_LAUNCHES)))
def test_seq_len_beyond_capacity_is_clamped(launch, case, local_blocks):
    """Issue 11's crash: seq_lens [300, 5000] with max_seq_len 1005 (capacity 8 blocks). §13.2:
    every kernel computes a request past the capacity as if its length were the capacity,
    1024 (query positions, visible blocks, forcing, the page-16 row and ctx): ids, table and
    context lengths equal the independent references' for the clamped lengths, as they do for
    a request exactly at the capacity."""
    drawn, extra, lens = CAPACITY_CASES[case]
    inputs, attn, max_block = make_decode_inputs(1, 1, drawn, seed=5, extra_tokens=extra,
                                                 attention_table=True)
    assert max_block == 8
    inputs["seq_lens"] = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    clamped = inputs["seq_lens"].cpu().clamp(max=max_block * 128)
    assert int(clamped.max()) == max_block * 128
    total_q = len(lens)
    out = torch.full((1, total_q, TOPK), -9, dtype=torch.int32, device=DEVICE)
    tab = torch.full((total_q, TOPK * 8), -9, dtype=torch.int32, device=DEVICE)
    ctx = torch.full((total_q,), -9, dtype=torch.int32, device=DEVICE)
    ids = generated.index_decode_with_launch(
        SCORE_LAUNCHES[launch], None, **inputs, topk=TOPK, init_blocks=0,
        local_blocks=local_blocks, num_kv_heads=1, decode_query_len=1, max_decode_query_len=1,
        out=out, attention_block_table=attn, sparse_block_table_out=tab,
        sparse_context_lens_out=ctx, block_page_stride=8)
    assert ids.data_ptr() == out.data_ptr()
    ref = ref_decode_scores(inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"],
                            inputs["seq_lens"], 0, local_blocks, 1, inputs["max_seq_len"])
    dense = torch.where(ref.isnan(), float("-inf"), ref)
    want = reference_topk(dense, clamped, 1, TOPK)
    if HAS_CUDA:  # tensor-core sums may swap near ties: the table follows the kernel's ids
        assert_topk_sets_match(out, dense, clamped, 1, TOPK, tol=1e-5)
        want = out.cpu()
    else:
        assert torch.equal(out.cpu(), want)
    want_tab, want_ctx = reference_sparse_table(want, attn, clamped, 1, 8,
                                                capacity_blocks=max_block)
    assert torch.equal(tab.cpu(), want_tab) and torch.equal(ctx.cpu(), want_ctx)
    assert int(want_ctx[1]) > 0


def scores(inputs, variant, local_blocks=1):
    """Scores of either scorer (init 1, local 1 unless given, Q = Qmax = 2); the balanced one
    with a budget of 3 programs, so a request spans several of them."""
    if variant == "split":
        return generated.index_decode_scores(**inputs, init_blocks=1, local_blocks=local_blocks,
                                             decode_query_len=Q, max_decode_query_len=QMAX,
                                             variant="split")
    from generated import index_score

    H, total_q = inputs["idx_q"].shape[1], inputs["idx_q"].shape[0]
    out = index_score.alloc_scores(H, total_q, inputs["max_seq_len"], DEVICE)
    return index_score.launch_score_balanced(
        inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"], inputs["seq_lens"],
        out, 1, local_blocks, Q, QMAX, program_budget=3,
        max_block=-(-inputs["max_seq_len"] // 128))


@pytest.mark.parametrize("local_blocks", [0, 1])
def test_scores_beyond_capacity_match_reference(local_blocks):
    """Request 1 (seq_len 4000) counts as the capacity, 1024: its last row sits at 1023 and
    sees the key there, made block 7's clear maximum, so a clamp one token short changes an
    unforced (local 0) score; both scorers equal the reference."""
    inputs, _ = make_decode_inputs(2, Q, [300, 1000], seed=6)
    assert inputs["max_seq_len"] == 1005
    inputs["seq_lens"] = torch.tensor([300, 4000], dtype=torch.int32, device=DEVICE)
    page = int(inputs["block_table"][1, 7])
    q = inputs["idx_q"][2 * Q - 1].float().cpu()  # request 1's last row, [H, D]
    inputs["index_kv_cache"][page, 127] = (q[0] * 8).to(inputs["index_kv_cache"].dtype)
    key = inputs["index_kv_cache"][page, 127].double().cpu()
    ref = ref_decode_scores(inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"],
                            inputs["seq_lens"], 1, local_blocks, Q, inputs["max_seq_len"])
    if local_blocks == 0:
        hot = (q[0].double() * key).sum()
        assert ref[0, 2 * Q - 1, 7].item() == torch.tensor(hot.item()).float().item()
    mask = _written(ref).to(DEVICE)
    for variant in ("split", "balanced"):
        got = scores(inputs, variant, local_blocks)
        torch.testing.assert_close(got[mask].cpu(), ref[mask.cpu()], **REF_TOL)


def _selected_from_its_scores(inputs, ids, Q=1, Qmax=1):
    """``ids`` of `_call` equal the reference selection of the call's own scores."""
    got = generated.index_decode_scores(inputs["idx_q"], inputs["index_kv_cache"],
                                        inputs["block_table"], inputs["seq_lens"],
                                        inputs["max_seq_len"], 0, 1, Q, Qmax)
    assert torch.equal(ids.cpu(), reference_topk(got, inputs["seq_lens"], Q, TOPK))


def test_negative_seq_lens_are_empty_rows():
    inputs, _ = make_decode_inputs(1, 1, [300, 200], seed=8)
    inputs["seq_lens"] = torch.tensor([-5, 200], dtype=torch.int32, device=DEVICE)
    ids = _call(inputs)
    assert (ids[0, 0] == -1).all() and (ids[0, 1] >= 0).any()
    _selected_from_its_scores(inputs, ids)


@pytest.mark.parametrize("variant", ["split", "balanced"])
def test_page_ids_outside_the_cache(variant):
    """Block-table entries outside [0, num_pages) score as blocks without a visible key (raw
    -inf; forcing still applies), whatever their magnitude."""
    inputs, _ = make_decode_inputs(2, Q, [700, 1000], seed=9)
    num_pages = inputs["index_kv_cache"].shape[0]
    bt = inputs["block_table"].clone()
    bt[0, 1], bt[0, 3], bt[1, 0], bt[1, 7] = -1, num_pages, (1 << 31) - 1, -(1 << 31)
    inputs["block_table"] = bt
    got = scores(inputs, variant)
    ref = ref_decode_scores(inputs["idx_q"], inputs["index_kv_cache"], bt, inputs["seq_lens"],
                            1, 1, Q, inputs["max_seq_len"])
    mask = _written(ref).to(DEVICE)
    torch.testing.assert_close(got[mask].cpu(), ref[mask.cpu()], **REF_TOL)
    assert torch.isinf(ref[0, 0, 3]) and ref[0, 0, 3] < 0  # an unforced bad page: -inf
    # and the whole call selects from them
    one_head = {**inputs, "idx_q": inputs["idx_q"][:, :1]}
    ids = _call(one_head, decode_query_len=Q, max_decode_query_len=QMAX)
    assert ids.shape == (1, 2 * Q, TOPK)
    _selected_from_its_scores(one_head, ids, Q, QMAX)


def test_empty_cache_rejected_only_when_blocks_exist():
    inputs, _ = make_decode_inputs(1, 1, [0, 0], seed=10)
    empty = inputs["index_kv_cache"][:0]
    assert_named(ValueError, "index_kv_cache", _call, inputs={**inputs, "index_kv_cache": empty})
    ids = _call({**inputs, "index_kv_cache": empty, "max_seq_len": 0,
                 "block_table": inputs["block_table"][:, :0]})
    assert (ids == -1).all()
    # a page-16 table asked for at capacity 0: the table and lengths are written as zeros
    table = torch.full((2, TOPK * 8), -9, dtype=torch.int32, device=DEVICE)
    ctx = torch.full((2,), -9, dtype=torch.int32, device=DEVICE)
    ids = _call({**inputs, "index_kv_cache": empty, "max_seq_len": 0,
                 "block_table": inputs["block_table"][:, :0]},
                attention_block_table=torch.zeros((2, 0), dtype=torch.int32, device=DEVICE),
                sparse_block_table_out=table, sparse_context_lens_out=ctx, block_page_stride=8)
    assert (ids == -1).all() and not table.any() and not ctx.any()
    # buffers made in inference mode, the call outside it (as the kernels' writes elsewhere)
    with torch.inference_mode():
        out = torch.full((1, 2, TOPK), -9, dtype=torch.int32, device=DEVICE)
        table, ctx = table.clone().fill_(-9), ctx.clone().fill_(-9)
    assert not torch.is_inference_mode_enabled()
    ids = _call({**inputs, "index_kv_cache": empty, "max_seq_len": 0,
                 "block_table": inputs["block_table"][:, :0]}, out=out,
                attention_block_table=torch.zeros((2, 0), dtype=torch.int32, device=DEVICE),
                sparse_block_table_out=table, sparse_context_lens_out=ctx, block_page_stride=8)
    assert ids.data_ptr() == out.data_ptr()
    assert (out == -1).all() and not table.any() and not ctx.any()


def test_builder_ids_and_lengths_out_of_range():
    """Caller-given ids beyond the attention table's width W (and beyond the row's own block,
    negative, duplicated) are dropped or deduplicated as documented; requests longer than
    W·128 are clamped; the table is never read past W."""
    g = torch.Generator().manual_seed(11)
    R, width, topk = 3, 5, 6
    lens = torch.tensor([5 * 128 + 3, 10_000, 0], dtype=torch.int32)
    ids = torch.randint(-3, 9, (1, R, topk), generator=g, dtype=torch.int32)
    ids[0, 0, :3] = torch.tensor([(1 << 31) - 1, 4, 4])  # huge, and a duplicated tail
    ids[0, 1, 0] = width
    attn = torch.randint(0, 1000, (R, width), generator=g, dtype=torch.int32)
    table, ctx = generated.build_sparse_block_table_decode(
        ids.to(DEVICE), attn.to(DEVICE), lens.to(DEVICE), 1, 16)
    ref_table, ref_ctx = reference_sparse_table(ids, attn, lens, 1, 16)
    assert torch.equal(table.cpu(), ref_table) and torch.equal(ctx.cpu(), ref_ctx)
    # without a tail block (position 199, its own block 1 not listed) ctx = min(n_valid · 128,
    # causal_len) (§6): block 0 listed three times, 384 capped at 200
    ids = torch.tensor([[[0, 0, 0, -1]]], dtype=torch.int32)
    attn, lens = torch.tensor([[7, 3]], dtype=torch.int32), torch.tensor([200], dtype=torch.int32)
    table, ctx = generated.build_sparse_block_table_decode(
        ids.to(DEVICE), attn.to(DEVICE), lens.to(DEVICE), 1, 8)
    ref_table, ref_ctx = reference_sparse_table(ids, attn, lens, 1, 8)
    assert ref_ctx.tolist() == [200]
    assert torch.equal(table.cpu(), ref_table) and torch.equal(ctx.cpu(), ref_ctx)


# ---- router ------------------------------------------------------------------------------------

ROUTER_SHAPE = (4096, 8)


@pytest.mark.parametrize("seed", range(TRIALS))
def test_router_any_layout(seed):
    rng = random.Random(300 + seed)
    g = torch.Generator().manual_seed(seed)
    K, N = ROUTER_SHAPE
    M = rng.choice((1, 3, 8))
    x = torch.randn((M, K), generator=g).to(rng.choice((torch.bfloat16, torch.float32)))
    w = torch.randn((N, K), generator=g)
    base = dict(hidden_states=x.to(DEVICE), router_weight=w.to(DEVICE))
    expected = generated.router_gemm(**base)
    changed = {k: relayout(base[k], rng) for k in base if rng.random() < 0.6}
    contract = {"hidden_states": lambda t: t.is_contiguous(),
                "router_weight": lambda t: t.is_contiguous()}
    check_call(generated.router_gemm, contract, base, changed,
               lambda out: torch.testing.assert_close(out, expected, **ROUTER_TOL))
    # router_logits takes any layout of x (made contiguous) and any of w (F.linear fallback)
    got = generated.router_logits(changed.get("hidden_states", base["hidden_states"]),
                                  changed.get("router_weight", base["router_weight"]))
    torch.testing.assert_close(got, expected, **ROUTER_TOL)


def _randn(shape, g):
    return torch.randn(shape, generator=g).to(DEVICE)


def test_router_storage_offset_and_types():
    K, N = ROUTER_SHAPE
    g = torch.Generator().manual_seed(21)
    big = _randn((5, K), g)
    w = _randn((N, K), g)
    x = big[1:4]  # contiguous, storage offset K (and an odd offset below)
    torch.testing.assert_close(generated.router_gemm(x, w), generated.router_gemm(x.clone(), w),
                               **ROUTER_TOL)
    flat = _randn((3 * K + 1,), g)
    x_odd = flat[1:].view(3, K)  # 4-byte aligned only
    torch.testing.assert_close(generated.router_gemm(x_odd, w),
                               generated.router_gemm(x_odd.clone(), w), **ROUTER_TOL)
    for bad in NOT_TENSORS:
        assert_named(TypeError, "hidden_states", generated.router_gemm, hidden_states=bad,
                     router_weight=w)
        assert_named(TypeError, "router_weight", generated.router_gemm, hidden_states=x,
                     router_weight=bad)
        assert generated.can_use_router_gemm(bad, w) is False
    for bad in NOT_INTS:
        if bad is None:
            continue
        assert_named(TypeError, "num_tokens", generated.explain_router_gemm, hidden_size=K,
                     num_experts=N, num_tokens=bad, hardware="generic")
    assert_named(TypeError, "hardware", generated.router_gemm, hidden_states=x,
                 router_weight=w, hardware=["sm_90"])  # unhashable: no plan key, still named
    for fn in (generated.router_logits, generated.explain_router_logits):
        for bad in NOT_TENSORS:  # neither the kernel nor the F.linear fallback takes them
            assert_named(TypeError, "hidden_states", fn, hidden_states=bad, router_weight=w)
            assert_named(TypeError, "router_weight", fn, hidden_states=x, router_weight=bad)


def test_router_logits_names_what_the_linear_fallback_cannot_take():
    """Tensors the kernel does not take go to F.linear, which raises a RuntimeError for shapes
    or devices it cannot multiply: router_logits refuses those by name first, and keeps the
    fallback for everything it can (other shapes, batch dims, dtypes)."""
    K, N = ROUTER_SHAPE
    g = torch.Generator().manual_seed(22)
    w = _randn((N, K), g)
    x = _randn((3, K), g)
    for kwargs, name in ((dict(hidden_states=x[:, :-1], router_weight=w),
                          "hidden_states/router_weight"),
                         (dict(hidden_states=x, router_weight=w[None]), "router_weight"),
                         (dict(hidden_states=x, router_weight=w.to("meta")), "router_weight")):
        assert_named(ValueError, name, generated.router_logits, **kwargs)
    batched = _randn((2, 3, K), g)
    torch.testing.assert_close(generated.router_logits(batched, w), batched @ w.T, **ROUTER_TOL)
    odd, w_odd = _randn((5, 40), g), _randn((6, 40), g)
    torch.testing.assert_close(generated.router_logits(odd, w_odd.double()), odd @ w_odd.T,
                               **ROUTER_TOL)


def test_buffers_sharing_memory_are_refused_by_name():
    """Outputs the caller passes share no memory with each other or with the inputs: each
    case is refused naming the written argument, on a fresh key and on a cached one (the
    addresses are checked on every call whose addresses changed)."""
    base = _decode_case(1, 0, True)
    T = len(LENS) * Q
    generated.index_decode(**base)  # a plan for this key
    buf = torch.zeros((1, T + 3, TOPK), dtype=torch.int32, device=DEVICE)
    cases = [
        (dict(out=buf, completion_counter=buf.view(1, -1)[:, :T + 1]), "out",
         "completion_counter"),
        (dict(completion_counter=buf.view(1, -1)[:, :T + 1],
              sparse_context_lens_out=buf.view(-1)[:T]), "completion_counter",
         "sparse_context_lens_out"),
    ]
    for change, written, other in cases:
        with pytest.raises(ValueError, match=rf"^{written}: shares memory with {other}"):
            generated.index_decode(**{**base, **change})
    # an output inside another output
    table = torch.zeros((T, TOPK * 8 + TOPK * (T + 3)), dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="^out: shares memory with sparse_block_table_out"):
        generated.index_decode(**{**base, "sparse_block_table_out": table[:, :TOPK * 8],
                                  "out": table.view(-1)[TOPK * 8:TOPK * 8 + TOPK * (T + 3)]
                                  .view(1, T + 3, TOPK)})
    # the counter over an input
    lens = torch.zeros(64, dtype=torch.int32, device=DEVICE)
    lens[:len(LENS)] = base["seq_lens"]
    with pytest.raises(ValueError, match="^completion_counter: shares memory with seq_lens"):
        generated.index_decode(**{**base, "seq_lens": lens[:len(LENS)],
                                  "completion_counter": lens[:T + 1].view(1, T + 1)})


def test_outputs_over_the_inputs_the_kernels_read_are_refused():
    """index_decode's ids or counter over idx_q or the index cache, index_prefill's ids over
    cu_seqlens_q / prefix_lens / the table, index_prefill_topk's over its scores: a later
    program would read what an earlier one wrote (the ids silently wrong). Refused naming the
    written argument."""
    base = _decode_case(1, 0, False)
    T = len(LENS) * Q
    cache = base["index_kv_cache"]
    over_cache = cache.view(-1).view(torch.int32)[:T * TOPK].view(1, T, TOPK)
    with pytest.raises(ValueError, match="^out: shares memory with index_kv_cache"):
        generated.index_decode(**{**base, "out": over_cache})
    q = base["idx_q"]
    over_q = q.view(-1).view(torch.int32)[:T + 1].view(1, T + 1)
    with pytest.raises(ValueError, match="^completion_counter: shares memory with idx_q"):
        generated.index_decode(**{**base, "completion_counter": over_q})

    g = torch.Generator().manual_seed(5)
    H, D, topk, P = 2, 16, 3, 1000
    idx_cache = torch.randn((16, 128, D), generator=g).bfloat16().to(DEVICE)
    idx_q = torch.randn((2, H, D), generator=g).bfloat16().to(DEVICE)
    buf = torch.zeros(32, dtype=torch.int32, device=DEVICE)
    table, cu, pre, lens = buf[16:32].view(2, 8), buf[0:3], buf[3:5], buf[5:7]
    table.copy_(torch.arange(16).view(2, 8))
    cu.copy_(torch.tensor([0, 1, 2]))
    pre.fill_(P)
    lens.fill_(P + 1)
    args = (idx_q, idx_cache, table, cu, lens, pre, 1, P + 1, H, topk, 0, 0)
    want = generated.index_prefill(*args).clone()
    with pytest.raises(ValueError, match="^out: shares memory with cu_seqlens_q"):
        generated.index_prefill(*args, out=buf[0:12].view(2, 2, 3))
    assert torch.equal(generated.index_prefill(*args), want)  # nothing was written
    score = torch.randn((H, 2, 16), generator=g).to(DEVICE)
    with pytest.raises(ValueError, match="^out: shares memory with score"):
        generated.index_prefill_topk(score, cu, pre, 1, topk, 0, 0,
                                     out=score.view(torch.int32)[:, :, :topk])


def test_indexer_offsets_past_int32_are_refused_by_name():
    """The indexers take offsets within a cache page, along idx_q's d, between requests'
    lengths and within ``out`` in int32: views whose strides put such elements 2^31 apart or
    more (legal tensors over a large allocation) are refused naming them, where a kernel would
    have read or written outside its tensors."""
    g = torch.Generator().manual_seed(6)
    D, fp8 = 16, torch.float8_e4m3fn
    q = torch.randn((1, 1, D), generator=g).to(fp8).to(DEVICE)
    cache = torch.randn((1, 128, D), generator=g).to(fp8).to(DEVICE)
    table = torch.zeros((1, 1), dtype=torch.int32, device=DEVICE)
    lens = torch.tensor([128], dtype=torch.int32, device=DEVICE)
    want = generated.index_decode_scores(q, cache, table, lens, 128, 0, 0, 1, 1)[..., :1]
    S = (1 << 31) // 127 + 16
    wide = virtual_tensor(127 * S + D, fp8).as_strided((1, 128, D), (D, S, 1))
    with pytest.raises(ValueError, match="^index_kv_cache"):
        generated.index_decode_scores(q, wide, table, lens, 128, 0, 0, 1, 1)
    del wide
    S = (1 << 31) // 15 + 16
    wide_q = virtual_tensor(15 * S + 1, fp8).as_strided((1, 1, D), (1, 1, S))
    with pytest.raises(ValueError, match="^idx_q"):
        generated.index_decode_scores(wide_q, cache, table, lens, 128, 0, 0, 1, 1)
    del wide_q
    S = (1 << 31) // 3 + 1
    score = torch.randn((1, 1, 16), generator=g).to(DEVICE)
    cu = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    pre = torch.tensor([1000], dtype=torch.int32, device=DEVICE)
    out = virtual_tensor(3 * S + 1, torch.int32).as_strided((1, 1, 4), (1, 1, S))
    with pytest.raises(ValueError, match="^out"):
        generated.index_prefill_topk(score, cu, pre, 1, 4, 0, 0, out=out)
    del out
    S = (1 << 31) // 15 + 64  # index_prefill_topk: a score row's 16 blocks span 2^31
    wide_score = virtual_tensor(15 * S + 1, torch.float32).as_strided((1, 1, 16), (1, 1, S))
    with pytest.raises(ValueError, match="^score"):
        generated.index_prefill_topk(wide_score, cu, pre, 1, 4, 0, 0)
    del wide_score
    # (the one block's score; the scratch's other columns are never written)
    assert torch.equal(generated.index_decode_scores(q, cache, table, lens, 128, 0, 0, 1, 1)
                       [..., :1], want)


def test_tables_whose_rows_lie_2_31_elements_apart_give_the_contiguous_result():
    """The attention table read, the page-16 table written and the builder's ids may have rows
    2^31 elements apart or more (views over a large allocation): the kernels take row offsets in
    int64, so each call equals the one on contiguous tensors, and nothing past the rows moves."""
    R, topk, S = 3, 4, (1 << 30) + 16  # row 2 starts 2^31 + 32 elements in
    inputs, attn, _ = make_decode_inputs(1, 1, [300, 200, 400], seed=12, attention_table=True)

    def wide_rows(t):
        wide = virtual_tensor(2 * S + t.shape[1], t.dtype).as_strided(tuple(t.shape), (S, 1))
        wide.copy_(t)
        return wide

    tables = dict(attention_block_table=attn, block_page_stride=8,
                  sparse_block_table_out=torch.zeros((R, topk * 8), dtype=torch.int32,
                                                     device=DEVICE),
                  sparse_context_lens_out=torch.zeros((R,), dtype=torch.int32, device=DEVICE))
    call = dict(inputs, topk=topk, init_blocks=0, local_blocks=1, num_kv_heads=1,
                decode_query_len=1, max_decode_query_len=1, **tables)
    ids = generated.index_decode(**call).clone()
    want = tables["sparse_block_table_out"].clone()
    wide_attn = wide_rows(attn)
    tables["sparse_block_table_out"].fill_(-5)
    assert torch.equal(generated.index_decode(**{**call, "attention_block_table": wide_attn}),
                       ids)
    assert torch.equal(tables["sparse_block_table_out"], want)
    wide_out = wide_rows(torch.full_like(want, -5))
    generated.index_decode(**{**call, "sparse_block_table_out": wide_out})
    assert torch.equal(wide_out, want)
    del wide_out

    lens = inputs["seq_lens"]
    want_table, want_ctx = generated.build_sparse_block_table_decode(ids, attn, lens, 1, 8)
    got = generated.build_sparse_block_table_decode(ids, wide_attn, lens, 1, 8)
    assert torch.equal(got[0], want_table) and torch.equal(got[1], want_ctx)
    del wide_attn
    wide_ids = wide_rows(ids[0]).unsqueeze(0)
    got = generated.build_sparse_block_table_decode(wide_ids, attn, lens, 1, 8)
    assert torch.equal(got[0], want_table) and torch.equal(got[1], want_ctx)


def test_table_builder_refuses_widths_whose_keys_pass_int32():
    """An attention table of 2^24 columns or more holds keys past int32 positions (its
    width · 128 would wrap and clamp every request to nothing): refused naming it."""
    ids = torch.zeros((1, 1, 1), dtype=torch.int32, device=DEVICE)
    lens = torch.tensor([100], dtype=torch.int32, device=DEVICE)
    wide = torch.zeros((1, (1 << 24) + 1), dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="^attention_block_table"):
        generated.build_sparse_block_table_decode(ids, wide, lens)
    table, ctx = generated.build_sparse_block_table_decode(ids, wide[:, :(1 << 24) - 1], lens)
    assert int(ctx[0]) == 100


def test_index_decode_writes_into_out_whatever_its_rows_and_counter_width():
    """``out`` with exactly total_q rows is returned itself, a wider one as the view of its
    first total_q rows (the rows past them untouched); a counter of exactly total_q columns
    or wider: the same ids as fresh buffers give, on a new plan and on its cached one."""
    base = _decode_case(1, 0, False)
    T = len(LENS) * Q
    want = generated.index_decode(**{**base, "out": None, "completion_counter": None})
    for rows, columns in ((T, T), (T + 3, T + 1), (T, T + 1), (T + 3, T)):
        for _ in range(2):
            out = torch.full((1, rows, TOPK), -9, dtype=torch.int32, device=DEVICE)
            counter = torch.zeros((1, columns), dtype=torch.int32, device=DEVICE)
            got = generated.index_decode(**{**base, "out": out, "completion_counter": counter})
            assert (got is out) == (rows == T)
            assert got.data_ptr() == out.data_ptr() and got.shape == (1, T, TOPK)
            assert torch.equal(got, want) and bool((out[:, T:] == -9).all())


def test_disjoint_arguments_take_addresses_in_the_calls_order():
    """A check built with the call's order (`order`: an entry's key order) compares each
    written tensor with every other, naming them; an order that does not name each tensor
    once is a ValueError."""
    from generated import _runtime

    buf = torch.zeros(64, dtype=torch.int32)
    out, a, b = buf[0:8], buf[8:16], buf[16:24]
    check = _runtime.DisjointArguments(dict(out=out), dict(a=a, b=b), order=("a", "b", "out"))
    check(a, b, out)  # apart
    check.check([a.data_ptr(), b.data_ptr(), out.data_ptr()])
    with pytest.raises(ValueError, match="^out: shares memory with b"):
        check(a, buf[4:12], out)
    with pytest.raises(ValueError, match="^out: shares memory with a"):
        check.check([buf[2:10].data_ptr(), b.data_ptr(), out.data_ptr()])
    for order in (("a", "out"), ("a", "b", "out", "out"), ("a", "b", "c")):
        with pytest.raises(ValueError, match="^order"):
            _runtime.DisjointArguments(dict(out=out), dict(a=a, b=b), order=order)


def test_sharing_is_checked_again_when_the_addresses_change_under_one_plan():
    """The same plan key (shapes, strides, alignment) with the counter moved over ``out``:
    refused, although the last call's addresses passed; the separate buffers pass again."""
    base = _decode_case(1, 0, False)
    counter = base["completion_counter"]
    out = base["out"]
    over_out = out.view(-1)[:counter.numel()].view(counter.shape)
    assert over_out.data_ptr() % 16 == counter.data_ptr() % 16 == 0
    generated.index_decode(**base)
    generated.index_decode(**base)  # the same addresses: the remembered ones
    with pytest.raises(ValueError, match="^out: shares memory with completion_counter"):
        generated.index_decode(**{**base, "completion_counter": over_out})
    out.fill_(-9)
    generated.index_decode(**base)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_views_with_a_pending_negation_and_non_strided_tensors_are_refused():
    """A view flagged negated (its memory holds the values before the negation), sparse
    or MKL-DNN tensors (no strides to read) and nested ones (strided, but no one shape) are
    refused by name, also after a plan exists for a plain tensor of the same shape."""
    base = _decode_case(1, 0, False)
    generated.index_decode(**base)
    q = base["idx_q"].float()
    neg = torch.complex(torch.zeros_like(q), -q).conj().imag
    assert neg.is_neg() and torch.equal(neg, q)
    generated.index_decode(**{**base, "idx_q": q})
    assert_named(ValueError, "idx_q", generated.index_decode, **{**base, "idx_q": neg})
    nested = torch.nested.nested_tensor(list(q.unbind(0)))
    assert_named(ValueError, "idx_q", generated.index_decode, **{**base, "idx_q": nested})
    K, N = ROUTER_SHAPE
    g = torch.Generator().manual_seed(23)
    x, w = _randn((3, K), g), _randn((N, K), g)
    generated.router_gemm(x, w)
    for odd in (x.to_sparse(), x.to_sparse_csr(), torch.nested.nested_tensor(list(x))):
        assert_named(ValueError, "hidden_states", generated.router_gemm, hidden_states=odd,
                     router_weight=w)
        assert_named(ValueError, "hidden_states", generated.router_logits, hidden_states=odd,
                     router_weight=w)
        assert generated.can_use_router_gemm(odd, w) is False
    assert_named(ValueError, "router_weight", generated.router_gemm, hidden_states=x,
                 router_weight=w.to_sparse())


def test_explain_functions_name_their_dtype_and_enum_arguments():
    """An unknown dtype names the argument it came in (not a generic 'dtype'); unhashable or
    unknown enum values are ValueErrors naming them."""
    attn = dict(mode="decode", hardware="sm_90", q_dtype="bf16", kv_dtype="bf16",
                scales="none", group=16, head_dim=128, programs=8)
    for name, bad in (("q_dtype", "float"), ("kv_dtype", None), ("mode", ["decode"]),
                      ("scales", ["none"]), ("scales", "zz"), ("query_len", 0)):
        assert_named(ValueError, name, generated.explain_sparse_attn, **{**attn, name: bad})
    assert_named(TypeError, "query_len", generated.explain_sparse_attn,
                 **{**attn, "query_len": 2.0})
    assert_named(ValueError, "query_len", generated.explain_sparse_attn,  # decode's only
                 **{**attn, "mode": "prefill", "query_len": 1})
    dec = dict(hardware="sm_90", q_dtype="bf16", cache_dtype="bf16", head_dim=128, num_reqs=4,
               max_block=64, total_q=4, num_heads=1, topk=16, max_decode_query_len=1)
    for name in ("q_dtype", "cache_dtype"):
        assert_named(ValueError, name, generated.explain_index_decode,
                     **{**dec, name: torch.float64})
    pre = dict(hardware="sm_90", q_dtype="bf16", cache_dtype="bf16", head_dim=128, num_heads=1,
               num_tokens=64, max_block=8, topk=16)
    for name in ("q_dtype", "cache_dtype"):
        assert_named(ValueError, name, generated.explain_index_prefill, **{**pre, name: "xx"})


# ---- explain functions refuse what their entries refuse -----------------------------------------
# Each explain function reports the launch of a call described by sizes and dtype names; for a
# description whose call the entry refuses it raises the entry's error, naming its own argument
# (ENTRY_NAME[explain's name] is the entry's name for the same fact). The entries below are
# called with every launch a no-op: only their validation and dispatch run.

DTYPE_NAMES = ("bf16", "fp16", "fp32", "fp8e4m3", "fp8e5m2")
TORCH_OF = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
            "fp8e4m3": torch.float8_e4m3fn, "fp8e5m2": torch.float8_e5m2}


@pytest.fixture
def no_launch(monkeypatch):
    """Kernel launches do nothing (validation and dispatch still run)."""
    monkeypatch.setattr(generated._runtime.KernelLaunch, "__call__", lambda self, *args: None)


def _outcome(fn, **kwargs):
    """(exception type, the name its message starts with), or (None, None) when accepted."""
    try:
        fn(**kwargs)
    except (ValueError, TypeError) as e:
        return type(e), str(e).partition(":")[0]
    return None, None


def _same_refusal(explain, entry, names):
    """The explain call refuses exactly when the entry call does, with the same exception type
    and the corresponding argument name (``names``: explain's name -> the entry's names for
    the same fact)."""
    assert explain[0] == entry[0], (explain, entry)
    assert entry[1] in names.get(explain[1], (explain[1],)), (explain, entry)


def _zeros(shape, name):
    return torch.zeros(shape, dtype=TORCH_OF[name], device=DEVICE)


def _int32(values):
    return torch.tensor(values, dtype=torch.int32, device=DEVICE)


DECODE_BASE = dict(q="bf16", cache="bf16", H=1, D=16, R=2, T=2, Q=1, Qmax=1, topk=4,
                   max_seq_len=300)
# explain_index_decode's argument -> the names index_decode gives the same fact (total_q rows
# with no 0 < Q ≤ max_decode_query_len: the entry is given Q, decode_query_len)
DECODE_NAMES = {"q_dtype": ("idx_q",), "cache_dtype": ("index_kv_cache",),
                "num_heads": ("idx_q",), "head_dim": ("idx_q",),
                "total_q": ("idx_q", "decode_query_len"), "max_block": ("max_seq_len",)}
DECODE_CASES = [  # (one change, refused); Q is the entry's decode_query_len
    (dict(q="fp8e4m3"), True), (dict(q="fp8e4m3", cache="fp16"), True),
    (dict(q="fp8e5m2"), True), (dict(H=3), True), (dict(D=24), True), (dict(Qmax=9), True),
    (dict(Qmax=0), True), (dict(T=3), True), (dict(T=4, Q=2), True), (dict(R=0, T=2), True),
    (dict(R=0, T=0, H=3), True), (dict(R=0, T=0, topk=0), True), (dict(R=0, T=0, Qmax=9), True),
    (dict(topk=0), True), (dict(topk=513), True), (dict(max_seq_len=65535 * 128), True),
    (dict(T=4, Q=2, Qmax=2), False), (dict(R=0, T=0), False),
    (dict(q="fp8e4m3", cache="fp8e4m3"), False), (dict(q="fp32", cache="fp8e4m3"), False),
]


def _decode_pair(hw, q, cache, H, D, R, T, Q, Qmax, topk, max_seq_len):
    """(explain_index_decode's outcome, index_decode's outcome) for one call."""
    width = max(1, -(-max_seq_len // 128))
    explain = _outcome(generated.explain_index_decode, hardware=hw, q_dtype=q,
                       cache_dtype=cache, head_dim=D, num_reqs=R, max_block=width, total_q=T,
                       num_heads=H, topk=topk, max_decode_query_len=Qmax)
    entry = _outcome(generated.index_decode, idx_q=_zeros((T, H, D), q),
                     index_kv_cache=_zeros((4, 128, D), cache),
                     block_table=torch.zeros((R, min(width, 8)), dtype=torch.int32,
                                             device=DEVICE),
                     seq_lens=_int32([1] * R), max_seq_len=max_seq_len, topk=topk,
                     init_blocks=0, local_blocks=1, num_kv_heads=H, decode_query_len=Q,
                     max_decode_query_len=Qmax, hardware=hw)
    return explain, entry


@pytest.mark.parametrize("change,refused", DECODE_CASES, ids=[str(c) for c, _ in DECODE_CASES])
def test_explain_index_decode_refuses_what_index_decode_refuses(change, refused, no_launch):
    """fp8 queries with other caches, total_q ≠ num_reqs · Q, an out-of-range
    max_decode_query_len (named so, not by the table's axis max_q), heads, dims, topk and
    block counts outside the domain, also where no request launches anything."""
    explain, entry = _decode_pair("sm_90", **{**DECODE_BASE, **change})
    _same_refusal(explain, entry, DECODE_NAMES)
    assert (explain[0] is not None) == refused, explain


def test_explain_index_decode_names_max_decode_query_len_and_total_q():
    dec = dict(hardware="sm_90", q_dtype="bf16", cache_dtype="bf16", head_dim=128, num_reqs=4,
               max_block=64, total_q=4, num_heads=1, topk=16, max_decode_query_len=1)
    for bad in (0, 9, 100):
        assert_named(ValueError, "max_decode_query_len", generated.explain_index_decode,
                     **{**dec, "max_decode_query_len": bad})
    for total_q, qmax in ((5, 1), (12, 2), (0, 1), (3, 8)):  # no 0 < Q ≤ Qmax with 4·Q rows
        assert_named(ValueError, "total_q", generated.explain_index_decode,
                     **{**dec, "total_q": total_q, "max_decode_query_len": qmax})
    assert_named(ValueError, "q_dtype", generated.explain_index_decode,
                 **{**dec, "q_dtype": "fp8e4m3"})
    assert generated.explain_index_decode(**{**dec, "total_q": 12,
                                             "max_decode_query_len": 3})["scorer"]


@pytest.mark.parametrize("q", DTYPE_NAMES)
def test_explain_index_decode_dtype_pairs_as_index_decode(q, no_launch):
    for cache in DTYPE_NAMES:
        explain, entry = _decode_pair("generic", **{**DECODE_BASE, "q": q, "cache": cache})
        _same_refusal(explain, entry, DECODE_NAMES)


PREFILL_BASE = dict(q="bf16", cache="bf16", H=1, D=16, T=3, topk=4, max_seq_len=300)
PREFILL_NAMES = {"q_dtype": ("idx_q",), "cache_dtype": ("index_kv_cache",),
                 "num_heads": ("idx_q",), "head_dim": ("idx_q",), "max_block": ("max_seq_len",)}
PREFILL_CASES = [  # (one change, refused)
    (dict(q="fp8e4m3"), True), (dict(H=3), True), (dict(D=24), True), (dict(topk=0), True),
    (dict(topk=513), True), (dict(max_seq_len=65535 * 128), True), (dict(T=0, topk=0), True),
    (dict(T=0, H=3), True), (dict(T=0, q="fp8e4m3"), True), (dict(T=0), False),
    (dict(q="fp32", cache="fp8e4m3"), False),
]


def _prefill_pair(hw, q, cache, H, D, T, topk, max_seq_len):
    width = max(1, -(-max_seq_len // 128))
    explain = _outcome(generated.explain_index_prefill, hardware=hw, q_dtype=q,
                       cache_dtype=cache, head_dim=D, num_heads=H, num_tokens=T,
                       max_block=width, topk=topk)
    entry = _outcome(generated.index_prefill, idx_q=_zeros((T, H, D), q),
                     index_kv_cache=_zeros((4, 128, D), cache),
                     block_table=torch.zeros((1, min(width, 8)), dtype=torch.int32,
                                             device=DEVICE),
                     cu_seqlens_q=_int32([0, T]), seq_lens=_int32([T]), prefix_lens=_int32([0]),
                     max_query_len=T, max_seq_len=max_seq_len, num_kv_heads=H, topk=topk,
                     init_blocks=0, local_blocks=1, hardware=hw)
    return explain, entry


@pytest.mark.parametrize("change,refused", PREFILL_CASES,
                         ids=[str(c) for c, _ in PREFILL_CASES])
def test_explain_index_prefill_refuses_what_index_prefill_refuses(change, refused, no_launch):
    explain, entry = _prefill_pair("sm_90", **{**PREFILL_BASE, **change})
    _same_refusal(explain, entry, PREFILL_NAMES)
    assert (explain[0] is not None) == refused, explain


@pytest.mark.parametrize("q", DTYPE_NAMES)
def test_explain_index_prefill_dtype_pairs_as_index_prefill(q, no_launch):
    for cache in DTYPE_NAMES:
        explain, entry = _prefill_pair("generic", **{**PREFILL_BASE, "q": q, "cache": cache})
        _same_refusal(explain, entry, PREFILL_NAMES)


@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_explain_sparse_attn_dtype_pairs_as_the_entries(mode, no_launch):
    """bf16 q with an fp16 cache (and the reverse), fp8 queries, fp32 caches: refused by both,
    explain naming q_dtype / kv_dtype where the entry names q / kv."""
    T, Hkv, G, D = 2, 1, 4, 64
    refused = 0
    for q in DTYPE_NAMES:
        for kv in DTYPE_NAMES:
            explain = _outcome(generated.explain_sparse_attn, mode=mode, hardware="sm_90",
                               q_dtype=q, kv_dtype=kv, scales="none", group=G, head_dim=D,
                               programs=T * Hkv)
            args = dict(q=_zeros((T, Hkv * G, D), q), kv=_zeros((2, 2, 128, Hkv, D), kv),
                        topk_idx=torch.zeros((Hkv, T, 2), dtype=torch.int32, device=DEVICE),
                        block_table=torch.zeros((1, 2), dtype=torch.int32, device=DEVICE),
                        num_kv_heads=Hkv, sm_scale=0.125,
                        output=torch.zeros((T, Hkv * G, D), device=DEVICE), hardware="sm_90")
            if mode == "decode":
                entry = _outcome(generated.sparse_attn_decode, **args, seq_lens=_int32([T]),
                                 decode_query_len=T)
            else:
                entry = _outcome(generated.sparse_attn_prefill, **args, seq_lens=_int32([T]),
                                 cu_seqlens_q=_int32([0, T]), prefix_lens=_int32([0]),
                                 max_query_len=T)
            _same_refusal(explain, entry, {"q_dtype": ("q",), "kv_dtype": ("kv",)})
            refused += explain[0] is not None
    assert refused == 2 + 2 * 5 + 3  # bf16/fp16 pairs, fp8 q, fp32 kv (q 16-bit or fp32)


# ---- *_with_launch: launches given by hand are held to their variants' specs -------------------

SPLIT = {"variant": "index_score_split", "kv_chunks": 4, "high_batch": False,
         "static_chunks": True, "num_warps": 4, "num_stages": 2}
BALANCED = {"variant": "index_score_balanced", "program_budget": 3, "num_warps": 2,
            "num_stages": 1}
FUSED = {"variant": "index_decode_fused", "kv_chunks": 2, "topk_tile": 128}
SELECTOR = {"topk_chunks": 2, "topk_tile": 128, "single_tile": False, "adaptive_merge": True,
            "num_warps": 4, "num_stages": 2}


def _without(d, key):
    return {k: v for k, v in d.items() if k != key}


# (score_launch, topk_launch, error type, the name it starts with, what the message says)
BAD_DECODE_LAUNCHES = [
    ({**SPLIT, "kv_chunks": 0}, None, ValueError, "score_launch", "kv_chunks must be ≥ 1"),
    ({**SPLIT, "kv_chunks": -4}, None, ValueError, "score_launch", "kv_chunks must be ≥ 1"),
    ({**SPLIT, "kv_chunks": 3}, None, ValueError, "score_launch", "kv_chunks must be a power"),
    ({**SPLIT, "kv_chunks": 2048}, None, ValueError, "score_launch", "kv_chunks must be ≤ 1024"),
    (_without(SPLIT, "kv_chunks"), None, ValueError, "score_launch", "missing key 'kv_chunks'"),
    (_without(SPLIT, "num_warps"), None, ValueError, "score_launch", "missing key 'num_warps'"),
    ({**SPLIT, "num_warps": 3}, None, ValueError, "score_launch", "num_warps must be a power"),
    ({**SPLIT, "num_stages": 0}, None, ValueError, "score_launch", "num_stages must be ≥ 1"),
    ({**SPLIT, "kv_chunk": 4}, None, ValueError, "score_launch", "unknown key 'kv_chunk'"),
    ({**SPLIT, "high_batch": 1}, None, TypeError, "score_launch", "high_batch must be a bool"),
    ({**SPLIT, "kv_chunks": 4.0}, None, TypeError, "score_launch", "kv_chunks must be an int"),
    ({**SPLIT, "kv_chunks": None}, None, TypeError, "score_launch", "kv_chunks must be an int"),
    ({**BALANCED, "program_budget": 0}, None, ValueError, "score_launch",
     "program_budget must be ≥ 1"),
    ({**BALANCED, "program_budget": -3}, None, ValueError, "score_launch",
     "program_budget must be ≥ 1"),
    ({**FUSED, "kv_chunks": 0}, None, ValueError, "score_launch", "kv_chunks must be ≥ 1"),
    ({**FUSED, "topk_tile": 200}, None, ValueError, "score_launch", "topk_tile must be a power"),
    (_without(SPLIT, "variant"), None, ValueError, "score_launch", "missing key 'variant'"),
    ({**SPLIT, "variant": "index_score"}, None, ValueError, "score_launch", "variant must be"),
    ("index_score_split", None, TypeError, "score_launch", "must be a dict"),
    (None, {**SELECTOR, "topk_tile": 100}, ValueError, "topk_launch", "topk_tile must be a power"),
    (None, {**SELECTOR, "topk_chunks": 0}, ValueError, "topk_launch", "topk_chunks must be ≥ 1"),
    (None, {**SELECTOR, "topk_chunks": 32}, ValueError, "topk_launch", "topk_chunks must be ≤ 16"),
    (None, _without(SELECTOR, "single_tile"), ValueError, "topk_launch",
     "missing key 'single_tile'"),
    (None, {**SELECTOR, "single_tile": None}, TypeError, "topk_launch", "single_tile must be"),
    (SPLIT, [SELECTOR], TypeError, "topk_launch", "must be a dict"),
]


@pytest.fixture
def launches_fail(monkeypatch):
    """A kernel launch fails the test: refusals come before anything is launched."""
    def launched(self, *args):
        pytest.fail(f"{self.kernel} launched")
    monkeypatch.setattr(generated._runtime.KernelLaunch, "__call__", launched)


@pytest.mark.parametrize("case", range(len(BAD_DECODE_LAUNCHES)))
def test_index_decode_with_launch_refuses_bad_launches_by_key(case, launches_fail):
    """Missing keys were KeyErrors, zero or negative kv_chunks / program_budget gave wrong ids,
    non-power-of-two tiles failed inside Triton: each is now refused by name, before any
    launch, by the rules the variant's spec declares."""
    score, topk, error, name, says = BAD_DECODE_LAUNCHES[case]
    inputs, _ = make_decode_inputs(1, 1, [300, 1000], seed=5)
    with pytest.raises(error) as info:
        generated.index_decode_with_launch(score, topk, **inputs, topk=TOPK, init_blocks=0,
                                           local_blocks=1, num_kv_heads=1, decode_query_len=1,
                                           max_decode_query_len=1)
    assert str(info.value).startswith(name + ":") and says in str(info.value), info.value


def _prefill_inputs():
    g = torch.Generator().manual_seed(3)
    return dict(idx_q=torch.randn((5, 1, 16), generator=g).bfloat16().to(DEVICE),
                index_kv_cache=torch.randn((6, 128, 16), generator=g).bfloat16().to(DEVICE),
                block_table=_int32([[0, 1, 2], [3, 4, 5]]), cu_seqlens_q=_int32([0, 2, 5]),
                seq_lens=_int32([200, 300]), prefix_lens=_int32([198, 297]), max_query_len=3,
                max_seq_len=300, num_kv_heads=1, topk=4, init_blocks=1, local_blocks=1)


STREAM = {"variant": "index_prefill_stream", "block_m": 16, "topk_tile": 16, "num_warps": 4,
          "num_stages": 2}
PREFILL_SCORE = {"block_m": 16, "kv_splits": 2, "num_warps": 4, "num_stages": 2}
PREFILL_TOPK = {"block_k": 128, "block_rows": 2, "num_warps": 4, "num_stages": None}
TWO = {"variant": "index_prefill", "score": PREFILL_SCORE, "topk": PREFILL_TOPK}
BAD_PREFILL_LAUNCHES = [
    ({**STREAM, "block_m": 0}, ValueError, "launch", "block_m must be ≥ 1"),
    ({**STREAM, "block_m": 12}, ValueError, "launch", "block_m must be a power"),
    (_without(STREAM, "topk_tile"), ValueError, "launch", "missing key 'topk_tile'"),
    ({**STREAM, "topk_tile": 48}, ValueError, "launch", "topk_tile must be a power"),
    ({**STREAM, "num_stages": -1}, ValueError, "launch", "num_stages must be ≥ 1"),
    ({**STREAM, "lanes": 16}, ValueError, "launch", "unknown key 'lanes'"),
    (_without(STREAM, "variant"), ValueError, "launch", "missing key 'variant'"),
    ({**STREAM, "variant": "stream"}, ValueError, "launch", "variant must be"),
    ({**TWO, "score": {**PREFILL_SCORE, "kv_splits": 0}}, ValueError, "launch['score']",
     "kv_splits must be ≥ 1"),
    ({**TWO, "score": {**PREFILL_SCORE, "kv_splits": 3}}, ValueError, "launch['score']",
     "kv_splits must be a power"),
    ({**TWO, "score": _without(PREFILL_SCORE, "block_m")}, ValueError, "launch['score']",
     "missing key 'block_m'"),
    ({**TWO, "topk": {**PREFILL_TOPK, "block_k": 24}}, ValueError, "launch['topk']",
     "block_k must be a power"),
    ({**TWO, "topk": {**PREFILL_TOPK, "block_rows": 0}}, ValueError, "launch['topk']",
     "block_rows must be ≥ 1"),
    ({**TWO, "scores": None}, ValueError, "launch", "unknown key 'scores'"),
    ([STREAM], TypeError, "launch", "must be a dict"),
]


@pytest.mark.parametrize("case", range(len(BAD_PREFILL_LAUNCHES)))
def test_index_prefill_with_launch_refuses_bad_launches_by_key(case, launches_fail):
    launch, error, name, says = BAD_PREFILL_LAUNCHES[case]
    with pytest.raises(error) as info:
        generated.prefill_indexer.index_prefill_with_launch(launch, **_prefill_inputs())
    assert str(info.value).startswith(name + ":") and says in str(info.value), info.value


ATTN = {"splits": 2, "num_warps": 4, "num_stages": 2}
TILED = {"variant": "sparse_attn_tiled", "lanes": 64, "num_warps": 4, "num_stages": 2}
BAD_ATTN_LAUNCHES = [  # (mode, launch, error type, what the message says)
    ("decode", {**ATTN, "splits": 0}, ValueError, "splits must be ≥ 1"),
    ("decode", {**ATTN, "splits": -2}, ValueError, "splits must be ≥ 1"),
    ("prefill", {**ATTN, "splits": 0}, ValueError, "splits must be ≥ 1"),
    ("decode", {**ATTN, "splits": 3}, ValueError, "splits must be a power"),
    ("decode", _without(ATTN, "splits"), ValueError, "missing key 'splits'"),
    ("decode", _without(ATTN, "num_stages"), ValueError, "missing key 'num_stages'"),
    ("decode", {**ATTN, "kv_tile": 48}, ValueError, "kv_tile must be a power"),
    ("decode", {**ATTN, "kv_tile": 8}, ValueError, "kv_tile must be ≥ 16"),
    ("decode", {**ATTN, "kv_tile": 256}, ValueError, "kv_tile must be ≤ 128"),
    ("decode", {**ATTN, "head_split": 0}, ValueError, "head_split must be ≥ 1"),
    ("decode", {**ATTN, "merge_kernel": 1}, TypeError, "merge_kernel must be a bool"),
    ("decode", {**ATTN, "split": 2}, ValueError, "unknown key 'split'"),
    ("decode", {**ATTN, "variant": "sparse_attn"}, ValueError, "variant must be"),
    ("decode", {**TILED, "lanes": 24}, ValueError, "lanes must be a power"),
    ("prefill", {**TILED, "lanes": 24}, ValueError, "lanes must be a power"),
    ("prefill", {**TILED, "lanes": 8}, ValueError, "lanes must be ≥ 16"),
    ("prefill", _without(TILED, "lanes"), ValueError, "missing key 'lanes'"),
    ("prefill", {**TILED, "splits": 3}, ValueError, "splits must be a power"),
    ("decode", (2, 4, 2), TypeError, "must be a dict"),
]


def _attn_inputs(mode):
    T, Hkv, G, D = 2, 1, 4, 64
    g = torch.Generator().manual_seed(4)
    args = dict(q=torch.randn((T, Hkv * G, D), generator=g).bfloat16().to(DEVICE),
                kv=torch.randn((2, 2, 128, Hkv, D), generator=g).bfloat16().to(DEVICE),
                topk_idx=torch.zeros((Hkv, T, 2), dtype=torch.int32, device=DEVICE),
                block_table=_int32([[0, 1]]), seq_lens=_int32([200]), num_kv_heads=Hkv,
                sm_scale=0.125, output=torch.zeros((T, Hkv * G, D), device=DEVICE))
    if mode == "decode":
        return dict(args, decode_query_len=T)
    return dict(args, cu_seqlens_q=_int32([0, T]), prefix_lens=_int32([198]), max_query_len=T)


@pytest.mark.parametrize("case", range(len(BAD_ATTN_LAUNCHES)))
def test_sparse_attn_with_launch_refuses_bad_launches_by_key(case, launches_fail):
    """splits 0 or negative gave wrong outputs (an empty grid), non-power-of-two tiles failed
    inside Triton, missing keys were KeyErrors; sparse_decode_step_with_launch checks the same
    launch."""
    mode, launch, error, says = BAD_ATTN_LAUNCHES[case]
    sa = generated.sparse_attention
    with pytest.raises(error) as info:
        sa.sparse_attn_with_launch(launch, mode, **_attn_inputs(mode))
    assert str(info.value).startswith("launch:") and says in str(info.value), info.value
    if mode != "decode":
        return
    step = _attn_inputs("decode")
    T, Hkv, D = step["q"].shape[0], step["num_kv_heads"], step["q"].shape[2]
    step.update(idx_q=torch.zeros((T, Hkv, D), dtype=torch.bfloat16, device=DEVICE),
                index_kv_cache=torch.zeros((2, 128, D), dtype=torch.bfloat16, device=DEVICE),
                index_block_table=_int32([[0, 1]]), max_seq_len=200, topk=2, init_blocks=0,
                local_blocks=1, max_decode_query_len=T)
    del step["topk_idx"]
    with pytest.raises(error) as info:
        sa.sparse_decode_step_with_launch(launch, **step)
    assert str(info.value).startswith("launch:") and says in str(info.value), info.value


def test_sparse_attn_with_launch_names_its_mode_and_arguments(launches_fail):
    sa = generated.sparse_attention
    for mode in ("Decode", ["decode"], None):
        assert_named(ValueError, "mode", sa.sparse_attn_with_launch, launch=ATTN, mode=mode,
                     **_attn_inputs("decode"))
    args = _attn_inputs("decode")
    del args["output"]
    with pytest.raises(TypeError, match="^missing a required argument: 'output'"):  # was a KeyError
        sa.sparse_attn_with_launch(ATTN, "decode", **args)


def test_launch_rules_are_the_specs_params():
    """The rules *_with_launch apply are each variant's declared launch parameters (not a
    second list): the same names, kinds, powers of two, ranges and optional values."""
    from codegen import registry

    reg = registry.load()
    got = generated._runtime.LAUNCH_PARAMS
    for v in reg.variants.values():
        if v.params:
            assert got[v.name] == {p.name: p.rule() for p in v.params}, v.name
            assert all(r.minimum == p.minimum and r.maximum == p.maximum
                       for p in v.params if p.kind == "int" for r in [got[v.name][p.name]])
    assert set(got) == {v.name for v in reg.variants.values() if v.params}


def test_the_table_builder_takes_a_most_negative_seq_len_as_empty():
    """seq_len −2³¹ with Q 2: positions seq_len − Q + i would wrap in int32 to ~2³¹ (every id
    valid, the attention table read past its width); a negative seq_len counts as 0: zero rows
    and contexts, whatever the ids."""
    seq_lens = torch.tensor([-(1 << 31)], dtype=torch.int32, device=DEVICE)
    attn = torch.tensor([[7, 8, 9]], dtype=torch.int32, device=DEVICE)
    ids = torch.tensor([[[0, 1, 2, -1], [16_000_000, 0, -1, -1]]], dtype=torch.int32,
                       device=DEVICE)
    table, ctx = generated.build_sparse_block_table_decode(ids, attn, seq_lens, 2, 8)
    assert not table.any() and ctx.tolist() == [0, 0]


def test_the_table_builder_refuses_what_its_kernel_cannot_address():
    """topk past MAX_TOPK (the kernel's tile) names topk_idx; a seq_lens view whose elements
    lie 2³¹ apart (int32 offsets along it) names seq_lens."""
    attn = torch.zeros((1, 4), dtype=torch.int32, device=DEVICE)
    lens = torch.tensor([300], dtype=torch.int32, device=DEVICE)
    wide = torch.full((1, 1, 1), -1, dtype=torch.int32, device=DEVICE).expand(1, 1, 513)
    with pytest.raises(ValueError, match=r"^topk_idx: must be \[1, total_q, topk ≤ 512\]"):
        generated.build_sparse_block_table_decode(wide, attn, lens)
    S = (1 << 30) + 16
    strided = virtual_tensor(2 * S + 1, torch.int32).as_strided((3,), (S,))
    ids = torch.full((1, 3, 4), -1, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="^seq_lens: strides"):
        generated.build_sparse_block_table_decode(ids, attn.expand(3, 4), strided)


def test_ids_index_decode_would_make_past_int32_offsets_are_refused():
    """Without out, index_decode makes the ids [H, total_q, topk]; where they pass int32
    offsets (as a given out of that shape would) the call is refused naming idx_q, before
    anything is allocated (inputs broadcast: a few bytes)."""
    H, topk, D, total_q = 4, 512, 16, 1_400_000
    q = torch.zeros((1, H, D), dtype=torch.bfloat16, device=DEVICE).expand(total_q, H, D)
    cache = torch.zeros((1, 128, D), dtype=torch.bfloat16, device=DEVICE)
    table = torch.zeros((1, 1), dtype=torch.int32, device=DEVICE).expand(total_q, 1)
    lens = torch.full((1,), 100, dtype=torch.int32, device=DEVICE).expand(total_q)
    with pytest.raises(ValueError, match=r"^idx_q: the ids of its H · total_q = 4 · 1400000 "
                                         r"rows at topk 512"):
        generated.index_decode(q, cache, table, lens, 128, topk, 0, 1, H, 1, 1)


def test_the_prefill_selector_refuses_more_heads_than_its_grid_holds():
    score = torch.zeros((65536, 1, 16), device=DEVICE)
    cu = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    pre = torch.tensor([0], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="^score: at most 65535 heads"):
        generated.index_prefill_topk(score, cu, pre, 1, 4, 0, 1)


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")  # (the interpreter's max)
def test_a_nan_query_scores_nan_at_whole_blocks_and_minus_inf_at_partial_ones():
    """docs/KERNELS.md §3: the block maximum skips NaN products and counts masked keys as −inf,
    so a row whose query holds a NaN scores NaN at each block it sees whole and −inf at the
    block it sees in part, in the decode and the prefill scorers alike; its ids are then the
    whole blocks, lowest first, then the partial one. Scores and ids equal the independent
    references' (which skip NaN the same way) on every written entry."""
    from reference_prefill import ref_prefill_scores, ref_prefill_topk
    from test_index_prefill import TWO, make_inputs, score_args, stream

    inputs, _, _ = make_decode_inputs(1, 1, [300], seed=1, attention_table=True)
    inputs["idx_q"][0, 0, 0] = float("nan")
    scores = generated.index_decode_scores(
        **{k: inputs[k] for k in ("idx_q", "index_kv_cache", "block_table", "seq_lens",
                                  "max_seq_len")},
        init_blocks=0, local_blocks=0, decode_query_len=1, max_decode_query_len=1)
    assert scores[0, 0, :2].isnan().all() and scores[0, 0, 2].item() == float("-inf")
    ref, written = ref_decode_scores(inputs["idx_q"], inputs["index_kv_cache"],
                                     inputs["block_table"], inputs["seq_lens"], 0, 0, 1,
                                     inputs["max_seq_len"], return_written=True)
    assert ref[0, 0, :3].isnan().tolist() == [True, True, False]
    torch.testing.assert_close(scores[written.to(DEVICE)].cpu(), ref[written], rtol=0, atol=0,
                               equal_nan=True)
    out = torch.full((1, 1, TOPK), -9, dtype=torch.int32, device=DEVICE)
    _call(inputs, local_blocks=0, out=out)
    want = reference_topk(torch.where(written, ref, float("-inf")), inputs["seq_lens"], 1, TOPK)
    assert want[0, 0].tolist() == [0, 1, 2, -1] and torch.equal(out.cpu(), want)

    inp = make_inputs([250], [20], H=1, seed=3)  # row 16 sits at 266: blocks 0, 1 whole, 2 part
    inp["idx_q"][16, 0, 0] = float("nan")
    scores = generated.index_prefill_score(**inp)
    assert scores[0, 16, :2].isnan().all() and scores[0, 16, 2].item() == float("-inf")
    ref, written = ref_prefill_scores(**score_args(inp), max_seq_len=inp["max_seq_len"],
                                      return_written=True)
    assert ref[0, 16].isnan().tolist() == [True, True, False]
    torch.testing.assert_close(scores[:, :, :ref.shape[2]][written].double(), ref[written],
                               rtol=1e-6, atol=1e-4, equal_nan=True)
    want = ref_prefill_topk(torch.where(written, ref, float("-inf")).float(),
                            inp["cu_seqlens_q"], inp["prefix_lens"], 3, 0, 0,
                            capacity=ref.shape[2])
    assert want[0, 16].tolist() == [0, 1, 2]
    for launch in (TWO, stream(16)):
        out = torch.full((1, 20, 3), -9, dtype=torch.int32, device=DEVICE)
        generated.prefill_indexer.index_prefill_with_launch(
            launch, **inp, topk=3, init_blocks=0, local_blocks=0, out=out)
        assert torch.equal(out[:, 16].cpu(), want[:, 16]), launch
        assert torch.equal(out.cpu(), ref_prefill_topk(scores, inp["cu_seqlens_q"],
                                                       inp["prefix_lens"], 3, 0, 0,
                                                       capacity=ref.shape[2])), launch


def test_hardware_is_named_even_where_nothing_launches():
    """An unknown or non-string ``hardware`` is refused by name (ValueError / TypeError) by
    every entry, also on calls with nothing to launch (no rows, no tokens, capacity 0)."""
    from test_index_prefill import make_inputs

    decode = _decode_case(1, 0, False)
    empty_decode = dict(decode, idx_q=decode["idx_q"][:0], seq_lens=decode["seq_lens"][:0],
                        block_table=decode["block_table"][:0], out=None,
                        completion_counter=None)
    prefill = make_inputs([250], [0], H=1, seed=3)  # no query tokens
    K, N = ROUTER_SHAPE
    x, w = torch.zeros((0, K), device=DEVICE), torch.zeros((N, K), device=DEVICE)
    calls = [
        lambda hw: generated.index_decode(**empty_decode, hardware=hw),
        lambda hw: generated.index_prefill_score(**prefill, hardware=hw),
        lambda hw: generated.index_prefill(**prefill, topk=3, init_blocks=0, local_blocks=0,
                                           hardware=hw),
        lambda hw: generated.index_prefill_topk(
            torch.zeros((1, 0, 3), device=DEVICE), prefill["cu_seqlens_q"],
            prefill["prefix_lens"], 0, 3, 0, 0, hardware=hw),
        lambda hw: generated.router_gemm(x, w, hardware=hw),
    ]
    for call in calls:
        call(None)  # accepted without a target
        for bad, exc in (("bogus", ValueError), (5, TypeError)):
            with pytest.raises(exc) as info:
                call(bad)
            assert str(info.value).startswith("hardware: "), str(info.value)
