"""Compile warm-up: fill Triton's disk cache in parallel worker processes before timing.

Every candidate is its own Triton compile (about 2200 for the router section, 4000 for
decode, 100–200 per attention point, the same ones at every point of a mode and inputs);
compiled serially in the timing process that would take most of a device call. The workers launch one representative of every distinct compile key
once (constexprs, launch options, and the integer specialisations Triton makes: 1 and
multiples of 16 are their own compiles), grouped so no two workers compile the same kernel
(attention: each candidate once, at the first point measuring it, in chunks of a few; decode
points of up to ATTN_STEP_MAX_PROGRAMS programs also run inside sparse_decode_step, as the
timing loop does).
The timing process then only loads them. If the pool fails, the timing loop compiles on
demand.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from types import SimpleNamespace

import common  # tools/common.py

from .space import ATTN_STEP_MAX_PROGRAMS


ATTN_CHUNK = 8  # attention tasks per warm-up group (each one or two compiles)


def _int_class(n: int) -> int:
    """Triton's integer specialisation of an argument: 1, divisible by 16, or other."""
    return 1 if n == 1 else (16 if n % 16 == 0 else 0)


def warm_groups(space, sections, shapes=None, contexts=None, requests=None,
                programs=None, tokens=None) -> list:
    """Disjoint groups of launch tasks covering every compile the timing loop will need,
    longest first (a decode compile costs several router compiles)."""
    groups: dict = {}
    seen: set = set()  # the same launch reached from two groups (a scorer with its selector)

    def add(group, dedup, task):
        if repr(task) not in seen:
            seen.add(repr(task))
            groups.setdefault(group, {}).setdefault(dedup, task)

    if "router" in sections:
        for shape, (lo, hi), reps in space.router_buckets(shapes, tokens):
            for kernel, params in space.router_candidates(*shape, lo, hi):
                for m, dt in reps:
                    if kernel == "splitk":  # does not specialise M: one compile per config
                        add(("splitk", shape, dt, params["block_m"]), tuple(params.items()),
                            ("router", shape, m, dt, kernel, params))
                    else:
                        add(("per_expert", shape, dt, params["block_m"]),
                            (params["block_e"], params["block_k"], params["num_warps"],
                             _int_class(m)),
                            ("router", shape, m, dt, kernel, params))
    if "decode" in sections:
        for R, Q, mb in space.decode_points(contexts, requests):
            fixed = space.fixed_selector(R, Q, mb)
            default = space.default("index_score", space.score_bucket(R, Q, mb))
            for variant, params in space.scorer_candidates_at(R, Q, mb):
                add(("scorer", variant, R if variant.endswith("balanced") else None, Q),
                    (params.get("num_warps"), params.get("num_stages"), params.get("topk_tile"),
                     params.get("static_chunks"), fixed.get("pdl")),
                    ("decode", R, Q, variant, params, fixed))
            selectors = space.selector_candidates_at(R, Q, mb) if space.measures_selector \
                else []
            for _, sel in [(None, fixed)] + selectors:
                add(("selector", sel["topk_chunks"], sel["topk_tile"]),
                    tuple(sorted(sel.items())) + (_int_class(R * Q),),
                    ("decode", R, Q, *default, sel))

    if "attention" in sections:
        # One task per compile: a candidate's kernels depend on the mode, the inputs and the
        # launch, not on the point's program count or KV heads (whose integers the kernels
        # do not specialise: on 2026-12-03 a 1-KV-head point's 144 candidates were timed in
        # 2.4 s right after the 4-head point had compiled them), so each is launched at the
        # smallest point that measures it (a decode point of up to ATTN_STEP_MAX_PROGRAMS
        # also inside the step): sixteen workers each holding a largest point's inputs (up
        # to 16 GiB) ran the device out of memory. Per-point groups had every worker compile
        # the same kernels. Chunks of ATTN_CHUNK tasks, in point order (a worker builds a
        # point's inputs once per chunk), spread the compiles over the workers.
        tasks = {}
        # (nor its query length: the attention does not specialise decode_query_len; the
        # step's indexer does, and compiles in the settle round of its first Q 4 point)
        for mode, inputs, P, H, Q in sorted(space.attn_points(programs), key=lambda p: p[2]):
            step = mode == "decode" and P <= ATTN_STEP_MAX_PROGRAMS
            for variant, params in space.attn_candidates_at(mode, inputs, P, Q):
                tasks.setdefault((mode, repr(sorted(inputs.items())), step, variant,
                                  repr(params)),
                                 ("attention", mode, inputs, P, H, Q, variant, params))
        ordered = list(tasks.values())
        for i in range(0, len(ordered), ATTN_CHUNK):
            for n, task in enumerate(ordered[i:i + ATTN_CHUNK]):
                add(("attention", i), n, task)

    def cost(tasks):
        return sum(1 if t[0] == "router" else 4 for t in tasks)

    return sorted((list(g.values()) for g in groups.values()), key=cost, reverse=True)


def _worker(args):
    """In a spawned process: launch each task once. Returns (launches that ran, [errors])."""
    tasks, consts = args
    common.setup(False)
    import torch

    from .kernels import GpuDevice

    dev = GpuDevice(SimpleNamespace(**consts))
    ok, errors, cache = 0, [], {}
    for task in tasks:
        try:
            if task[0] == "router":
                _, shape, m, dt, kernel, params = task
                if ("w", shape) not in cache:
                    cache.clear()
                    cache[("w", shape)] = dev.router_weight(*shape)
                dev.router_call(dev.router_case(cache[("w", shape)], m, dt), kernel, params)()
            elif task[0] == "attention":
                _, mode, inputs, P, H, Q, variant, params = task
                key = ("a", mode, repr(sorted(inputs.items())), P, H, Q)
                if key not in cache:
                    cache.clear()
                    cache[key] = dev.attn_case(mode, inputs, P, H, Q=Q)
                dev.attn_call(cache[key], variant, params)()
                if mode == "decode" and P <= ATTN_STEP_MAX_PROGRAMS:  # also inside the step
                    step = key + ("step",)
                    if step not in cache:
                        cache[step] = dev.attn_step_case(cache[key])
                    dev.attn_call(cache[step], variant, params)()
            else:
                _, R, Q, variant, params, sel = task
                if ("d", R, Q) not in cache:
                    cache.clear()
                    cache[("d", R, Q)] = dev.decode_case(R, Q, 64 * consts["block"])
                inp = cache[("d", R, Q)]
                inp["counter"].zero_()
                dev.decode_call(inp, variant, params, sel)()
            torch.cuda.synchronize()
            ok += 1
        except Exception as e:  # noqa: BLE001 - reported; the timing loop rejects it again
            errors.append(f"{task[:4]}: {type(e).__name__}: {e}"[:300])
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - a broken context: stop this worker
                break
    return ok, errors


def warm(space, sections, jobs=None, timeout_s=240.0, shapes=None, contexts=None, requests=None,
         programs=None, tokens=None, say=common.say) -> dict:
    """Run the warm-up pool; returns what it did (for the run file)."""
    jobs = min(14, max(1, (os.cpu_count() or 2) - 2)) if jobs is None else jobs
    work = warm_groups(space, sections, shapes, contexts, requests, programs, tokens)
    if jobs <= 0 or not work:
        return {"skipped": True}
    consts = {"block": space.block, "head_dim": space.head_dim, "topk": space.topk,
              "inputs": space.inputs}
    tasks, t = sum(len(g) for g in work), time.time()
    say(f"== compile warm-up: {tasks} kernels in {len(work)} groups on {jobs} workers")
    try:
        pool = mp.get_context("spawn").Pool(processes=jobs)
        try:  # a worker that dies (not just raises) would leave map() waiting: bound the wait
            results = pool.map_async(_worker, [(g, consts) for g in work], chunksize=1).get(
                timeout_s)
            pool.close()
        finally:
            pool.terminate()
            pool.join()
    except Exception as e:  # noqa: BLE001 - the timing loop compiles on demand instead
        say(f"   warm-up failed ({type(e).__name__}: {e}); compiling on demand")
        return {"error": f"{type(e).__name__}: {e}"}
    errors = [e for r in results for e in r[1]]
    say(f"   warm-up: {sum(r[0] for r in results)} launches, {len(errors)} errors "
        f"[{time.time() - t:.1f}s]")
    return {"tasks": tasks, "ok": sum(r[0] for r in results), "errors": errors[:50],
            "seconds": time.time() - t}
