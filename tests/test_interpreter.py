"""The generated package runs on Triton's CPU interpreter by itself (issue 11, item 3).

A fresh process with only ``TRITON_INTERPRET=1`` set and ``import generated`` (no test
fixtures) must run every index kernel and give exact bf16 ``tl.dot`` products: the package's
own interpreter fixes (generated/_interpreter.py) are what the tests use too.
"""
import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")

SCRIPT = r"""
import sys
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
