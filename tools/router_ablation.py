"""Device study: where the per-expert router kernel's time goes at small M (the rows where
vLLM's CUDA kernel is ahead). Variants of generated/moe_router.py, each built by replacing one
load of the kernel's source text (x, or the weight tile, becomes a load of one element: no
traffic for it),
run with the sm_90 table's launch of the row and timed interleaved with the kernel as
generated and an empty kernel (graph replay, L2 flushed). The variants' outputs are wrong by
design: timing only. If dropping x's loads (every program reads all of x from L2) recovers
most of the gap to reading the weight alone, x re-reads are what a new kernel must avoid.

    python3 tools/router_ablation.py OUTDIR            # H200: OUTDIR/router_ablation.json
    python3 tools/router_ablation.py OUTDIR --smoke    # CPU interpreter, one tiny shape
"""
import importlib.util
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]
import common  # noqa: E402

SMOKE = "--smoke" in sys.argv
common.setup(SMOKE)
import torch  # noqa: E402

import generated  # noqa: E402,F401
from generated import moe_router as base  # noqa: E402
from tune.measure import interleave  # noqa: E402

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
# name -> [(old text, new text)] applied to generated/moe_router.py
VARIANTS = {
    "base": [],
    # x is one element: no x traffic (each program otherwise reads all of its rows from L2)
    "no_x": [(X_LOAD, X_CONST)],
    # the weight tile is one element: no weight traffic
    "no_w": [(W_LOAD, W_CONST)],
    # neither: the launch, the products and the store
    "no_loads": [(X_LOAD, X_CONST), (W_LOAD, W_CONST)],
}


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


def rows():
    if SMOKE:
        return [((4096, 8), m, x) for m in (1, 4) for x in ("bf16", "fp32")]
    return [(shape, m, x) for shape in ((3072, 256), (6144, 128)) for m in (1, 4, 8, 16)
            for x in ("bf16", "fp32")]


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    dev = "cpu" if SMOKE else "cuda"
    hw = common.detected_hardware(SMOKE)
    mods = {n: build(n, e) for n, e in VARIANTS.items()}
    dummy = torch.zeros(16, dtype=torch.int32, device=dev)
    g = torch.Generator(device=dev).manual_seed(3)
    res, weights = [], {}
    for (K, N), M, x_dtype in rows():
        w_dtype = base.ROUTER_GEMM_LIMITS[(K, N)][0]
        if (K, N) not in weights:
            weights.clear()
            weights[(K, N)] = (torch.randn((N, K), generator=g, device=dev) * K ** -0.5).to(w_dtype)
        w = weights[(K, N)]
        x = torch.randn((M, K), generator=g, device=dev).to(common.torch_dtype(x_dtype))
        out = torch.empty((M, N), dtype=torch.float32, device=dev)
        launch = base.explain_router_gemm(K, N, M, hw, x_dtype)
        label = f"({K},{N}) M{M} {x_dtype}"
        if launch["kernel"] != "per_expert":
            print(f"{label}: {launch['kernel']} row, skipped", flush=True)
            continue
        params = {k: launch[k] for k in ("block_m", "block_e", "block_k", "num_warps", "num_stages")}
        calls = {"empty kernel": lambda: common.launch_empty(dummy)}
        for name, mod in mods.items():
            run = mod.prepare_router_gemm(x, w, **params)
            calls[name] = lambda run=run: run(x, w, out)
        samplers = {}
        for k, fn in calls.items():
            if SMOKE:  # the code paths only: the first call's time stands for every sample
                once = common.time_cpu(fn, 1, 0)["median_us"]
                samplers[k] = lambda n, once=once: [once] * n
                continue
            fn()
            torch.cuda.synchronize()
            graph = common.capture_graph(fn)
            samplers[k] = lambda n, graph=graph: common.replay_times(graph.replay, n,
                                                                     settled=True)
        times = interleave(samplers, rounds=1 if SMOKE else 5, per_round=1 if SMOKE else 20)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{label} {params}: " + "  ".join(f"{k} {v:.2f}" for k, v in med.items()),
              flush=True)
        res.append({"shape": [K, N], "M": M, "x_dtype": x_dtype, "launch": params, "us": med})
        with open(os.path.join(out_dir, "router_ablation.json"), "w") as f:
            json.dump(res, f, indent=1)
    common.free_memory()


if __name__ == "__main__":
    main()
