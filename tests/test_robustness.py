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
from decode_inputs import DEVICE, make_decode_inputs
from reference_index import ref_decode_scores
from reference_topk import reference_sparse_table

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

LENS = [0, 130, 301, 7]  # a padding request, spec rows with query_pos < 0 (7 with Q = 2 is fine)
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
NOT_INTS = (4.0, "4", True, torch.tensor(4), None)


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
    assert_named(ValueError, "hardware", generated.index_decode, **base, hardware=["sm_90"])


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


def test_scalar_ranges_named():
    base = _decode_case(1, 0, False)
    for name, bad in (("topk", 0), ("init_blocks", -1), ("local_blocks", -2),
                      ("max_seq_len", -1), ("decode_query_len", 0)):
        assert_named(ValueError, name, generated.index_decode, **{**base, name: bad})
    # past int64 no kernel argument can hold the value (2⁶³ was taken as unsigned)
    for name in ("init_blocks", "local_blocks"):
        for bad in (1 << 63, (1 << 64) + 5):
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


@pytest.mark.parametrize("launch", range(len(SCORE_LAUNCHES)))
def test_seq_len_beyond_capacity_is_clamped(launch):
    """Issue 11's crash: seq_lens [300, 5000] with max_seq_len 1005 (capacity 8 blocks). Every
    kernel computes request 1 as if its length were the capacity, 1024."""
    inputs, attn, max_block = make_decode_inputs(1, 1, [300, 1000], seed=5, attention_table=True)
    assert max_block == 8 and inputs["max_seq_len"] == 1005
    table = dict(attention_block_table=attn, block_page_stride=8)

    def run(lens):
        total_q = len(lens)
        ctx = torch.full((total_q,), -9, dtype=torch.int32, device=DEVICE)
        tab = torch.full((total_q, TOPK * 8), -9, dtype=torch.int32, device=DEVICE)
        ids = generated.index_decode_with_launch(
            SCORE_LAUNCHES[launch], None, **dict(inputs, seq_lens=torch.tensor(
                lens, dtype=torch.int32, device=DEVICE)), topk=TOPK, init_blocks=0,
            local_blocks=1, num_kv_heads=1, decode_query_len=1, max_decode_query_len=1,
            sparse_block_table_out=tab, sparse_context_lens_out=ctx, **table)
        return ids, tab, ctx

    got = run([300, 5000])
    want = run([300, 1024])
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert int(got[2][1]) > 0


def scores(inputs, variant):
    """Scores of either scorer (init 1, local 1, Q = Qmax = 2); the balanced one with a budget
    of 3 programs, so a request spans several of them."""
    if variant == "split":
        return generated.index_decode_scores(**inputs, init_blocks=1, local_blocks=1,
                                             decode_query_len=Q, max_decode_query_len=QMAX,
                                             variant="split")
    from generated import index_score

    H, total_q = inputs["idx_q"].shape[1], inputs["idx_q"].shape[0]
    out = index_score.alloc_scores(H, total_q, inputs["max_seq_len"], DEVICE)
    return index_score.launch_score_balanced(
        inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"], inputs["seq_lens"],
        out, 1, 1, Q, QMAX, program_budget=3,
        max_block=-(-inputs["max_seq_len"] // 128))


def test_scores_beyond_capacity_match_reference():
    inputs, _ = make_decode_inputs(2, Q, [300, 1000], seed=6)
    inputs["seq_lens"] = torch.tensor([300, 4000], dtype=torch.int32, device=DEVICE)
    for variant in ("split", "balanced"):
        got = scores(inputs, variant)
        ref = ref_decode_scores(inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"],
                                inputs["seq_lens"], 1, 1, Q, inputs["max_seq_len"])
        mask = _written(ref).to(DEVICE)
        torch.testing.assert_close(got[mask].cpu(), ref[mask.cpu()], **REF_TOL)


def test_negative_seq_lens_are_empty_rows():
    inputs, _ = make_decode_inputs(1, 1, [300, 200], seed=8)
    inputs["seq_lens"] = torch.tensor([-5, 200], dtype=torch.int32, device=DEVICE)
    ids = _call(inputs)
    assert (ids[0, 0] == -1).all() and (ids[0, 1] >= 0).any()


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
    # and the whole call (selector, table) runs on them
    ids = _call({**inputs, "idx_q": inputs["idx_q"][:, :1]}, decode_query_len=Q,
                max_decode_query_len=QMAX)
    assert ids.shape == (1, 2 * Q, TOPK)


def test_empty_cache_rejected_only_when_blocks_exist():
    inputs, _ = make_decode_inputs(1, 1, [0, 0], seed=10)
    empty = inputs["index_kv_cache"][:0]
    assert_named(ValueError, "index_kv_cache", _call, inputs={**inputs, "index_kv_cache": empty})
    ids = _call({**inputs, "index_kv_cache": empty, "max_seq_len": 0,
                 "block_table": inputs["block_table"][:, :0]})
    assert (ids == -1).all()


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


def test_router_storage_offset_and_types():
    K, N = ROUTER_SHAPE
    big = torch.randn((5, K), device=DEVICE)
    w = torch.randn((N, K), device=DEVICE)
    x = big[1:4]  # contiguous, storage offset K (and an odd offset below)
    torch.testing.assert_close(generated.router_gemm(x, w), generated.router_gemm(x.clone(), w),
                               **ROUTER_TOL)
    flat = torch.randn((3 * K + 1,), device=DEVICE)
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
    assert_named(ValueError, "hardware", generated.router_gemm, hidden_states=x,
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
    w = torch.randn((N, K), device=DEVICE)
    x = torch.randn((3, K), device=DEVICE)
    for kwargs, name in ((dict(hidden_states=x[:, :-1], router_weight=w),
                          "hidden_states/router_weight"),
                         (dict(hidden_states=x, router_weight=w[None]), "router_weight"),
                         (dict(hidden_states=x, router_weight=w.to("meta")), "router_weight")):
        assert_named(ValueError, name, generated.router_logits, **kwargs)
    batched = torch.randn((2, 3, K), device=DEVICE)
    torch.testing.assert_close(generated.router_logits(batched, w), batched @ w.T, **ROUTER_TOL)
    odd, w_odd = torch.randn((5, 40), device=DEVICE), torch.randn((6, 40), device=DEVICE)
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


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_views_with_a_pending_negation_and_non_strided_tensors_are_refused():
    """A view flagged negated (its memory holds the values before the negation) and sparse
    or MKL-DNN tensors (no strides to read) are refused by name, also after a plan exists for
    a plain tensor of the same shape."""
    base = _decode_case(1, 0, False)
    generated.index_decode(**base)
    q = base["idx_q"].float()
    neg = torch.complex(torch.zeros_like(q), -q).conj().imag
    assert neg.is_neg() and torch.equal(neg, q)
    generated.index_decode(**{**base, "idx_q": q})
    assert_named(ValueError, "idx_q", generated.index_decode, **{**base, "idx_q": neg})
    K, N = ROUTER_SHAPE
    x, w = torch.randn((3, K), device=DEVICE), torch.randn((N, K), device=DEVICE)
    generated.router_gemm(x, w)
    for odd in (x.to_sparse(), x.to_sparse_csr()):
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
                      ("scales", ["none"]), ("scales", "zz")):
        assert_named(ValueError, name, generated.explain_sparse_attn, **{**attn, name: bad})
    dec = dict(hardware="sm_90", q_dtype="bf16", cache_dtype="bf16", head_dim=128, num_reqs=4,
               max_block=64, total_q=4, num_heads=1, topk=16, max_decode_query_len=1)
    for name in ("q_dtype", "cache_dtype"):
        assert_named(ValueError, name, generated.explain_index_decode,
                     **{**dec, name: torch.float64})
    pre = dict(hardware="sm_90", q_dtype="bf16", cache_dtype="bf16", head_dim=128, num_heads=1,
               num_tokens=64, max_block=8, topk=16)
    for name in ("q_dtype", "cache_dtype"):
        assert_named(ValueError, name, generated.explain_index_prefill, **{**pre, name: "xx"})
