"""Router GEMM (docs/KERNELS.md §11, invariants §12 items 15-18).

CPU runs go through Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1 when there
is no GPU); on a GPU machine the same tests run on the device. The reference is written from the
spec text: logits[m, n] = Σ_k float32(x[m, k]) · w[n, k], evaluated in fp64 (a bf16 or fp32 value
widens exactly to fp64, so the reference is exact up to one fp64 rounding per product/sum).
Tests marked ``gpu`` need a CUDA device and are skipped elsewhere.
"""
from __future__ import annotations

import itertools
import logging
import sys
import types
import zlib

import pytest
import torch

import generated
from generated import (
    ROUTER_GEMM_KERNELS,
    ROUTER_GEMM_SHAPES,
    ROUTER_GEMM_SPLITK_SHAPES,
    can_use_router_gemm,
    explain_router_gemm,
    explain_router_logits,
    launch_router_gemm,
    launch_router_gemm_splitk,
    router_gemm,
    router_logits,
)
from generated.dispatch import ROUTER_GEMM as TABLE
from graph_capture import capture

# The module that defines the kernel and the wrappers (F, _router_gemm_kernel live there).
# `generated.router_gemm` is the re-exported function, so go through its __module__.
_mod = sys.modules[router_gemm.__module__]
_rt = sys.modules["generated._runtime"]

HAS_CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")
gpu = pytest.mark.gpu

ATOL = 5e-4
MAX_TOKENS = 32

# §11 "Supported (K = hidden_size, N = num_experts)", written out independently of the code.
SPEC_SHAPES = ((3072, 256), (4096, 8), (4096, 192), (6144, 128), (6144, 256))
# §14.2: the bf16-weight shape (tests/test_dropin.py covers its numerics and cap).
BF16_WEIGHT_SHAPES = ((7168, 896),)

# §11 launch table for gfx950: shape -> (M <= 4, 5 <= M <= 16, 17 <= M <= 32) of
# (BLOCK_M, BLOCK_K, num_warps); num_stages is always 1.
GFX950_TABLE = {
    (4096, 8): ((1, 1024, 4), (1, 1024, 4), (1, 1024, 4)),
    (3072, 256): ((1, 1024, 8), (4, 1024, 8), (8, 1024, 8)),
    (4096, 192): ((1, 1024, 8), (4, 1024, 8), (4, 2048, 8)),
    (6144, 128): ((1, 1024, 8), (4, 1024, 8), (4, 2048, 8)),
    (6144, 256): ((1, 1024, 8), (8, 1024, 8), (4, 2048, 8)),
}
BUCKETS = ((1, 4), (5, 16), (17, 32))
HARDWARE = ("gfx950", "sm_90", "generic")

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def shape_id(shape) -> str:
    return f"k{shape[0]}_n{shape[1]}"


def topk_k(shape) -> int:
    """§12.16: k = 2 for (4096, 8), else 8."""
    return 2 if tuple(shape) == (4096, 8) else 8


# -------------------------------------------------------------------------------------------
# Reference and input helpers
# -------------------------------------------------------------------------------------------


def seed_of(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def randn(*shape, seed, device=None):
    """A seeded N(0, 1) tensor (drawn on the CPU, so the same on every device)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device or DEVICE)


def make_inputs(K, N, M, x_dtype, *, seed, device=DEVICE, w_dtype=torch.float32):
    """x ~ randn [M, K] in x_dtype; w ~ 0.02·randn [N, K] (router-like logit scale ~1-2)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).to(x_dtype)
    w = (torch.randn(N, K, generator=g) * 0.02).to(w_dtype)
    return x.to(device), w.to(device)


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """fp64 Σ_k x[m, k] · w[n, k] for the last axis of x (on x's device)."""
    return torch.matmul(x.detach().double(), w.detach().double().t())


def check_logits(out, x, w, *, atol=ATOL):
    """§12.15: shape [..., N], fp32, x's device, contiguous, no NaN, |out - ref| <= atol."""
    expected_shape = tuple(x.shape[:-1]) + (w.shape[0],)
    assert tuple(out.shape) == expected_shape
    assert out.dtype == torch.float32
    assert out.device == x.device
    assert out.is_contiguous()
    assert not torch.isnan(out).any(), "NaN in logits"
    ref = reference(x, w)
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=0)
    return ref


def check_topk(out, ref, k, *, tol=1e-3):
    """§12.16: top-k expert sets agree except swaps whose reference logit is within tol of the
    reference k-th value."""
    k = min(k, out.shape[-1])
    out = out.double().reshape(-1, out.shape[-1]).cpu()
    ref = ref.double().reshape(-1, ref.shape[-1]).cpu()
    for m in range(out.shape[0]):
        ref_vals, ref_idx = torch.topk(ref[m], k)
        got = set(torch.topk(out[m], k).indices.tolist())
        want = set(ref_idx.tolist())
        kth = ref_vals[-1].item()
        for e in got ^ want:
            assert abs(ref[m, e].item() - kth) <= tol, (
                f"row {m}: expert {e} swapped into/out of the top-{k} (ref logit "
                f"{ref[m, e].item():.6g}, k-th value {kth:.6g}); got {sorted(got)}, "
                f"want {sorted(want)}")


# module attribute of each kernel -> its kind in ROUTER_GEMM_KERNELS
KERNEL_ATTRS = {"_router_gemm_kernel": "per_expert", "_router_gemm_splitk_kernel": "splitk"}


class KernelSpy:
    """Stands in for the module's Triton kernels: records each launch, then runs it (unless
    ``execute`` is False: the launch is only recorded and the output stays unwritten).

    ``calls`` holds (grid, kwargs) of every launch of either kernel (the grid without
    trailing 1s; every argument by name, positional ones included), ``kinds`` the kernel kind
    ("per_expert" | "splitk") of each."""

    def __init__(self):
        self.calls = []
        self.kinds = []
        self.execute = True

    def wrap(self, kernel, kind):
        spy = self

        class _One:
            def __getitem__(self, grid):
                launcher = kernel[grid]

                def run(*args, **kwargs):
                    dims = tuple(grid)
                    while len(dims) > 1 and dims[-1] == 1:
                        dims = dims[:-1]
                    spy.calls.append((dims, {**dict(zip(kernel.arg_names, args)), **kwargs}))
                    spy.kinds.append(kind)
                    return launcher(*args, **kwargs) if spy.execute else None

                return run

        return _One()


class _NoKernel:
    def __getitem__(self, grid):
        raise AssertionError("the router GEMM kernel must not launch here")


@pytest.fixture
def kernel_spy(monkeypatch):
    spy = KernelSpy()
    for attr, kind in KERNEL_ATTRS.items():
        monkeypatch.setattr(_mod, attr, spy.wrap(getattr(_mod, attr), kind))
    _rt.clear_plans()  # cached plans hold the real kernels
    yield spy
    _rt.clear_plans()


@pytest.fixture
def no_linear(monkeypatch):
    """Make the F.linear fallback of the generated module raise: proves the kernel ran."""

    def linear(*args, **kwargs):
        raise AssertionError("router_logits took the F.linear fallback")

    monkeypatch.setattr(_mod, "F", types.SimpleNamespace(linear=linear))


@pytest.fixture
def no_kernel(monkeypatch):
    for attr in KERNEL_ATTRS:
        monkeypatch.setattr(_mod, attr, _NoKernel())
    _rt.clear_plans()
    yield
    _rt.clear_plans()


@pytest.fixture
def exact_fp32_matmul():
    """The linear fallback must be compared in true fp32 (no TF32) on a GPU."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def run_case(shape, M, dtype_name):
    K, N = shape
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], seed=seed_of("main", tuple(shape), M,
                                                                  dtype_name))
    return x, w, router_gemm(x, w)


# -------------------------------------------------------------------------------------------
# 1. Numerics for every shape x M x dtype (§12.15)
# -------------------------------------------------------------------------------------------


def test_supported_shapes_match_spec():
    assert set(ROUTER_GEMM_SHAPES) == set(SPEC_SHAPES) | set(BF16_WEIGHT_SHAPES)
    assert len(ROUTER_GEMM_SHAPES) == len(SPEC_SHAPES) + len(BF16_WEIGHT_SHAPES)


def _reference_cases():
    """Every shape × M × x dtype on the GPU. On the interpreter, where M > 1 is the suite's
    most expensive case, M = 5 and M = 17 take one x dtype each per shape (the two differ, and
    alternate between shapes) where the launch costs at most REFERENCE_STEPS program · K
    steps, and the full-tile M = 32 runs on the smallest weight only: every shape still meets
    both dtypes at M 0 and 1. The generic table's launch parameters do not depend on the
    weight's shape (test_generic_launch_is_the_same_for_every_weight), so a larger weight at
    M > 1 runs the smallest one's computation with larger constexpr K and N; the
    forced-hardware cases add M = 2, 6, 18 on other rows."""
    smallest = min(SPEC_SHAPES, key=lambda s: s[0] * s[1])
    cases = []
    for i, shape in enumerate(SPEC_SHAPES):
        for M in (0, 1, 5, 17, 32):
            for j, dtype_name in enumerate(DTYPES):
                if HAS_CUDA or M <= 1 or (M == 32 and shape == smallest) or (
                        ((M == 5 and (i + j) % 2 == 1) or (M == 17 and (i + j) % 2 == 0))
                        and _generic_steps(shape, M, dtype_name) <= REFERENCE_STEPS):
                    cases.append((shape, M, dtype_name))
    return cases


REFERENCE_STEPS = 800  # programs · K steps of a reference case on the interpreter (~3 s)


def test_generic_launch_is_the_same_for_every_weight():
    """What lets the interpreter run M > 1 on the smallest weight alone (_reference_cases)."""
    for M in range(1, 33):
        for dtype_name in DTYPES:
            assert len({frozenset(TABLE.lookup("generic", shape, dtype_name, M).params.items())
                        for shape in SPEC_SHAPES}) == 1, (M, dtype_name)


def _generic_steps(shape, M, dtype_name) -> int:
    """Programs · K steps of the generic table's launch (the interpreter's) at M tokens."""
    K, N = shape
    p = TABLE.lookup("generic", shape, dtype_name, M).params
    return -(-M // p["block_m"]) * N // p["block_e"] * K // p["block_k"]


@pytest.mark.parametrize("shape,M,dtype_name", _reference_cases(),
                         ids=lambda v: shape_id(v) if isinstance(v, tuple) else str(v))
def test_router_gemm_matches_reference(shape, M, dtype_name):
    x, w, out = run_case(shape, M, dtype_name)
    ref = check_logits(out, x, w)
    assert out.shape == (M, shape[1])
    if M:
        check_topk(out, ref, topk_k(shape))


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("shape", SPEC_SHAPES, ids=shape_id)
def test_zero_tokens_launches_nothing(shape, dtype_name, kernel_spy):
    K, N = shape
    x = torch.empty(0, K, dtype=DTYPES[dtype_name], device=DEVICE)
    w = randn(N, K, seed=seed_of("zero", shape))
    out = router_gemm(x, w)
    assert out.shape == (0, N) and out.dtype == torch.float32 and out.device == x.device
    assert kernel_spy.calls == []
    assert can_use_router_gemm(x, w)


def test_output_is_fresh_and_inputs_untouched():
    """Each call returns a new tensor: a later call (on other inputs) leaves an earlier
    result as it was; the inputs are not written; equal inputs give equal logits."""
    K, N = 4096, 8
    x, w = make_inputs(K, N, 7, torch.bfloat16, seed=seed_of("fresh"))
    x2, _ = make_inputs(K, N, 7, torch.bfloat16, seed=seed_of("fresh", 2))
    x0, w0 = x.clone(), w.clone()
    a = router_gemm(x, w)
    a0 = a.clone()
    b = router_gemm(x2, w)  # a persistent output buffer would overwrite a here
    assert torch.equal(a, a0) and not torch.equal(a, b)
    assert torch.equal(router_gemm(x, w), a)  # deterministic
    assert torch.equal(x, x0) and torch.equal(w, w0)
    check_logits(a, x, w)
    check_logits(b, x2, w)


# -------------------------------------------------------------------------------------------
# 2. Top-k expert agreement (§12.16)
# -------------------------------------------------------------------------------------------


# test_router_gemm_matches_reference checks the top-k expert sets of every case with M > 0.


def test_topk_checker_allows_only_near_ties():
    """The §12.16 exemption is tight: a swap at a near tie passes, a real swap does not."""
    ref = torch.tensor([[5.0, 4.0, 3.0, 2.9995, 1.0]], dtype=torch.float64)
    near = ref.clone()
    near[0, 3] = 3.0001  # experts 2 and 3 swap; |ref[3] - kth| = 5e-4
    check_topk(near, ref, 3)
    far = ref.clone()
    far[0, 4] = 3.5  # expert 4 (ref 1.0) enters the top-3
    with pytest.raises(AssertionError):
        check_topk(far, ref, 3)


# -------------------------------------------------------------------------------------------
# 3. Validation (§11 rows 2-9) and can_use_router_gemm
# -------------------------------------------------------------------------------------------


def _t(M, K, dtype=torch.float32, device=None):
    return randn(M, K, seed=seed_of("t", M, K), device=device).to(dtype)


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _noncontig(M, K, dtype=torch.float32):
    return randn(K, M, seed=seed_of("noncontig", M, K)).to(dtype).t()


# id -> (builder returning (x, w), [the argument the message starts with, then fragments the
# message must contain])
SHAPE_NAME = "hidden_states/router_weight"  # the shape check names both arguments
REJECTIONS = {
    # row 2: both 2-D
    "x_1d": (lambda: (randn(4096, seed=1), _t(8, 4096)), ["hidden_states", "2-D"]),
    "x_3d": (lambda: (randn(2, 3, 4096, seed=2), _t(8, 4096)),
             ["hidden_states", "2-D"]),
    "w_1d": (lambda: (_t(3, 4096), randn(4096, seed=3)), ["router_weight", "2-D"]),
    "w_3d": (lambda: (_t(3, 4096), randn(1, 8, 4096, seed=4)),
             ["router_weight", "2-D"]),
    "x_not_tensor": (lambda: ([[0.0] * 4096], _t(8, 4096)), ["hidden_states"]),
    # row 3: x dtype in {bf16, fp32}
    "x_fp16": (lambda: (_t(3, 4096, torch.float16), _t(8, 4096)),
               ["hidden_states", "bfloat16 or float32"]),
    "x_fp64": (lambda: (_t(3, 4096, torch.float64), _t(8, 4096)),
               ["hidden_states", "bfloat16 or float32"]),
    "x_int32": (lambda: (_t(3, 4096, torch.int32), _t(8, 4096)),
                ["hidden_states", "bfloat16 or float32"]),
    # row 4: w dtype fp32
    "w_bf16": (lambda: (_t(3, 4096), _t(8, 4096, torch.bfloat16)), ["router_weight", "float32"]),
    "w_fp16": (lambda: (_t(3, 4096), _t(8, 4096, torch.float16)), ["router_weight", "float32"]),
    "w_fp64": (lambda: (_t(3, 4096), _t(8, 4096, torch.float64)), ["router_weight", "float32"]),
    # row 5: on a GPU device (CPU only through the interpreter); meta is neither
    "x_meta": (lambda: (_meta(3, 4096), _meta(8, 4096)), ["hidden_states", "device"]),
    # row 6: same device
    "w_other_device": (lambda: (_t(3, 4096), _meta(8, 4096)), ["router_weight", "device"]),
    # row 7: contiguous
    "x_noncontiguous": (lambda: (_noncontig(3, 4096), _t(8, 4096)),
                        ["hidden_states", "contiguous"]),
    "x_strided_rows": (lambda: (_t(6, 4096)[::2], _t(8, 4096)), ["hidden_states", "contiguous"]),
    "w_noncontiguous": (lambda: (_t(3, 4096), _noncontig(8, 4096)),
                        ["router_weight", "contiguous"]),
    # row 8: supported (K, N) and w.shape[1] == K
    "shape_k_unsupported": (lambda: (_t(3, 2048), _t(8, 2048)), [SHAPE_NAME, "shape"]),
    "shape_n_unsupported": (lambda: (_t(3, 4096), _t(16, 4096)), [SHAPE_NAME, "shape"]),
    "shape_w_hidden_mismatch": (lambda: (_t(3, 4096), _t(8, 3072)), [SHAPE_NAME, "shape"]),
    "shape_w_transposed": (lambda: (_t(3, 4096), _t(4096, 8)), [SHAPE_NAME, "shape"]),
    "shape_swapped_pair": (lambda: (_t(3, 256), _t(3072, 256)), [SHAPE_NAME, "shape"]),
    # row 9: 0 <= M <= 32
    "M33": (lambda: (_t(33, 4096), _t(8, 4096)), ["hidden_states", "num_tokens"]),
    "M64_bf16": (lambda: (_t(64, 3072, torch.bfloat16), _t(256, 3072)),
                 ["hidden_states", "num_tokens"]),
    # order: the first failing check wins
    "order_rank_before_dtype": (lambda: (randn(2, 3, 4096, seed=5).half(),
                                         _t(8, 4096, torch.bfloat16)), ["hidden_states", "2-D"]),
    "order_w_rank_before_x_dtype": (lambda: (_t(3, 4096, torch.float16),
                                             randn(4096, seed=6)),
                                    ["router_weight", "2-D"]),
    "order_x_dtype_before_w_dtype": (lambda: (_t(3, 4096, torch.float16),
                                              _t(8, 4096, torch.bfloat16)),
                                     ["hidden_states", "bfloat16 or float32"]),
    "order_w_dtype_before_device": (lambda: (_meta(3, 4096), _meta(8, 4096, dtype=torch.bfloat16)),
                                    ["router_weight", "float32"]),
    "order_w_dtype_before_contiguous": (lambda: (_noncontig(3, 4096),
                                                 _t(8, 4096, torch.bfloat16)),
                                        ["router_weight", "float32"]),
    "order_device_before_contiguous": (lambda: (_meta(4096, 3).t(), _meta(8, 4096)),
                                       ["hidden_states", "device"]),
    "order_contiguous_before_shape": (lambda: (_noncontig(3, 2048), _t(8, 2048)),
                                      ["hidden_states", "contiguous"]),
    "order_contiguous_before_num_tokens": (lambda: (_t(40, 4096), _noncontig(8, 4096)),
                                           ["router_weight", "contiguous"]),
    "order_shape_before_num_tokens": (lambda: (_t(40, 2048), _t(8, 2048)), [SHAPE_NAME, "shape"]),
}


@pytest.mark.parametrize("case", list(REJECTIONS))
def test_validation_rejects(case, no_kernel):
    build, fragments = REJECTIONS[case]
    x, w = build()
    assert not can_use_router_gemm(x, w)
    with pytest.raises(TypeError if case.endswith("not_tensor") else ValueError) as info:
        router_gemm(x, w)
    message = str(info.value)
    assert message.startswith(fragments[0] + ": "), f"{message!r} does not start with " \
        f"{fragments[0]!r}"
    for fragment in fragments[1:]:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    if fragments[0] == SHAPE_NAME:
        # §11 row 8: the error lists the supported pairs.
        for K, N in SPEC_SHAPES:
            assert f"({K}, {N})" in message
    if case.startswith("order_"):
        # nothing later in the list leaks into the first error
        assert "num_tokens" not in message or "num_tokens" in fragments


@pytest.mark.skipif(HAS_CUDA, reason="CPU tensors are never accepted with a GPU present")
def test_cpu_tensors_accepted_only_when_interpreting(monkeypatch, no_kernel):
    x, w = make_inputs(4096, 8, 3, torch.float32, seed=seed_of("interp"))
    assert can_use_router_gemm(x, w)  # TRITON_INTERPRET=1 (conftest)
    for value in ("0", ""):
        monkeypatch.setenv("TRITON_INTERPRET", value)
        assert not can_use_router_gemm(x, w)
        with pytest.raises(ValueError, match="^hidden_states: must be on a GPU"):
            router_gemm(x, w)
        info = explain_router_logits(x, w)
        assert info["path"] == "linear" and "GPU" in info["reason"]
        check_logits(router_logits(x, w), x, w)  # falls back to F.linear
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not can_use_router_gemm(x, w)


def test_cpu_tensors_rejected_without_interpreter(monkeypatch, no_kernel):
    """Without TRITON_INTERPRET=1 (read when a call's key is first checked; no plan is cached
    here) CPU tensors are rejected (§11 row 5)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x, w = make_inputs(4096, 8, 3, torch.bfloat16, seed=seed_of("cpu"), device="cpu")
    assert not can_use_router_gemm(x, w)
    with pytest.raises(ValueError) as info:
        router_gemm(x, w)
    assert str(info.value).startswith("hidden_states: must be on a GPU device"), info.value


def test_unknown_hardware_rejected():
    x, w = make_inputs(4096, 8, 2, torch.float32, seed=seed_of("hw"))
    with pytest.raises(ValueError, match="^hardware: unknown target"):
        router_gemm(x, w, hardware="sm_100_unknown")
    with pytest.raises(ValueError, match="^hardware: unknown target"):
        explain_router_gemm(4096, 8, 2, "tpu")


# -------------------------------------------------------------------------------------------
# 4. Launch tables
# -------------------------------------------------------------------------------------------


X_DTYPES = ("bf16", "fp32")


def _row_points(row):
    hws, shapes, x_dtypes, tokens = row.conds
    hws = HARDWARE if hws is None else hws
    shapes = SPEC_SHAPES if shapes is None else shapes
    x_dtypes = X_DTYPES if x_dtypes is None else x_dtypes
    lo = 1 if tokens is None else tokens.lo
    hi = MAX_TOKENS if tokens is None or tokens.hi is None else min(tokens.hi, MAX_TOKENS)
    return [(hw, shape, dt, m) for hw in hws for shape in shapes for dt in x_dtypes
            for m in range(lo, hi + 1)]


def _row_id(row):
    hws, shapes, x_dtypes, tokens = row.conds
    hw = "any" if hws is None else "+".join(hws)
    sh = "any" if shapes is None else "+".join(shape_id(s) for s in shapes)
    dt = "any" if x_dtypes is None else "+".join(x_dtypes)
    tk = "any" if tokens is None else f"M{tokens.lo}-{tokens.hi}"
    return f"r{row.index:02d}-{hw}-{sh}-{dt}-{tk}"


def test_table_axes():
    assert TABLE.axes == ("hardware", "shape", "x_dtype", "num_tokens")


def test_table_covers_domain_exactly_once():
    """Each point of the domain has one row; a shape's tokens beyond its cap have one row too:
    the region outside the domain (variant None) that rejects them."""
    for hw in HARDWARE:
        for shape in SPEC_SHAPES + BF16_WEIGHT_SHAPES:
            for dt in X_DTYPES:
                for m in range(1, MAX_TOKENS + 1):
                    hits = [r.index for r in TABLE.rows
                            if all(c is None or v in c
                                   for c, v in zip(r.conds, (hw, shape, dt, m)))]
                    assert len(hits) == 1, (hw, shape, dt, m, hits)


def test_x_dtypes_take_their_own_rows():
    """The measured target keys its rows by the hidden states' dtype: a call takes its dtype's
    row (explained and launched alike), and an unknown dtype name is refused by name."""
    differ = [(K, N, m) for K, N in SPEC_SHAPES for m in range(1, MAX_TOKENS + 1)
              if explain_router_gemm(K, N, m, "sm_90", "bf16")["rule"]
              != explain_router_gemm(K, N, m, "sm_90", "fp32")["rule"]]
    assert differ
    assert explain_router_gemm(6144, 128, 4, "sm_90") == \
        explain_router_gemm(6144, 128, 4, "sm_90", "bf16")
    with pytest.raises(ValueError, match="^x_dtype"):
        explain_router_gemm(6144, 128, 4, "sm_90", "fp16")


@pytest.mark.parametrize("row", [r for r in TABLE.rows if r.variant is not None], ids=_row_id)
def test_explain_returns_row_params(row):
    points = _row_points(row)
    assert points
    for hw, (K, N), dt, m in points:
        info = explain_router_gemm(K, N, m, hw, dt)
        kind = ROUTER_GEMM_KERNELS[row.variant]
        want = ROUTER_GEMM_SPLITK_SHAPES if kind == "splitk" else ROUTER_GEMM_SHAPES
        assert info["variant"] == row.variant == want[(K, N)]
        assert info["kernel"] == kind
        assert info["rule"] == row.index and info["where"] == row.where
        assert info["hardware"] == hw
        for name, value in row.params.items():
            assert info[name] == value, (name, hw, K, N, m)
        for name in ("block_m", "block_k", "num_warps", "num_stages"):
            assert name in info
        assert ("block_e" in info) == (kind == "per_expert")
        bm, bk = row.params["block_m"], row.params["block_k"]
        assert bm & (bm - 1) == 0 and bk & (bk - 1) == 0 and 1 <= bm <= MAX_TOKENS
        if kind == "splitk":
            # one row tile of >= 16 rows, tl.dot tiles >= 16, equal K slices, no K masking
            bn, sk = row.params["block_n"], row.params["split_k"]
            assert m <= bm and bm >= 16 and bn >= 16 and bn & (bn - 1) == 0 and bk >= 16
            assert K % (bk * sk) == 0
            assert info["launch_grid"] == (-(-N // bn), sk)
            assert info["grid"] == -(-N // bn) * sk
        else:
            # tile constraints of §11: no K or expert masking, power-of-two tiles, BLOCK_M <= 32
            be = row.params["block_e"]
            assert K % bk == 0 and N % be == 0 and be & (be - 1) == 0
            assert info["grid"] == -(-m // bm) * (N // be)
            assert info["launch_grid"] == (info["grid"],)


@pytest.mark.parametrize("shape", SPEC_SHAPES, ids=shape_id)
def test_gfx950_table_equals_kernels_md(shape):
    K, N = shape
    for (lo, hi), (bm, bk, nw) in zip(BUCKETS, GFX950_TABLE[shape]):
        for m in range(lo, hi + 1):
            for alias in ("gfx950", "MI355X", "mi350x"):
                info = explain_router_gemm(K, N, m, alias)
                assert info["hardware"] == "gfx950"
                assert info["kernel"] == "per_expert" and "split_k" not in info
                got = (info["block_m"], info["block_e"], info["block_k"], info["num_warps"],
                       info["num_stages"])
                assert got == (bm, 1, bk, nw, 1), (shape, m, alias)


def test_hardware_aliases_resolve():
    for alias, hw in (("h200", "sm_90"), ("H100", "sm_90"), ("hopper", "sm_90"),
                      ("sm90", "sm_90"), ("generic", "generic")):
        for m in (1, 9, 32):
            a = explain_router_gemm(6144, 128, m, alias)
            b = explain_router_gemm(6144, 128, m, hw)
            assert a == b and a["hardware"] == hw


@pytest.mark.parametrize("M", [0, -1, 33, 128])
def test_explain_rejects_token_counts(M):
    with pytest.raises(ValueError, match="^num_tokens: must be in 1..32"):
        explain_router_gemm(4096, 8, M, "gfx950")


def test_explain_rejects_unsupported_shape():
    with pytest.raises(ValueError, match="^hidden_size/num_experts: unsupported shape"):
        explain_router_gemm(4096, 16, 4, "gfx950")


def test_table_matches_registry():
    """The generated table is the flattened spec policy (generated/ is in sync with specs/)."""
    registry = pytest.importorskip("codegen.registry")
    reg = registry.load()
    flat = reg.tables["router_gemm"]
    assert len(flat) == len(TABLE.rows)
    for rule, row in zip(flat, TABLE.rows):
        assert rule.index == row.index and rule.variant == row.variant
        assert dict(rule.params) == row.params
        assert rule.loc.citation == row.where
        for spec_cond, gen_cond in zip(rule.conds, row.conds):
            if spec_cond is None or gen_cond is None:
                assert spec_cond is None and gen_cond is None
            elif hasattr(spec_cond, "lo"):
                assert (spec_cond.lo, spec_cond.hi) == (gen_cond.lo, gen_cond.hi)
            else:
                assert tuple(spec_cond) == tuple(gen_cond)
    policy = reg.policies["router_gemm"]
    assert tuple(a.name for a in policy.axes) == TABLE.axes


# One kernel run per (non-generic hardware, shape, bucket) with the hardware forced. M is inside
# the bucket and not a multiple of the larger BLOCK_M values, so the row mask is exercised.
BUCKET_M = {(1, 4): 2, (5, 16): 6, (17, 32): 18}
FORCED_CASES = [(hw, shape, bucket, ("bf16", "fp32")[i % 2])
                for i, (hw, shape, bucket) in enumerate(
                    (hw, shape, bucket) for hw in ("gfx950", "sm_90")
                    for shape in SPEC_SHAPES for bucket in BUCKETS)]


def _interpreted_once(cases):
    """Per computation (kernel, x dtype, block parameters), the case the interpreter runs: the
    cheapest one (fewest program · K steps). Where even that costs more than
    MAX_INTERPRETED_STEPS, the case is returned in the second set: its computation runs on
    SMALL_WEIGHT instead (test_forced_launch_on_the_small_weight). The interpreter ignores
    num_warps / num_stages, so the other cases of a computation are only checked for their
    launch there (the weight shape and M change loop bounds and masks, which the reference
    cases cover at every shape)."""
    cheapest = {}
    for hw, shape, bucket, dtype_name in cases:
        M, (K, N) = BUCKET_M[bucket], shape
        row = TABLE.lookup(hw, shape, dtype_name, M)
        p = row.params
        kernel = ROUTER_GEMM_KERNELS[row.variant]
        computation = (kernel, dtype_name, tuple(sorted(
            (k, v) for k, v in p.items() if k not in ("num_warps", "num_stages"))))
        if kernel == "splitk":
            cost = -(-N // p["block_n"]) * K // p["block_k"]
        else:
            cost = -(-M // p["block_m"]) * N // p["block_e"] * K // p["block_k"]
        if computation not in cheapest or cost < cheapest[computation][0]:
            cheapest[computation] = (cost, (hw, shape, bucket, dtype_name))
    return ({case[:3] for cost, case in cheapest.values() if cost <= MAX_INTERPRETED_STEPS},
            [case for cost, case in cheapest.values() if cost > MAX_INTERPRETED_STEPS])


MAX_INTERPRETED_STEPS = 800  # programs · K steps (the interpreter runs ~300 a second)
SMALL_WEIGHT = (4096, 8)  # every block parameter of the tables divides its K


FORCED_RUN_ON_INTERPRETER, FORCED_ON_SMALL_WEIGHT = _interpreted_once(FORCED_CASES)


@pytest.mark.parametrize(
    "hw,shape,bucket,dtype_name", FORCED_CASES,
    ids=[f"{hw}-{shape_id(s)}-M{b[0]}-{b[1]}-{d}" for hw, s, b, d in FORCED_CASES])
def test_forced_hardware_launch(hw, shape, bucket, dtype_name, kernel_spy):
    K, N = shape
    M = BUCKET_M[bucket]
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], seed=seed_of("forced", hw, shape, M))
    kernel_spy.execute = HAS_CUDA or (hw, shape, bucket) in FORCED_RUN_ON_INTERPRETER
    out = router_gemm(x, w, hardware=hw)
    if kernel_spy.execute:
        ref = check_logits(out, x, w)
        check_topk(out, ref, topk_k(shape))
    row = TABLE.lookup(hw, shape, dtype_name, M)
    p = row.params
    assert len(kernel_spy.calls) == 1
    assert kernel_spy.kinds == [ROUTER_GEMM_KERNELS[row.variant]]
    grid, kwargs = kernel_spy.calls[0]
    if kernel_spy.kinds[0] == "splitk":
        assert grid == (-(-N // p["block_n"]), p["split_k"])
        assert kwargs["BLOCK_N"] == p["block_n"] and kwargs["SPLIT_K"] == p["split_k"]
    else:
        assert grid == (-(-M // p["block_m"]) * (N // p["block_e"]),)
        assert kwargs["BLOCK_E"] == p["block_e"]
    assert grid == explain_router_gemm(K, N, M, hw, dtype_name)["launch_grid"]
    assert kwargs["BLOCK_M"] == p["block_m"] and kwargs["BLOCK_K"] == p["block_k"]
    assert kwargs["num_warps"] == p["num_warps"] and kwargs["num_stages"] == p["num_stages"]
    assert kwargs["HIDDEN_SIZE"] == K and kwargs["NUM_EXPERTS"] == N
    if hw == "gfx950":
        bm, bk, nw = GFX950_TABLE[shape][BUCKETS.index(bucket)]
        assert (kwargs["BLOCK_M"], kwargs["BLOCK_E"], kwargs["BLOCK_K"], kwargs["num_warps"],
                kwargs["num_stages"]) == (bm, 1, bk, nw, 1)


@pytest.mark.skipif(HAS_CUDA, reason="the GPU runs every forced case at its own shape")
@pytest.mark.parametrize("hw,shape,bucket,dtype_name", FORCED_ON_SMALL_WEIGHT,
                         ids=[f"{hw}-{shape_id(s)}-M{b[0]}-{b[1]}-{d}"
                              for hw, s, b, d in FORCED_ON_SMALL_WEIGHT])
def test_forced_launch_on_the_small_weight(hw, shape, bucket, dtype_name):
    """A table row too costly to interpret at its own weight: its launch parameters on
    SMALL_WEIGHT, against the reference (every logit written, the same top-k)."""
    row = TABLE.lookup(hw, shape, dtype_name, BUCKET_M[bucket])
    (K, N), M = SMALL_WEIGHT, BUCKET_M[bucket]
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], seed=seed_of("small", hw, shape, M))
    out = torch.full((M, N), float("nan"), device=x.device)
    launch = launch_router_gemm_splitk if ROUTER_GEMM_KERNELS[row.variant] == "splitk" \
        else launch_router_gemm
    launch(x, w, out, **row.params)
    check_topk(out, check_logits(out, x, w), topk_k(SMALL_WEIGHT))


def test_every_forced_computation_is_interpreted():
    """No table computation is left to the GPU alone (the split above is not vacuous)."""
    assert FORCED_ON_SMALL_WEIGHT and FORCED_RUN_ON_INTERPRETER


def test_default_hardware_is_detected(kernel_spy):
    x, w = make_inputs(4096, 8, 6, torch.float32, seed=seed_of("detect"))
    router_gemm(x, w)
    hw = _rt.detect_hardware(x.device)
    if not HAS_CUDA:
        assert hw == "generic"
    info = explain_router_gemm(4096, 8, 6, hw, "fp32")
    (grid, kwargs), = kernel_spy.calls
    assert kernel_spy.kinds == [info["kernel"]]
    assert grid == info["launch_grid"] and kwargs["BLOCK_M"] == info["block_m"]


# -------------------------------------------------------------------------------------------
# 4b. Split-K kernel, forced through its explicit launcher (launch_router_gemm_splitk)
# -------------------------------------------------------------------------------------------


def splitk_params(M, *, block_n=16, block_k=128, split_k=1, tf32x3=False, num_warps=4,
                  num_stages=2):
    """Split-K launch parameters for M tokens: one row tile of 16 or 32 rows."""
    return dict(block_m=16 if M <= 16 else 32, block_n=block_n, block_k=block_k,
                split_k=split_k, tf32x3=tf32x3, num_warps=num_warps, num_stages=num_stages)


def run_splitk(x, w, params):
    out = torch.full((x.shape[0], w.shape[0]), float("nan"), device=x.device)
    launch_router_gemm_splitk(x, w, out, **params)
    return out


def splitk_counter(device):
    return _mod._COUNTERS[torch.device(device)]


# (shape, M, x dtype, split_k, block_n, block_k): two shapes (one expert tile with masked
# experts; 16 tiles) × M ∈ {1, 5, 17, 32} × both x dtypes; split_k cycles through 1, 2, 4 so
# that every split_k meets every shape and dtype, block_n / block_k alternate.
SPLITK_CASES = [
    (shape, M, dt, (1, 2, 4)[i % 3], (16, 32)[i // 3 % 2], (64, 128)[i // 6 % 2],
     bool(i // 2 % 2))
    for i, (shape, M, dt) in enumerate(itertools.product(((4096, 8), (3072, 256)), (1, 5, 17, 32),
                                                         ("bf16", "fp32")))]


@pytest.mark.parametrize(
    "shape,M,dtype_name,split_k,block_n,block_k,tf32x3", SPLITK_CASES,
    ids=[f"{shape_id(s)}-M{m}-{d}-sk{sk}-bn{bn}-bk{bk}{'-tf32x3' if t else ''}"
         for s, m, d, sk, bn, bk, t in SPLITK_CASES])
def test_splitk_matches_reference(shape, M, dtype_name, split_k, block_n, block_k, tf32x3):
    K, N = shape
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], seed=seed_of("splitk", shape, M, dtype_name))
    params = splitk_params(M, block_n=block_n, block_k=block_k, split_k=split_k, tf32x3=tf32x3)
    out = run_splitk(x, w, params)
    ref = check_logits(out, x, w)
    check_topk(out, ref, topk_k(shape))
    counter = splitk_counter(x.device)
    assert not counter.any(), "split-K counter left non-zero"
    again = run_splitk(x, w, params)
    assert torch.equal(out, again)  # deterministic: partials summed in K-slice order
    assert not counter.any() and splitk_counter(x.device) is counter


@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_splitk_tf32x3_bf16_weight(dtype_name):
    """tf32x3 with a 16-bit operand: a bf16 x against the bf16 weight takes one exact 16-bit
    product, an fp32 x splits only itself: both within the reference's bounds, deterministic."""
    (K, N), M = BF16_WEIGHT_SHAPES[0], 5
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], w_dtype=torch.bfloat16,
                       seed=seed_of("splitk-bf16w", dtype_name))
    params = splitk_params(M, block_n=64, block_k=512, split_k=2, tf32x3=True)
    out = run_splitk(x, w, params)
    ref = check_logits(out, x, w)
    check_topk(out, ref, topk_k((K, N)))
    assert torch.equal(out, run_splitk(x, w, params))
    assert not splitk_counter(x.device).any()


@pytest.mark.parametrize("dtype_name,w_16", [("fp32", False), ("bf16", False), ("fp32", True)])
def test_splitk_tf32x3_non_finite_hidden_states_give_linears_values(dtype_name, w_16):
    """A ±inf or NaN hidden state gives F.linear's ±inf / NaN logits in the tf32x3 kernel
    (its remainder and its head against the weight's remainder are left out: inf − inf and
    inf · 0 would be NaN), including against weight columns exact in TF32 (zero remainder);
    the other rows keep their bounds."""
    (K, N), M = (3072, 256), 6
    w_dtype = torch.bfloat16 if w_16 else torch.float32
    if w_16:
        (K, N) = BF16_WEIGHT_SHAPES[0]
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], w_dtype=w_dtype,
                       seed=seed_of("splitk-inf", dtype_name, w_16))
    w = w.clone()
    w[:, :4] = w[:, :4].to(torch.bfloat16).to(w_dtype)  # TF32-exact columns: zero remainder
    x = x.clone()
    x[0, 1], x[1, 2], x[2, 3], x[3, 1], x[3, 2] = (float("inf"), float("-inf"), float("nan"),
                                                  float("inf"), float("-inf"))
    x[4, 7] = float("nan")  # (a NaN that arithmetic makes: its head is NaN)
    params = splitk_params(M, block_n=64, block_k=512, split_k=2, tf32x3=True)
    out = run_splitk(x, w, params).cpu()
    want = torch.nn.functional.linear(x.double().cpu(), w.double().cpu())
    assert bool(torch.isnan(want[4]).all())
    for row in range(5):
        assert torch.equal(torch.isnan(out[row]), torch.isnan(want[row])), row
        inf = torch.isinf(want[row])
        assert torch.equal(out[row][inf], want[row][inf].float()), row
    check_logits(out[5:].to(x.device), x[5:], w)


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (the interpreter's NumPy)
@pytest.mark.parametrize("dtype_name", ["fp32", "bf16"])
def test_splitk_tf32x3_inf_against_an_operand_below_tf32s_range_reads_nan(dtype_name):
    """The documented exception: ±inf against a nonzero fp32 weight below 2^-136 in magnitude
    (its TF32 head is 0: inf · 0) reads NaN where linear gives ±inf; an fp32 hidden state that
    small against an inf weight likewise. The logits of other experts are linear's."""
    (K, N), M = (3072, 256), 3
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], seed=seed_of("splitk-tiny", dtype_name))
    x, w = x.clone(), w.clone()
    x[0, 1], w[5, 1] = float("inf"), 1e-42
    if dtype_name == "fp32":
        x[1, 2], w[6, 2] = -1e-42, float("inf")
    params = splitk_params(M, block_n=64, block_k=512, split_k=2, tf32x3=True)
    out = run_splitk(x, w, params).cpu()
    want = torch.nn.functional.linear(x.double().cpu(), w.double().cpu())
    odd = [(0, 5)] + ([(1, 6)] if dtype_name == "fp32" else [])
    for row, expert in odd:
        assert torch.isinf(want[row, expert]) and torch.isnan(out[row, expert])
        want[row, expert] = float("nan")
    for row in range(len(odd)):
        assert torch.equal(torch.isnan(out[row]), torch.isnan(want[row])), row
        inf = torch.isinf(want[row])
        assert torch.equal(out[row][inf], want[row][inf].float()), row
    check_logits(out[len(odd):].to(x.device), x[len(odd):], w)


def test_router_gemm_dispatches_splitk_rows(monkeypatch, kernel_spy):
    """A table row naming the split-K variant launches the split-K kernel with its params
    (independent of which buckets the current tables give to it)."""
    from generated.dispatch import Row, Table

    K, N, M = 3072, 256, 17
    params = dict(block_m=32, block_n=32, block_k=64, split_k=4, tf32x3=False, num_warps=4,
                  num_stages=2)
    row = Row(0, (None, None, None, None), ROUTER_GEMM_SPLITK_SHAPES[(K, N)], params, "test",
              "")
    monkeypatch.setattr(_mod, "_TABLE", Table("router_gemm", TABLE.axes, TABLE.domains, (row,)))
    x, w = make_inputs(K, N, M, torch.bfloat16, seed=seed_of("dispatch-splitk"))
    out = router_gemm(x, w, hardware="sm_90")
    check_logits(out, x, w)
    (grid, kwargs), = kernel_spy.calls
    assert kernel_spy.kinds == ["splitk"] and grid == (N // 32, 4)
    assert (kwargs["BLOCK_M"], kwargs["BLOCK_N"], kwargs["BLOCK_K"], kwargs["SPLIT_K"],
            kwargs["PRECISION"]) == (32, 32, 64, 4, "ieee")
    info = explain_router_gemm(K, N, M, "sm_90")
    assert info["kernel"] == "splitk" and info["launch_grid"] == grid and info["grid"] == 32
    assert {k: info[k] for k in params} == params


def test_splitk_variants_cover_every_shape():
    assert set(ROUTER_GEMM_SPLITK_SHAPES) == set(SPEC_SHAPES) | set(BF16_WEIGHT_SHAPES)
    for shape in SPEC_SHAPES + BF16_WEIGHT_SHAPES:
        assert ROUTER_GEMM_KERNELS[ROUTER_GEMM_SHAPES[shape]] == "per_expert"
        assert ROUTER_GEMM_KERNELS[ROUTER_GEMM_SPLITK_SHAPES[shape]] == "splitk"
    assert set(ROUTER_GEMM_KERNELS) == {r.variant for r in TABLE.rows if r.variant} | \
        set(ROUTER_GEMM_SHAPES.values()) | set(ROUTER_GEMM_SPLITK_SHAPES.values())


def test_generic_table_uses_the_per_expert_kernel():
    for K, N in SPEC_SHAPES:
        for m in range(1, MAX_TOKENS + 1):
            assert explain_router_gemm(K, N, m, "generic")["kernel"] == "per_expert"


def test_splitk_launcher_rejects_bad_tiles(no_kernel):
    x, w = make_inputs(4096, 8, 17, torch.float32, seed=seed_of("splitk-bad"))
    out = torch.empty(17, 8, device=DEVICE)
    with pytest.raises(ValueError, match="^block_m: "):  # one row tile: M ≤ block_m
        launch_router_gemm_splitk(x, w, out, **splitk_params(16, split_k=2))
    with pytest.raises(ValueError, match="^block_k/split_k: "):  # 1024·8 does not divide 4096
        launch_router_gemm_splitk(x, w, out, **splitk_params(17, block_k=1024, split_k=8))
    with pytest.raises(ValueError, match="^block_k/split_k: "):
        launch_router_gemm_splitk(x, w, out, **splitk_params(17, split_k=0))


# (shape, M, x dtype, block_m, block_e, block_k, num_warps): expert tiles of 2–8 experts (all
# of a shape's experts in one tile, too), partial last row tiles, both x dtypes; and one expert
# per program at 256-column steps (an sm_90 row's, too costly on the interpreter at its shape)
EXPERT_TILE_CASES = [
    ((4096, 8), 18, "bf16", 4, 1, 256, 2),
    ((4096, 8), 1, "bf16", 1, 8, 1024, 4),
    ((4096, 8), 5, "fp32", 4, 2, 512, 4),
    ((3072, 256), 3, "bf16", 2, 4, 1024, 8),
    ((3072, 256), 5, "fp32", 4, 4, 512, 4),
]


def run_per_expert(x, w, **params):
    out = torch.full((x.shape[0], w.shape[0]), float("nan"), device=x.device)
    launch_router_gemm(x, w, out, num_stages=1, **params)
    return out


@pytest.mark.parametrize("shape,M,dtype_name,block_m,block_e,block_k,num_warps",
                         EXPERT_TILE_CASES,
                         ids=[f"{shape_id(s)}-M{m}-{d}-bm{bm}-be{be}"
                              for s, m, d, bm, be, _, _ in EXPERT_TILE_CASES])
def test_expert_tiles_match_reference(shape, M, dtype_name, block_m, block_e, block_k,
                                      num_warps):
    """The per-expert kernel with block_e experts per program: every logit written (NaN
    poison), within the fp64 reference's bounds, the same top-k."""
    K, N = shape
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], seed=seed_of("tiles", shape, M, block_e))
    out = run_per_expert(x, w, block_m=block_m, block_e=block_e, block_k=block_k,
                         num_warps=num_warps)
    ref = check_logits(out, x, w)
    check_topk(out, ref, topk_k(shape))


def test_per_expert_launcher_rejects_bad_tiles(no_kernel):
    x, w = make_inputs(4096, 8, 3, torch.float32, seed=seed_of("per-expert-bad"))
    out = torch.empty(3, 8, device=DEVICE)
    with pytest.raises(ValueError, match="^block_e: 16 does not divide num_experts 8"):
        launch_router_gemm(x, w, out, block_m=1, block_e=16, block_k=1024, num_warps=4,
                           num_stages=1)
    with pytest.raises(ValueError, match="^block_k: 8192 does not divide hidden_size 4096"):
        launch_router_gemm(x, w, out, block_m=1, block_e=1, block_k=8192, num_warps=4,
                           num_stages=1)


def test_splitk_tf32x3_needs_nvidia(monkeypatch, no_kernel):
    """tf32x3 is refused on a device that is neither NVIDIA nor the interpreter."""
    x, w = make_inputs(4096, 8, 3, torch.float32, seed=seed_of("tf32x3-cpu"))
    out = torch.empty(3, 8, device=DEVICE)
    monkeypatch.setattr(_mod._rt, "nvidia_ptx", lambda device: False)
    monkeypatch.setattr(_mod._rt, "interpreting", lambda: False)
    with pytest.raises(ValueError, match="^tf32x3: tensor-core tf32x3 products need an NVIDIA"):
        launch_router_gemm_splitk(x, w, out, **splitk_params(3, tf32x3=True))


def test_splitk_counter_is_allocated_once_per_device(monkeypatch):
    monkeypatch.setattr(_mod, "_COUNTERS", {})
    x, w = make_inputs(4096, 8, 2, torch.float32, seed=seed_of("counter"))
    router_gemm(x, w, hardware="gfx950")  # a per-expert row: the counter is still allocated
    counter = splitk_counter(x.device)
    assert counter.dtype == torch.int32 and counter.is_contiguous()
    assert counter.numel() >= max(-(-N // 16) for _, N in SPEC_SHAPES)  # block_n ≥ 16
    assert not counter.any()
    run_splitk(x, w, splitk_params(2, split_k=4))
    router_gemm(x, w)
    assert splitk_counter(x.device) is counter and not counter.any()
    assert list(_mod._COUNTERS) == [x.device]


def test_splitk_counter_is_not_allocated_during_capture(monkeypatch):
    """Allocating the persistent counter inside a CUDA-graph capture is refused with a clear
    error (it would come from the graph's pool); capture is faked here."""
    monkeypatch.setattr(_mod, "_COUNTERS", {})
    monkeypatch.setattr(_mod, "_capturing", lambda device: True)
    x, w = make_inputs(4096, 8, 3, torch.float32, seed=seed_of("capture"))
    out = torch.empty(3, 8, device=DEVICE)
    with pytest.raises(RuntimeError, match="^router GEMM split-K counter .* before capturing"):
        launch_router_gemm_splitk(x, w, out, **splitk_params(3, split_k=2))
    assert router_gemm(x[:0], w).shape == (0, 8)  # nothing to launch: no error
    assert _mod._COUNTERS == {}


def test_splitk_launch_during_capture_reuses_the_counter(monkeypatch):
    """Once the counter exists (an eager warm-up), a split-K launch under CUDA-graph capture
    takes it as it is: no error, no new buffer, the same logits (capture is faked here)."""
    x, w = make_inputs(4096, 8, 3, torch.float32, seed=seed_of("capture-reuse"))
    params = splitk_params(3, split_k=2)
    want = run_splitk(x, w, params)  # eager: the counter exists from here on
    counter = splitk_counter(x.device)
    monkeypatch.setattr(_mod, "_capturing", lambda device: True)
    got = run_splitk(x, w, params)
    assert torch.equal(got, want)
    assert splitk_counter(x.device) is counter and not counter.any()


def test_splitk_counter_slots_bound_the_expert_tiles(kernel_spy):
    """Every expert tile has its own counter slot: 896 experts in tiles of 16 (the smallest
    block_n the launcher promises) take 56 slots and launch; tiles of 8 would need 112, more
    than the buffer holds, and are refused by name before anything runs."""
    (K, N), M = BF16_WEIGHT_SHAPES[0], 1
    x, w = make_inputs(K, N, M, torch.bfloat16, w_dtype=torch.bfloat16,
                       seed=seed_of("counter-slots"))
    out = torch.empty((M, N), device=DEVICE)
    kernel_spy.execute = False  # only the launch matters here (896 experts: slow to interpret)
    launch_router_gemm_splitk(x, w, out, **splitk_params(M, block_n=16, split_k=8))
    assert [grid for grid, _ in kernel_spy.calls] == [(N // 16, 8)]
    with pytest.raises(ValueError, match="^block_n: "):
        launch_router_gemm_splitk(x, w, out, **splitk_params(M, block_n=8, split_k=8))
    assert len(kernel_spy.calls) == 1


def test_splitk_launch_passes_its_precision(kernel_spy):
    """tf32x3 in the launch parameters (explicit, or a dispatch row's) is the kernel's
    PRECISION: "tf32x3" when set, exact fp32 FMAs ("ieee") otherwise."""
    if not (_rt.tf32_tensor_cores(DEVICE) or _rt.interpreting()):
        pytest.skip("tf32x3 launches need TF32 tensor cores (test_splitk_tf32x3_needs_nvidia)")
    kernel_spy.execute = False
    x, w = make_inputs(4096, 8, 3, torch.float32, seed=seed_of("precision"))
    for tf32x3 in (False, True):
        launch_router_gemm_splitk(x, w, torch.empty((3, 8), device=DEVICE),
                                  **splitk_params(3, split_k=2, tf32x3=tf32x3))
    assert [kwargs["PRECISION"] for _, kwargs in kernel_spy.calls] == ["ieee", "tf32x3"]
    seen = set()
    for (K, N), M, dtype_name in itertools.product(SPEC_SHAPES, BUCKET_M.values(), DTYPES):
        info = explain_router_gemm(K, N, M, "sm_90", dtype_name)
        if info["kernel"] != "splitk":
            continue
        kernel_spy.calls.clear()
        x, w = make_inputs(K, N, M, DTYPES[dtype_name], seed=seed_of("precision", K, N, M))
        router_gemm(x, w, hardware="sm_90")
        (_, kwargs), = kernel_spy.calls
        assert kwargs["PRECISION"] == ("tf32x3" if info["tf32x3"] else "ieee"), (K, N, M)
        seen.add(info["tf32x3"])
    assert True in seen  # the measured table has tf32x3 rows: the check above is not vacuous


def _program_order(monkeypatch, order):
    """Make the interpreter run a launch's programs in ``order(nx, ny, nz)`` (every program id
    (x, y, z) once) instead of its nested x, y, z loops, as a GPU may schedule them."""
    from triton.runtime import interpreter as itp

    builder = itp.interpreter_builder
    real = type(builder).set_grid_idx

    def set_grid_idx(x, y, z):
        nx, ny, nz = builder.grid_dim
        ids = order(nx, ny, nz)
        assert sorted(ids) == list(itertools.product(range(nx), range(ny), range(nz)))
        real(builder, *ids[(x * ny + y) * nz + z])

    monkeypatch.setattr(builder, "set_grid_idx", set_grid_idx)


def _shuffled(nx, ny, nz):
    ids = list(itertools.product(range(nx), range(ny), range(nz)))
    perm = torch.randperm(len(ids), generator=torch.Generator().manual_seed(7)).tolist()
    return [ids[i] for i in perm]


PROGRAM_ORDERS = {
    # the last K slice arrives first, the first one last
    "reversed": lambda nx, ny, nz: list(itertools.product(range(nx), range(ny), range(nz)))[::-1],
    # the expert tiles' programs interleave: tile fastest, then K slice
    "tiles_interleaved": lambda nx, ny, nz: [(x, y, z) for z in range(nz) for y in range(ny)
                                             for x in range(nx)],
    "shuffled": _shuffled,
}


@pytest.mark.skipif(HAS_CUDA, reason="the GPU schedules programs itself (GPU tests: repeats)")
@pytest.mark.parametrize("dtype_name,tf32x3", [("fp32", False), ("bf16", True)])
def test_splitk_sum_does_not_depend_on_program_order(dtype_name, tf32x3, monkeypatch):
    """§11: the last program of an expert tile to arrive sums the K-slice partials in a fixed
    order, so the logits are the same bits whichever program arrives last and however the
    tiles' programs interleave; every logit is written and the counter ends at zero."""
    K, N, M = 1024, 40, 5  # 3 expert tiles of 16 (the last one masked), rows 5..15 masked
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], seed=seed_of("order", dtype_name))
    params = splitk_params(M, block_n=16, block_k=64, split_k=4, tf32x3=tf32x3)
    want = run_splitk(x, w, params)  # the interpreter's own order: tile by tile, ks ascending
    check_logits(want, x, w)
    counter = splitk_counter(x.device)
    for name, order in PROGRAM_ORDERS.items():
        _program_order(monkeypatch, order)
        got = run_splitk(x, w, params)
        assert torch.equal(got, want), name
        assert not counter.any(), name


def _guarded(values, fill, pad):
    """A contiguous copy of ``values`` inside a flat buffer with ``pad`` elements of ``fill``
    before and after it: (buffer, view)."""
    n = values.numel()
    buf = torch.full((n + 2 * pad,), fill, dtype=values.dtype, device=values.device)
    view = buf[pad:pad + n].view(values.shape)
    view.copy_(values)
    return buf, view


@pytest.mark.parametrize("kernel,split_k", [("per_expert", None), ("splitk", 1), ("splitk", 2)])
def test_kernels_touch_only_their_tensors(kernel, split_k):
    """§13: a kernel never writes outside `logits` (NaN guards on both sides survive, every
    logit is written) and never uses a value outside x or w (NaN guards around both: a read
    of one would reach the logits)."""
    K, N, M = 1024, 40, 5  # partial row tiles; for split-K also a partial expert tile
    x0, w0 = make_inputs(K, N, M, torch.float32, seed=seed_of("guards", kernel, split_k))
    pad = 32 * N
    x_buf, x = _guarded(x0, float("nan"), pad)
    w_buf, w = _guarded(w0, float("nan"), pad)
    out_buf, out = _guarded(torch.full((M, N), float("nan"), device=DEVICE), float("nan"), pad)
    out_buf[:pad] = -7.0  # distinct guard values: a write of anything changes them
    out_buf[-pad:] = 7.0
    if kernel == "per_expert":
        launch_router_gemm(x, w, out, block_m=4, block_e=8, block_k=256, num_warps=4,
                           num_stages=1)
    else:
        # split_k 1 stores straight to the logits, 2 through the partials
        launch_router_gemm_splitk(x, w, out, **splitk_params(M, block_n=16, block_k=128,
                                                             split_k=split_k))
    check_logits(out, x0, w0)
    assert torch.equal(out_buf[:pad], torch.full_like(out_buf[:pad], -7.0))
    assert torch.equal(out_buf[-pad:], torch.full_like(out_buf[-pad:], 7.0))
    assert x_buf[:pad].isnan().all() and x_buf[-pad:].isnan().all()
    assert w_buf[:pad].isnan().all() and w_buf[-pad:].isnan().all()
    assert torch.equal(x, x0) and torch.equal(w, w0)


@pytest.mark.skipif(HAS_CUDA, reason="GPU: test_gpu_splitk_tf32x3_accuracy")
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_splitk_tf32x3_split_is_lossless_on_the_interpreter(dtype_name):
    """The interpreter computes a tf32 dot in fp32, so tf32x3 (head·head + head·rest +
    rest·head, a 16-bit operand unsplit) drops only rest·rest, under 2⁻²⁰ of a product: its
    error against fp64 stays within a few times the exact fp32 FMA launch's."""
    K, N, M = 1024, 32, 5
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], seed=seed_of("tf32x3-split", dtype_name))
    ref = reference(x, w)
    errors = {}
    for tf32x3 in (False, True):
        out = run_splitk(x, w, splitk_params(M, block_n=16, block_k=64, split_k=4,
                                             tf32x3=tf32x3))
        check_logits(out, x, w)
        errors[tf32x3] = (out.double() - ref).abs().max().item()
    assert errors[True] <= 4 * errors[False] + 1e-6, errors


# -------------------------------------------------------------------------------------------
# 5. router_logits (custom op kspec::router_logits), §12.18
# -------------------------------------------------------------------------------------------

# (shape, M, x dtype, also compare bitwise with a second, direct router_gemm call). Under the
# interpreter the cost grows with cdiv(M, BLOCK_M)·N programs, so the wide shape runs once.
KERNEL_PATH_CASES = [((4096, 8), 4, "bf16", True), ((4096, 8), 4, "fp32", True),
                     ((4096, 8), 32, "fp32", True), ((4096, 8), 32, "bf16", True),
                     ((3072, 256), 4, "bf16", False)]


@pytest.mark.parametrize("shape,M,dtype_name,direct", KERNEL_PATH_CASES,
                         ids=[f"{shape_id(s)}-M{m}-{d}" for s, m, d, _ in KERNEL_PATH_CASES])
def test_router_logits_kernel_path(shape, M, dtype_name, direct, no_linear, kernel_spy):
    K, N = shape
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], seed=seed_of("op", shape, M, dtype_name))
    info = explain_router_logits(x, w)
    assert info["path"] == "kernel"
    assert info["variant"] in (ROUTER_GEMM_SHAPES[shape], ROUTER_GEMM_SPLITK_SHAPES[shape])
    assert info == {"path": "kernel", "reason": info["reason"],
                    **explain_router_gemm(K, N, M, _rt.detect_hardware(x.device),
                                          dtype_name)}
    out = torch.ops.kspec.router_logits(x, w)
    check_logits(out, x, w)
    assert len(kernel_spy.calls) == 1
    assert kernel_spy.calls[0][0] == info["launch_grid"]
    assert kernel_spy.kinds == [info["kernel"]]
    if direct:
        # dispatch op == direct impl (same kernel, same launch): bitwise
        assert torch.equal(out, router_gemm(x, w))


def test_router_logits_zero_tokens(no_linear, kernel_spy):
    x = torch.empty(0, 6144, dtype=torch.bfloat16, device=DEVICE)
    w = randn(128, 6144, seed=seed_of("logits-zero"))
    info = explain_router_logits(x, w)
    assert info["path"] == "kernel" and "block_m" not in info
    out = torch.ops.kspec.router_logits(x, w)
    assert out.shape == (0, 128) and out.dtype == torch.float32 and out.device == x.device
    assert kernel_spy.calls == []


# id -> (K, N, M, x dtype, w dtype, fragment of the linear-path reason)
LINEAR_CASES = {
    "M33-fp32": (4096, 8, 33, torch.float32, torch.float32, "num_tokens"),
    "M33-bf16-k3072_n256": (3072, 256, 33, torch.bfloat16, torch.float32, "num_tokens"),
    "M64-bf16": (4096, 192, 64, torch.bfloat16, torch.float32, "num_tokens"),
    "unsupported-shape-k4096_n16": (4096, 16, 4, torch.float32, torch.float32, "shape"),
    "unsupported-shape-k2048_n8-bf16": (2048, 8, 4, torch.bfloat16, torch.float32, "shape"),
    "bf16-weight": (4096, 8, 4, torch.float32, torch.bfloat16, "float32"),
    "bf16-weight-bf16-x": (6144, 128, 3, torch.bfloat16, torch.bfloat16, "float32"),
    "fp16-x": (4096, 8, 4, torch.float16, torch.float32, "bfloat16 or float32"),
}


@pytest.mark.parametrize("case", list(LINEAR_CASES))
def test_router_logits_linear_path(case, no_kernel, exact_fp32_matmul):
    K, N, M, x_dtype, w_dtype, fragment = LINEAR_CASES[case]
    x, w = make_inputs(K, N, M, x_dtype, w_dtype=w_dtype, seed=seed_of("linear", case))
    info = explain_router_logits(x, w)
    assert info["path"] == "linear"
    assert fragment in info["reason"]
    out = torch.ops.kspec.router_logits(x, w)
    check_logits(out, x, w)
    if not can_use_router_gemm(x, w) and M > MAX_TOKENS:
        with pytest.raises(ValueError, match="^hidden_states: num_tokens"):
            router_gemm(x, w)


NONCONTIG_CASES = {
    # id -> (K, N, M, x dtype, builder from a contiguous [M, K] tensor to a view with equal values)
    "transposed-k4096_n8-fp32": (4096, 8, 5, torch.float32, lambda x: x.t().contiguous().t()),
    "strided-rows-k4096_n8-bf16": (4096, 8, 7, torch.bfloat16,
                                   lambda x: torch.repeat_interleave(x, 2, dim=0)[::2]),
    "column-slice-k4096_n8-fp32": (4096, 8, 9, torch.float32,
                                   lambda x: torch.nn.functional.pad(x, (32, 32))[:, 32:-32]),
    "transposed-k3072_n256-bf16": (3072, 256, 2, torch.bfloat16,
                                   lambda x: x.t().contiguous().t()),
}


@pytest.mark.parametrize("case", list(NONCONTIG_CASES))
def test_router_logits_noncontiguous_takes_kernel(case, no_linear, kernel_spy):
    K, N, M, x_dtype, view = NONCONTIG_CASES[case]
    x0, w = make_inputs(K, N, M, x_dtype, seed=seed_of("noncontig", case))
    x = view(x0)
    assert not x.is_contiguous() and torch.equal(x, x0)
    assert not can_use_router_gemm(x, w)  # the direct entry insists on contiguous
    assert explain_router_logits(x, w)["path"] == "kernel"
    out = torch.ops.kspec.router_logits(x, w)
    check_logits(out, x0, w)
    assert len(kernel_spy.calls) == 1


def test_router_logits_logs_path(monkeypatch, caplog, no_kernel, exact_fp32_matmul):
    monkeypatch.setenv("KSPEC_LOG_DISPATCH", "1")
    monkeypatch.setattr(_rt, "_seen_keys", set())
    caplog.set_level(logging.INFO, logger="generated")
    x, w = make_inputs(4096, 8, 33, torch.float32, seed=seed_of("log"))
    torch.ops.kspec.router_logits(x, w)
    linear = [r.getMessage() for r in caplog.records if "router_logits" in r.getMessage()]
    assert linear and "linear" in linear[-1] and "num_tokens" in linear[-1]
    monkeypatch.undo()  # restore the kernel, keep logging on
    monkeypatch.setenv("KSPEC_LOG_DISPATCH", "1")
    monkeypatch.setattr(_rt, "_seen_keys", set())
    caplog.clear()
    x, w = make_inputs(4096, 8, 2, torch.bfloat16, seed=seed_of("log2"))
    torch.ops.kspec.router_logits(x, w)
    messages = [r.getMessage() for r in caplog.records]
    assert any("router_logits" in m and "kernel" in m for m in messages), messages
    assert any("router_gemm" in m and ROUTER_GEMM_SHAPES[(4096, 8)] in m for m in messages)
    # each new key is logged once
    caplog.clear()
    torch.ops.kspec.router_logits(x, w)
    assert not [r for r in caplog.records if "router_logits" in r.getMessage()]


def test_no_log_without_flag(monkeypatch, caplog):
    monkeypatch.delenv("KSPEC_LOG_DISPATCH", raising=False)
    monkeypatch.setattr(_rt, "_seen_keys", set())
    caplog.set_level(logging.INFO, logger="generated")
    x, w = make_inputs(4096, 8, 1, torch.float32, seed=seed_of("nolog"))
    torch.ops.kspec.router_logits(x, w)
    assert not [r for r in caplog.records if r.name.startswith("generated")]


# -------------------------------------------------------------------------------------------
# 6. Fake impl, opcheck, torch.compile
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("M", [0, 1, 7, 32, 33, 100], ids=lambda m: f"M{m}")
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_fake_impl_shape(M, dtype_name):
    from torch._subclasses.fake_tensor import FakeTensorMode

    for K, N in SPEC_SHAPES + ((4096, 16),):
        with FakeTensorMode():
            x = torch.empty(M, K, dtype=DTYPES[dtype_name], device=DEVICE)
            w = torch.empty(N, K, device=DEVICE)
            out = torch.ops.kspec.router_logits(x, w)
        assert tuple(out.shape) == (M, N) and out.dtype == torch.float32
        assert out.device.type == DEVICE.type


OPCHECK_CASES = [((4096, 8), 3, "fp32"), ((4096, 8), 6, "bf16"), ((4096, 8), 40, "fp32"),
                 ((4096, 16), 4, "bf16")]


@pytest.mark.parametrize("shape,M,dtype_name", OPCHECK_CASES,
                         ids=[f"{shape_id(s)}-M{m}-{d}" for s, m, d in OPCHECK_CASES])
def test_opcheck(shape, M, dtype_name, exact_fp32_matmul):
    K, N = shape
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], seed=seed_of("opcheck", shape, M))
    torch.library.opcheck(torch.ops.kspec.router_logits.default, (x, w))


def test_fake_impl_matches_linear_fallback_for_3d_input(exact_fp32_matmul):
    x, w = make_inputs(4096, 8, 6, torch.float32, seed=seed_of("3d"))
    torch.library.opcheck(torch.ops.kspec.router_logits.default, (x.view(2, 3, 4096), w))


def test_compile_dynamic_aot_eager(exact_fp32_matmul):
    """Dynamic-M tracing through the fake impl (aot_eager: no C++/GPU compiler needed)."""
    torch._dynamo.reset()

    def fn(x, w):
        return torch.ops.kspec.router_logits(x, w)

    compiled = torch.compile(fn, backend="aot_eager", dynamic=True, fullgraph=True)
    for M in (4, 16, 33, 5, 32):
        x, w = make_inputs(4096, 8, M, torch.float32, seed=seed_of("aot", M))
        check_logits(compiled(x, w), x, w)
    torch._dynamo.reset()


# -------------------------------------------------------------------------------------------
# GPU (skipped without CUDA)
# -------------------------------------------------------------------------------------------


@gpu
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("shape", SPEC_SHAPES, ids=shape_id)
def test_gpu_all_token_counts(shape, dtype_name):
    K, N = shape
    for M in range(0, MAX_TOKENS + 1):
        x, w = make_inputs(K, N, M, DTYPES[dtype_name], device="cuda",
                           seed=seed_of("gpu", shape, M, dtype_name))
        out = router_gemm(x, w)
        ref = check_logits(out, x, w)
        assert out.shape == (M, N)
        if M:
            check_topk(out, ref, topk_k(shape))
    torch.cuda.synchronize()


@gpu
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("shape", SPEC_SHAPES + BF16_WEIGHT_SHAPES, ids=shape_id)
def test_gpu_expert_tiles_all_token_counts(shape, dtype_name):
    """Every M the shape serves through expert tiles of 2, 4 and 8 (forced), at one and at four
    rows per program: within the fp64 reference's bounds, the same top-k."""
    K, N = shape
    w_dtype = torch.bfloat16 if shape in BF16_WEIGHT_SHAPES else torch.float32
    cap = generated.ROUTER_GEMM_LIMITS[shape][1]
    x_all, w = make_inputs(K, N, cap, DTYPES[dtype_name], device="cuda", w_dtype=w_dtype,
                           seed=seed_of("gpu-tiles", shape, dtype_name))
    for block_m, block_e, num_warps in ((1, 8, 4), (4, 2, 4), (4, 4, 2)):
        block_k = 4 * 32 * num_warps  # four weight elements per thread per step
        for M in range(1, cap + 1):
            x = x_all[:M]
            out = run_per_expert(x, w, block_m=block_m, block_e=block_e, block_k=block_k,
                                 num_warps=num_warps)
            ref = check_logits(out, x, w)
            check_topk(out, ref, topk_k(shape))
    torch.cuda.synchronize()


GRAPH_CASES = [((6144, 128), 7, "bf16"), ((3072, 256), 32, "fp32"), ((4096, 8), 1, "bf16"),
               ((4096, 192), 17, "fp32"), ((6144, 256), 4, "bf16")]


@gpu
@pytest.mark.parametrize("shape,M,dtype_name", GRAPH_CASES,
                         ids=[f"{shape_id(s)}-M{m}-{d}" for s, m, d in GRAPH_CASES])
def test_gpu_cuda_graph_router_gemm(shape, M, dtype_name):
    K, N = shape
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], device="cuda", seed=seed_of("g", shape, M))
    graph, out = capture(lambda: router_gemm(x, w), warmups=3)
    ptrs = (x.data_ptr(), w.data_ptr(), out.data_ptr())
    for trial in range(3):
        x_new, w_new = make_inputs(K, N, M, DTYPES[dtype_name], device="cuda",
                                   seed=seed_of("g", shape, M, trial))
        x.copy_(x_new)
        if trial == 2:
            w.copy_(w_new)
        out.fill_(float("nan"))  # check_logits refuses NaN: a replay that skips a write fails
        graph.replay()
        torch.cuda.synchronize()
        check_logits(out, x, w)
        assert (x.data_ptr(), w.data_ptr(), out.data_ptr()) == ptrs
    assert not splitk_counter(x.device).any()  # split-K rows leave the counter at zero


# (shape, M, dtype, transposed x view)
GRAPH_OP_CASES = [((6144, 128), 8, "bf16", False), ((4096, 8), 33, "fp32", False),
                  ((3072, 256), 5, "fp32", True), ((4096, 192), 32, "bf16", False)]


@gpu
@pytest.mark.parametrize("shape,M,dtype_name,transposed", GRAPH_OP_CASES,
                         ids=[f"{shape_id(s)}-M{m}-{d}{'-transposed' if t else ''}"
                              for s, m, d, t in GRAPH_OP_CASES])
def test_gpu_cuda_graph_router_logits(shape, M, dtype_name, transposed, exact_fp32_matmul):
    K, N = shape
    dtype = DTYPES[dtype_name]
    x0, w = make_inputs(K, N, M, dtype, device="cuda", seed=seed_of("go", shape, M))
    if transposed:
        x = torch.empty(K, M, dtype=dtype, device="cuda").t()
        x.copy_(x0)
        assert not x.is_contiguous()
    else:
        x = x0
    graph, out = capture(lambda: torch.ops.kspec.router_logits(x, w), warmups=3)
    for trial in range(3):
        x_new, _ = make_inputs(K, N, M, dtype, device="cuda", seed=seed_of("go", shape, M, trial))
        x.copy_(x_new)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_logits(out, x, w)


@gpu
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("shape", [(6144, 128), (4096, 8)], ids=shape_id)
def test_gpu_compile_dynamic(shape, dtype_name, exact_fp32_matmul):
    K, N = shape
    torch._dynamo.reset()

    def fn(x, w):
        return torch.ops.kspec.router_logits(x, w)

    compiled = torch.compile(fn, dynamic=True)
    for M in (4, 16, 33, 5, 32):
        x, w = make_inputs(K, N, M, DTYPES[dtype_name], device="cuda",
                           seed=seed_of("compile", shape, M, dtype_name))
        out = compiled(x, w)
        ref = check_logits(out, x, w)
        check_topk(out, ref, topk_k(shape))
    torch._dynamo.reset()


@gpu
@pytest.mark.parametrize("M", [1, 9, 32], ids=lambda m: f"M{m}")
def test_gpu_noncontiguous_takes_kernel(M, no_linear, kernel_spy):
    K, N = 6144, 128
    x0, w = make_inputs(K, N, M, torch.bfloat16, device="cuda", seed=seed_of("gnc", M))
    # Every other column of a [M, 2K] buffer: non-contiguous for every M (M = 1 included).
    wide = torch.zeros((M, 2 * K), dtype=x0.dtype, device=x0.device)
    wide[:, ::2] = x0
    x = wide[:, ::2]
    assert not x.is_contiguous()
    info = explain_router_logits(x, w)
    assert info["path"] == "kernel" and info["hardware"] == _rt.detect_hardware(x.device)
    out = torch.ops.kspec.router_logits(x, w)
    torch.cuda.synchronize()
    check_logits(out, x0, w)
    assert len(kernel_spy.calls) == 1


# Split-K configurations forced on every shape (block_k·split_k divides every K; block_m follows
# M): direct stores (fp32 FMA dot), many small K slices (tf32x3), wider expert tiles with more
# warps and stages (tf32x3), FMA dot with a reduction.
SPLITK_GPU_CONFIGS = (
    dict(block_n=16, block_k=128, split_k=1, tf32x3=False, num_warps=4, num_stages=2),
    dict(block_n=16, block_k=64, split_k=16, tf32x3=True, num_warps=4, num_stages=2),
    dict(block_n=32, block_k=128, split_k=8, tf32x3=True, num_warps=8, num_stages=3),
    dict(block_n=32, block_k=64, split_k=4, tf32x3=False, num_warps=4, num_stages=2),
)


@gpu
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("shape", SPEC_SHAPES, ids=shape_id)
def test_gpu_splitk_all_token_counts(shape, dtype_name):
    """Every M ∈ 1..32 through the split-K kernel (forced), on several configurations:
    within 5e-4 of the fp64 reference, top-k agreement, bitwise-equal repeat, counter zero."""
    K, N = shape
    x_all, w = make_inputs(K, N, MAX_TOKENS, DTYPES[dtype_name], device="cuda",
                           seed=seed_of("gpu-splitk", shape, dtype_name))
    for cfg in SPLITK_GPU_CONFIGS:
        for M in range(1, MAX_TOKENS + 1):
            x = x_all[:M]  # the first M rows (contiguous)
            params = splitk_params(M, **cfg)
            out = run_splitk(x, w, params)
            ref = check_logits(out, x, w)
            check_topk(out, ref, topk_k(shape))
            again = run_splitk(x, w, params)
            assert torch.equal(out, again), (M, cfg)  # arrival order never changes the sum
    torch.cuda.synchronize()
    assert not splitk_counter(x.device).any()


@gpu
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("shape", SPEC_SHAPES + BF16_WEIGHT_SHAPES, ids=shape_id)
def test_gpu_splitk_tf32x3_accuracy(shape, dtype_name):
    """tf32x3 keeps fp32's accuracy: where an operand is fp32 the largest error against fp64
    is under a quarter of one TF32 pass's (the operands truncated to TF32, summed exactly);
    with two 16-bit operands (exact products) at most 4× torch's fp32 matmul's + 1e-6."""
    K, N = shape
    M = MAX_TOKENS
    w_dtype = torch.bfloat16 if shape in BF16_WEIGHT_SHAPES else torch.float32
    x, w = make_inputs(K, N, M, DTYPES[dtype_name], device="cuda", w_dtype=w_dtype,
                       seed=seed_of("gpu-tf32x3", shape, dtype_name))
    ref = reference(x, w)
    out = run_splitk(x, w, splitk_params(M, block_n=32, block_k=64, split_k=8, tf32x3=True))
    err = (out.double() - ref).abs().max().item()
    if (x.dtype, w.dtype) == (torch.bfloat16, torch.bfloat16):
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            fp32 = torch.matmul(x.float(), w.float().t())
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        assert err <= 4 * (fp32.double() - ref).abs().max().item() + 1e-6
    else:
        def truncated(t):  # what one TF32 pass reads of an fp32 operand: 10 mantissa bits
            return (t.float().view(torch.int32) & -8192).view(torch.float32).double()
        one_pass = (truncated(x) @ truncated(w).t() - ref).abs().max().item()
        assert err < one_pass / 4, (err, one_pass)


# (shape, M, x dtype, split-K params)
SPLITK_GRAPH_CASES = [
    ((6144, 128), 32, "fp32", dict(block_m=32, block_n=16, block_k=128, split_k=16,
                                   tf32x3=True, num_warps=4, num_stages=2)),
    ((3072, 256), 9, "bf16", dict(block_m=16, block_n=32, block_k=64, split_k=8,
                                  tf32x3=False, num_warps=4, num_stages=2)),
    ((4096, 8), 1, "bf16", dict(block_m=16, block_n=16, block_k=128, split_k=32,
                                tf32x3=True, num_warps=4, num_stages=2)),
    ((6144, 256), 17, "fp32", dict(block_m=32, block_n=16, block_k=128, split_k=16,
                                   tf32x3=False, num_warps=4, num_stages=3)),
]


@gpu
@pytest.mark.parametrize("shape,M,dtype_name,params", SPLITK_GRAPH_CASES,
                         ids=[f"{shape_id(s)}-M{m}-{d}-sk{p['split_k']}"
                              for s, m, d, p in SPLITK_GRAPH_CASES])
def test_gpu_splitk_cuda_graph(shape, M, dtype_name, params):
    """Capture one split-K launch, replay it many times with mutated input: correct results,
    bitwise-stable per input, counter zero after the replays."""
    K, N = shape
    dtype = DTYPES[dtype_name]
    x, w = make_inputs(K, N, M, dtype, device="cuda", seed=seed_of("gsg", shape, M))
    out = torch.empty((M, N), device="cuda")
    graph, _ = capture(lambda: launch_router_gemm_splitk(x, w, out, **params), warmups=3)
    counter = splitk_counter(x.device)
    inputs = [make_inputs(K, N, M, dtype, device="cuda", seed=seed_of("gsg", shape, M, i))[0]
              for i in range(4)]
    first = {}
    for trial in range(64):
        i = trial % len(inputs)
        x.copy_(inputs[i])
        out.fill_(float("nan"))
        graph.replay()
        if trial < len(inputs) or trial % 16 == 0:
            torch.cuda.synchronize()
            check_logits(out, x, w)
        if i in first:
            assert torch.equal(out, first[i]), trial
        else:
            first[i] = out.clone()
    torch.cuda.synchronize()
    assert not counter.any()
    # eager launches after the replays still see a zero counter
    check_logits(run_splitk(x, w, params), x, w)
    torch.cuda.synchronize()
    assert not counter.any()


def test_router_logits_recording_autograd_takes_linear_and_keeps_its_gradients():
    """The kernel has no backward: a call that records autograd (grad mode on, the weight or
    the hidden states requiring grad) takes F.linear, whose gradients it keeps; under no_grad
    or inference mode the same tensors take the kernel."""
    K, N, M = 4096, 8, 3
    x, w = make_inputs(K, N, M, torch.float32, seed=seed_of("autograd"))
    want = torch.nn.functional.linear(x, w)
    for x_grad in (False, True):
        xi = x.clone().requires_grad_(x_grad)
        wi = torch.nn.Parameter(w.clone(), requires_grad=not x_grad)
        assert explain_router_logits(xi, wi)["path"] == "linear"
        out = router_logits(xi, wi)
        assert out.requires_grad and torch.equal(out, want)
        grad = randn(*out.shape, seed=seed_of("grad", x_grad))
        out.backward(grad)
        leaf = xi if x_grad else wi
        torch.testing.assert_close(leaf.grad, grad @ w if x_grad else grad.t() @ x)
        for mode in (torch.no_grad, torch.inference_mode):
            with mode():
                assert explain_router_logits(xi, wi)["path"] == "kernel"
                check_logits(router_logits(xi, wi), x, w)
