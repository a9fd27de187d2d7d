#!/usr/bin/env python3
"""Where does the split-K router kernel spend its time? (H200 experiment, not a test.)

Builds timing-only variants of the *generated* split-K kernel by editing its source text
(generated/moe_router.py is read at run time, nothing is copied into this file) and times
them against the table's kernel and an empty kernel:

- as generated;
- early_reset: the last arrival resets the counter (relaxed) before its reduction loads;
- release: the arrival atomic is a release (not acq_rel), the reduction loads are .cg;
- no_reduction: every program stores its partial straight to the output (wrong sums: only
  the main body's cost);
- no_scratch: the atomic without the partial store before it.

    PYTHONPATH=. python3 tools/explore_splitk_tail.py
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SRC = os.path.join(common.ROOT, "generated", "moe_router.py")


def kernel_source() -> str:
    text = open(SRC, encoding="utf-8").read()
    start = text.index("@triton.jit(do_not_specialize")
    end = text.index("\ndef _validate")
    return text[start:end]


def variants() -> dict:
    base = kernel_source()
    tail_start = base.index("        tl.store(scratch_ptr")
    out = {"generated": base}
    reset = ("            tl.atomic_xchg(counter_ptr + nt, 0, sem=\"acq_rel\", scope=\"gpu\")\n")
    assert reset in base
    early = base.replace("        # leave the counter at zero", "        # (moved)")
    early = early.replace(reset, "")
    early = early.replace("        if arrived == SPLIT_K - 1:\n",
                          "        if arrived == SPLIT_K - 1:\n"
                          "            tl.atomic_xchg(counter_ptr + nt, 0, sem=\"relaxed\","
                          " scope=\"gpu\")\n")
    out["early_reset"] = early
    out["release"] = early.replace('arrived = tl.atomic_add(counter_ptr + nt, 1, sem="acq_rel"',
                                   'arrived = tl.atomic_add(counter_ptr + nt, 1, sem="release"')
    assert out["release"] != early
    out["no_reduction"] = base[:tail_start] + "        tl.store(out_ptr + offs, acc, mask=mask)\n"
    out["no_scratch"] = re.sub(r"        tl\.store\(scratch_ptr[^\n]*\n", "", early, count=1)
    return out


def load(name: str, src: str):
    d = tempfile.mkdtemp()
    path = os.path.join(d, f"splitk_{name}.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write("import triton\nimport triton.language as tl\n\n\n" + src)
    spec = importlib.util.spec_from_file_location(f"splitk_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod._router_gemm_splitk_kernel


def main():
    common.setup(False)
    import torch
    import triton

    import generated
    from generated import moe_router as mr

    empty = common.empty_kernel_us()["median_us"]
    common.say(f"empty kernel {empty:.2f} µs")
    kernels = {name: load(name, src) for name, src in variants().items()}
    counter = torch.zeros(64, dtype=torch.int32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(3)
    configs = [dict(block_n=32, block_k=64, split_k=32, num_warps=4, num_stages=3),
               dict(block_n=16, block_k=64, split_k=32, num_warps=2, num_stages=3),
               dict(block_n=32, block_k=128, split_k=48, num_warps=4, num_stages=1)]
    for K, N in ((6144, 128), (6144, 256)):
        w = torch.randn((N, K), generator=g, device="cuda") * K ** -0.5
        for M in (1, 8, 32):
            x = torch.randn((M, K), generator=g, device="cuda")
            ref = x.double() @ w.double().T
            t = common.time_graph(lambda: generated.router_gemm(x, w), reps=40)["median_us"]
            common.say(f"({K},{N}) M{M} fp32: table {t:.2f} (−empty {t - empty:.2f})")
            for cfg in configs:
                if K % (cfg["block_k"] * cfg["split_k"]):
                    continue
                bm = 16 if M <= 16 else 32
                tiles = triton.cdiv(N, cfg["block_n"])
                line = []
                for name, kern in kernels.items():
                    out = torch.empty((M, N), device="cuda")
                    scratch = torch.empty((cfg["split_k"], M, N), device="cuda")

                    def fn(kern=kern, out=out, scratch=scratch):
                        kern[(tiles, cfg["split_k"])](
                            x, w, out, scratch, counter, M, HIDDEN_SIZE=K, NUM_EXPERTS=N,
                            BLOCK_M=bm, BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
                            SPLIT_K=cfg["split_k"], PRECISION="tf32x3",
                            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
                    fn()
                    torch.cuda.synchronize()
                    ok = name not in ("generated", "early_reset", "release") or \
                        float((out.double() - ref).abs().max()) < 5e-4
                    counter.zero_()
                    tm = common.time_graph(fn, reps=40)["median_us"]
                    counter.zero_()
                    line.append(f"{name} {tm - empty:.2f}{'' if ok else ' WRONG'}")
                common.say(f"   bn{cfg['block_n']} bk{cfg['block_k']} s{cfg['split_k']} "
                           f"w{cfg['num_warps']} ns{cfg['num_stages']} (−empty): "
                           + " | ".join(line))
    del mr


if __name__ == "__main__":
    main()
