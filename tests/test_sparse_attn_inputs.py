"""Input properties of the three attention entries (docs/KERNELS.md §13, §15) that the kernel
tests leave open: each malformed argument refused by name (also after a valid call of the same
shapes has cached a plan), and odd but supported inputs served — fp16 outputs, negative and
past-capacity seq_lens, extreme page and block ids, cu_seqlens_q past the rows, a cache
without pages, expanded (stride-0) arguments, NumPy and int scalars, no rows, and offsets past
int32 in the cache, the output and the ids — against the float64 reference or the bits of the
contiguous call, at the entry's table launch and explicit split and query-tiled launches.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import generated
from decode_inputs import DEVICE, virtual_tensor
from generated import sparse_attention as sa
from generated import sparse_attn as sk
from reference_attn import decode_positions, prefill_positions, ref_sparse_attn
from test_sparse_attn import (BLOCK, FP8, _poisoned, _small_prefill, _step_args, block_lists,
                              check, decode_case)

ENTRIES = {"decode": generated.sparse_attn_decode, "prefill": generated.sparse_attn_prefill}
# the entry's table launch (None), the split kernel at one and four splits (merged by the last
# split), the query tile's sorted walk
LAUNCHES = (None, dict(splits=1, num_warps=4, num_stages=2),
            dict(splits=4, num_warps=4, num_stages=2),
            dict(variant="sparse_attn_tiled", lanes=16, sorted_union=True, num_warps=4,
                 num_stages=2))


def _attend(mode, launch, **kw):
    """The ``mode`` entry's call at its table's launch (None) or at ``launch``."""
    if launch is None:
        return ENTRIES[mode](**kw)
    return sa.sparse_attn_with_launch(launch, mode, **kw)


def _ref(kw, pos):
    return ref_sparse_attn(kw["q"], kw["kv"], kw["topk_idx"], kw["block_table"], pos,
                           kw["num_kv_heads"], kw["sm_scale"])


# ---- rejections by name -------------------------------------------------------------------------

def _scale(dtype=torch.float32, shape=()):
    return torch.ones(shape, dtype=dtype, device=DEVICE)


# (k_scale and v_scale of the wrong form: the one at fault named, the other a valid scalar)
BAD_SCALES = (("bf16", lambda: _scale(torch.bfloat16), ValueError),
              ("float64", lambda: _scale(torch.float64), ValueError),
              ("python-float", lambda: 1.0, TypeError),
              ("no-element", lambda: _scale(shape=(0,)), ValueError))


def _common_rejections():
    """(change of the entry's keyword arguments, error, the argument named) that every entry
    refuses."""
    rows = [
        pytest.param(lambda b: dict(q=b["q"][None]), ValueError, "q", id="q-rank-4"),
        pytest.param(lambda b: dict(q=b["q"][0]), ValueError, "q", id="q-rank-2"),
        pytest.param(lambda b: dict(q=b["q"].int()), ValueError, "q", id="q-int32"),
        pytest.param(lambda b: dict(q=b["q"].double()), ValueError, "q", id="q-float64"),
        pytest.param(lambda b: dict(q=b["q"].to("meta")), ValueError, "q", id="q-meta"),
        pytest.param(lambda b: dict(kv=b["kv"][:, 0, :, 0]), ValueError, "kv", id="kv-rank-3"),
        pytest.param(lambda b: dict(kv=b["kv"].to("meta")), ValueError, "kv", id="kv-meta"),
        pytest.param(lambda b: dict(block_table=b["block_table"].long()), ValueError,
                     "block_table", id="block_table-int64"),
        pytest.param(lambda b: dict(block_table=b["block_table"][0]), ValueError,
                     "block_table", id="block_table-rank-1"),
        pytest.param(lambda b: dict(seq_lens=b["seq_lens"].long()), ValueError, "seq_lens",
                     id="seq_lens-int64"),
        pytest.param(lambda b: dict(seq_lens=b["seq_lens"][:, None]), ValueError, "seq_lens",
                     id="seq_lens-rank-2"),
        pytest.param(lambda b: dict(output=b["output"].int()), ValueError, "output",
                     id="output-int32"),
        pytest.param(lambda b: dict(output=b["output"].to(FP8["e4m3"])), ValueError, "output",
                     id="output-fp8"),
        pytest.param(lambda b: dict(output=b["output"].to("meta")), ValueError, "output",
                     id="output-meta"),
        pytest.param(lambda b: dict(num_kv_heads=0), ValueError, "num_kv_heads",
                     id="num_kv_heads-0"),
        pytest.param(lambda b: dict(num_kv_heads=-1), ValueError, "num_kv_heads",
                     id="num_kv_heads-minus-1"),
        pytest.param(lambda b: dict(num_kv_heads=True), TypeError, "num_kv_heads",
                     id="num_kv_heads-True"),
        pytest.param(lambda b: dict(num_kv_heads=1.0), TypeError, "num_kv_heads",
                     id="num_kv_heads-1.0"),
        pytest.param(lambda b: dict(hardware="bogus"), ValueError, "hardware",
                     id="hardware-bogus"),
        pytest.param(lambda b: dict(hardware=5), TypeError, "hardware", id="hardware-5"),
    ]
    for label, bad, error in BAD_SCALES:
        rows += [pytest.param(lambda b, bad=bad: dict(kv=b["kv"].to(FP8["e4m3"]), k_scale=bad(),
                                                      v_scale=_scale()),
                              error, "k_scale", id=f"k_scale-{label}"),
                 pytest.param(lambda b, bad=bad: dict(kv=b["kv"].to(FP8["e4m3"]),
                                                      k_scale=_scale(), v_scale=bad()),
                              error, "v_scale", id=f"v_scale-{label}")]
    return rows


def _ids_rejections():
    return [pytest.param(lambda b: dict(topk_idx=torch.zeros(
                (1, b["q"].shape[0] + 1, 1), dtype=torch.int32, device=DEVICE)),
                ValueError, "topk_idx", id="topk_idx-T-plus-1"),
            pytest.param(lambda b: dict(topk_idx=b["topk_idx"][0]), ValueError, "topk_idx",
                         id="topk_idx-rank-2")]


def _no_rows(b, names):
    """``b``'s tensors of T rows (named with their row dimension) cut to none."""
    return {n: b[n][:, :0] if n == "topk_idx" else b[n][:0] for n in names}


def _hardware_without_rows(names):
    return [pytest.param(lambda b: dict(_no_rows(b, names), hardware="bogus"), ValueError,
                         "hardware", id="hardware-bogus-T0"),
            pytest.param(lambda b: dict(_no_rows(b, names), hardware=5), TypeError, "hardware",
                         id="hardware-5-T0")]


DECODE_REJECTIONS = _common_rejections() + _ids_rejections() + _hardware_without_rows(
    ("q", "topk_idx", "block_table", "seq_lens", "output")) + [
    pytest.param(lambda b: dict(decode_query_len=True), TypeError, "decode_query_len",
                 id="decode_query_len-True")]

PREFILL_REJECTIONS = _common_rejections() + _ids_rejections() + _hardware_without_rows(
    ("q", "topk_idx", "output")) + [
    *[pytest.param(lambda b, n=name, form=form: {n: form(b[n])}, error, name,
                   id=f"{name}-{label}")
      for name in ("cu_seqlens_q", "prefix_lens")
      for label, form, error in (("int64", lambda t: t.long(), ValueError),
                                 ("rank-2", lambda t: t[None], ValueError),
                                 ("None", lambda t: None, TypeError))],
    pytest.param(lambda b: dict(max_query_len=2.0), TypeError, "max_query_len",
                 id="max_query_len-2.0"),
    pytest.param(lambda b: dict(max_query_len=True), TypeError, "max_query_len",
                 id="max_query_len-True")]

STEP_REJECTIONS = _common_rejections() + _hardware_without_rows(
    ("idx_q", "index_block_table", "q", "block_table", "seq_lens", "output")) + [
    pytest.param(lambda b: dict(decode_query_len=True), TypeError, "decode_query_len",
                 id="decode_query_len-True")]


def _decode_base(seed):
    """sparse_attn_decode's keywords of two one-row requests, one KV head of G 4, topk 1."""
    case, _ = decode_case([20, 10], Q=1, Hkv=1, G=4, topk=1, seed=seed)
    return dict(case, output=torch.zeros_like(case["q"]))


def _prefill_base(seed):
    """sparse_attn_prefill's keywords: _decode_base's rows as two one-row requests
    (max_query_len 1)."""
    b = _decode_base(seed)
    return dict(q=b["q"], kv=b["kv"], topk_idx=b["topk_idx"], block_table=b["block_table"],
                cu_seqlens_q=torch.arange(3, dtype=torch.int32, device=DEVICE),
                seq_lens=b["seq_lens"], prefix_lens=b["seq_lens"] - 1, max_query_len=1,
                num_kv_heads=1, sm_scale=b["sm_scale"], output=b["output"])


def _step_base(seed):
    """sparse_decode_step's keywords: one request of 20 keys, one block, topk 1."""
    names = inspect.signature(generated.sparse_decode_step).parameters
    return dict(zip(names, _step_args(seed, lens=(20,), topk=1, W=1)))


def _refused_by_name(entry, base, change, error, name):
    """``entry`` serves ``base`` (caching its plan), then refuses ``base`` changed by
    ``change`` with ``error`` whose message starts with ``name``."""
    entry(**base)
    with pytest.raises(error, match=f"^{name}: "):
        entry(**{**base, **change(base)})


@pytest.mark.parametrize("change,error,name", DECODE_REJECTIONS)
def test_decode_refuses_each_malformed_argument_by_name(change, error, name):
    """§13.7 and §15: a malformed q, kv, ids, table, lengths, output, scale, head count, query
    length or hardware (with rows or none) is a ValueError or TypeError whose message starts
    with the argument's name, even where a plan of the same shapes is cached (True and 1.0
    equal the base's 1)."""
    _refused_by_name(generated.sparse_attn_decode, _decode_base(70), change, error, name)


@pytest.mark.parametrize("change,error,name", PREFILL_REJECTIONS)
def test_prefill_refuses_each_malformed_argument_by_name(change, error, name):
    """sparse_attn_prefill as the decode entry, and its own cu_seqlens_q, prefix_lens (int32,
    1-D, tensors) and max_query_len (an int: True is refused though it equals the base's 1)."""
    _refused_by_name(generated.sparse_attn_prefill, _prefill_base(71), change, error, name)


@pytest.mark.parametrize("change,error,name", STEP_REJECTIONS)
def test_decode_step_refuses_each_malformed_attention_argument_by_name(change, error, name):
    """sparse_decode_step names the attention's arguments as the decode entry does (§15)."""
    _refused_by_name(generated.sparse_decode_step, _step_base(72), change, error, name)


# ---- supported inputs ---------------------------------------------------------------------------

@pytest.mark.parametrize("q_dtype", [torch.bfloat16, torch.float16])
def test_fp16_output_matches_float64(q_dtype):
    """§15: the output may be fp16 whatever q's 16-bit type (a bf16 q into an fp16 output; an
    fp16 q over an fp16 cache): within vLLM's bounds of the float64 result rounded to fp16."""
    case, pos = decode_case([300, 140], Q=2, Hkv=1, G=4, q_dtype=q_dtype, kv_dtype=q_dtype,
                            seed=73)
    ref = _ref(case, pos)
    for launch in LAUNCHES:
        out = _attend("decode", launch, **case, output=_poisoned(case["q"], torch.float16))
        assert out.dtype == torch.float16
        check(out, ref)


@pytest.mark.parametrize("seq_len", [-5, -2 ** 31, -2 ** 31 + 1])
@pytest.mark.parametrize("Q", [1, 2])
def test_negative_seq_lens_give_zero_rows(seq_len, Q):
    """A negative seq_len counts as 0 (§13.3): the request's rows are zeros (its positions lie
    below every key, without wrapping at int32's least value), and the other request's rows
    match float64."""
    case, _ = decode_case([300, 300], Q=Q, Hkv=1, G=4, seed=74)
    case["seq_lens"] = torch.tensor([seq_len, 300], dtype=torch.int32, device=DEVICE)
    ref = _ref(case, decode_positions(case["seq_lens"], Q))
    for launch in LAUNCHES:
        out = _attend("decode", launch, **case, output=_poisoned(case["q"]))
        assert bool((out[:Q] == 0).all()), launch
        check(out[Q:], ref[Q:])


def test_seq_lens_past_the_table_see_every_listed_key():
    """A seq_len past the table's 128 · W keys, and 2³¹ − 1: the rows' positions lie past
    every key of their listed blocks (ids < W), all of which they see (§13.2, §15), as float64
    does."""
    case, _ = decode_case([300, 140], Q=2, Hkv=1, G=4, seed=75, extra_cols=0)
    W = case["block_table"].shape[1]
    case["seq_lens"] = torch.tensor([W * BLOCK + 500, 2 ** 31 - 1], dtype=torch.int32,
                                    device=DEVICE)
    ref = _ref(case, decode_positions(case["seq_lens"], 2))
    for launch in LAUNCHES:
        check(_attend("decode", launch, **case, output=_poisoned(case["q"])), ref)


def test_extreme_page_and_block_ids_are_skipped():
    """Page ids −2³¹ and 2³¹ − 1 in the table (outside the cache) and block ids −2³¹ and
    2³¹ − 1 in the lists (outside the table) are skipped (§15 Out of range):
    each row attends its other listed blocks, as float64 does, in the split kernel (also
    taking its pages from registers, table_first) and both query-tile walks."""
    case, pos = decode_case([300, 300], Q=1, Hkv=1, G=4, topk=4, seed=76)
    case["block_table"][0, 1] = -2 ** 31
    case["block_table"][1, 1] = 2 ** 31 - 1
    case["topk_idx"] = torch.tensor([[[2, 1, -2 ** 31, 0], [2, 1, 2 ** 31 - 1, 0]]],
                                    dtype=torch.int32, device=DEVICE)
    ref = _ref(case, pos)
    for launch in LAUNCHES + (dict(splits=2, table_first=True, num_warps=4, num_stages=2),
                              dict(variant="sparse_attn_tiled", lanes=16, num_warps=4,
                                   num_stages=2)):
        check(_attend("decode", launch, **case, output=_poisoned(case["q"])), ref)


@pytest.mark.parametrize("cu,T,max_query_len", [([2, 5, 7], 8, 3), ([1, 4, 10], 6, 9)])
def test_prefill_cu_seqlens_past_the_rows(cu, T, max_query_len):
    """cu_seqlens_q[0] > 0 (the rows before it are no request's) and cu_seqlens_q[R] > T (the
    last request's rows past T do not exist; max_query_len above T counts as T, §13.8): rows of
    no request are zeros, the others match float64 (§15)."""
    (_, kv, _, table, _, lens, pre), _, _ = _small_prefill(77)
    g = torch.Generator().manual_seed(77)
    cu = torch.tensor(cu, dtype=torch.int32, device=DEVICE)
    pos = prefill_positions(cu, pre, lens, T, max_query_len)
    kw = dict(q=torch.randn((T, 4, 64), generator=g).bfloat16().to(DEVICE), kv=kv,
              topk_idx=block_lists(pos, 1, 3, table.shape[1], g).to(DEVICE), block_table=table,
              cu_seqlens_q=cu, seq_lens=lens, prefix_lens=pre, max_query_len=max_query_len,
              num_kv_heads=1, sm_scale=0.125)
    ref = _ref(kw, pos)
    none = [row for row in range(T) if pos[row] is None]
    assert none and len(none) < T
    for launch in LAUNCHES:
        out = _attend("prefill", launch, **kw, output=_poisoned(kw["q"], torch.float32))
        assert bool((out[none] == 0).all()), launch
        check(out, ref)


def test_a_cache_without_pages_gives_zeros():
    """A cache of no page: every page id is outside it (§15 Out of range), so every row of
    both entries is zero, at each launch and at a TMA launch (which reads such a cache by
    pointers)."""
    case, _ = decode_case([300, 140], Q=2, Hkv=1, G=4, seed=78)
    case["kv"] = case["kv"][:0]
    prefill = dict(case, cu_seqlens_q=torch.tensor([0, 2, 4], dtype=torch.int32, device=DEVICE),
                   prefix_lens=case["seq_lens"] - 2, max_query_len=2)
    del prefill["decode_query_len"]
    for mode, kw in (("decode", case), ("prefill", prefill)):
        for launch in LAUNCHES + (dict(splits=2, tma=True, num_warps=4, num_stages=2),):
            out = _attend(mode, launch, **kw, output=_poisoned(case["q"]))
            assert bool((out == 0).all()), (mode, launch)


def test_expanded_arguments_equal_the_contiguous_call():
    """§13.1: q, topk_idx, block_table and seq_lens of stride 0 along their rows (every row the
    first one's: an expand) give the bits of the same values made contiguous, at each decode
    launch and in the decode step (its ids and output; the indexer's idx_q and table expanded
    too)."""
    case, _ = decode_case([300, 140], Q=2, Hkv=2, G=4, seed=79)
    expanded = dict(case, q=case["q"][:1].expand_as(case["q"]),
                    topk_idx=case["topk_idx"][:, :1].expand_as(case["topk_idx"]),
                    block_table=case["block_table"][:1].expand_as(case["block_table"]),
                    seq_lens=case["seq_lens"][:1].expand(2))
    dense = {k: v.contiguous() if isinstance(v, torch.Tensor) else v
             for k, v in expanded.items()}
    assert expanded["q"].stride(0) == 0 and dense["q"].stride(0) != 0
    for launch in LAUNCHES:
        want = _attend("decode", launch, **dense, output=_poisoned(case["q"])).clone()
        got = _attend("decode", launch, **expanded, output=_poisoned(case["q"]))
        assert torch.equal(got, want), launch
    step = _step_base(79)
    R = 2
    step.update(idx_q=step["idx_q"].expand(R, -1, -1), q=step["q"].expand(R, -1, -1),
                index_block_table=step["index_block_table"].expand(R, -1),
                block_table=step["block_table"].expand(R, -1), seq_lens=step["seq_lens"].expand(R))
    dense = {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in step.items()}
    want = [t.clone() for t in generated.sparse_decode_step(
        **dict(dense, output=_poisoned(dense["q"])))]
    got = generated.sparse_decode_step(**dict(step, output=_poisoned(dense["q"])))
    assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0])


def test_numpy_and_int_scalars_are_taken_by_value():
    """§13.7 and §15: a NumPy integer num_kv_heads / decode_query_len / max_query_len, a NumPy
    float64 sm_scale and a Python int sm_scale give the bits of the Python float and int call
    of the same values, in the three entries (the int scale's result matching float64)."""
    case, pos = decode_case([300, 140], Q=2, Hkv=1, G=4, seed=80)
    prefill = dict(case, cu_seqlens_q=torch.tensor([0, 2, 4], dtype=torch.int32, device=DEVICE),
                   prefix_lens=case["seq_lens"] - 2, max_query_len=2)
    del prefill["decode_query_len"]
    step = _step_base(80)
    calls = (
        ("decode", case, dict(sm_scale=np.float64(0.125), num_kv_heads=np.int64(1),
                              decode_query_len=np.int32(2)), dict(sm_scale=0.125)),
        ("decode", case, dict(sm_scale=1), dict(sm_scale=1.0)),
        ("prefill", prefill, dict(sm_scale=np.float64(0.125), num_kv_heads=np.int64(1),
                                  max_query_len=np.int64(2)), dict(sm_scale=0.125)),
        ("step", step, dict(sm_scale=np.float64(0.125), num_kv_heads=np.int64(1),
                            decode_query_len=np.int32(1), max_decode_query_len=np.int32(1)),
         dict(sm_scale=0.125)),
    )
    for mode, kw, numpy, plain in calls:
        entry = generated.sparse_decode_step if mode == "step" else ENTRIES[mode]
        want = entry(**{**kw, **plain, "output": _poisoned(kw["q"])})
        got = entry(**{**kw, **plain, **numpy, "output": _poisoned(kw["q"])})
        if mode == "step":
            assert torch.equal(got[1], want[1])
            got, want = got[0], want[0]
        assert torch.equal(got, want), (mode, numpy)
    check(generated.sparse_attn_decode(**dict(case, sm_scale=1), output=_poisoned(case["q"])),
          _ref(dict(case, sm_scale=1), pos))


@pytest.mark.parametrize("Q", [1, 2])
def test_decode_of_no_rows_returns_the_empty_output(Q):
    """T = 0 (no request): nothing runs; the entry returns the empty output it was given."""
    case, _ = decode_case([300], Q=Q, Hkv=1, G=4, seed=81)
    empty = dict(case, q=case["q"][:0], topk_idx=case["topk_idx"][:, :0],
                 block_table=case["block_table"][:0], seq_lens=case["seq_lens"][:0])
    for launch in LAUNCHES:
        out = _poisoned(empty["q"])
        got = _attend("decode", launch, **empty, output=out)
        assert got is out and got.shape == (0, 4, 64), launch


# ---- offsets past int32 -------------------------------------------------------------------------

def test_cache_pages_past_int32_elements_are_addressed(monkeypatch):
    """§15 refuses only a cache whose one page spans 2³¹ elements (in-page offsets are int32):
    pages past int32 are addressed. An fp8 cache whose page stride is 2³¹ + 256 elements
    (page 1 begins past int32; rows see keys of both pages) matches float64 over a dense copy,
    at the table's launch, the split kernel by pointers and through TMA, and the query tile."""
    case, pos = decode_case([200], Q=1, Hkv=1, G=4, topk=2, kv_dtype=FP8["e4m3"], seed=82,
                            extra_cols=0)
    S = (1 << 31) + 256
    dense = case["kv"][:2].contiguous()  # [2, 2, 128, 1, 64]
    storage = virtual_tensor(S + dense[0].numel(), FP8["e4m3"])
    kv = storage.as_strided(dense.shape, (S,) + dense.stride()[1:])
    kv[0], kv[1] = dense[0], dense[1]
    case.update(kv=kv, block_table=torch.tensor([[0, 1]], dtype=torch.int32, device=DEVICE),
                topk_idx=torch.tensor([[[1, 0]]], dtype=torch.int32, device=DEVICE))
    ref = _ref(dict(case, kv=dense), pos)
    made, real = [], sk.kv_descriptor
    monkeypatch.setattr(sk, "kv_descriptor", lambda kv, layout: made.append(layout) or
                        real(kv, layout))
    for launch in LAUNCHES + (dict(splits=2, kv_tile=64, tma=True, num_warps=4, num_stages=2),
                              dict(variant="sparse_attn_tiled", lanes=16, tma=True, num_warps=4,
                                   num_stages=2)):
        before = len(made)
        check(_attend("decode", launch, **case, output=_poisoned(case["q"], torch.float32)), ref)
        if launch is not None and launch.get("tma"):  # its tiles came through a descriptor
            assert len(made) == before + 1, launch


def test_output_heads_past_int32_elements_are_addressed():
    """§15: element offsets within the output are int64: an output whose head stride is
    2²⁸ + 16 elements (heads 8 on past int32) gets the contiguous output's bits, written by
    one split, the last of four, the merge kernel and the query tile."""
    case, _ = decode_case([300, 140], Q=1, Hkv=1, G=16, topk=4, seed=83)
    S = (1 << 28) + 16
    storage = virtual_tensor(15 * S + 2 * 64, torch.bfloat16)
    out = storage.as_strided((2, 16, 64), (64, S, 1))
    for launch in LAUNCHES + (dict(splits=4, merge_kernel=True, num_warps=4, num_stages=2),):
        want = _attend("decode", launch, **case, output=_poisoned(case["q"])).clone()
        out.fill_(float("nan"))
        got = _attend("decode", launch, **case, output=out)
        assert got is out and torch.equal(got, want), launch


def test_ids_of_a_kv_head_past_int32_elements_are_addressed():
    """§15: element offsets within the ids are int64: topk_idx whose KV-head stride is
    2³¹ + 16 elements (KV head 1's lists past int32) gives the contiguous lists' bits in both
    entries' kernels."""
    case, _ = decode_case([300, 140], Q=1, Hkv=2, G=4, topk=4, seed=84)
    ids = case["topk_idx"]
    S = (1 << 31) + 16
    storage = virtual_tensor(S + ids[1].numel(), torch.int32)
    far = storage.as_strided(ids.shape, (S,) + ids.stride()[1:])
    far[0], far[1] = ids[0], ids[1]
    prefill = dict(case, cu_seqlens_q=torch.arange(3, dtype=torch.int32, device=DEVICE),
                   prefix_lens=case["seq_lens"] - 1, max_query_len=1)
    del prefill["decode_query_len"]
    for mode, kw in (("decode", case), ("prefill", prefill)):
        for launch in LAUNCHES:
            want = _attend(mode, launch, **kw, output=_poisoned(case["q"])).clone()
            got = _attend(mode, launch, **dict(kw, topk_idx=far), output=_poisoned(case["q"]))
            assert torch.equal(got, want), (mode, launch)
