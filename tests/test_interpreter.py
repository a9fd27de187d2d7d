"""The generated package runs on Triton's CPU interpreter by itself (issue 11, item 3).

A fresh process with only ``TRITON_INTERPRET=1`` set and ``import generated`` (no test
fixtures) must run every index kernel and give exact bf16 ``tl.dot`` products: the package's
own interpreter fixes (generated/_interpreter.py) are what the tests use too.
"""
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")

SCRIPT = r"""
import sys
import pytest
import torch
import generated
from generated import _interpreter
sys.path.insert(0, TESTS)  # the independent references only
from reference_index import ref_decode_scores
from reference_topk import reference_topk

assert _interpreter.install() is True
g = torch.Generator().manual_seed(0)
lens, Q, D = [300, 1000], 2, 16
max_seq_len = 1005
mb = -(-max_seq_len // 128)
cache = torch.randn((2 * mb + 1, 128, D), generator=g).bfloat16()
bt = torch.randperm(2 * mb + 1, generator=g)[: 2 * mb].reshape(2, mb).int()
q = torch.randn((2 * Q, 1, D), generator=g).bfloat16()
seq_lens = torch.tensor(lens, dtype=torch.int32)
s = generated.index_decode_scores(q, cache, bt, seq_lens, max_seq_len, 0, 1, Q, Q,
                                  variant="split")
ref = ref_decode_scores(q, cache, bt, seq_lens, 0, 1, Q, max_seq_len)
mask = ~torch.isnan(ref)
assert torch.equal(s[mask], ref[mask])
ids = generated.index_decode(q, cache, bt, seq_lens, max_seq_len, 16, 0, 1, 1, Q, Q)
assert torch.equal(ids, reference_topk(ref, seq_lens, Q, 16))
x = torch.randn((3, 4096), generator=g).bfloat16()
w = torch.randn((8, 4096), generator=g)
got = generated.router_gemm(x, w).double()
want = x.double() @ w.double().T
assert (got - want).abs().max().item() < 5e-4
print("ok")
"""


def test_generated_package_runs_on_the_interpreter_alone():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["TRITON_INTERPRET"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, "-c", f"TESTS = {TESTS!r}\n" + SCRIPT], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


def test_fixes_are_off_without_the_interpreter(monkeypatch):
    from generated import _interpreter

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert _interpreter.install() is False


def test_remembered_numpy_dtypes_are_the_interpreters_own():
    """Fix 6 only remembers answers: for every Triton dtype, block of it and pointer, the same
    NumPy dtype as the interpreter's own function."""
    import triton.language as tl
    from triton.runtime import interpreter as itp

    from generated import _interpreter

    _interpreter._remember_np_dtypes(itp, tl)
    fast = itp._get_np_dtype
    original = fast.original
    scalars = [tl.int1, tl.int8, tl.uint8, tl.int16, tl.uint16, tl.int32, tl.uint32, tl.int64,
               tl.uint64, tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.float8e4nv,
               tl.float8e5]
    cases = scalars + [tl.block_type(t, [4, 2]) for t in scalars] + [
        tl.pointer_type(tl.float32), tl.block_type(tl.pointer_type(tl.bfloat16), [8])]
    for _ in range(2):  # the second round answers from memory
        for t in cases:
            assert fast(t) == original(t), t


def test_overflow_checks_are_skipped_only_while_debug_is_off():
    """Fix 8: the interpreter's builders compute no overflow check that device_assert would
    drop (debug off); a builder with debug on keeps them; int32 arithmetic that wraps gives the
    same bits either way."""
    import dataclasses

    import numpy as np
    import triton
    import triton.language as tl
    from triton.runtime import interpreter as itp

    from generated import _interpreter

    _interpreter._skip_discarded_overflow_checks(itp)
    assert itp.interpreter_builder.options.sanitize_overflow is False
    assert itp.InterpreterBuilder().options.sanitize_overflow is False
    debug = dataclasses.replace(itp.InterpreterOptions(), debug=True)
    assert _interpreter_unchecked(debug) is debug

    if os.environ.get("TRITON_INTERPRET") != "1":
        return

    @triton.jit
    def wrap(x_ptr, out_ptr):
        x = tl.load(x_ptr + tl.arange(0, 4))
        tl.store(out_ptr + tl.arange(0, 4), x * 65537 + 2147483000)

    x = torch.tensor([0, 1, 40000, -70000], dtype=torch.int32)
    out = torch.empty_like(x)
    wrap[(1,)](x, out)
    want = (x.numpy().astype(np.int64) * 65537 + 2147483000).astype(np.int32)
    assert torch.equal(out, torch.from_numpy(want))


def _interpreter_unchecked(options):
    """The fix's own rule, reached through a fresh builder whose options are ``options``."""
    from triton.runtime import interpreter as itp

    builder = itp.InterpreterBuilder.__new__(itp.InterpreterBuilder)
    original = itp.InterpreterOptions
    try:
        itp.InterpreterOptions = lambda: options
        itp.InterpreterBuilder.__init__(builder)
    finally:
        itp.InterpreterOptions = original
    return builder.options


def test_bf16_casts_are_torchs(monkeypatch):
    """Fix 9: bf16 ↔ fp32 ``.to()`` in a kernel gives torch's conversion bit for bit (fp32 →
    bf16 rounds to nearest even, ties included; NaN, ±inf, subnormals, values past bf16's
    range), and the bit functions agree with torch on their own."""
    import numpy as np
    import triton
    import triton.language as tl
    from triton.runtime import interpreter as itp

    from generated import _interpreter

    monkeypatch.setattr(_interpreter, "np", np)  # imported by install(), on the interpreter only
    g = torch.Generator().manual_seed(9)
    # random values, every tie (low half 0x8000) and its neighbours, the edges of the formats
    bits = torch.randint(0, 1 << 32, (4096,), generator=g, dtype=torch.int64)
    ties = (bits & ~0xFFFF) | torch.tensor([0x7FFF, 0x8000, 0x8001, 0x0000])[
        torch.arange(4096) % 4]
    edges = torch.tensor([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000,
                          0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F800000, 0xFF800000,
                          0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x3F808000, 0x3F818000])
    x = torch.cat([bits, ties, edges]).to(torch.int64)
    x = torch.where(x >= 1 << 31, x - (1 << 32), x).to(torch.int32).view(torch.float32)
    want = x.to(torch.bfloat16)
    got = torch.from_numpy(_interpreter.f32_to_bf16_bits(x.numpy()).view(np.int16))
    nan = torch.isnan(x)
    assert torch.equal(got[~nan], want.view(torch.int16)[~nan])
    assert torch.isnan(got.view(torch.bfloat16)[nan]).all()
    wide = _interpreter._bf16_bits_to_f32(want.view(torch.int16).numpy().view(np.uint16))
    assert torch.equal(torch.from_numpy(wide)[~nan], want.float()[~nan])

    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    _interpreter._fast_bf16_casts(itp, tl)

    @triton.jit
    def casts(x_ptr, narrow_ptr, wide_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        narrow = tl.load(x_ptr + offs).to(tl.bfloat16)
        tl.store(narrow_ptr + offs, narrow)
        tl.store(wide_ptr + offs, narrow.to(tl.float32) * 1.0)

    n = 1 << (x.numel() - 1).bit_length()
    padded = torch.cat([x, torch.zeros(n - x.numel())])
    narrow = torch.empty(n, dtype=torch.bfloat16)
    wide = torch.empty(n, dtype=torch.float32)
    casts[(1,)](padded, narrow, wide, n)
    keep = ~torch.isnan(padded)
    assert torch.equal(narrow[keep], padded.to(torch.bfloat16)[keep])
    assert torch.equal(wide[keep], padded.to(torch.bfloat16).float()[keep])
    assert torch.isnan(narrow[~keep]).all() and torch.isnan(wide[~keep]).all()


def test_remembered_shapes_build_what_triton_builds(monkeypatch):
    """Fix 10: block types and tensors of a shape seen before get the fields Triton's own
    constructors give (element type, shape, numel, name); a bad shape still raises however
    often it is tried; a kernel computes the same bits with and without the fix."""
    import numpy as np
    import triton
    import triton.language as tl

    from generated import _interpreter

    core = tl.core
    for cls, name in ((core.block_type, "__init__"), (core.tensor, "__init__"),
                      (core.tuple, "__eq__")):
        # a process that compiles for a GPU gets Triton's own classes back after the test
        monkeypatch.setattr(cls, name, getattr(cls, name))
    _interpreter._remember_shapes(tl)
    block_init = core.block_type.__init__.original
    tensor_init = core.tensor.__init__.original

    def own(cls, init, *args):
        obj = cls.__new__(cls)
        init(obj, *args)
        return obj

    def fields(t):
        return (str(t.element_ty), list(t.shape), t.numel, t.name)

    for _ in range(2):  # the second round answers from memory
        for shape in ([16], [4, 32], [core.constexpr(8), 2], [1, 1, 64]):
            for element in (tl.float32, tl.bfloat16, tl.pointer_type(tl.int32)):
                made = core.block_type(element, shape)
                assert fields(made) == fields(own(core.block_type, block_init, element, shape))
                again = core.block_type(element, made.shape)  # from a made type's shape
                assert fields(again) == fields(made)
                for ty in (made, element if not element.is_ptr() else tl.int32):
                    t, want = core.tensor(None, ty), own(core.tensor, tensor_init, None, ty)
                    assert (list(t.shape), t.numel.value, t.dtype, t.type) == (
                        list(want.shape), want.numel.value, want.dtype, want.type)
        for bad in ([3], [4, 6], []):
            with pytest.raises((ValueError, TypeError)):
                core.block_type(tl.float32, bad)
    c = core.constexpr
    shapes = [core.tuple([16, 4]), core.tuple([c(16), c(4)]), core.tuple([16, c(4)]),
              core.tuple([4, 16]), core.tuple([16]), core.tuple([])]
    for a in shapes:
        for b in shapes + [[16, 4], [c(16), 4], (16, 4), (16,), [], c(16), 16, None,
                           [np.int64(16), 4], [None], ((16, 4),), [core.tuple([16, 4])]]:
            try:
                want = bool(core.tuple.__eq__.original(a, b))
            except Exception as e:  # noqa: BLE001 - then the fix raises the same
                with pytest.raises(type(e)):
                    a == b
                continue
            assert bool(a == b) is want and bool(a != b) is not want, (a, b)

    if os.environ.get("TRITON_INTERPRET") != "1":
        return

    @triton.jit
    def mix(x_ptr, out_ptr, N: tl.constexpr):
        rows = tl.arange(0, N)
        x = tl.load(x_ptr + rows[:, None] * N + rows[None, :])
        y = tl.sum(x * 2.0, axis=1)[:, None] + tl.max(x, axis=0)[None, :]
        tl.store(out_ptr + rows[:, None] * N + rows[None, :], tl.where(x > 0, y, x))

    x = torch.randn((16, 16), generator=torch.Generator().manual_seed(10))
    fast, slow = torch.empty_like(x), torch.empty_like(x)
    mix[(1,)](x, fast, 16)
    monkeypatch.setattr(core.block_type, "__init__", block_init)
    monkeypatch.setattr(core.tensor, "__init__", tensor_init)
    mix[(1,)](x, slow, 16)
    assert torch.equal(fast, slow)
    torch.testing.assert_close(fast, torch.where(x > 0, (x * 2).sum(1)[:, None] + x.max(0).values,
                                                 x))
