"""Single-launch decode indexer `index_decode_fused` (scorer + top-k selection + page-16 table).

The fused kernel must give exactly the two-kernel path's results (split-K scorer, then the fused
selector): ids, sparse table and context lengths bit for bit, the fp32 scores written like the
split scorer's, and the completion counter all-zero after every launch. CPU tests run in Triton's
interpreter with small shapes; ``gpu`` tests use realistic sizes and CUDA graphs.
"""
from __future__ import annotations

import os
import shutil
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import generated  # noqa: E402
import generated.decode_indexer as decode_indexer  # noqa: E402
from generated import index_decode, index_decode_scores, index_decode_with_launch  # noqa: E402
from generated.index_fused import launch_index_fused  # noqa: E402
from generated.index_score import alloc_scores, launch_score_split  # noqa: E402
from decode_inputs import make_decode_inputs  # noqa: E402
from graph_capture import capture, page16_outputs, replay_poisoned  # noqa: E402
from reference_topk import cdiv, reference_sparse_table, reference_topk  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
POISON_OUT = -7
POISON_TABLE = 0x7EADBEEF
BF16 = torch.bfloat16
gpu = pytest.mark.gpu

# seq_lens: padding (0), 1 token, 127/128/129 around a block edge, a short request whose
# speculative rows have query_pos < 0 (2), non-aligned lengths, the longest one sets max_block.
LENS = [0, 1, 127, 128, 129, 2, 1000, 2600]


# ------------------------------------------------------------------------------------------------
# helpers


def make_inputs(H, Q, lens, D=16, seed=0, extra_tokens=5, device=DEVICE):
    """(index_decode kwargs, attention table, max_block), bf16."""
    return make_decode_inputs(H, Q, lens, D=D, seed=seed, extra_tokens=extra_tokens,
                              device=device, attention_table=True)


def split_launch(kv_chunks, num_warps=4, num_stages=2):
    return dict(variant="index_score_split", kv_chunks=kv_chunks, high_batch=False,
                num_warps=num_warps, num_stages=num_stages)


def fused_launch(kv_chunks, tile, num_warps=4, num_stages=2):
    return dict(variant="index_decode_fused", kv_chunks=kv_chunks, topk_tile=tile,
                num_warps=num_warps, num_stages=num_stages)


SELECTORS = (  # the two-kernel path's selector: one tile, or several chunks + atomic merge
    dict(topk_chunks=1, topk_tile=512, single_tile=True, adaptive_merge=False, num_warps=4,
         num_stages=2),
    dict(topk_chunks=4, topk_tile=128, single_tile=False, adaptive_merge=True, num_warps=4,
         num_stages=2),
)


def run_decode(score, sel, inputs, attn, H, Q, Qmax, topk, *, stride=None, init_blocks=1,
               local_blocks=1, counter=None, hardware=None):
    """index_decode_with_launch into poisoned outputs; checks the counter is all-zero after the
    launch and that nothing outside [:, :total_q, :topk] was written. Returns (ids, table, ctx)
    (table/ctx None without emission)."""
    total_q = inputs["idx_q"].shape[0]
    dev = inputs["idx_q"].device
    out = torch.full((H, total_q + 2, topk + 1), POISON_OUT, dtype=torch.int32, device=dev)
    own_counter = counter is None
    if own_counter:
        counter = torch.zeros((H, total_q + 2), dtype=torch.int32, device=dev)
    kw = {}
    if stride is not None:
        kw = dict(attention_block_table=attn,
                  sparse_block_table_out=torch.full((total_q, topk * 8), POISON_TABLE,
                                                    dtype=torch.int32, device=dev),
                  sparse_context_lens_out=torch.full((total_q,), POISON_TABLE, dtype=torch.int32,
                                                     device=dev),
                  block_page_stride=stride)
    got = index_decode_with_launch(score, sel, **inputs, topk=topk, init_blocks=init_blocks,
                                   local_blocks=local_blocks, num_kv_heads=H, decode_query_len=Q,
                                   max_decode_query_len=Qmax, out=out[:, :, :topk],
                                   completion_counter=counter, hardware=hardware, **kw)
    assert got.data_ptr() == out.data_ptr() and got.shape == (H, total_q, topk)
    assert int(counter.abs().sum()) == 0, "completion counter not returned to zero"
    assert bool((out[:, total_q:] == POISON_OUT).all()), "rows >= total_q written"
    assert bool((out[:, :, topk] == POISON_OUT).all()), "slots >= topk written"
    if stride is None:
        return got, None, None
    return got, kw["sparse_block_table_out"], kw["sparse_context_lens_out"]


def assert_same(a, b):
    for x, y, name in zip(a, b, ("ids", "table", "ctx")):
        if x is None and y is None:
            continue
        if not torch.equal(x.cpu(), y.cpu()):
            bad = (x.cpu() != y.cpu()).nonzero()[:5].tolist()
            raise AssertionError(f"{name} differ at {bad}")


# ------------------------------------------------------------------------------------------------
# fused == two kernels, bit for bit


FUSED_CASES = [
    # (H, Q, Qmax, kv_chunks, topk, stride, tile)  (table only with H = 1)
    (1, 1, 1, 1, 16, 8, 128),
    (1, 4, 4, 2, 13, 16, 128),
    (1, 3, 4, 8, 16, 8, 128),
    (1, 4, 4, 4, 16, None, 256),
    (2, 1, 1, 4, 13, None, 128),
    (2, 4, 4, 8, 16, None, 128),
    (2, 3, 4, 1, 16, None, 512),
    (4, 3, 4, 2, 13, None, 128),
    (4, 4, 4, 8, 16, None, 128),
    (4, 1, 1, 1, 16, None, 256),
]


@pytest.mark.parametrize("case", FUSED_CASES,
                         ids=[f"H{c[0]}_Q{c[1]}of{c[2]}_C{c[3]}_k{c[4]}_s{c[5]}_t{c[6]}"
                              for c in FUSED_CASES])
def test_fused_equals_two_kernel_path(case):
    H, Q, Qmax, kv_chunks, topk, stride, tile = case
    inputs, attn, max_block = make_inputs(H, Q, LENS, seed=H * 100 + Q * 10 + kv_chunks)
    assert max_block <= tile
    init_blocks = 2 if kv_chunks % 2 == 0 else 0  # forced 1e30 ties on blocks 0, 1
    sel = SELECTORS[FUSED_CASES.index(case) % 2]
    kw = dict(stride=stride, init_blocks=init_blocks)
    want = run_decode(split_launch(kv_chunks), sel, inputs, attn, H, Q, Qmax, topk, **kw)
    got = run_decode(fused_launch(kv_chunks, tile), None, inputs, attn, H, Q, Qmax, topk, **kw)
    assert_same(got, want)
    # anchors: empty rows are all -1 (zero table row, ctx 0); ids match the reference order.
    # The scores come from the split-K scorer with the case's chunks (any chunking gives the
    # same bits; the policy's 64 chunks for 8 requests cost 3x more in the interpreter).
    scores = alloc_scores(H, len(LENS) * Q, inputs["max_seq_len"], DEVICE)
    launch_score_split(inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"],
                       inputs["seq_lens"], scores, init_blocks, 1, Q, Qmax,
                       num_kv_chunks=kv_chunks, max_block=max_block)
    ref = reference_topk(scores, inputs["seq_lens"], Q, topk)
    assert torch.equal(got[0].cpu(), ref)
    if stride is not None:
        ref_table, ref_ctx = reference_sparse_table(got[0], attn, inputs["seq_lens"], Q, stride)
        assert torch.equal(got[1].cpu(), ref_table) and torch.equal(got[2].cpu(), ref_ctx)


def test_fused_writes_scores_like_split_scorer():
    """The fused kernel's scoring is the split scorer's code path: same fp32 bits where written,
    the NaN pre-fill untouched elsewhere (b ≥ nb_req, padding requests)."""
    H, Q, Qmax = 2, 3, 4
    inputs, _, max_block = make_inputs(H, Q, LENS, seed=7)
    total_q = len(LENS) * Q
    args = (inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"], inputs["seq_lens"])
    for chunks in (1, 3, 8):
        a = alloc_scores(H, total_q, inputs["max_seq_len"], DEVICE).fill_(float("nan"))
        b = torch.full_like(a, float("nan"))
        launch_score_split(*args, a, 1, 1, Q, Qmax, num_kv_chunks=chunks, max_block=max_block)
        out = torch.empty((H, total_q, 16), dtype=torch.int32, device=DEVICE)
        counter = torch.zeros((len(LENS),), dtype=torch.int32, device=DEVICE)
        launch_index_fused(*args, b, out, 16, 1, 1, Q, Qmax, num_kv_chunks=chunks,
                           max_block=max_block, block_k=128,
                           completion_counter=counter)
        assert int(counter.abs().sum()) == 0
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))  # NaN == NaN bitwise
        assert bool(torch.isnan(b[:, :Q]).all())  # padding request: nothing written


def test_counter_zero_across_alternating_launches():
    """One persistent counter and out buffer, seq_lens changing between launches (padding
    only, single block, more chunks than blocks, capacity): exact and zero every time."""
    H, Q, Qmax, topk, tile = 1, 2, 2, 16, 128
    patterns = [[0, 0, 0], [2600, 1, 0], [129, 2, 2600], [0, 128, 1], [2600, 2600, 2600],
                [1, 0, 200]]
    base, attn, _ = make_inputs(H, Q, [2600, 2600, 2600], seed=3)
    counter = torch.zeros((H, 3 * Q), dtype=torch.int32, device=DEVICE)
    for i, pat in enumerate(patterns):
        inputs = dict(base, seq_lens=torch.tensor(pat, dtype=torch.int32, device=DEVICE))
        chunks = (8, 4, 1)[i % 3]
        got = run_decode(fused_launch(chunks, tile), None, inputs, attn, H, Q, Qmax, topk,
                         stride=16, counter=counter)
        want = run_decode(split_launch(chunks), SELECTORS[1], inputs, attn, H, Q, Qmax, topk,
                          stride=16)
        assert_same(got, want)
        assert int(counter.abs().sum()) == 0
        if not any(pat):
            assert bool((got[0] == -1).all()) and not bool(got[1].any()) and not bool(got[2].any())


# ------------------------------------------------------------------------------------------------
# dispatch: sm_90 tables, fallback, explicit launches, feasibility check

TUNED = ("bf16", "bf16", 128)


def _fused_points():
    """(R, Qmax, max_block) points where the measured sm_90 table picks the fused variant."""
    ex = generated.explain_index_decode
    return [(R, Qmax, mb) for R in (1, 2, 3, 4, 5, 8, 9, 11, 12, 16, 17, 64) for Qmax in (1, 4)
            for mb in (0, 1, 64, 65, 200, 256, 257, 1024)
            if ex("sm_90", *TUNED, R, mb, R * Qmax, 1, 16, Qmax)["fused"]]


def _a_fused_point():
    """The cheapest (R, Qmax, max_block > 0) point where the sm_90 table picks the fused
    variant; the tables come from measurements, so skip when it is picked nowhere."""
    points = sorted((p for p in _fused_points() if p[2] > 0), key=lambda p: (p[0] * p[2], p))
    if not points:
        pytest.skip("the measured sm_90 tables pick index_decode_fused nowhere")
    return points[0]


def test_sm90_fused_rows_are_feasible_and_only_on_sm90():
    """Whatever the tuner measured: a fused row holds its whole max_block range in one tile, and
    gfx950 / generic never pick the fused variant (it is not in their upstream policies)."""
    ex = generated.explain_index_decode
    for R, Qmax, max_block in _fused_points():
        e = ex("sm_90", *TUNED, R, max_block, R * Qmax, 1, 16, Qmax)
        assert max_block <= e["topk_tile"] and e["topk_chunks"] == 1 and e["single_tile"]
        assert e["program_budget"] is None and e["kv_chunks"] >= 1
        assert e["topk_num_warps"] == e["num_warps"]
    for hw in ("gfx950", "generic"):
        for R in (1, 4, 16, 64):
            for max_block in (0, 64, 256, 512):
                for H in (1, 2, 4):
                    for Qmax in (1, 4):
                        e = ex(hw, *TUNED, R, max_block, R * Qmax, H, 16, Qmax)
                        assert not e["fused"], (hw, R, max_block, H)


def test_fused_row_falls_back_to_two_kernels_when_topk_exceeds_the_tile():
    R, Qmax, mb = _a_fused_point()
    fused = generated.explain_index_decode("sm_90", *TUNED, R, mb, R * Qmax, 1, 16, Qmax)
    e = generated.explain_index_decode("sm_90", *TUNED, R, mb, R * Qmax, 1, 512, Qmax)
    assert fused["fused"] and fused["scorer"] == "split" and fused["topk_tile"] < 512
    assert not e["fused"] and e["scorer"] == "split" and e["kv_chunks"] == fused["kv_chunks"]
    assert e["num_warps"] == fused["num_warps"] and e["num_stages"] == fused["num_stages"]
    # the fallback is a declared row of its own, from the same data-file row as the fused one
    # (each rule reads "<where> (index_score row <index>)")
    assert e["score_rule"] != fused["score_rule"] and e["topk_tile"] >= 256
    where = [r["score_rule"].rsplit(" (index_score row ", 1)[0] for r in (e, fused)]
    assert where[0] == where[1] and where[0].startswith("specs/measured/sm_90.json ("), where
    assert e["topk_rule"].startswith("specs/")
    from generated.dispatch import INDEX_SCORE

    rows = {r.index: r for r in INDEX_SCORE.rows}
    fallback = rows[int(e["score_rule"].rsplit("row ", 1)[1].rstrip(")"))]
    assert fallback.variant == "index_score_split" and "topk >" in fallback.note


def _count_fused_launches(monkeypatch):
    """Plans that prepare the single launch (each call below is a new key: plans cleared)."""
    calls = []
    real = decode_indexer.prepare_index_fused

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(decode_indexer, "prepare_index_fused", spy)
    decode_indexer._rt.clear_plans()
    return calls


def test_index_decode_sm90_tables_launch_fused(monkeypatch):
    """hardware="sm_90" (bf16, D 128, H 1): index_decode takes the fused row (one launch),
    equal to the two-kernel path; without a counter a fresh one is used; topk beyond the tile
    falls back to two kernels; index_decode_scores uses the split equivalent."""
    R, Qmax, mb = _a_fused_point()
    H, Q = 1, Qmax
    lens = ([mb * 128 - 5] + [2, 0, 129, 300, 1, 77, 128] * R)[:R]  # max_block == mb
    inputs, attn, max_block = make_inputs(H, Q, lens, D=128, seed=5)
    assert max_block == mb
    calls = _count_fused_launches(monkeypatch)
    e = generated.explain_index_decode("sm_90", *TUNED, len(lens), max_block, len(lens) * Q, H,
                                       16, Qmax)
    assert e["fused"] and e["scorer"] == "split"
    got = run_decode(None, None, inputs, attn, H, Q, Qmax, 16, stride=8, hardware="sm_90")
    assert len(calls) == 1 and calls[0]["num_kv_chunks"] == e["kv_chunks"]
    assert calls[0]["block_k"] == e["topk_tile"]
    want = run_decode(split_launch(e["kv_chunks"]), SELECTORS[0], inputs, attn, H, Q, Qmax, 16,
                      stride=8)
    assert_same(got, want)
    fresh = index_decode(**inputs, topk=16, init_blocks=1, local_blocks=1, num_kv_heads=H,
                         decode_query_len=Q, max_decode_query_len=Qmax, hardware="sm_90")
    assert len(calls) == 2 and torch.equal(fresh.cpu(), want[0].cpu())
    # topk 300 (next_pow2 512) beyond the row's tile: two kernels
    if e["topk_tile"] < 512:
        big = index_decode(**inputs, topk=300, init_blocks=1, local_blocks=1, num_kv_heads=H,
                           decode_query_len=Q, max_decode_query_len=Qmax, hardware="sm_90")
        assert len(calls) == 2 and big.shape == (1, len(lens) * Q, 300)
        assert torch.equal(big[:, :, :16].cpu(), want[0].cpu())
    # an explicit selector turns the fused table row into its two-kernel equivalent
    again = run_decode(None, SELECTORS[1], inputs, attn, H, Q, Qmax, 16, stride=8,
                       hardware="sm_90")
    assert len(calls) == 2
    assert_same(again, want)
    # scores only: the split-K equivalent of the fused row (bitwise the split scores)
    s_tab = index_decode_scores(**inputs, init_blocks=1, local_blocks=1, decode_query_len=Q,
                                max_decode_query_len=Qmax, hardware="sm_90")
    s_split = index_decode_scores(**inputs, init_blocks=1, local_blocks=1, decode_query_len=Q,
                                  max_decode_query_len=Qmax, variant="split", hardware="sm_90")
    for row in range(len(lens) * Q):
        nb = cdiv(max(lens[row // Q], 0), 128)
        assert torch.equal(s_tab[:, row, :nb].view(torch.int32),
                           s_split[:, row, :nb].view(torch.int32))


def test_explicit_fused_launch_checks_and_defaults():
    H, Q = 1, 1
    inputs, attn, max_block = make_inputs(H, Q, [200 * 128, 5], seed=2)  # 201 blocks
    kw = dict(**inputs, topk=16, init_blocks=0, local_blocks=1, num_kv_heads=H,
              decode_query_len=Q, max_decode_query_len=Q)
    with pytest.raises(ValueError, match="^score_launch: index_decode_fused cannot serve this "
                                         "call: max_block = 201 exceeds the fused topk_tile 128"):
        index_decode_with_launch(fused_launch(4, 128), None, **kw)
    with pytest.raises(ValueError, match=r"^score_launch: index_decode_fused cannot serve this "
                                         r"call: next_pow2\(topk\) = 512 exceeds the fused "
                                         r"topk_tile"):
        index_decode_with_launch(fused_launch(4, 256), None, **dict(kw, topk=300))
    # missing keys come from the variant's defaults; a given topk_launch is ignored
    partial = {"variant": "index_decode_fused", "kv_chunks": 8}
    got = index_decode_with_launch(partial, SELECTORS[1], **kw)
    want = index_decode_with_launch(split_launch(8), SELECTORS[0], **kw)
    assert torch.equal(got, want)


def test_fused_rule_must_fit_its_tile(tmp_path):
    """A rule choosing index_decode_fused for max_block beyond its topk_tile is a spec error
    naming the rule's line (here a measured target's data-file row, its bucket and target)."""
    from codegen import registry
    from codegen.model import SpecError

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec_copy = tmp_path / "specs"
    shutil.copytree(os.path.join(root, "specs"), spec_copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    from codegen import measured

    path = spec_copy / "measured" / "sm_90.json"
    data = measured.read(str(path))
    row = next(r for r in data["index_score"]
               if (r["q_dtype"], r["max_q"], r["max_block"], r["num_reqs"]) ==
               ("bf16", [1, 1], [65, 256], [1, 2]))
    row.update(variant="index_decode_fused", source="default",
               params=dict(kv_chunks=16, topk_tile=128, num_warps=4, num_stages=2))
    row.pop("measured", None)
    path.write_text(measured.dumps(data))
    with pytest.raises(SpecError, match=r"measured/sm_90\.json:\d+ \(index_score row sm_90: "
                                        r"q_dtype bf16, .*, max_q 1, max_block 65..256, "
                                        r"num_reqs 1..2\).*topk_tile.*"
                                        r"max_block ≤ topk_tile = 128.*up to 256"):
        registry.load(str(spec_copy))


# ------------------------------------------------------------------------------------------------
# GPU tests (realistic sizes, CUDA graphs). Skipped without a GPU.


def _gpu_inputs(R, Q, H, max_seq_len, seed, D=128):
    g = torch.Generator(device="cuda").manual_seed(seed)
    max_block = cdiv(max_seq_len, 128)
    num_pages = R * max_block + 7
    cache = torch.randn((num_pages, 128, D), generator=g, device="cuda").to(BF16)
    block_table = torch.randperm(num_pages, generator=g, device="cuda")[: R * max_block]
    q = torch.randn((R * Q, H, D), generator=g, device="cuda").to(BF16)
    attn = torch.randperm(num_pages * 4, generator=g, device="cuda")[: R * max_block] + 100000
    return (dict(idx_q=q, index_kv_cache=cache,
                 block_table=block_table.reshape(R, max_block).to(torch.int32),
                 seq_lens=_gpu_seq_lens(R, max_seq_len, seed, Q), max_seq_len=max_seq_len),
            attn.reshape(R, max_block).to(torch.int32), max_block)


def _gpu_seq_lens(R, max_seq_len, seed, Q, spread=False):
    """Random lengths with the capacity, a padding request, speculative rows with
    query_pos < 0 and a 129-token request among them: in requests 0..3, or with ``spread`` in
    requests that change with the seed (each request is padding for some seeds, not others)."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, max_seq_len + 1, (R,), generator=g)
    at = torch.randperm(R, generator=g).tolist() if spread else list(range(R))
    lens[at[0]] = max_seq_len  # capacity
    if R > 3:
        lens[at[1]] = 0  # padding request
        lens[at[2]] = Q - 2 if Q > 2 else 1  # speculative rows with query_pos < 0
        lens[at[3]] = 129
    return lens.clamp(max=max_seq_len).to(torch.int32).cuda()


GPU_CASES = [
    # (R, Q, H, max_seq_len, tile, kv_chunks, num_warps, num_stages, stride)
    (1, 4, 1, 8192, 128, 64, 4, 2, 8),
    (4, 4, 1, 32768, 256, 64, 4, 2, 16),
    (16, 1, 1, 32768, 256, 16, 4, 2, 8),
    (16, 4, 1, 65536, 512, 16, 8, 2, 16),
    (2, 4, 1, 32768, 256, 256, 4, 3, 8),
    (8, 2, 2, 16384, 128, 32, 4, 2, None),
    (11, 1, 4, 32768, 256, 32, 8, 2, None),
    (16, 4, 4, 65536, 512, 8, 4, 2, None),
]


@gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=[f"R{c[0]}_Q{c[1]}_H{c[2]}_{c[3] // 1024}k_t{c[4]}"
                                                 f"_C{c[5]}_w{c[6]}s{c[7]}" for c in GPU_CASES])
def test_gpu_fused_equals_two_kernel_path(case):
    """Realistic sizes: equal to the two-kernel path on every one of many launches (a missing
    release/acquire would show up as a stale score in some launch), counter zero each time."""
    R, Q, H, max_seq_len, tile, chunks, warps, stages, stride = case
    inputs, attn, max_block = _gpu_inputs(R, Q, H, max_seq_len, seed=R + Q + H)
    assert max_block <= tile
    want = run_decode(split_launch(chunks, warps, stages), SELECTORS[0], inputs, attn, H, Q, Q,
                      16, stride=stride)
    total_q = R * Q
    counter = torch.zeros((H, total_q), dtype=torch.int32, device="cuda")
    launch = fused_launch(chunks, tile, warps, stages)
    for i in range(40):
        got = run_decode(launch, None, inputs, attn, H, Q, Q, 16, stride=stride, counter=counter)
        torch.cuda.synchronize()
        assert_same(got, want)
    for topk in (13, 16):  # topk 13 too
        w13 = run_decode(split_launch(chunks), SELECTORS[1], inputs, attn, H, Q, Q, topk,
                         stride=stride)
        g13 = run_decode(launch, None, inputs, attn, H, Q, Q, topk, stride=stride)
        assert_same(g13, w13)


@gpu
def test_gpu_policy_dispatches_fused_on_sm90():
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        pytest.skip("sm_90 tables only")
    points = [(R, Q, mb * 128) for R, Q, mb in
              ((R, Qmax, mb) for R, Qmax, mb in _fused_points() if mb > 0)][:4]
    if not points:  # the tables come from measurements; explicit launches are tested above
        pytest.skip("the measured sm_90 tables pick index_decode_fused nowhere (max_block > 0)")
    for R, Q, max_seq_len in points:
        inputs, attn, max_block = _gpu_inputs(R, Q, 1, max_seq_len, seed=R)
        e = generated.explain_index_decode("sm_90", *TUNED, R, max_block, R * Q, 1, 16, Q)
        assert e["fused"] and e["scorer"] == "split"
        got = run_decode(None, None, inputs, attn, 1, Q, Q, 16, stride=8)
        want = run_decode(split_launch(e["kv_chunks"]), SELECTORS[0], inputs, attn, 1, Q, Q, 16,
                          stride=8)
        assert_same(got, want)


class _GraphedFused:
    """index_decode_with_launch(fused) captured in a CUDA graph with static buffers."""

    def __init__(self, R, Q, H, max_seq_len, tile, chunks, seed, emit):
        self.R, self.Q, self.H, self.max_seq_len = R, Q, H, max_seq_len
        self.tile, self.chunks, self.emit = tile, chunks, emit
        self.inputs, self.attn, self.max_block = _gpu_inputs(R, Q, H, max_seq_len, seed)
        total_q = R * Q
        self.out = torch.full((H, total_q + 8, 16), POISON_OUT, dtype=torch.int32, device="cuda")
        self.counter = torch.zeros((H, total_q + 8), dtype=torch.int32, device="cuda")
        self.kw = {}
        if emit:
            self.kw = page16_outputs(self.attn, total_q)
        self.graph, self.result = capture(self._call)
        assert self.result.data_ptr() == self.out.data_ptr()

    def replay(self):
        """Poison every output, then replay: a replay that skips a write leaves the poison."""
        tables = ((self.kw["sparse_block_table_out"], POISON_TABLE),
                  (self.kw["sparse_context_lens_out"], POISON_TABLE)) if self.emit else ()
        replay_poisoned(self.graph, ((self.out, POISON_OUT),) + tables)

    def _call(self):
        return index_decode_with_launch(
            fused_launch(self.chunks, self.tile), None, **self.inputs, topk=16, init_blocks=0,
            local_blocks=1, num_kv_heads=self.H, decode_query_len=self.Q,
            max_decode_query_len=self.Q, out=self.out, completion_counter=self.counter,
            **self.kw)

    def check_against_two_kernels(self):
        want = run_decode(split_launch(self.chunks), SELECTORS[0], self.inputs, self.attn,
                          self.H, self.Q, self.Q, 16, stride=16 if self.emit else None,
                          init_blocks=0)
        torch.cuda.synchronize()
        got = (self.result, self.kw.get("sparse_block_table_out"),
               self.kw.get("sparse_context_lens_out"))
        assert_same(got, want)


@gpu
def test_gpu_fused_graph_replay_mutated_seq_lens():
    """Capture once, mutate seq_lens in place (capacity, padding, speculative rows with
    query_pos < 0, in requests that change between replays, all padding), replay into
    poisoned outputs: equals the two-kernel path; counter zero."""
    gf = _GraphedFused(16, 4, 1, 65536, 512, 16, seed=3, emit=True)
    # lengths other than the warm-ups' (which wrote the outputs the graph would leave alone)
    gf.inputs["seq_lens"].copy_(_gpu_seq_lens(16, 65536, 103, 4, spread=True))
    gf.replay()
    torch.cuda.synchronize()
    assert int(gf.counter.abs().sum()) == 0
    gf.check_against_two_kernels()
    for seed in range(4, 12):
        if seed == 7:
            gf.inputs["seq_lens"].zero_()
        else:
            gf.inputs["seq_lens"].copy_(_gpu_seq_lens(16, 65536 if seed % 2 else 3000, seed, 4,
                                                      spread=True))
        gf.replay()
        torch.cuda.synchronize()
        assert int(gf.counter.abs().sum()) == 0
        gf.check_against_two_kernels()


@gpu
def test_gpu_fused_many_alternating_replays_counter_zero():
    """Three fused graphs (different shapes, chunks, tiles), replayed round-robin many times
    with changing seq_lens: every counter stays zero, results equal the two-kernel path."""
    graphs = (_GraphedFused(1, 4, 1, 8192, 128, 64, seed=11, emit=True),
              _GraphedFused(4, 4, 1, 32768, 256, 64, seed=12, emit=True),
              _GraphedFused(12, 1, 4, 16384, 128, 32, seed=13, emit=False))
    for i in range(300):
        g = graphs[i % 3]
        if i % 10 == 0:
            g.inputs["seq_lens"].copy_(_gpu_seq_lens(g.R, g.max_seq_len, 100 + i, g.Q,
                                                     spread=True))
        g.replay()
        if i % 25 == 0:
            torch.cuda.synchronize()
            assert all(int(x.counter.abs().sum()) == 0 for x in graphs)
    torch.cuda.synchronize()
    assert all(int(x.counter.abs().sum()) == 0 for x in graphs)
    for x in graphs:
        x.check_against_two_kernels()
