"""Decode index scorers (generated/index_score.py) against docs/KERNELS.md §3 / §12 items 1-5.

CPU runs go through the Triton interpreter (small shapes); tests marked ``gpu`` use realistic
sizes (up to 128k tokens, 64 requests) and are skipped without a GPU.
"""
from __future__ import annotations

import os
import random
import sys

import pytest
import torch

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from decode_inputs import DEVICE  # noqa: E402
from generated import index_score as isc  # noqa: E402
from graph_capture import capture  # noqa: E402
from reference_index import (  # noqa: E402
    BLOCK, INIT_SCORE, LOCAL_SCORE, ref_balanced_map, ref_decode_scores, score_columns,
)

NAN = float("nan")
F32_INIT = torch.tensor(INIT_SCORE, dtype=torch.float32)
F32_LOCAL = torch.tensor(LOCAL_SCORE, dtype=torch.float32)
POISON = 64.0  # value of the page no block table entry in range may point to


def _cdiv(a, b):
    return -(-a // b)


# ---------------------------------------------------------------------------------------------
# case construction
# ---------------------------------------------------------------------------------------------

class Case:
    """Inputs for one decode scorer launch. ``layout`` picks strides:

    * "contiguous": every tensor dense.
    * "strided":    idx_q is a head-major transposed view, the cache a [pages, D, 128] transposed
                    view (token stride 1, dim stride 128), the block table a column window of a
                    wider table, the score buffer a transposed view of a token-major buffer.
    """

    def __init__(self, seq_lens, Q, Qmax, H, D, *, max_seq_len=None, init_blocks=0,
                 local_blocks=1, seed=0, layout="contiguous", device=DEVICE):
        gen = torch.Generator(device=device).manual_seed(seed)
        self.R = R = len(seq_lens)
        self.Q, self.Qmax, self.H, self.D = Q, Qmax, H, D
        self.init_blocks, self.local_blocks = init_blocks, local_blocks
        self.max_seq_len = max_seq_len if max_seq_len is not None else max(max(seq_lens), 1)
        assert max(seq_lens) <= self.max_seq_len
        max_block = _cdiv(self.max_seq_len, BLOCK)
        self.total_q = total_q = R * Q
        self.device = device

        # pages: every (request, block) gets a distinct page; one poison page fills the rest
        num_pages = R * max_block + 2
        perm = torch.randperm(num_pages, generator=gen, device=device)
        poison_page = int(perm[-1])
        width = max_block + 3
        bt = torch.full((R, width), poison_page, dtype=torch.int32, device=device)
        bt[:, :max_block] = perm[:R * max_block].view(R, max_block).to(torch.int32)

        cache = torch.randn(num_pages, BLOCK, D, generator=gen, device=device)
        cache[poison_page] = POISON
        q = torch.randn(total_q, H, D, generator=gen, device=device)

        if layout == "contiguous":
            self.idx_q = q.to(torch.bfloat16)
            self.cache = cache.to(torch.bfloat16)
            self.block_table = bt
        elif layout == "strided":
            self.idx_q = q.transpose(0, 1).contiguous().to(torch.bfloat16).transpose(0, 1)
            self.cache = cache.transpose(1, 2).contiguous().to(torch.bfloat16).transpose(1, 2)
            wide = torch.full((R, width + 5), poison_page, dtype=torch.int32, device=device)
            wide[:, 2:2 + width] = bt
            self.block_table = wide[:, 2:2 + width]
        else:
            raise ValueError(layout)
        del cache, q
        self.layout = layout
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)

    # score buffers -------------------------------------------------------------------------
    def nan_scores(self):
        """NaN-filled score tensor [H, total_q, S], plus the larger NaN buffer it is a view of
        (one extra row block and 16 extra columns that must also stay NaN)."""
        S = isc.score_columns(self.max_seq_len)
        rows = self.total_q + self.Qmax
        if self.layout == "strided":
            big = torch.full((rows, self.H, S + 16), NAN, dtype=torch.float32, device=self.device)
            view = big.permute(1, 0, 2)[:, :self.total_q, :S]
        else:
            big = torch.full((self.H, rows, S + 16), NAN, dtype=torch.float32, device=self.device)
            view = big[:, :self.total_q, :S]
        return view, big

    def launch(self, scores, variant, **kw):
        args = (self.idx_q, self.cache, self.block_table, self.seq_lens, scores,
                self.init_blocks, self.local_blocks, self.Q, self.Qmax)
        kw.setdefault("max_block", _cdiv(self.max_seq_len, BLOCK))
        if variant == "split":
            kw.setdefault("num_kv_chunks", 3)
            return isc.launch_score_split(*args, **kw)
        kw.setdefault("program_budget", 5)
        return isc.launch_score_balanced(*args, **kw)

    def run(self, variant, **kw):
        view, big = self.nan_scores()
        self.launch(view, variant, **kw)
        if self.device != "cpu":
            torch.cuda.synchronize()
        return view, big

    def reference(self, device="cpu"):
        return ref_decode_scores(self.idx_q, self.cache, self.block_table, self.seq_lens,
                                 self.init_blocks, self.local_blocks, self.Q, self.max_seq_len,
                                 device=device)


def assert_scores_match(out, ref, *, rtol=1e-5, atol=1e-4):
    """NaN (unwritten), ±inf and forced (1e29 / 1e30) positions exact; other values close."""
    out = out.detach().float().cpu()
    ref = ref.detach().float().cpu()
    assert out.shape == ref.shape
    nan_out, nan_ref = torch.isnan(out), torch.isnan(ref)
    bad = nan_out != nan_ref
    assert not bad.any(), (
        f"written region differs at {bad.nonzero()[:8].tolist()} "
        f"(NaN in kernel output: {nan_out[bad][:8].tolist()})")
    special = torch.isinf(ref) | (ref == F32_LOCAL) | (ref == F32_INIT)
    special_out = torch.isinf(out) | (out == F32_LOCAL) | (out == F32_INIT)
    exact = (special | special_out) & ~nan_ref
    if exact.any():
        mism = exact & (out != ref)
        assert not mism.any(), (
            f"forced/-inf mismatch at {mism.nonzero()[:8].tolist()}: "
            f"got {out[mism][:8].tolist()} want {ref[mism][:8].tolist()}")
    vals = ~nan_ref & ~exact
    torch.testing.assert_close(out[vals], ref[vals], rtol=rtol, atol=atol)


def assert_untouched(view, big):
    """Everything of ``big`` outside ``view`` is still NaN."""
    mask = torch.ones_like(big, dtype=torch.bool)
    # mark the view's elements through a same-strided bool view of the mask
    mask.as_strided(view.shape, view.stride(), view.storage_offset() - big.storage_offset()).fill_(
        False)
    assert torch.isnan(big[mask]).all(), "kernel wrote outside the score view"


# ---------------------------------------------------------------------------------------------
# reference self-check (brute force, tiny)
# ---------------------------------------------------------------------------------------------

def _brute_scores(case):
    """Element-by-element loops over (h, row, b, p), straight from §2/§3 (slow; tiny cases)."""
    q = case.idx_q.float().cpu()
    k = case.cache.float().cpu()
    bt = case.block_table.cpu()
    S = score_columns(case.max_seq_len)
    out = torch.full((case.H, case.total_q, S), NAN, dtype=torch.float32)
    for row in range(case.total_q):
        req, q_off = divmod(row, case.Q)
        seq_len = int(case.seq_lens[req])
        nb_req = _cdiv(max(seq_len, 0), BLOCK)
        query_pos = seq_len - case.Q + q_off
        kv_len = max(query_pos + 1, 0)
        nb_q = _cdiv(kv_len, BLOCK)
        for h in range(case.H):
            for b in range(nb_req):
                page = int(bt[req, b])
                best = float("-inf")
                for t in range(BLOCK):
                    if BLOCK * b + t < kv_len:
                        dot = sum(float(q[row, h, d]) * float(k[page, t, d]) for d in range(case.D))
                        best = max(best, dot)
                val = torch.tensor(best, dtype=torch.float32)
                if b < nb_q:
                    if b >= max(0, nb_q - case.local_blocks):
                        val = F32_LOCAL
                    elif b < case.init_blocks:
                        val = F32_INIT
                out[h, row, b] = val
    return out


def test_reference_matches_brute_force():
    case = Case([130, 0, 3, 257], Q=3, Qmax=4, H=2, D=16, init_blocks=1, local_blocks=1, seed=1,
                max_seq_len=300)
    assert_scores_match(case.reference(), _brute_scores(case), rtol=1e-6, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# §12.1 / §12.2: values vs reference, write region
# ---------------------------------------------------------------------------------------------

VALUE_CASES = [
    # seq_lens, Q, Qmax, H, D, init, local, layout
    ([300, 0, 129, 1, 2], 2, 4, 2, 32, 1, 1, "contiguous"),
    ([256, 3, 1000, 0], 3, 4, 4, 64, 2, 3, "strided"),
    ([0, 0, 0], 1, 1, 1, 16, 1, 1, "contiguous"),  # only padding requests
    ([640, 1, 129, 128], 1, 1, 1, 128, 0, 1, "contiguous"),
    ([511, 385, 2], 4, 8, 2, 16, 1, 2, "strided"),  # query_pos < 0 rows in request 2
    ([700, 127], 1, 2, 4, 32, 0, 0, "contiguous"),  # no forcing at all
    ([900, 50], 2, 2, 1, 64, 8, 1, "contiguous"),  # init reaches past the visible blocks
    ([640, 1, 129], 1, 1, 1, 64, 0, 0, "contiguous"),  # seq_len = capacity, unforced
]


@pytest.mark.parametrize("variant,kw", [("split", dict(num_kv_chunks=1)),
                                        ("split", dict(num_kv_chunks=3)),
                                        ("balanced", dict(program_budget=1)),
                                        ("balanced", dict(program_budget=4))],
                         ids=["split1", "split3", "bal1", "bal4"])
@pytest.mark.parametrize("spec", VALUE_CASES, ids=[f"c{i}" for i in range(len(VALUE_CASES))])
def test_values_and_write_region(spec, variant, kw):
    seq_lens, Q, Qmax, H, D, init_b, local_b, layout = spec
    case = Case(seq_lens, Q, Qmax, H, D, init_blocks=init_b, local_blocks=local_b, layout=layout,
                seed=len(seq_lens) * 7 + D)
    view, big = case.run(variant, **kw)
    assert_scores_match(view, case.reference())
    assert_untouched(view, big)


@pytest.mark.parametrize("variant", ["split", "balanced"])
def test_a_request_at_the_capacity_sees_its_last_key(variant):
    """seq_len = max_seq_len = max_block·128 (§13.2: a length at the capacity is not clamped):
    the row's query sits at position 639, so the key there is visible. That key is made the
    block's clear maximum, so a scorer that drops it (a capacity off by one) scores block 4
    below the reference; unforced (local 0) and forced layouts both compared."""
    for Q, local in ((1, 0), (2, 1)):
        case = Case([640, 1, 129], Q=Q, Qmax=2, H=2, D=64, init_blocks=0, local_blocks=local,
                    seed=21)
        assert case.max_seq_len == 640
        page = int(case.block_table[0, 4])
        q = case.idx_q[(Q - 1), 0].float()
        case.cache[page, 127] = (q * 8).to(case.cache.dtype)  # q·k = 8·|q|² at position 639
        ref = case.reference()
        hot = float((q.double() * case.cache[page, 127].double()).sum())
        if local == 0:
            assert ref[0, Q - 1, 4].item() == torch.tensor(hot, dtype=torch.float32).item()
        view, big = case.run(variant)
        assert_scores_match(view, ref)
        assert_untouched(view, big)


def test_padding_and_negative_query_pos_rows():
    """seq_len 0 requests write nothing; rows with query_pos < 0 get -inf for b < nb_req only."""
    Q = 4
    case = Case([0, 2, 0, 131], Q=Q, Qmax=4, H=2, D=16, init_blocks=1, local_blocks=1,
                max_seq_len=400, seed=3)
    for variant in ("split", "balanced"):
        view, big = case.run(variant)
        out = view.cpu()
        S = out.shape[-1]
        # requests 0 and 2: all rows untouched
        for req in (0, 2):
            assert torch.isnan(out[:, req * Q:(req + 1) * Q]).all()
        # request 1 (seq_len 2, nb_req 1): rows 0,1 have query_pos -2,-1 -> -inf, unforced
        r1 = out[:, Q:2 * Q]
        assert torch.isneginf(r1[:, 0:2, 0]).all()
        assert (r1[:, 2:4, 0] == F32_LOCAL).all()  # kv_len 1, 2: block 0 is local (over init)
        assert torch.isnan(r1[:, :, 1:S]).all()
        # request 3 (seq_len 131): row 0 (query_pos 127) sees one block, block 1 -> -inf
        r3 = out[:, 3 * Q:4 * Q]
        assert (r3[:, 0, 0] == F32_LOCAL).all() and torch.isneginf(r3[:, 0, 1]).all()
        assert (r3[:, 1:, 0] == F32_INIT).all() and (r3[:, 1:, 1] == F32_LOCAL).all()
        assert torch.isnan(r3[:, :, 2:]).all()
        assert_untouched(view, big)
        assert_scores_match(view, case.reference())


# ---------------------------------------------------------------------------------------------
# §12.3: split vs balanced, bitwise
# ---------------------------------------------------------------------------------------------

def _bits(t):
    return t.detach().cpu().contiguous().view(torch.int32)


BITWISE_PATTERNS = {
    "uniform": [777, 777, 777],
    "single_active": [0, 0, 1000, 0],
    "unaligned": [129, 255, 1, 383, 645],
}


@pytest.mark.parametrize("pattern", sorted(BITWISE_PATTERNS))
@pytest.mark.parametrize("H,Q,Qmax,D", [(1, 1, 2, 64), (2, 3, 4, 128), (4, 1, 4, 16),
                                        (4, 2, 4, 32)])
def test_split_balanced_bitwise(pattern, H, Q, Qmax, D):
    seq_lens = BITWISE_PATTERNS[pattern]
    case = Case(seq_lens, Q=Q, Qmax=Qmax, H=H, D=D, init_blocks=1, local_blocks=1, seed=H * D)
    split, _ = case.run("split", num_kv_chunks=2)
    ref_bits = _bits(split)
    for budget in (1, 3, 8):
        bal, _ = case.run("balanced", program_budget=budget)
        assert torch.equal(_bits(bal), ref_bits), f"budget {budget}"
    split_many, _ = case.run("split", num_kv_chunks=7)
    assert torch.equal(_bits(split_many), ref_bits)
    max_block = _cdiv(case.max_seq_len, BLOCK)
    for chunks in (1, 3, 16):  # static chunks: cut from the capacity, some empty
        static, _ = case.run("split", num_kv_chunks=chunks, static_chunks=True,
                             max_block=max_block)
        assert torch.equal(_bits(static), ref_bits), f"static, {chunks} chunks"
    case.block_table = case.block_table[:, :max_block].contiguous()  # exactly max_block wide
    static, _ = case.run("split", num_kv_chunks=3, static_chunks=True, max_block=max_block)
    assert torch.equal(_bits(static), ref_bits), "static, table exactly max_block wide"
    assert_scores_match(split, case.reference())


# ---------------------------------------------------------------------------------------------
# §12.4: balanced work map coverage. test_balanced_map_coverage is a self-check of the spec's
# map (tests/reference_index.ref_balanced_map, pure Python, no generated code); the kernels
# follow it in test_balanced_kernel_follows_map* (20-99 blocks per request on the CPU,
# 65534 on the GPU).
# ---------------------------------------------------------------------------------------------

def _check_map(seq_lens, budget):
    R = len(seq_lens)
    width, assign = ref_balanced_map(seq_lens, budget)
    assert len(assign) == budget + R - 1
    blocks = [_cdiv(max(s, 0), BLOCK) for s in seq_lens]
    assert width == max(1, _cdiv(sum(blocks), budget))
    owned = [(pid, a) for pid, a in enumerate(assign) if a is not None]
    # request order, contiguous program ids, contiguous ranges covering [0, nb) exactly once
    reqs = [a[0] for _, a in owned]
    assert reqs == sorted(reqs)
    pids = [pid for pid, _ in owned]
    assert pids == list(range(len(pids))), "owning programs must be a prefix of the grid"
    for r, nb in enumerate(blocks):
        ranges = [(s, e) for _, (rr, s, e) in owned if rr == r]
        if nb == 0:
            assert ranges == []
            continue
        assert ranges[0][0] == 0 and ranges[-1][1] == nb
        for (s0, e0), (s1, _) in zip(ranges, ranges[1:]):
            assert e0 == s1
        assert all(0 < e - s <= width for s, e in ranges)
    # §3.2's bound, from the formula (the map itself asserts its ids stay inside the grid)
    progs = sum(_cdiv(nb, width) for nb in blocks)
    assert progs == len(owned) and progs <= budget + R - 1


@pytest.mark.parametrize("R", range(1, 12))
def test_balanced_map_coverage(R):
    """Spec self-check (no kernel runs here): the §3.2 map covers every request's blocks once,
    contiguously, in request order, within budget + R − 1 programs."""
    rng = random.Random(R)
    budgets = (1, 2, 3, 7, 64, 768, 1024)
    patterns = [
        [0] * R,
        [65534 * BLOCK] * R,
        [rng.randrange(0, 65535) * BLOCK for _ in range(R)],
        [rng.randrange(0, 40) * BLOCK - rng.randrange(0, 128) for _ in range(R)],  # unaligned, <=0
        [rng.choice([0, 1, 127, 128, 129, 65534 * BLOCK]) for _ in range(R)],
    ]
    for seq_lens in patterns:
        for budget in budgets:
            _check_map(seq_lens, budget)
    # exhaustive tiny block counts
    if R <= 3:
        for counts in __import__("itertools").product(range(5), repeat=R):
            for budget in (1, 2, 3, 5):
                _check_map([c * BLOCK for c in counts], budget)


def test_balanced_kernel_follows_map():
    """Budgets that force width > 1 and leave idle programs; the output must still be complete."""
    case = Case([1000, 0, 130, 520, 1], Q=1, Qmax=1, H=1, D=16, seed=5)
    ref = case.reference()
    for budget in (1, 2, 3, 4, 6, 19, 40):
        view, big = case.run("balanced", program_budget=budget)
        assert_scores_match(view, ref)
        assert_untouched(view, big)


def test_balanced_kernel_follows_map_over_many_blocks():
    """The kernel's own map at 11 requests (the balanced policy's largest R) with 20-99-block
    requests between 0-, 1- and 2-block ones: budget 1 (one program per request), 3 (requests
    straddle programs) and 64 (several programs per request, idle ones at the end); every
    written score is the reference's, nothing else is written."""
    rng = random.Random(11)
    lens = [rng.choice([0, 1, 127, 128, 129]) if i % 3 else
            rng.randrange(20, 100) * BLOCK - rng.randrange(0, BLOCK) for i in range(11)]
    case = Case(lens, Q=1, Qmax=1, H=1, D=16, init_blocks=0, local_blocks=1, seed=6)
    ref = case.reference()
    for budget in (1, 3, 64):
        view, big = case.run("balanced", program_budget=budget)
        assert_scores_match(view, ref)
        assert_untouched(view, big)


def test_alloc_scores_shape():
    s = isc.alloc_scores(4, 6, 1000, "cpu")
    assert s.shape == (4, 6, 16) and s.dtype == torch.float32
    assert isc.alloc_scores(1, 1, 128 * 16 + 1, "cpu").shape == (1, 1, 32)
    assert isc.alloc_scores(2, 3, 0, "cpu").shape == (2, 3, 0)


# ---------------------------------------------------------------------------------------------
# GPU tests (realistic sizes)
# ---------------------------------------------------------------------------------------------

def _split_chunks(R):
    """Default split policy of docs/KERNELS.md §8.2 (target grid 512, at most 256 chunks)."""
    x = max(1, min(256, 512 // max(1, R)))
    return 1 << (x.bit_length() - 1)


# GPU tolerance: fp32 tensor-core accumulation of D=128 bf16 products of N(0,1) data (|dot| ~ 40)
GPU_RTOL, GPU_ATOL = 1e-5, 2e-3


@pytest.mark.gpu
@pytest.mark.parametrize("R,seq_max,H,Q,Qmax", [
    (1, 128 * 1024, 4, 1, 1),
    (11, 128 * 1024, 1, 1, 1),
    (4, 128 * 1024, 4, 4, 5),
    (64, 16 * 1024, 2, 2, 4),
    (64, 128 * 1024, 1, 1, 1),
])
def test_gpu_values_realistic(R, seq_max, H, Q, Qmax):
    rng = random.Random(R * 31 + H)
    seq_lens = [seq_max] + [rng.randrange(0, seq_max + 1) for _ in range(R - 1)]
    if R > 2:
        seq_lens[1] = 0  # graph padding request
        seq_lens[2] = 2  # speculative rows with query_pos < 0 when Q > 2
    case = Case(seq_lens, Q=Q, Qmax=Qmax, H=H, D=128, init_blocks=0, local_blocks=1,
                max_seq_len=seq_max, seed=R, device="cuda")
    ref = case.reference(device="cuda")
    split, big = case.run("split", num_kv_chunks=_split_chunks(R))
    assert_scores_match(split, ref, rtol=GPU_RTOL, atol=GPU_ATOL)
    assert_untouched(split, big)
    budget = 1024 if R <= 8 else 768
    bal, big_b = case.run("balanced", program_budget=budget, num_warps=2, num_stages=1)
    assert_untouched(bal, big_b)
    assert torch.equal(_bits(bal), _bits(split))


@pytest.mark.gpu
@pytest.mark.parametrize("budget", [1, 3, 768, 1024])
def test_gpu_balanced_kernel_follows_map_at_65534_blocks(budget):
    """§12.4's largest block count through the kernel (minutes on the interpreter): two
    requests of 65534 blocks around a short one, every block scored once, as the reference."""
    seq_max = 65534 * BLOCK
    case = Case([seq_max, 5, seq_max - 77], Q=1, Qmax=1, H=1, D=16, init_blocks=0,
                local_blocks=1, max_seq_len=seq_max, seed=budget, device="cuda")
    ref = case.reference(device="cuda")
    view, big = case.run("balanced", program_budget=budget)
    assert_scores_match(view, ref, rtol=GPU_RTOL, atol=GPU_ATOL)
    assert_untouched(view, big)


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", ["uniform", "single_active", "unaligned"])
@pytest.mark.parametrize("H,Q,Qmax", [(1, 1, 1), (2, 1, 4), (4, 3, 4), (4, 4, 5)])
def test_gpu_split_balanced_bitwise(pattern, H, Q, Qmax):
    R = 8
    if pattern == "uniform":
        seq_lens = [32 * 1024] * R
    elif pattern == "single_active":
        seq_lens = [0] * R
        seq_lens[5] = 100_000
    else:
        seq_lens = [129, 255, 1, 383, 645, 65_537, 4097, 127]
    case = Case(seq_lens, Q=Q, Qmax=Qmax, H=H, D=128, init_blocks=1, local_blocks=1,
                max_seq_len=128 * 1024, seed=H * 10 + Q, device="cuda")
    split, _ = case.run("split", num_kv_chunks=_split_chunks(R))  # backend defaults
    want = _bits(split)
    configs = [("split", dict(num_kv_chunks=_split_chunks(R), num_warps=4, num_stages=2)),
               ("split", dict(num_kv_chunks=3, num_warps=2, num_stages=1)),
               ("balanced", dict(program_budget=1024, num_warps=2, num_stages=1)),
               ("balanced", dict(program_budget=97, num_warps=4, num_stages=3)),
               ("split", dict(num_kv_chunks=64, static_chunks=True, max_block=1024,
                              num_warps=4, num_stages=2)),
               ("split", dict(num_kv_chunks=512, static_chunks=True, max_block=1024,
                              num_warps=4, num_stages=3))]
    for variant, kw in configs:
        out, _ = case.run(variant, **kw)
        assert torch.equal(_bits(out), want), (variant, kw)
    assert_scores_match(split, case.reference(device="cuda"), rtol=GPU_RTOL, atol=GPU_ATOL)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["split", "balanced"])
def test_gpu_graph_replay_mutated_seq_lens(variant):
    """§12.5: a captured launch replayed after seq_lens changes reproduces eager results in place."""
    R, H, Q, Qmax, seq_max = 6, 2, 2, 4, 64 * 1024
    lens_a = [seq_max, 0, 1000, 129, 2, 40_000]
    lens_b = [1, 64_000, 0, seq_max, 777, 128]
    case = Case(lens_a, Q=Q, Qmax=Qmax, H=H, D=128, init_blocks=1, local_blocks=1,
                max_seq_len=seq_max, seed=11, device="cuda")
    kw = (dict(num_kv_chunks=_split_chunks(R)) if variant == "split"
          else dict(program_budget=1024, num_warps=2, num_stages=1))
    scores, _ = case.nan_scores()
    ptr = scores.data_ptr()

    def eager(lens):
        case.seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        out, _ = case.nan_scores()
        case.launch(out, variant, **kw)
        torch.cuda.synchronize()
        return out.clone()

    eager_a, eager_b = eager(lens_a), eager(lens_b)
    case.seq_lens.copy_(torch.tensor(lens_a, dtype=torch.int32))
    graph, _ = capture(lambda: case.launch(scores, variant, **kw), warmups=1)
    for lens, want in ((lens_b, eager_b), (lens_a, eager_a), (lens_b, eager_b)):
        case.seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        scores.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        assert scores.data_ptr() == ptr
        assert torch.equal(_bits(scores), _bits(want)), lens
    case.seq_lens.copy_(torch.tensor(lens_b, dtype=torch.int32))
    assert_scores_match(eager_b, case.reference(device="cuda"), rtol=GPU_RTOL, atol=GPU_ATOL)


@pytest.mark.gpu
def test_gpu_bandwidth_11x128k():
    """11 requests x 128k tokens x 128 dims bf16 (~369 MB of index-K) should stream at close to HBM
    bandwidth: target <= ~92 us on H200. Prints a small sweep; asserts the best configuration
    on an H200 (other devices have other bandwidths: skipped there after the sweep)."""
    import triton.testing

    R, H, Q, Qmax, seq = 11, 1, 1, 1, 128 * 1024
    case = Case([seq] * R, Q=Q, Qmax=Qmax, H=H, D=128, max_seq_len=seq, seed=2, device="cuda")
    scores = isc.alloc_scores(H, R * Q, seq, "cuda")
    nbytes = R * seq * 128 * 2
    results = {}
    sweeps = [("split", dict(num_kv_chunks=c, num_warps=w, num_stages=s))
              for c in (_split_chunks(R), 24, 36, 48, 96) for w in (4, 8) for s in (3, 4)]
    sweeps += [("balanced", dict(program_budget=b, num_warps=w, num_stages=s))
               for b in (768, 264, 396) for w in (2, 4) for s in (1, 3)]
    for variant, kw in sweeps:
        case.launch(scores, variant, **kw)  # compile outside the graph capture
        torch.cuda.synchronize()
        ms = triton.testing.do_bench_cudagraph(lambda: case.launch(scores, variant, **kw), rep=50,
                                                return_mode="median")
        results[(variant, tuple(sorted(kw.items())))] = ms * 1e3
    for key, us in sorted(results.items(), key=lambda kv: kv[1]):
        print(f"{us:8.1f} us  {nbytes / us / 1e6:6.2f} TB/s  {key}")
    best = min(results.values())
    name = torch.cuda.get_device_name()
    if "H200" not in name:  # (an H100 streams ~3 TB/s: 124 us on GPU-864b6bb2, 2026-12-05)
        pytest.skip(f"the 92 us target is the H200's; best on {name}: {best:.1f} us")
    assert best <= 92.0 * 1.1, f"best {best:.1f} us > target"
