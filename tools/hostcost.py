#!/usr/bin/env python3
"""Host cost per eager call of every public entry (issues 13, 19, 21), on a CUDA device.

    python3 tools/hostcost.py [--out DIR] [--calls 300] [--passes 2]
    python3 tools/hostcost.py --against OLD [--calls 1000]   # OLD/generated: another package
    python3 tools/hostcost.py --peer FILE:FUNCTION[:packed]   # another decode attention too

Method: the GPU is first given a long `torch.cuda._sleep`, so launches never wait for a full
queue; then each call is timed with a host clock (median of --calls, ≥ 300). That is
the Python + launch cost a caller pays per call, whatever the kernels' GPU time. The whole
sweep runs --passes times (default 2) and each row keeps its lowest median: a row can sit
~10 µs high for one pass on a busy host (both packages' rows alike in `--against` runs), and
host noise only adds. A group's rows (one set of inputs) are timed call by call in turns, so
a row judged against others of its group (`sparse_decode_step` against the two calls it
replaces, `router_gemm` against `F.linear(x.float(), w)`) meets the host's drift as they do:
its target sums their medians of the pass that gave its own lowest. Beside our entries:
`F.linear(x.float(), w)` on the same router shapes and an empty Triton kernel launched through
the JIT. Prints a table with the targets and writes DIR/hostcost.json (about a minute a pass
with the kernels compiled).

`--peer` (as `tools/bench_attn.py --peer`: another implementation of sparse_attn_decode's
positional arguments, e.g. vLLM's from a local copy) adds to each attention group the peer's
call and ours on the peer's cache, judged against it.

Host time moves by several µs between hosts and between processes on one host: to compare two
packages, `--against OLD` times each row of ours and of OLD/generated (e.g. `mkdir OLD && git
archive REV generated | tar -x -C OLD`) call by call in turns, in one process.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (tools/common.py)
import targets  # noqa: E402  (tools/targets.py)

# (R, context, Q) of the decode rows; (K, N, M, x dtype) of the router rows (issue 13)
DECODE = ((1, 8192, 4), (16, 131072, 4))
# (R, prefix, chunk, H) of the prefill rows (issue 19): entries judged like the decode ones
PREFILL = ((1, 0, 8192, 1), (8, 1024, 128, 4))
# (Hq, Hkv, R, context, Q) of the attention rows (issue 21): judged like index_decode_scores
ATTENTION = ((32, 2, 32, 32768, 1), (64, 4, 1, 32768, 1))
# (Hq, Hkv, prefix, chunk) of the prefill attention rows (issue 21): judged like the decode one
ATTENTION_PREFILL = ((32, 2, 8192, 2048), (16, 1, 1024, 128))
ROUTER = ((6144, 128, 1, "bf16"), (3072, 256, 8, "bf16"))
SLEEP_CYCLES = 400_000_000  # ~0.2 s of GPU time: far longer than 100 timed calls
PEER = None  # (function, (file, function, layout)) from --peer


def host_us_turns(fns, calls: int) -> list[float]:
    """Median host µs of each of ``fns``, timed call by call in turns (each round starting one
    later) while the GPU is busy, so no launch waits on a full queue and a host's slow drift
    hits every one alike."""
    import torch

    for fn in fns:
        fn()
    torch.cuda.synchronize()
    samples = [[] for _ in fns]
    rounds_per_sleep = max(1, 100 // len(fns))  # ≤ ~100 calls per sleep: queue room
    done = 0
    while done < calls:
        torch.cuda._sleep(SLEEP_CYCLES)
        for _ in range(min(rounds_per_sleep, calls - done)):
            for j in range(len(fns)):
                k = (j + done) % len(fns)
                t0 = time.perf_counter()
                fns[k]()
                samples[k].append((time.perf_counter() - t0) * 1e6)
            done += 1
        torch.cuda.synchronize()
    return [statistics.median(x) for x in samples]


def decode_fns(generated, R, ctx, Q):
    import bench

    sc = bench.Scenario(R, ctx, Q)
    inp = bench.make_decode_inputs(sc, "cuda")
    decode = bench.ours_fn(generated, sc, inp, None)

    def scores():
        return generated.index_decode_scores(inp["idx_q"], inp["cache"], inp["block_table"],
                                             inp["seq_lens"], sc.max_seq_len, bench.INIT_BLOCKS,
                                             bench.LOCAL_BLOCKS, Q, Q)
    return sc.name.replace("  ", " "), decode, scores, inp


def prefill_fns(generated, row):
    """(name, call, host target) of the three prefill entries on one bench_prefill row."""
    import bench_prefill as bp

    inp = bp.make_inputs(row, "bf16", "cuda")
    args = [inp[k] for k in ("idx_q", "index_kv_cache", "block_table", "cu_seqlens_q",
                             "seq_lens", "prefix_lens", "max_query_len", "max_seq_len",
                             "num_kv_heads")]
    sel = (inp["cu_seqlens_q"], inp["prefix_lens"], inp["max_query_len"], bp.TOPK,
           bp.INIT_BLOCKS, bp.LOCAL_BLOCKS)
    score = generated.index_prefill_score(*args)
    R, prefix, chunk, H = row
    label = f"R{R} ({prefix}+{chunk}) H{H}"
    return [
        (f"index_prefill {label}", lambda: generated.index_prefill(
            *args, bp.TOPK, bp.INIT_BLOCKS, bp.LOCAL_BLOCKS), targets.HOST_US["index_decode"]),
        (f"index_prefill_score {label}", lambda: generated.index_prefill_score(*args),
         targets.HOST_US["index_decode_scores"]),
        (f"index_prefill_topk {label}", lambda: generated.index_prefill_topk(score, *sel),
         targets.HOST_US["index_decode_scores"]),
    ]


def decode_rows(generated, R, ctx, Q):
    name, decode, scores, _ = decode_fns(generated, R, ctx, Q)
    return [(f"index_decode {name} +table", decode, targets.HOST_US["index_decode"]),
            (f"index_decode_scores {name}", scores, targets.HOST_US["index_decode_scores"])]


def attention_rows(generated, row, device="cuda", d=None, topk=None):
    """The attention entry and the decode step, judged against the two calls it replaces (and
    with --peer the peer's call, and ours on its cache judged against it)."""
    import torch

    import bench_attn

    case = bench_attn.make_case(row, device, d or bench_attn.D, topk or bench_attn.TOPK)
    out = torch.empty(case["q"].shape, dtype=torch.bfloat16, device=device)
    Hq, Hkv, R, ctx, Q = row
    name = f"{Hq}/{Hkv} R{R} {ctx // 1024}k Q{Q}"
    indexer, attention, step, _ = bench_attn.step_calls(generated, case, row, device)
    parts = (f"index_decode of the step {name}", f"sparse_attn_decode of the step {name}")
    rows = [(f"sparse_attn_decode {name}",
             lambda: generated.sparse_attn_decode(**case, output=out),
             targets.HOST_US["index_decode_scores"]),
            (parts[0], indexer, None), (parts[1], attention, None),
            (f"sparse_decode_step {name}", step, (parts, 0.0))]
    if PEER is not None:
        peer, (_, function, layout) = PEER
        peer_case = dict(case, kv=bench_attn.packed(case["kv"])) if layout == "packed" else case
        peer_name = f"peer {function} {name}"
        peer_out = torch.full_like(out, float("nan"))
        peer_call = bench_attn.decode_call(peer, peer_case, peer_out)
        try:  # once, and compared with ours: a peer given the wrong layout is no benchmark
            peer_call()
            generated.sparse_attn_decode(**case, output=out)
        except Exception as e:
            raise SystemExit(f"hostcost: --peer {function} at {name}: "
                             f"{type(e).__name__}: {e}"[:400])
        err = (peer_out.double() - out.double()).abs()
        if not (err.mean() <= 2.5e-4 and err.max() <= 1.7e-2):
            raise SystemExit(f"hostcost: --peer {function} at {name}: its output differs from "
                             f"ours (max abs {float(err.max()):.3g}): the layout (:packed)?")
        rows += [(peer_name, peer_call, None),
                 (f"sparse_attn_decode {name} on the peer's cache",
                  bench_attn.decode_call(generated.sparse_attn_decode, peer_case,
                                         torch.empty_like(out)), ((peer_name,), 0.0))]
    return rows


def attention_prefill_rows(generated, row):
    """The prefill attention entry on one bench_attn prefill row (one request)."""
    import torch

    import bench_attn

    case = bench_attn.make_prefill_case(row, "cuda")
    out = torch.empty(case["q"].shape, dtype=torch.bfloat16, device="cuda")
    Hq, Hkv, prefix, chunk = row
    return [(f"sparse_attn_prefill {Hq}/{Hkv} 1 × ({prefix}+{chunk})",
             lambda: generated.sparse_attn_prefill(**case, output=out),
             targets.HOST_US["index_decode_scores"])]


def router_rows(generated, K, N, M, dt):
    """The router entries beside `F.linear(x.float(), w)` (issue 13's target)."""
    import torch
    import torch.nn.functional as F

    x = torch.randn((M, K), device="cuda").to(common.torch_dtype(dt))
    w = torch.randn((N, K), device="cuda")
    lin, gemm = f"F.linear(x.float(), w) ({K},{N}) M{M} {dt}", f"router_gemm ({K},{N}) M{M} {dt}"
    return [(lin, lambda: F.linear(x.float(), w), None),
            (gemm, lambda: generated.router_gemm(x, w), ((lin,), 0.0)),
            (f"router_logits ({K},{N}) M{M} {dt}", lambda: generated.router_logits(x, w),
             ((gemm,), targets.HOST_LOGITS_OVER_GEMM_US))]


def groups(generated):
    """The timed rows, one group of inputs at a time: zero-argument builders, each giving a list
    of (name, call, target), a target None, a number of µs, or (other rows' names in the group,
    an offset): their µs summed plus the offset. A group's inputs live while it is timed."""
    import torch

    dummy = torch.zeros(16, dtype=torch.int32, device="cuda")
    yield lambda: [("empty Triton kernel (JIT launch)", lambda: common.launch_empty(dummy),
                    None)]
    for R, ctx, Q in DECODE:
        yield lambda R=R, ctx=ctx, Q=Q: decode_rows(generated, R, ctx, Q)
    for row in PREFILL:
        yield lambda row=row: prefill_fns(generated, row)
    for row in ATTENTION:
        yield lambda row=row: attention_rows(generated, row)
    for row in ATTENTION_PREFILL:
        yield lambda row=row: attention_prefill_rows(generated, row)
    for K, N, M, dt in ROUTER:
        yield lambda K=K, N=N, M=M, dt=dt: router_rows(generated, K, N, M, dt)


def load_package(folder: str, name: str = "generated_against"):
    """The generated package under ``folder`` (e.g. `git archive REV generated | tar -x -C
    DIR`), imported as ``name`` beside ours."""
    import importlib.util

    init = os.path.join(folder, "generated", "__init__.py")
    if not os.path.exists(init):
        raise SystemExit(f"--against: no generated/__init__.py under {folder}")
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[os.path.dirname(init)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def measure(calls: int, passes: int = 1) -> dict:
    """{row: {"host_us", "passes", "target_us"}} of our package, rows in order: each pass's
    median in "passes", the lowest as "host_us" (a target summing rows of its group sums
    their medians of the same pass)."""
    import generated

    results = {}
    for _ in range(passes):
        for build in groups(generated):
            _measure_group(build(), calls, results)
            common.free_memory()  # (the group's inputs went with its rows)
    return results


def _measure_group(rows, calls: int, results: dict) -> None:
    names = [name for name, _, _ in rows]
    medians = [round(us, 2) for us in host_us_turns([fn for _, fn, _ in rows], calls)]
    for name, us in zip(names, medians):
        results.setdefault(name, {"passes": []})["passes"].append(us)
    for name, _, target in rows:
        r = results[name]
        r["host_us"] = min(r["passes"])
        if isinstance(target, tuple):  # the named rows' medians in this row's lowest pass
            named, offset = target
            missing = [n for n in named if n not in names]
            if missing:
                raise ValueError(f"{name}: its target names {missing}, not rows of its group")
            best = r["passes"].index(r["host_us"])
            target = round(sum(results[n]["passes"][best] for n in named) + offset, 2)
        r["target_us"] = target


def compare(calls: int, folder: str) -> dict:
    """{row: {"host_us", "against_us"}}: each row of our package and of the one under
    ``folder``, timed call by call in turns (`host_us_turns`); {"error"} where the other
    package cannot make or run it (an older one may lack an entry or an argument)."""
    import generated

    other = load_package(folder)
    results = {}
    for build, build_other in zip(groups(generated), groups(other)):
        _compare_group(build(), build_other, calls, results)
        common.free_memory()  # (the groups' inputs went with their rows)
    return results


def _compare_group(ours, build_other, calls: int, results: dict) -> None:
    try:
        theirs = [fn for _, fn, _ in build_other()]
    except Exception as e:
        theirs = [f"{type(e).__name__}: {e}"[:300]] * len(ours)
    for (name, fn, _), other in zip(ours, theirs):
        if isinstance(other, str):  # (the other package could not make the row)
            results[name] = {"error": other}
            continue
        try:
            a, b = host_us_turns([fn, other], calls)
        except Exception as e:
            results[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
            continue
        results[name] = {"host_us": round(a, 2), "against_us": round(b, 2)}


def manifest_hash(package) -> str | None:
    """sha256 of a generated package's MANIFEST.json (which names every file's hash)."""
    import hashlib

    path = os.path.join(os.path.dirname(package.__file__), "MANIFEST.json")
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--passes", type=int, default=2,
                   help="sweeps of every row; each row keeps its lowest median (not --against)")
    p.add_argument("--against", metavar="DIR", default=None,
                   help="a folder holding another generated/ package: time each row of both, "
                        "call by call in turns (host time moves between processes)")
    p.add_argument("--peer", metavar="FILE:FUNCTION[:packed]", default=None,
                   help="another implementation of sparse_attn_decode's positional arguments, "
                        "timed beside ours in the attention groups (as bench_attn.py --peer)")
    args = p.parse_args(argv)
    if args.peer is not None and args.against:
        raise SystemExit("hostcost: --peer and --against: one at a time")
    if args.peer is not None:
        import bench_attn

        try:
            where = bench_attn.peer_option(args.peer)
        except argparse.ArgumentTypeError as e:
            raise SystemExit(f"hostcost: --peer: {e}")
    common.setup(smoke=False)
    peer_info = None
    if args.peer is not None:
        fn, peer_info = bench_attn.load_peer(*where[:2])
        peer_info["layout"] = where[2]
        global PEER
        PEER = (fn, where)

    header = f"entry (eager, host µs per call, median of {args.calls})"
    if args.against:
        results = compare(args.calls, args.against)
        print(f"\n{header:60s}{'ours':>9s}{'against':>9s}  ours/against")
        for name, r in results.items():
            print(f"{name:60s}  {r['error']}" if "error" in r else
                  f"{name:60s}{r['host_us']:9.2f}{r['against_us']:9.2f}  "
                  f"{r['host_us'] / r['against_us']:.3f}")
    else:
        if args.passes < 1:
            raise SystemExit("--passes: at least 1")
        results = measure(args.calls, args.passes)
        header += f", lowest of {args.passes} passes"
        print(f"\n{header:78s}{'µs':>9s}  target  (each pass)")
        for name, r in results.items():
            target = r["target_us"]
            verdict = "" if target is None else \
                f"≤ {target:.1f} {'PASS' if r['host_us'] <= target else 'FAIL'}"
            print(f"{name:78s}{r['host_us']:9.2f}  {verdict}  "
                  f"({' / '.join(f'{us:.2f}' for us in r['passes'])})")
    if args.out:
        import generated

        packages = {"manifest": manifest_hash(generated)}
        if peer_info is not None:
            packages["peer"] = peer_info
        if args.against:
            packages.update(against=args.against,
                            against_manifest=manifest_hash(sys.modules["generated_against"]))
        common.write_json(os.path.join(args.out, "hostcost.json"),
                          {"env": common.env_info(), "calls": args.calls,
                           "passes": None if args.against else args.passes, **packages,
                           "rows": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
