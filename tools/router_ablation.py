"""Device study: where the router kernels' time goes. Variants of generated/moe_router.py,
each built by replacing a piece of the kernel's source text, run with the sm_90 table's launch
of the row and timed interleaved with the kernel as generated, an empty kernel and
`F.linear(x.float(), w.float())` (graph replay, L2 flushed, rotating rounds). The variants' outputs
are wrong by design: timing only.

- Per-expert rows (`--rows vllm`, the rows where vLLM's CUDA kernel was ahead): x, or the
  weight tile, becomes a load of one element (no traffic for it). If dropping x's loads (every
  program reads all of its rows of x from L2) recovers most of the gap to reading the weight
  alone, x re-reads are what a new kernel must avoid.
- Split-K rows (`--rows flinear`, the (4096, 192) rows that miss 2× F.linear): the steps of
  the last-arrival reduction are dropped one at a time (the counter's fence, the partial
  loads, the whole reduction), the loads made one element, and the products made one TF32
  pass instead of three: base minus each is what that step costs. Two correct variants
  (checked against the kernel before timing) put back what the kernel replaced: `sk_one_chain`
  sums tf32x3's head and remainder products on one accumulator (one dependent tensor-core
  chain), `sk_builtin` is Triton's own tf32x3 (three products of every term, one chain);
  `--rows exact16` times them where an operand is 16-bit.

    python3 tools/router_ablation.py OUTDIR [--rows vllm|flinear|exact16]   # H200
    python3 tools/router_ablation.py OUTDIR --smoke    # CPU interpreter, tiny shapes
"""
import importlib.util
import json
import os
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]
import common  # noqa: E402

if __name__ == "__main__":
    common.usage_unless_out_dir(__doc__)  # (before the setup below)
SMOKE = "--smoke" in sys.argv
common.setup(SMOKE)
import torch  # noqa: E402

import generated  # noqa: E402,F401
from generated import moe_router as base  # noqa: E402

X_LOAD = ("        x = tl.load(x_ptr + rows[:, None, None] * HIDDEN_SIZE + (k0 + cols)[None, None, :],\n"
          "                    mask=row_ok[:, None, None], other=0.0)\n")
W_LOAD = ("        w = tl.load(w_ptr + experts[None, :, None] * HIDDEN_SIZE"
          " + (k0 + cols)[None, None, :])\n")
# Stand-ins keep a load of the same shape, layout and mask, at one address for every element
# (an L1 hit after the first): a constant tile instead changes what the compiler emits for the
# products and measured slower than the kernel itself.
X_CONST = ("        x = tl.load(x_ptr + (rows * 0)[:, None, None] + (cols * 0)[None, None, :],\n"
           "                    mask=row_ok[:, None, None], other=0.0)\n")
W_CONST = ("        w = tl.load(w_ptr + (experts * 0)[None, :, None]"
           " + (cols * 0)[None, None, :])\n")
# name -> [(old text, new text)] applied to generated/moe_router.py: per-expert kernel
VARIANTS = {
    "base": [],
    # x is one element: no x traffic (each program otherwise reads all of its rows from L2)
    "no_x": [(X_LOAD, X_CONST)],
    # the weight tile is one element: no weight traffic
    "no_w": [(W_LOAD, W_CONST)],
    # neither: the launch, the products and the store
    "no_loads": [(X_LOAD, X_CONST), (W_LOAD, W_CONST)],
}

SK_X_LOAD = ("        x = tl.load(x_ptr + rows[:, None] * HIDDEN_SIZE + k[None, :],\n"
             "                    mask=row_ok[:, None], other=0.0)\n")
SK_W_LOAD = ("        w = tl.load(w_ptr + experts[:, None] * HIDDEN_SIZE + k[None, :],\n"
             "                    mask=expert_ok[:, None], other=0.0)\n")
SK_X_CONST = ("        x = tl.load(x_ptr + (rows * 0)[:, None] + (k * 0)[None, :],\n"
              "                    mask=row_ok[:, None], other=0.0)\n")
SK_W_CONST = ("        w = tl.load(w_ptr + (experts * 0)[:, None] + (k * 0)[None, :],\n"
              "                    mask=expert_ok[:, None], other=0.0)\n")
SK_ARRIVE = '        arrived = tl.atomic_add(counter_ptr + nt, 1, sem="acq_rel", scope="gpu")\n'
SK_SUM = "            for s in tl.static_range(SPLIT_K):\n"
SK_PRECISION = '"tf32x3" if tf32x3 else "ieee"'
# the products of the generated kernel, and Triton's own tf32x3 (every operand split, the
# three products of a term on one accumulator) that they replaced
SK_DOT = ('        if PRECISION != "tf32x3":\n'
          "            acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc,\n"
          "                         input_precision=PRECISION)\n")
SK_BUILTIN = ("        if True:\n"
              "            acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc,\n"
              "                         input_precision=PRECISION)\n")
# the remainders' products on the head products' accumulator: one chain
SK_X_REST = "                x_rest_acc = tl.dot(x32 - x_head, tl.trans(w_head), x_rest_acc,\n"
SK_W_REST = "                w_rest_acc = tl.dot(x_head, tl.trans(w32 - w_head), w_rest_acc,\n"
# the remainders added where the head products are finite (a non-finite x or w: its
# remainders are NaN)
SK_REST_SUM = ("        acc = tl.where(tl.abs(acc) < float(\"inf\"), acc + (x_rest_acc + "
               "w_rest_acc), acc)\n")
# the same for the split-K kernel (its launch text too: the precision is an argument)
SPLITK_VARIANTS = {
    "base": [],
    # partials stored, then nothing: no counter, no last-arrival sum
    "sk_partials_only": [(SK_ARRIVE, "        arrived = nt * 0 - 1\n")],
    # the counter without its release/acquire fence (a race: timing only)
    "sk_relaxed": [(SK_ARRIVE, SK_ARRIVE.replace('"acq_rel"', '"relaxed"'))],
    # the last arrival reads one partial instead of SPLIT_K
    "sk_one_partial": [(SK_SUM, SK_SUM.replace("SPLIT_K", "1"))],
    # one TF32 product per term instead of three
    "sk_tf32": [(SK_PRECISION, '"tf32" if tf32x3 else "ieee"')],
    # x and w are one element each: the loop's products and the reduction, no traffic
    "sk_no_loads": [(SK_X_LOAD, SK_X_CONST), (SK_W_LOAD, SK_W_CONST)],
    # correct: every product on one accumulator (a chain up to three times as long)
    "sk_one_chain": [(SK_X_REST, SK_X_REST.replace("x_rest_acc", "acc")),
                     (SK_W_REST, SK_W_REST.replace("w_rest_acc", "acc")),
                     (SK_REST_SUM, "        acc += 0.0\n")],
    # correct: Triton's tf32x3 for every dtype pair (what the kernel did before)
    "sk_builtin": [(SK_DOT, SK_BUILTIN)],
    # correct for finite inputs (the kernel before 2026-12-05: NaN logits for a non-finite
    # x): what the non-finite handling costs
    "sk_unguarded": [(SK_REST_SUM, "        acc += x_rest_acc + w_rest_acc\n")],
}
# correct variants: each checked against the kernel as generated before it is timed
CORRECT = {"sk_one_chain", "sk_builtin", "sk_unguarded"}
PARAMS = {"per_expert": ("block_m", "block_e", "block_k", "num_warps", "num_stages"),
          "splitk": ("block_m", "block_n", "block_k", "split_k", "tf32x3", "num_warps",
                     "num_stages")}


def build(name, edits):
    src = open(base.__file__).read()
    for old, new in edits:
        assert src.count(old) == 1, (name, old)
        src = src.replace(old, new)
    src = src.replace("from . import _runtime as _rt", "from generated import _runtime as _rt")
    src = src.replace("from .dispatch import", "from generated.dispatch import")
    path = os.path.join(tempfile.mkdtemp(), f"moe_router_{name}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"router_ablation_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ROW_SETS = ("vllm", "flinear", "exact16")
ROW_SET = sys.argv[sys.argv.index("--rows") + 1] if "--rows" in sys.argv else "vllm"
if ROW_SET not in ROW_SETS:
    sys.exit(f"--rows: one of {', '.join(ROW_SETS)}, got {ROW_SET!r}")
# the smoke test's split-K launches (the interpreter's table has no split-K row); the interpreter
# pays per program, per loop step and per element, so the bf16 weight's row (7168, 896) keeps
# its expert count and its seven splits on a quarter of its hidden size (one step a split)
SMOKE_SPLITK = {"block_m": 4, "block_n": 64, "block_k": 512, "split_k": 4, "tf32x3": True,
                "num_warps": 4, "num_stages": 1}  # (4096, 192): two steps a split
SMOKE_SPLITK_WIDE = dict(SMOKE_SPLITK, block_n=128, block_k=256, split_k=7)
SMOKE_BF16_WEIGHT = ((1792, 896), (7168, 896))  # (the smoke's shape, the shape it stands for)


def rows():
    """(shape, M, x dtype, forced launch or None: the table's)"""
    if SMOKE:
        return ([((4096, 8), m, x, None) for m in (1, 4) for x in ("bf16", "fp32")]
                + [((4096, 192), 4, x, dict(SMOKE_SPLITK, kernel="splitk"))
                   for x in ("fp32", "bf16")]
                + [(SMOKE_BF16_WEIGHT[0], 4, x, dict(SMOKE_SPLITK_WIDE, kernel="splitk"))
                   for x in ("fp32", "bf16")])
    if ROW_SET == "flinear":
        return [((4096, 192), m, x, None) for m, x in ((16, "fp32"), (24, "fp32"), (32, "fp32"),
                                                       (32, "bf16"))]
    if ROW_SET == "exact16":  # split-K rows with a 16-bit operand (bf16 x, or the bf16 w)
        return [((6144, 256), 16, "bf16", None), ((6144, 256), 32, "bf16", None),
                ((3072, 256), 32, "bf16", None), ((6144, 128), 32, "bf16", None),
                ((7168, 896), 8, "bf16", None), ((7168, 896), 8, "fp32", None)]
    return [(shape, m, x, None) for shape in ((3072, 256), (6144, 128)) for m in (1, 4, 8, 16)
            for x in ("bf16", "fp32")]


def check_correct(calls, x, w, out):
    """Each CORRECT variant against the kernel as generated: within fp32 summation error of
    Σ|x·w| (tf32x3 and the variant's products are both ~2⁻²¹ relative per product)."""
    if not CORRECT & set(calls):
        return
    calls["base"]()
    want = out.clone()
    scale = x.double().abs() @ w.double().abs().T
    for name in CORRECT & set(calls):
        out.fill_(float("nan"))
        calls[name]()
        err = (out.double() - want.double()).abs()
        assert bool((err <= 1e-5 * scale + 1e-30).all()), (name, float(err.max()))


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    dev = "cpu" if SMOKE else "cuda"
    hw = common.detected_hardware(SMOKE)
    mods = {"per_expert": {n: build(n, e) for n, e in VARIANTS.items()},
            "splitk": {n: build(n, e) for n, e in SPLITK_VARIANTS.items()}}
    dummy = torch.zeros(16, dtype=torch.int32, device=dev)
    g = torch.Generator(device=dev).manual_seed(3)
    res, weights = [], {}
    for (K, N), M, x_dtype, forced in rows():
        w_dtype = base.ROUTER_GEMM_LIMITS[
            SMOKE_BF16_WEIGHT[1] if (K, N) == SMOKE_BF16_WEIGHT[0] else (K, N)][0]
        if (K, N) not in weights:
            weights.clear()
            weights[(K, N)] = (torch.randn((N, K), generator=g, device=dev) * K ** -0.5).to(w_dtype)
        w = weights[(K, N)]
        x = torch.randn((M, K), generator=g, device=dev).to(common.torch_dtype(x_dtype))
        out = torch.empty((M, N), dtype=torch.float32, device=dev)
        launch = forced or base.explain_router_gemm(K, N, M, hw, x_dtype)
        kernel = launch["kernel"]
        label = f"({K},{N}) M{M} {x_dtype} {kernel}"
        params = {k: launch[k] for k in PARAMS[kernel]}
        calls = {"empty kernel": lambda: common.launch_empty(dummy),
                 "F.linear": lambda: torch.nn.functional.linear(x.float(), w.float())}
        for name, mod in mods[kernel].items():
            prepare = mod.prepare_router_gemm_splitk if kernel == "splitk" \
                else mod.prepare_router_gemm
            run = prepare(x, w, **params)
            calls[name] = common.Checked(lambda run=run: run(x, w, out))
        check_correct(calls, x, w, out)
        med = common.interleaved_medians(calls, SMOKE)
        print(f"{label} {params}: " + "  ".join(f"{k} {v:.2f}" for k, v in med.items()),
              flush=True)
        res.append({"shape": [K, N], "M": M, "x_dtype": x_dtype,
                    "w_dtype": str(w_dtype).removeprefix("torch."), "kernel": kernel,
                    "launch": params, "us": med})
        with open(os.path.join(out_dir, "router_ablation.json"), "w") as f:
            json.dump(res, f, indent=1)
    common.free_memory()


if __name__ == "__main__":
    main()
