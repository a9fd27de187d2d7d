"""Host path (issue 13): one plan per call key, validated once, every rejection on every call.

The key holds every property validation and Triton's specialization read (device, dtype,
shape, strides, 16-byte alignment, scalars, forced hardware); any change is a new plan. GPU
tests: warm-up leaves nothing to compile, plans under CUDA graphs and on two streams.
"""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import generated
from generated import _runtime as _rt
from generated import decode_indexer, moe_router
from decode_inputs import DEVICE, make_decode_inputs

HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.gpu
Q = 2


def _decode_kwargs(seed=0, lens=(130, 301, 0)):
    inputs, attn, _ = make_decode_inputs(1, Q, list(lens), seed=seed, attention_table=True)
    total_q = len(lens) * Q
    return dict(inputs, topk=8, init_blocks=0, local_blocks=1, num_kv_heads=1,
                decode_query_len=Q, max_decode_query_len=Q, attention_block_table=attn,
                block_page_stride=8,
                sparse_block_table_out=torch.full((total_q, 64), -5, dtype=torch.int32,
                                                  device=DEVICE),
                sparse_context_lens_out=torch.full((total_q,), -5, dtype=torch.int32,
                                                   device=DEVICE))


def _misaligned_copy(t):
    """Same values, data pointer 4 bytes past a 16-byte boundary (a storage offset)."""
    flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = flat[1:].view(t.shape)
    view.copy_(t)
    assert view.data_ptr() % 16 != 0
    return view


def test_repeated_call_reuses_its_plan():
    _rt.clear_plans()
    kw = _decode_kwargs()
    first = generated.index_decode(**kw).clone()
    assert len(decode_indexer._DECODE_PLANS) == 1
    plan = next(iter(decode_indexer._DECODE_PLANS.values()))
    kw["seq_lens"] = kw["seq_lens"].flip(0).contiguous()  # other values, same key
    generated.index_decode(**kw)
    kw["seq_lens"] = kw["seq_lens"].flip(0).contiguous()
    again = generated.index_decode(**kw)
    assert len(decode_indexer._DECODE_PLANS) == 1
    assert next(iter(decode_indexer._DECODE_PLANS.values())) is plan
    assert torch.equal(first, again)


@pytest.mark.parametrize("change", ["dtype", "shape", "stride", "alignment", "scalar",
                                    "hardware"])
def test_any_change_is_a_new_key(change):
    _rt.clear_plans()
    kw = _decode_kwargs(seed=1)
    want = generated.index_decode(**kw).clone()
    before = len(decode_indexer._DECODE_PLANS)
    if change == "dtype":
        kw["idx_q"] = kw["idx_q"].to(torch.float16)
        kw["index_kv_cache"] = kw["index_kv_cache"].to(torch.float16)
    elif change == "shape":
        kw["block_table"] = torch.cat([kw["block_table"], kw["block_table"][:, :1]], dim=1)
    elif change == "stride":
        kw["seq_lens"] = torch.stack([kw["seq_lens"], kw["seq_lens"]], dim=1)[:, 0]
    elif change == "alignment":
        kw["seq_lens"] = _misaligned_copy(kw["seq_lens"])
    elif change == "scalar":
        kw["max_seq_len"] = kw["max_seq_len"] - 1
    else:
        kw["hardware"] = "gfx950"
    got = generated.index_decode(**kw)
    assert len(decode_indexer._DECODE_PLANS) == before + 1
    if change != "dtype":  # fp16 values differ from bf16 ones
        assert torch.equal(got, want)


def test_rejections_raise_on_every_call_and_are_never_cached():
    _rt.clear_plans()
    kw = _decode_kwargs(seed=2)
    generated.index_decode(**kw)
    bad = [("seq_lens", kw["seq_lens"].long()),  # dtype
           ("block_table", kw["block_table"].t().contiguous().t()),  # column stride
           ("topk", 4.0), ("topk", 0), ("completion_counter",
                                        torch.zeros((1, 1), dtype=torch.int32, device=DEVICE)),
           ("out", torch.zeros((1, 9, 8), dtype=torch.int32, device=DEVICE)[:, ::2])]
    for name, value in bad:
        for _ in range(3):
            with pytest.raises((TypeError, ValueError)) as info:
                generated.index_decode(**{**kw, name: value})
            assert str(info.value).startswith(name + ":"), str(info.value)
    assert len(decode_indexer._DECODE_PLANS) == 1


def test_router_plans():
    _rt.clear_plans()
    w = torch.randn((8, 4096), device=DEVICE)
    x = torch.randn((3, 4096), device=DEVICE).bfloat16()
    a = generated.router_gemm(x, w)
    b = generated.router_gemm(x.clone(), w)
    assert len(moe_router._PLANS) == 1 and torch.equal(a, b)
    generated.router_gemm(x.float(), w)  # dtype: new key
    generated.router_gemm(x[:2], w)  # shape: new key
    assert len(moe_router._PLANS) == 3
    for _ in range(2):
        with pytest.raises(ValueError, match="^hidden_states: must be contiguous"):
            generated.router_gemm(torch.randn((4096, 3), device=DEVICE).t(), w)
    assert len(moe_router._PLANS) == 3
    # router_logits: eager path chosen once per key, the custom op under torch.compile
    torch.testing.assert_close(generated.router_logits(x, w), a, rtol=0, atol=5e-4)
    torch.testing.assert_close(torch.ops.kspec.router_logits(x, w), a, rtol=0, atol=5e-4)


def test_warmup_enumerates_a_small_domain_on_the_interpreter():
    if HAS_CUDA:
        pytest.skip("GPU: see test_gpu_warmup_leaves_nothing_to_compile")
    result = generated.warmup("cpu", quick=True, num_heads=(1,), max_decode_query_lens=(1,),
                              num_reqs=(1,), max_seq_lens=(128,), sparse_table=(None,),
                              attention=False,
                              router_shapes=((4096, 8),), router_dtypes=("fp32",),
                              num_tokens=(1, 2), progress=False)
    assert result["hardware"] == "generic" and result["calls"] >= 3


def test_warmup_gives_each_router_shape_its_weight_dtype_and_token_cap(monkeypatch):
    """The bf16-weight (7168, 896) shape is warmed with a bf16 weight and at most 9 tokens
    (the calls recorded, not run)."""
    from generated import precompile

    calls = []
    monkeypatch.setattr(precompile, "router_gemm", lambda x, w, hardware: calls.append(
        (tuple(w.shape), w.dtype, x.shape[0])))
    generated.warmup("cpu", decode=False, prefill=False, attention=False,
                     router_shapes=((7168, 896), (4096, 8)),
                     router_dtypes=("bf16",), num_tokens=(1, 9, 10, 32), progress=False)
    assert calls == [((896, 7168), torch.bfloat16, 1), ((896, 7168), torch.bfloat16, 9),
                     ((8, 4096), torch.float32, 1), ((8, 4096), torch.float32, 9),
                     ((8, 4096), torch.float32, 10), ((8, 4096), torch.float32, 32)]


def test_warmup_takes_only_supported_dtype_pairs(monkeypatch):
    """The full decode (and prefill) domain holds fp8 queries; warm-up pairs them with the fp8
    cache only
    (an fp8 query with another cache is rejected by the entries: nothing to compile), and
    every pair the entries accept is warmed (the calls recorded, not run)."""
    from generated import decode_indexer, precompile

    calls = []
    monkeypatch.setattr(precompile, "_decode_call", lambda device, hw, q, cache, *rest:
                        calls.append((q, cache)))
    monkeypatch.setattr(precompile, "_prefill_call", lambda device, hw, q, cache, *rest:
                        calls.append((q, cache)))
    monkeypatch.setattr(precompile, "index_prefill_topk", lambda *a, **k: None)
    generated.warmup("cpu", hardware="sm_90", router=False, attention=False, head_dims=(128,),
                     num_heads=(1,), max_decode_query_lens=(1,), num_reqs=(1,),
                     max_seq_lens=(1024,), progress=False)
    names = precompile.TORCH_DTYPES
    q_dtypes = [n for n, t in names.items() if t in (torch.bfloat16, torch.float16,
                                                     torch.float32, torch.float8_e4m3fn)]
    accepted = {(q, c) for q in q_dtypes for c in names
                if decode_indexer.supported_dtype_pair(names[q], names[c])}
    assert ("fp8e4m3", "fp8e4m3") in set(calls) and ("fp8e4m3", "bf16") not in set(calls)
    assert set(calls) <= accepted and len(set(calls)) >= 9


def test_warmup_reaches_every_attention_row_class(monkeypatch):
    """The attention warm-up calls each table's programs buckets once per domain point, in both
    modes (recorded, not run), and the quick domain is MiniMax-M3's."""
    from generated import precompile

    calls = []
    monkeypatch.setattr(precompile, "_attn_call", lambda device, hw, *point: calls.append(point))
    generated.warmup("cpu", hardware="sm_90", decode=False, router=False, prefill=False,
                     quick=True, progress=False)
    assert {c[:6] for c in calls} >= {("decode", "bf16", "bf16", "none", 16, 128),
                                      ("prefill", "bf16", "bf16", "none", 8, 128)}
    programs = {c[6] for c in calls if c[0] == "prefill"}
    assert 2048 in programs and 1 in programs  # the tiled rows and the per-token ones
    # every decode row of each input called, at each query length (the Q ≥ 2 rows too), is
    # the row of one call
    from generated.dispatch import SPARSE_ATTN_DECODE as table
    names = ("mode", "q_dtype", "kv_dtype", "scales", "group", "head_dim")
    for inputs in {c[:6] for c in calls if c[0] == "decode"}:
        key = dict(zip(names[1:], inputs[1:]), hardware="sm_90")
        reached = {table.lookup(*table.point(**key, programs=-(-P // Q) * Q, query_len=Q)).index
                   for *_, P, Q in (c for c in calls if c[:6] == inputs)}
        rows = {row.index for row in table.rows if row.variant is not None and all(
            cond is None or key[axis] in cond for axis, cond in zip(table.axes, row.conds)
            if axis in key)}
        assert reached == rows and len(rows) > 2, (inputs, sorted(rows - reached))
    assert {c[7] for c in calls if c[0] == "decode"} == {1, 2}
    # a device with programmatic launches: also sparse_decode_step's attention and indexer
    steps, decodes = [], []
    monkeypatch.setattr(precompile._rt, "programmatic_launch", lambda device: True)
    monkeypatch.setattr(precompile, "_attn_call", lambda device, hw, *point, step=False:
                        steps.append(point) if step else None)
    monkeypatch.setattr(precompile, "_decode_call", lambda *a, launch_dependents=False:
                        decodes.append(launch_dependents))
    generated.warmup("cpu", hardware="sm_90", router=False, prefill=False, quick=True,
                     num_heads=(1,), max_decode_query_lens=(1,), num_reqs=(1,),
                     max_seq_lens=(8192,), sparse_table=(None,), progress=False)
    assert steps == [c for c in calls if c[0] == "decode"]
    assert True in decodes and False in decodes


def test_table_first_holds_one_size_for_every_width(monkeypatch):
    """A table_first launch holds its table row in one compile-time size, TABLE_FIRST_MAX, for
    every width up to it (none past it): one binary whatever the caller's table width. warmup's
    decode attention calls (alone and as the step's dependent, run by the interpreter) hold
    that size, so they compile the binary a real table takes
    (test_gpu_warmup_leaves_nothing_to_compile; a size per width compiled one per power of
    two)."""
    from generated import precompile
    from generated import sparse_attention as sa
    from generated import sparse_attn as sk

    widest = sk.TABLE_FIRST_MAX
    assert {sk.table_held(w) for w in range(1, widest + 1)} == {widest}
    assert sk.table_held(0) == sk.table_held(widest + 1) == 0
    point = ("decode", "bf16", "bf16", "none", 16, 128, 1, 1)
    launch = sa.explain_sparse_attn("decode", "sm_90", torch.bfloat16, torch.bfloat16, "none",
                                    16, 128, 1)
    assert launch["table_first"]  # (a point whose sm_90 launch holds the table)
    held, real = [], sk.table_held
    monkeypatch.setattr(sk, "table_held", lambda width: held.append(real(width)) or held[-1])
    for step in (False, True):
        held.clear()
        precompile._attn_call(DEVICE, "sm_90", *point, step=step)
        assert held == [widest], (step, held)


# ---- GPU -----------------------------------------------------------------------------------

@gpu
def test_gpu_warmup_leaves_nothing_to_compile():
    from generated.precompile import _compiled_count

    domain = dict(quick=True, num_heads=(1, 2), max_decode_query_lens=(1, 4), num_reqs=(1, 5, 16),
                  max_seq_lens=(8192, 32768), router_shapes=((6144, 128),),
                  num_tokens=(1, 4, 8, 16, 32))
    result = generated.warmup(**domain, progress=False)
    assert result["calls"] > 0
    before = _compiled_count()
    g = torch.Generator(device="cuda").manual_seed(0)
    for H, Qmax, Q, R, ctx in ((1, 4, 4, 5, 8000), (2, 1, 1, 16, 30000), (1, 1, 1, 1, 100)):
        pages = R * (ctx // 128 + 1)
        cache = torch.randn((pages, 128, 128), device="cuda", generator=g).bfloat16()
        table = torch.randperm(pages, device="cuda", generator=g).int().view(R, -1)
        wide = torch.zeros((R, 300), dtype=torch.int32, device="cuda")  # another table width
        wide[:, :table.shape[1]] = table
        max_seq_len = 8192 if ctx <= 8192 else 32768
        q = torch.randn((R * Q, H, 128), device="cuda", generator=g).bfloat16()
        lens = torch.full((R,), ctx, dtype=torch.int32, device="cuda")
        out = torch.empty((H, R * Q + 7, 16), dtype=torch.int32, device="cuda")
        counter = torch.zeros((H, 64), dtype=torch.int32, device="cuda")
        generated.index_decode(q, cache, wide, lens, max_seq_len, 16, 0, 1, H, Q, Qmax, out,
                               completion_counter=counter)
    for M in (1, 4, 8, 16, 32):
        generated.router_gemm(torch.randn((M, 6144), device="cuda").bfloat16(),
                              torch.randn((128, 6144), device="cuda"))
    for H, T, prefix in ((1, 3000, 40000), (2, 700, 0)):  # prefill: other lengths and tables
        pages = T // 128 + prefix // 128 + 2
        cache = torch.randn((pages, 128, 128), device="cuda", generator=g).bfloat16()
        table = torch.randperm(pages, device="cuda", generator=g).int().view(1, -1)
        q = torch.randn((T, H, 128), device="cuda", generator=g).bfloat16()
        cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
        lens = torch.tensor([prefix + T], dtype=torch.int32, device="cuda")
        pre = torch.tensor([prefix], dtype=torch.int32, device="cuda")
        args = (q, cache, table, cu, lens, pre, T, prefix + T, H)
        out = torch.empty((T, H, 16), dtype=torch.int32, device="cuda").transpose(0, 1)
        generated.index_prefill(*args, 16, 0, 1, out)
        generated.index_prefill_topk(generated.index_prefill_score(*args), cu, pre, T, 16, 0, 1,
                                     out)
    # attention (one binary for every KV head count) and the decode step, MiniMax-M3's heads
    for Hkv, G, R, Q, ctx in ((2, 16, 5, 1, 30000), (1, 8, 16, 4, 8000), (4, 16, 1, 1, 900)):
        W = ctx // 128 + 1
        kv = torch.randn((R * W, 2, 128, Hkv, 128), device="cuda", generator=g).bfloat16()
        table = torch.randperm(R * W, device="cuda", generator=g).int().view(R, W)
        q = torch.randn((R * Q, Hkv * G, 128), device="cuda", generator=g).bfloat16()
        lens = torch.full((R,), ctx, dtype=torch.int32, device="cuda")
        ids = torch.randint(-1, W, (Hkv, R * Q, 16), device="cuda", generator=g).int()
        out = torch.empty_like(q)
        generated.sparse_attn_decode(q, kv, ids, table, lens, Hkv, 0.1, out, Q)
        if Hkv <= 2:  # the domain's index head counts
            idx_q = torch.randn((R * Q, Hkv, 128), device="cuda", generator=g).bfloat16()
            idx_cache = torch.randn((R * W, 128, 128), device="cuda", generator=g).bfloat16()
            max_seq_len = 8192 if ctx <= 8192 else 32768
            wide = torch.zeros((R, 300), dtype=torch.int32, device="cuda")  # ≥ max_seq_len
            wide[:, :W] = table
            generated.sparse_decode_step(idx_q, idx_cache, wide, q, kv, wide, lens,
                                         max_seq_len, 16, 0, 1, Hkv, Q, 4 if Q > 1 else 1, 0.1,
                                         out)
        # prefill, 2048 + T tokens: query-tiled rows (T = 3000) and per-token ones (T = 7)
        kvp = torch.randn((48, 2, 128, Hkv, 128), device="cuda", generator=g).bfloat16()
        ptable = torch.randperm(48, device="cuda", generator=g).int()[:40].view(1, 40)
        pre = torch.tensor([2048], dtype=torch.int32, device="cuda")
        for T in (3000, 7):
            cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
            qp = torch.randn((T, Hkv * G, 128), device="cuda", generator=g).bfloat16()
            pids = torch.randint(-1, 40, (Hkv, T, 16), device="cuda", generator=g).int()
            generated.sparse_attn_prefill(qp, kvp, pids, ptable, cu, pre + T, pre, T, Hkv, 0.1,
                                          torch.empty_like(qp))
    torch.cuda.synchronize()
    assert _compiled_count() == before


@gpu
def test_gpu_plans_under_graphs_and_two_streams():
    _rt.clear_plans()
    kw = _decode_kwargs(seed=4, lens=(900, 4000, 0, 77))
    total_q = 4 * Q
    kw["out"] = torch.full((1, total_q, 8), -3, dtype=torch.int32, device="cuda")
    kw["completion_counter"] = torch.zeros((1, total_q), dtype=torch.int32, device="cuda")
    eager = generated.index_decode(**kw).clone()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        generated.index_decode(**kw)  # warm the plan on this stream
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            generated.index_decode(**kw)
    kw["out"].fill_(-3)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(kw["out"], eager)
    # the same key from two streams at once: separate outputs and counters, same plan
    outs = []
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for s in streams:
        with torch.cuda.stream(s):
            o = torch.full_like(kw["out"], -3)
            c = torch.zeros_like(kw["completion_counter"])
            for _ in range(20):
                generated.index_decode(**{**kw, "out": o, "completion_counter": c,
                                          "sparse_block_table_out": kw["sparse_block_table_out"]
                                          .clone(),
                                          "sparse_context_lens_out": kw["sparse_context_lens_out"]
                                          .clone()})
            outs.append((o, c))
    torch.cuda.synchronize()
    for o, c in outs:
        assert torch.equal(o, eager) and int(c.abs().sum()) == 0


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)


@gpu
def test_gpu_a_launch_capped_per_sm_asks_for_the_shared_memory_and_never_lowers_the_limit(
        monkeypatch):
    """KernelLaunch(per_sm=n) launches with `residency_shared` (n) of dynamic shared memory,
    here for a kernel using none of its own: launches capped at 1, 2, then 1 again and uncapped,
    of one compiled kernel, all run (raising its limit for one never lowers it for another).
    With a launch hook installed a capped plan launches uncapped (the JIT path), keeping nothing
    from that call: once the hook is gone it launches capped."""
    x = torch.zeros(4096, device="cuda")
    index = torch.cuda.current_device()
    capped = {n: _rt.KernelLaunch(_add_one, (16,), {"num_warps": 4}, per_sm=n) for n in (1, 2)}
    plain = _rt.KernelLaunch(_add_one, (16,), {"num_warps": 4})
    for n in (1, 2, 1, 0, 2):
        (capped[n] if n else plain)(x, 4096, 256)
    torch.cuda.synchronize()
    assert torch.equal(x, torch.full_like(x, 5))
    for n, launch in capped.items():
        assert launch.metadata[2] == _rt.residency_shared(index, n) > 0, n
        assert launch.compiled is plain.compiled
    assert plain.metadata[2] == plain.compiled.metadata.shared
    hooked = _rt.KernelLaunch(_add_one, (16,), {"num_warps": 4}, per_sm=2)
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *args: None)
    hooked(x, 4096, 256)
    assert hooked.compiled is None
    monkeypatch.undo()
    hooked(x, 4096, 256)
    torch.cuda.synchronize()
    assert hooked.metadata[2] == _rt.residency_shared(index, 2)
    assert torch.equal(x, torch.full_like(x, 7))


@gpu
def test_gpu_later_launches_go_straight_to_the_c_launcher(monkeypatch):
    """On the GPU, a cached plan's later launches of kernels without descriptor arguments go
    straight to Triton's C launcher (`RawLaunch`), every other launch of the call through
    `DescriptorLaunch`, with the first (JIT) call's bits, eagerly and replayed in a CUDA graph:
    the indexer (two kernels), the router and the decode step (indexer, table, attention,
    merge)."""
    _rt.clear_plans()
    g = torch.Generator(device="cuda").manual_seed(11)
    kw = _decode_kwargs(seed=6, lens=(900, 4000, 0, 77))
    total_q = 4 * Q
    kw["out"] = torch.full((1, total_q, 8), -3, dtype=torch.int32, device="cuda")
    kw["completion_counter"] = torch.zeros((1, total_q), dtype=torch.int32, device="cuda")
    w = torch.randn((128, 6144), device="cuda", generator=g)
    x = torch.randn((8, 6144), device="cuda", generator=g).bfloat16()
    Hkv, G, R, ctx = 2, 16, 5, 30000
    W = ctx // 128 + 1
    kv = torch.randn((R * W, 2, 128, Hkv, 128), device="cuda", generator=g).bfloat16()
    table = torch.zeros((R, 300), dtype=torch.int32, device="cuda")
    table[:, :W] = torch.randperm(R * W, device="cuda", generator=g).int().view(R, W)
    q = torch.randn((R, Hkv * G, 128), device="cuda", generator=g).bfloat16()
    idx_q = torch.randn((R, Hkv, 128), device="cuda", generator=g).bfloat16()
    idx_cache = torch.randn((R * W, 128, 128), device="cuda", generator=g).bfloat16()
    lens = torch.full((R,), ctx, dtype=torch.int32, device="cuda")
    attn_out = torch.empty_like(q)

    def call():
        kw["out"].fill_(-3)
        attn_out.fill_(float("nan"))
        return (generated.index_decode(**kw).clone(), generated.router_gemm(x, w),
                generated.sparse_decode_step(idx_q, idx_cache, table, q, kv, table, lens, 32768,
                                             16, 0, 1, Hkv, 1, 1, 0.1, attn_out)[0].clone())

    first = call()
    torch.cuda.synchronize()
    counts = {"launch": 0, "raw": 0, "descriptor": 0}
    plain, raw, desc = (_rt.KernelLaunch.__call__, _rt.RawLaunch.__call__,
                        _rt.DescriptorLaunch.__call__)

    def count(key, real):
        def spy(self, *args):
            counts[key] += 1
            return real(self, *args)
        return spy
    monkeypatch.setattr(_rt.KernelLaunch, "__call__", count("launch", plain))
    monkeypatch.setattr(_rt.RawLaunch, "__call__", count("raw", raw))
    monkeypatch.setattr(_rt.DescriptorLaunch, "__call__", count("descriptor", desc))
    for _ in range(2):
        again = call()
        torch.cuda.synchronize()
        for a, b in zip(again, first):
            assert torch.equal(a, b)
    # (a tma attention launch takes descriptors: `DescriptorLaunch`, the same C launcher)
    assert counts["raw"] >= 2 * 5 and counts["raw"] + counts["descriptor"] == counts["launch"], \
        counts
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            captured = call()
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, first):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kwargs,error,name", [
    (dict(q_dtypes=("xx",)), ValueError, "q_dtypes"),
    (dict(q_dtypes="bf16"), TypeError, "q_dtypes"),
    (dict(cache_dtypes=(torch.bfloat16,)), ValueError, "cache_dtypes"),
    (dict(head_dims=(7,)), ValueError, "head_dims"),
    (dict(head_dims=128), TypeError, "head_dims"),
    (dict(num_heads=(-1,)), ValueError, "num_heads"),
    (dict(max_decode_query_lens=(0,)), ValueError, "max_decode_query_lens"),
    (dict(num_reqs=(-1,)), ValueError, "num_reqs"),
    (dict(max_seq_lens=(10 ** 12,)), ValueError, "max_seq_lens"),
    (dict(topks=16), TypeError, "topks"),
    (dict(sparse_table=(None, 4)), ValueError, "sparse_table"),
    (dict(router_shapes=[(6144.0, 128)]), ValueError, "router_shapes"),
    (dict(router_dtypes=("fp16",)), ValueError, "router_dtypes"),
    (dict(num_tokens=(-1,)), ValueError, "num_tokens"),
    (dict(attn_domain="x"), TypeError, "attn_domain"),
    (dict(attn_domain={"bogus": (1,)}), ValueError, "attn_domain"),
    (dict(attn_domain={"scales": ("zz",)}), ValueError, "attn_domain"),
    (dict(device="bogus"), ValueError, "device"),
])
def test_warmup_refuses_its_own_arguments_by_name(kwargs, error, name):
    """Every domain argument is checked against the tables' domains before anything runs
    (bad ones used to surface as KeyErrors, RuntimeErrors or an entry's argument name)."""
    kwargs = {"device": "cpu", **kwargs}
    with pytest.raises(error) as info:
        generated.warmup(progress=False, **kwargs)
    assert str(info.value).startswith(name), str(info.value)


def _fake_run(launch, scratch=0, profile_scratch=0):
    """Triton 3.6's NVIDIA launcher object (`CudaLauncher`) around `launch`, without compiling
    a C module: the attributes `direct_launch` reads."""
    from triton.backends.nvidia.driver import CudaLauncher

    run = object.__new__(CudaLauncher)
    run.launch, run.global_scratch_size, run.profile_scratch_size = launch, scratch, profile_scratch
    run.launch_cooperative_grid, run.launch_pdl = False, True
    return run


def _fake_compiled(launcher, indices, metas, scratch=0):
    """A compiled kernel as `DescriptorLaunch.of` reads one: Triton 3.6's launcher wraps the
    raw launcher in a closure over it, the descriptor argument positions and their facts."""
    from types import SimpleNamespace

    def wrap(launcher, tensordesc_indices, tensordesc_meta):
        def inner(*args):
            return launcher, tensordesc_indices, tensordesc_meta
        return inner

    run = _fake_run(wrap(launcher, set(indices), metas), scratch=scratch)
    return SimpleNamespace(run=run, function=77, packed_metadata="packed")


class _CLauncher:
    """Stands for the compiled C launcher: a callable that is not a Python function."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def test_direct_launch_hands_the_arguments_to_the_c_launcher():
    """A kernel without descriptor arguments launches straight through Triton's C launcher: grid,
    stream and function, the fixed head (cooperative grid, PDL, no scratch, the packed metadata,
    no launch metadata or hooks: what Triton's Python launcher passes) and the arguments as
    given. With scratch memory to allocate, or a launcher that is not Triton 3.6's NVIDIA one,
    it declines (the launch goes through ``compiled.run``); a descriptor wrapper gets a
    `DescriptorLaunch`. The real launcher: test_gpu_later_launches_go_straight_to_the_c_launcher."""
    from types import SimpleNamespace

    c = _CLauncher()
    compiled = SimpleNamespace(run=_fake_run(c), function=77, packed_metadata="packed")
    launch = _rt.direct_launch(compiled)
    assert isinstance(launch, _rt.RawLaunch)
    t = torch.zeros(3)
    launch(4, 2, 1, 99, (t, 5, None, 7))
    assert c.calls == [(4, 2, 1, 99, 77, False, True, None, None, "packed", None, None, None,
                        t, 5, None, 7)]
    for run in (_fake_run(c, scratch=64), _fake_run(c, profile_scratch=8),
                SimpleNamespace(launch=c, global_scratch_size=0, profile_scratch_size=0,
                                launch_cooperative_grid=False, launch_pdl=True)):
        assert _rt.direct_launch(SimpleNamespace(run=run, function=77,
                                                 packed_metadata="packed")) is None
    wrapped = _fake_compiled(c, [1], [{"swizzle": 128}])
    assert isinstance(_rt.direct_launch(wrapped), _rt.DescriptorLaunch)


def test_descriptor_launch_encodes_each_descriptor_once_per_address():
    """A kernel with a host tensor descriptor argument launches with the descriptor's kernel
    arguments made once per base address (shape, strides and box) and spliced in its place,
    the launch's fixed arguments first; a new address makes them again; the kept ones are
    bounded; without the launcher internals it expects (or with scratch) it declines. The fake
    is triton 3.6's launcher (pyproject pins <3.7); the real one is exercised by
    test_sparse_attn's GPU test of tma launches, which asserts the plan launches through it."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    calls, made = [], []
    compiled = _fake_compiled(lambda *a: calls.append(a), [2], [{"swizzle": 128}])
    launch = _rt.DescriptorLaunch.of(compiled)
    assert launch is not None
    launch.make = lambda desc, meta: made.append(meta) or [("map", desc.base.data_ptr()),
                                                             *desc.shape, *desc.strides]
    a, b = (torch.zeros(4, 8, dtype=torch.bfloat16) for _ in range(2))

    def desc(t):
        return TensorDescriptor(t, [4, 8], [8, 1], [2, 8])

    for t in (a, a, b, a):
        launch(1, 2, 3, 99, ("x", 5, desc(t), None, 7))
    assert made == [{"swizzle": 128}] * 2  # a once, b once
    assert calls[0] == (1, 2, 3, 99, 77, False, True, None, None, "packed", None, None, None,
                        "x", 5, ("map", a.data_ptr()), 4, 8, 8, 1, None, 7)
    assert calls[2][15] == ("map", b.data_ptr()) and calls[3] == calls[0]
    for _ in range(2 * launch.LIMIT):
        launch(1, 1, 1, 0, ("x", 5, desc(torch.zeros(4, 8, dtype=torch.bfloat16)), None, 7))
    assert len(launch.cache) <= launch.LIMIT
    assert _rt.DescriptorLaunch.of(_fake_compiled(print, [2], [{}], scratch=128)) is None
    assert _rt.DescriptorLaunch.of(_fake_compiled(print, [2], [None])) is None
    from types import SimpleNamespace
    raw = SimpleNamespace(run=_fake_run(print), function=77, packed_metadata="packed")
    assert _rt.DescriptorLaunch.of(raw) is None  # no descriptor argument: the raw launcher
