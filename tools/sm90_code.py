#!/usr/bin/env python3
"""What a generated kernel compiles to for sm_90, on any machine (no GPU: Triton's bundled
ptxas and nvdisasm): registers, spills and the SASS instructions by kind, per thread.

    python3 tools/sm90_code.py router --shape 6144x256 --block-m 4 --block-e 2 --block-k 512 --warps 4
    python3 tools/sm90_code.py router-splitk --shape 4096x192 --block-m 32 --block-n 32 --block-k 64 --split-k 16 --stages 3
    python3 tools/sm90_code.py scorer --q bf16 --cache fp8e4m3 --block-q 4 --warps 4 --stages 3
    python3 tools/sm90_code.py attention --group 8 --kv-tile 64 --splits 8 --stages 3
    python3 tools/sm90_code.py tiled --group 16 --lanes 128 --warps 8 --stages 3
    python3 tools/sm90_code.py tiled --minima --variant below_page_last
    python3 tools/sm90_code.py tiled --minima --source OLD.py   # git show REV:generated/sparse_attn.py
    python3 tools/sm90_code.py tables --q bf16 --cache bf16 --against OLD.py
        # every sm_90 table launch for those inputs, beside OLD's
    python3 tools/sm90_code.py shared   # launches of the tables past sm_90's shared memory

Arguments are specialized the way the JIT specializes contiguous, 16-byte aligned tensors:
aligned pointers, unit strides as constants, the other strides divisible by 16. Reading the
counts: `BAR.SYNC` per K step means a layout conversion through shared memory, `LDL`/`STL`
are register spills, `LDG.E.128` are 16-byte loads. "main loop" counts one pass through the
loop that holds the matrix products (the attention's key step): where a step is bound by its
instruction latencies (one warp per scheduler) this, not the kernel's total, is its cost.
Device time is scarce; this is free.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (tools/common.py)

# the dispatch tables' dtype names -> Triton pointer types
POINTER = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32", "fp8e4m3": "*fp8e4nv",
           "fp8e5m2": "*fp8e5"}


def compile_kernel(kernel, pointer_types: dict, constexprs: dict, *, aligned=True,
                   div16=(), **options):
    """``kernel`` compiled for sm_90. ``pointer_types`` types any argument (a float scalar:
    "fp32"); other pointer arguments default to ``*i32`` and the rest to ``i32``;
    ``aligned``: every pointer 16-byte aligned; ``div16``: integer arguments known to be
    multiples of 16 (as the JIT specializes them)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = kernel.arg_names
    signature = {n: ("constexpr" if n in constexprs else pointer_types[n] if n in pointer_types
                     else "*i32" if n.endswith("_ptr") else "i32")
                 for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names
             if (aligned and signature[n].startswith("*")) or n in div16}
    src = ASTSource(fn=kernel, signature=signature, attrs=attrs,
                    constexprs={(names.index(n),): v for n, v in constexprs.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def facts(compiled) -> dict:
    """{"registers", "spill_stores", "spill_loads" (bytes), "ops": {SASS opcode: count}}."""
    from triton import knobs  # the ptxas and nvdisasm Triton itself uses

    ptxas = subprocess.run([knobs.nvidia.ptxas.path, "-arch=sm_90a", "-v", "-o", os.devnull,
                            "-"], input=compiled.asm["ptx"], capture_output=True, text=True,
                           check=True).stderr

    def number(pattern):
        found = re.search(pattern, ptxas)
        return int(found.group(1)) if found else 0

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        sass = subprocess.run([knobs.nvidia.nvdisasm.path, "-c", f.name],
                              capture_output=True, text=True, check=True).stdout
    ops = collections.Counter(m.group(1) for m in re.finditer(
        r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass, re.M))
    return {"registers": number(r"Used (\d+) registers"),
            "spill_stores": number(r"(\d+) bytes spill stores"),
            "spill_loads": number(r"(\d+) bytes spill loads"), "ops": dict(ops),
            "loop_ops": loop_ops(sass)}


def loop_ops(sass: str) -> dict:
    """{SASS opcode: count} of one pass through the kernel's main loop: of the loops (a label
    and a later branch back to it) the one with the most matrix products, or {} where no
    loop holds one. A latency-bound step's cost is this count, not the kernel's."""
    label_at, body, loops = {}, [], []
    for i, line in enumerate(sass.splitlines()):
        label = re.match(r"^(\.L_x_\d+):", line)
        if label:
            label_at[label.group(1)] = i
        op = re.match(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*)", line)
        if op:
            body.append((i, op.group(1)))
            back = re.search(r"\((\.L_x_\d+)\)", op.group(2))
            if op.group(1).startswith("BRA") and back and label_at.get(back.group(1), i) < i:
                loops.append((label_at[back.group(1)], i))
    counts = [collections.Counter(op for i, op in body if start < i <= end)
              for start, end in loops]
    products = [sum(n for op, n in c.items() if op.split(".")[0] in ("HMMA", "HGMMA"))
                for c in counts]
    return dict(counts[products.index(max(products))]) if products and max(products) else {}


def router(shape=(6144, 256), block_m=4, block_k=512, warps=4, x="bf16", w="fp32", block_e=1):
    """The router's per-expert kernel at one launch row."""
    from generated import moe_router

    K, N = shape
    return compile_kernel(moe_router._router_gemm_kernel,
                          {"x_ptr": POINTER[x], "w_ptr": POINTER[w], "out_ptr": "*fp32"},
                          dict(HIDDEN_SIZE=K, NUM_EXPERTS=N, BLOCK_M=block_m, BLOCK_E=block_e,
                               BLOCK_K=block_k),
                          num_warps=warps, num_stages=1)


def router_splitk(shape=(4096, 192), block_m=32, block_n=32, block_k=64, split_k=16,
                  tf32x3=True, warps=4, stages=3, x="fp32", w="fp32"):
    """The router's split-K kernel at one launch row (M is a runtime argument)."""
    from generated import moe_router

    K, N = shape
    return compile_kernel(moe_router._router_gemm_splitk_kernel,
                          {"x_ptr": POINTER[x], "w_ptr": POINTER[w], "out_ptr": "*fp32",
                           "scratch_ptr": "*fp32", "counter_ptr": "*i32"},
                          dict(HIDDEN_SIZE=K, NUM_EXPERTS=N, BLOCK_M=block_m, BLOCK_N=block_n,
                               BLOCK_K=block_k, SPLIT_K=split_k,
                               PRECISION="tf32x3" if tf32x3 else "ieee"),
                          num_warps=warps, num_stages=stages)


def scorer(q="bf16", cache="bf16", head_dim=128, heads=1, block_q=1, warps=4, stages=2,
           static_chunks=False):
    """The split-K scorer on contiguous inputs, with the products its launcher picks on an
    sm_90 device (`index_score.score_products`: fp32 beyond one lane is 3xTF32 there)."""
    import torch

    from generated import index_score

    real = block_q * heads
    products = index_score.score_products(common.torch_dtype(q), common.torch_dtype(cache), real,
                                          torch.device("cpu"))
    products = "tf32x3" if products == "ieee" else products  # sm_90 has TF32 tensor cores
    lanes = real if products == "fma" else max(index_score.MIN_DOT_ROWS, real)
    return compile_kernel(
        index_score._score_split_kernel,
        {"idx_q_ptr": POINTER[q], "kv_ptr": POINTER[cache], "scores_ptr": "*fp32"},
        dict(H=heads, D=head_dim, BLOCK_SIZE_Q=block_q, LANES=lanes, PRODUCTS=products,
             STATIC_CHUNKS=static_chunks, LAUNCH_DEPENDENTS=False, stride_sl=1, stride_qd=1,
             stride_kd=1, stride_sb=1),
        div16=("stride_qt", "stride_qh", "stride_kp", "stride_kt", "stride_sh", "stride_st"),
        num_warps=warps, num_stages=stages)


@contextlib.contextmanager
def sparse_attn_module(source=None, variant=None):
    """`generated.sparse_attn` replaced, while the block runs, by another revision of it
    (``source``: a file) and/or with one of attn_ablation's source variants applied (its
    VARIANTS' name); as it is where both are None."""
    if source is None and variant is None:
        yield
        return
    import generated
    import attn_ablation

    src = open(source).read() if source else None
    edits = attn_ablation.VARIANTS[variant] if variant else []
    mod = attn_ablation.build(variant or "source", edits, src)
    before = generated.sparse_attn
    generated.sparse_attn = sys.modules["generated.sparse_attn"] = mod
    try:
        yield
    finally:
        generated.sparse_attn = sys.modules["generated.sparse_attn"] = before


def attention(group=16, head_dim=128, kv_tile=128, splits=8, head_split=1, warps=4, stages=2,
              merge_kernel=False, q="bf16", cache="bf16", topk=16, tma=False,
              table_first=False, scales="none", pairs_desc=False, mode="decode",
              table_held=None, max_registers=None):
    """The sparse-attention split kernel (decode) at one launch, on a contiguous
    [pages, 2, 128, Hkv, D] cache of ``cache``'s type (the products taken as the launcher
    takes them on an H200: `sparse_attn.products`), its head lanes padded as the launcher
    pads them; ``tma``:
    its tiles through a tensor descriptor of the cache (`kv_tma_layout`); ``table_first``: the
    row's table read before the ids (``table_held`` entries; default as the launcher holds them,
    `sparse_attn.table_held`: TABLE_FIRST_MAX); ``scales``: none, scalar or per_token (K and V scales of an fp8 cache); ``pairs_desc``: that descriptor over an fp8
    cache viewed as 16-bit pairs (attn_ablation's k_pairs_tma); ``mode``: decode or prefill
    rows; ``max_registers``: ptxas' cap per thread (.maxnreg; the launch option max_registers)."""
    from generated import sparse_attn

    if table_held is None:
        table_held = sparse_attn.TABLE_FIRST_MAX
    gh = group // min(head_split, group)
    gp = max(sparse_attn.MIN_DOT_ROWS, 1 << (gh - 1).bit_length())
    merge_kernel = merge_kernel and splits > 1
    fp8 = cache.startswith("fp8")
    dot = "tf32x3" if q == "fp32" else "fp16" if fp8 and q == "bf16" else "native"
    return compile_kernel(
        sparse_attn._sparse_attn_kernel,
        {"q_ptr": POINTER[q], "kv_ptr": POINTER[cache], "out_ptr": POINTER[q],
         "part_ptr": "*fp32", "k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32",
         "sm_scale": "fp32",
         **({"kv_desc": f"tensordesc<i16[1,1,{kv_tile},1,{head_dim // 2}]>" if pairs_desc
             else f"tensordesc<{POINTER[cache][1:]}[1,1,{kv_tile},1,{head_dim}]>"}
            if tma else {})},
        dict(G=group, GH=gh, GP=gp, D=head_dim, BLOCK_N=kv_tile, SPLITS=splits, MODE=mode,
             SCALES=scales, DOT=dot, PDL="none", TOPK_P=1 << (topk - 1).bit_length(),
             MERGE_KERNEL=merge_kernel, LAUNCH_DEPENDENTS=merge_kernel, TMA=tma,
             TABLE_HELD=table_held if table_first else 0, FP8_PTX=fp8, V_PAIRS=fp8 and q != "fp32",
             **({} if tma else {"kv_desc": None}), stride_qd=1,
             stride_kd=1, stride_od=1, stride_ik=1, stride_sl=1, stride_cu=1, stride_pl=1),
        div16=("stride_qt", "stride_qh", "stride_kp", "stride_kh", "stride_kt", "v_off",
               "stride_ot", "stride_oh"),
        num_warps=warps, num_stages=stages,
        **({"maxnreg": max_registers} if max_registers else {}))


def tiled(group=16, head_dim=128, lanes=64, warps=4, stages=2, q="bf16", cache="bf16",
          topk=16, scales="none", sorted_union=True, tma=False, mode="prefill", splits=1):
    """The query-tiled sparse-attention kernel at one launch (``mode``: prefill rows, or
    decode rows launched plainly), on a contiguous [pages, 2, 128, Hkv, D] cache of
    ``cache``'s type (products as `attention` takes them);
    ``sorted_union``: the tile's union walked as sorted keys (a pipelined loop: cp.async
    copies, LDGSTS) or by minima; ``tma``: its tiles through a tensor descriptor of the cache
    (`kv_tma_layout`); ``splits``: shares of the sorted union writing partials."""
    from generated import sparse_attn

    fp8 = cache.startswith("fp8")
    dot = "tf32x3" if q == "fp32" else "fp16" if fp8 and q == "bf16" else "native"
    return compile_kernel(
        sparse_attn._sparse_attn_tiled_kernel,
        {"q_ptr": POINTER[q], "kv_ptr": POINTER[cache], "out_ptr": POINTER[q],
         "k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32", "sm_scale": "fp32",
         **({"part_ptr": "*fp32"} if splits > 1 else {}),
         **({"kv_desc": f"tensordesc<{POINTER[cache][1:]}[1,1,128,1,{head_dim}]>"}
            if tma else {})},
        dict(G=group, D=head_dim, BT=sparse_attn.tile_rows(group, lanes), TMA=tma, MODE=mode,
             PDL="none", SPLITS=splits, LAUNCH_DEPENDENTS=False,
             **({} if splits > 1 else {"part_ptr": None}),
             **({} if tma else {"kv_desc": None}),
             TOPK_P=1 << (topk - 1).bit_length(), SCALES=scales, DOT=dot, FP8_PTX=fp8,
             SORTED_UNION=sorted_union, stride_qd=1, stride_kd=1, stride_od=1, stride_ik=1, stride_sl=1, stride_cu=1,
             stride_pl=1),
        div16=("stride_qt", "stride_qh", "stride_kp", "stride_kh", "stride_kt", "v_off",
               "stride_ot", "stride_oh"),
        num_warps=warps, num_stages=stages)


def table_rows(hardware="sm_90", modes=("decode", "prefill")):
    """(mode, row, allowed) of each row of the attention tables that chooses a launch for
    ``hardware``; allowed(axis, every) is the row's values of that input axis (``every`` where
    it allows any; None: the axis' domain)."""
    from generated import dispatch

    for mode in modes:
        table = dispatch.TABLES[f"sparse_attn_{mode}"]
        first = {a: i for i, a in enumerate(table.axes)}
        for row in table.rows:
            hw = row.conds[first["hardware"]]
            if row.variant is None or (hw is not None and hardware not in hw):
                continue

            def allowed(axis, every=None, row=row, table=table, first=first):
                cond = row.conds[first[axis]]
                return cond if cond is not None else \
                    table.domains[first[axis]] if every is None else every

            yield mode, row, allowed


def table_launches(hardware="sm_90", modes=("decode", "prefill")) -> list:
    """The distinct attention launches the generated dispatch tables give ``hardware``: (mode,
    q, cache, scales, G, params) per row, the row's first allowed value of each input axis
    (bf16, none and G 16 where it allows any; a 16-bit cache of q's type, scales only over
    fp8)."""
    out = []
    for mode, row, allowed in table_rows(hardware, modes):
        q, cache = allowed("q_dtype", ("bf16",))[0], allowed("kv_dtype", ("bf16",))[0]
        cache = cache if cache.startswith("fp8") or q == "fp32" else q
        scales = allowed("scales", ("none",))[0] if cache.startswith("fp8") else "none"
        launch = (mode, q, cache, scales, allowed("group", (16,))[0],
                  tuple(sorted(row.params.items())))
        if launch not in out:
            out.append(launch)
    return out


def launch_facts(launch, source=None, variant=None) -> tuple:
    """(registers, spilled bytes stored and loaded, instructions per pass through the main
    loop) of one `table_launches` launch compiled for sm_90, from another revision
    (``source``) and/or with an attn_ablation variant where given."""
    common.setup(False)
    os.environ.pop("TRITON_INTERPRET", None)
    mode, q, cache, scales, group, params = launch
    import attn_ablation

    # (a variant that is a launch option, such as regs128, changes the launch, not the source)
    p = {**dict(params), **attn_ablation.LAUNCH_OPTIONS.get(variant, {})}
    with sparse_attn_module(source, variant):
        if "lanes" in p:
            compiled = tiled(group, 128, p["lanes"], p["num_warps"], p["num_stages"], q, cache,
                             16, scales, p["sorted_union"], p["tma"], mode=mode,
                             splits=p.get("splits", 1) if p["sorted_union"] else 1)
        else:
            compiled = attention(group, 128, p["kv_tile"], p["splits"], p["head_split"],
                                 p["num_warps"], p["num_stages"], p["merge_kernel"], q=q,
                                 cache=cache, tma=p["tma"], table_first=p["table_first"],
                                 scales=scales, mode=mode,
                                 max_registers=p.get("max_registers"))
    f = facts(compiled)
    return f["registers"], f["spill_stores"] + f["spill_loads"], sum(f["loop_ops"].values())


def tables_report(hardware, modes, source=None, variant=None, against=None, limit=None,
                  jobs=1, inputs=(None, None, None)) -> list:
    """One line per launch of the tables (`table_launches`; of the q, cache and scales given
    in ``inputs``, None: any) with its `launch_facts`, and beside them those of the
    ``against`` revision, marked "<<" where the kernel spills more or its loop is longer."""
    import concurrent.futures

    launches = [x for x in table_launches(hardware, modes)
                if all(want is None or want == got for want, got in zip(inputs, x[1:4]))]
    launches = launches[:limit]
    work = [(x, source, variant) for x in launches] + \
        ([(x, against, None) for x in launches] if against else [])
    with concurrent.futures.ProcessPoolExecutor(max(1, jobs)) as pool:
        got = list(pool.map(launch_facts, *zip(*work)))
    lines = []
    for i, (mode, q, cache, scales, group, params) in enumerate(launches):
        now = got[i]
        text = (f"{mode} q {q} cache {cache} scales {scales} G {group} {dict(params)}: "
                f"{now[0]} registers, spills {now[1]} bytes, main loop {now[2]}")
        if against:
            old = got[len(launches) + i]
            text += (f"; against: {old[0]}, {old[1]}, {old[2]}"
                     + (" <<" if now[1] > old[1] or now[2] > old[2] else ""))
        lines.append(text)
    return lines


# What one program may ask for on sm_90 (227 KiB of the SM's 228: one is the system's).
SM90_SHARED_MAX = 227 * 1024


def largest_launches(hardware="sm_90", modes=("decode", "prefill")) -> list:
    """Each attention launch of ``hardware``'s tables at the most shared memory it can ask
    for: (mode, q, cache, scales, G, D, params) per row and input kind it serves, at the
    row's largest group and head_dim (the tiles grow with both), every q type, one cache
    type per element size and every scale mode of an fp8 cache."""
    out = []
    for mode, row, allowed in table_rows(hardware, modes):
        group, head_dim = max(allowed("group")), max(allowed("head_dim"))
        for q in allowed("q_dtype"):
            for cache in allowed("kv_dtype"):
                # (either fp8 type: the same bytes; a 16-bit cache of q's type)
                cache = "fp8e4m3" if cache.startswith("fp8") else q if q != "fp32" else cache
                for scales in allowed("scales") if cache.startswith("fp8") else ("none",):
                    launch = (mode, q, cache, scales, group, head_dim,
                              tuple(sorted(row.params.items())))
                    if launch not in out:
                        out.append(launch)
    return out


def launch_shared(launch) -> int:
    """The most shared memory (bytes) one `largest_launches` launch asks for: the split kernel
    at 512 ids holding a 1024-entry table, the query tile at 512 ids walking by minima and, if
    its row sorts the union, at the most ids that sorting takes."""
    from generated import sparse_attn

    common.setup(False)
    os.environ.pop("TRITON_INTERPRET", None)
    mode, q, cache, scales, group, head_dim, params = launch
    p = dict(params)
    if "lanes" not in p:
        return attention(group, head_dim, p["kv_tile"], p["splits"], p["head_split"],
                         p["num_warps"], p["num_stages"], p["merge_kernel"], q=q, cache=cache,
                         topk=512, tma=p["tma"], table_first=p["table_first"], scales=scales,
                         mode=mode, table_held=1024).metadata.shared
    walks = [(512, False)]
    if p["sorted_union"]:
        walks.append((sparse_attn.SORTED_UNION_MAX_KEYS
                      // sparse_attn.tile_rows(group, p["lanes"]), True))
    return max(tiled(group, head_dim, p["lanes"], p["num_warps"], p["num_stages"], q, cache,
                     topk, scales, sorted_union, p["tma"], mode=mode,
                     splits=p.get("splits", 1) if sorted_union else 1).metadata.shared
               for topk, sorted_union in walks if topk >= 1)


def shared_report(hardware, modes, jobs=1, limit=None) -> list:
    """One line per `largest_launches` launch asking for more shared memory than an sm_90
    program may have, then a count of the launches compiled."""
    import concurrent.futures

    launches = largest_launches(hardware, modes)[:limit]
    with concurrent.futures.ProcessPoolExecutor(max(1, jobs)) as pool:
        got = list(pool.map(launch_shared, launches))
    lines = [f"OVER {mode} q {q} cache {cache} scales {scales} G {group} D {head_dim} "
             f"{dict(params)}: {nbytes} bytes of shared memory"
             for (mode, q, cache, scales, group, head_dim, params), nbytes in zip(launches, got)
             if nbytes > SM90_SHARED_MAX]
    return lines + [f"{len(launches)} launches compiled, {len(lines)} over "
                    f"{SM90_SHARED_MAX} bytes; the largest asks for {max(got, default=0)}"]


def summary(name: str, f: dict) -> str:
    ops = f["ops"]
    shown = sorted(k for k in ops if k.split(".")[0] in (
        "LDG", "STG", "LDS", "STS", "LDSM", "LDGSTS", "BAR", "LDL", "STL", "FFMA", "HMMA",
        "HGMMA", "F2F", "F2FP", "SHFL", "PRMT"))
    text = (f"{name}: {sum(ops.values())} SASS instructions, {f['registers']} registers, "
            f"spills {f['spill_stores']}/{f['spill_loads']} bytes stored/loaded\n  "
            + ", ".join(f"{k} {ops[k]}" for k in shown))
    loop = f.get("loop_ops")
    if loop:
        kinds = collections.Counter()
        for op, n in loop.items():
            kinds[op.split(".")[0]] += n
        text += (f"\n  main loop: {sum(loop.values())} instructions per pass: "
                 + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    return text


def revision(args) -> str:
    """' (source FILE, variant NAME)' where the kernel is not the generated one as it is."""
    given = [f"{k} {v}" for k, v in (("source", args.source), ("variant", args.variant)) if v]
    return f" ({', '.join(given)})" if given else ""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="kernel", required=True)
    r = sub.add_parser("router", help="per-expert router kernel")
    r.add_argument("--shape", default="6144x256", help="KxN weight shape")
    r.add_argument("--block-m", type=int, default=4)
    r.add_argument("--block-e", type=int, default=1)
    r.add_argument("--block-k", type=int, default=512)
    r.add_argument("--warps", type=int, default=4)
    r.add_argument("--x", choices=("bf16", "fp32"), default="bf16")
    r.add_argument("--w", choices=("bf16", "fp32"), default="fp32")
    rs = sub.add_parser("router-splitk", help="split-K router kernel")
    rs.add_argument("--shape", default="4096x192", help="KxN weight shape")
    rs.add_argument("--block-m", type=int, default=32)
    rs.add_argument("--block-n", type=int, default=32)
    rs.add_argument("--block-k", type=int, default=64)
    rs.add_argument("--split-k", type=int, default=16)
    rs.add_argument("--ieee", action="store_true", help="fp32 FMA products, not tf32x3")
    rs.add_argument("--warps", type=int, default=4)
    rs.add_argument("--stages", type=int, default=3)
    rs.add_argument("--x", choices=("bf16", "fp32"), default="fp32")
    rs.add_argument("--w", choices=("bf16", "fp32"), default="fp32")
    s = sub.add_parser("scorer", help="split-K decode scorer")
    s.add_argument("--q", choices=tuple(POINTER), default="bf16")
    s.add_argument("--cache", choices=tuple(POINTER), default="bf16")
    s.add_argument("--head-dim", type=int, default=128)
    s.add_argument("--block-q", type=int, default=1, help="next_pow2(Qmax)")
    s.add_argument("--warps", type=int, default=4)
    s.add_argument("--stages", type=int, default=2)
    a = sub.add_parser("attention", help="sparse-attention split kernel (decode)")
    a.add_argument("--group", type=int, default=16, help="query heads per KV head")
    a.add_argument("--head-dim", type=int, default=128)
    a.add_argument("--kv-tile", type=int, default=128, help="keys per step (64 or 128)")
    a.add_argument("--splits", type=int, default=8)
    a.add_argument("--head-split", type=int, default=1)
    a.add_argument("--warps", type=int, default=4)
    a.add_argument("--stages", type=int, default=2)
    a.add_argument("--merge-kernel", action="store_true")
    a.add_argument("--tma", action="store_true", help="tiles through a tensor descriptor")
    a.add_argument("--q", choices=("bf16", "fp16", "fp32"), default="bf16")
    a.add_argument("--cache", choices=tuple(POINTER), default="bf16")
    a.add_argument("--table-first", action="store_true",
                   help="the row's table entries read before its ids")
    a.add_argument("--scales", choices=("none", "scalar", "per_token"), default="none",
                   help="K and V scales of an fp8 cache")
    a.add_argument("--mode", choices=("decode", "prefill"), default="decode",
                   help="the rows' kind (prefill: the per-token kernel)")
    a.add_argument("--max-registers", type=int, default=None,
                   help="ptxas' register cap per thread (.maxnreg)")
    tb = sub.add_parser("tables", help="every attention launch of a target's dispatch tables")
    tb.add_argument("--hardware", default="sm_90")
    tb.add_argument("--mode", choices=("decode", "prefill", "both"), default="both")
    tb.add_argument("--against", default=None,
                    help="another revision of generated/sparse_attn.py (a file) beside it")
    tb.add_argument("--q", choices=("bf16", "fp16", "fp32"), default=None)
    tb.add_argument("--cache", choices=tuple(POINTER), default=None)
    tb.add_argument("--scales", choices=("none", "scalar", "per_token"), default=None)
    tb.add_argument("--limit", type=int, default=None, help="the first N launches only")
    tb.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    sh = sub.add_parser("shared", help="every attention launch of a target's tables at its "
                                       "largest group and head_dim: shared memory past sm_90's")
    sh.add_argument("--hardware", default="sm_90")
    sh.add_argument("--mode", choices=("decode", "prefill", "both"), default="both")
    sh.add_argument("--limit", type=int, default=None, help="the first N launches only")
    sh.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    t = sub.add_parser("tiled", help="sparse-attention query-tiled kernel")
    t.add_argument("--group", type=int, default=16, help="query heads per KV head")
    t.add_argument("--head-dim", type=int, default=128)
    t.add_argument("--lanes", type=int, default=64, help="query lanes (rows · G) per tile")
    t.add_argument("--topk", type=int, default=16)
    t.add_argument("--warps", type=int, default=4)
    t.add_argument("--stages", type=int, default=2)
    t.add_argument("--q", choices=("bf16", "fp16", "fp32"), default="bf16")
    t.add_argument("--cache", choices=tuple(POINTER), default="bf16")
    t.add_argument("--scales", choices=("none", "scalar", "per_token"), default="none")
    t.add_argument("--minima", action="store_true",
                   help="the union walked by repeated minima, not as sorted keys")
    t.add_argument("--tma", action="store_true", help="tiles through a tensor descriptor")
    t.add_argument("--mode", choices=("prefill", "decode"), default="prefill")
    t.add_argument("--splits", type=int, default=1, help="shares of the sorted union")
    for sp in (a, t, tb):
        sp.add_argument("--source", default=None,
                        help="another revision of generated/sparse_attn.py (a file)")
        sp.add_argument("--variant", default=None,
                        help="one of tools/attn_ablation.py's source variants, applied")
    args = p.parse_args(argv)
    common.setup(False)
    os.environ.pop("TRITON_INTERPRET", None)  # the interpreter replaces @triton.jit functions
    if args.kernel == "shared":
        modes = ("decode", "prefill") if args.mode == "both" else (args.mode,)
        print("\n".join(shared_report(args.hardware, modes, args.jobs, args.limit)))
        return
    if args.kernel == "tables":
        modes = ("decode", "prefill") if args.mode == "both" else (args.mode,)
        print("\n".join(tables_report(args.hardware, modes, args.source, args.variant,
                                       args.against, args.limit, args.jobs,
                                       (args.q, args.cache, args.scales))))
        return
    if args.kernel == "router":
        K, N = (int(v) for v in args.shape.split("x"))
        compiled = router((K, N), args.block_m, args.block_k, args.warps, args.x, args.w,
                          args.block_e)
        name = (f"router {args.shape} x {args.x} w {args.w} block_m {args.block_m} block_e "
                f"{args.block_e} block_k {args.block_k} warps {args.warps}")
    elif args.kernel == "router-splitk":
        K, N = (int(v) for v in args.shape.split("x"))
        compiled = router_splitk((K, N), args.block_m, args.block_n, args.block_k, args.split_k,
                                 not args.ieee, args.warps, args.stages, args.x, args.w)
        name = (f"router split-K {args.shape} x {args.x} w {args.w} block_m {args.block_m} "
                f"block_n {args.block_n} block_k {args.block_k} split_k {args.split_k} "
                f"{'ieee' if args.ieee else 'tf32x3'} warps {args.warps} stages {args.stages}")
    elif args.kernel == "attention":
        with sparse_attn_module(args.source, args.variant):
            compiled = attention(args.group, args.head_dim, args.kv_tile, args.splits,
                                 args.head_split, args.warps, args.stages, args.merge_kernel,
                                 q=args.q, cache=args.cache, tma=args.tma,
                                 table_first=args.table_first, scales=args.scales,
                                 mode=args.mode, max_registers=args.max_registers)
        name = (f"attention {args.mode} q {args.q} cache {args.cache} scales {args.scales} "
                f"G {args.group} D {args.head_dim} kv_tile {args.kv_tile} splits {args.splits} "
                f"head_split {args.head_split} warps {args.warps} stages {args.stages}"
                f"{' merge kernel' if args.merge_kernel else ''}{' tma' if args.tma else ''}"
                f"{' table first' if args.table_first else ''}"
                f"{f' max {args.max_registers} registers' if args.max_registers else ''}"
                f"{revision(args)}")
    elif args.kernel == "tiled":
        with sparse_attn_module(args.source, args.variant):
            compiled = tiled(args.group, args.head_dim, args.lanes, args.warps, args.stages,
                             args.q, args.cache, args.topk, args.scales, not args.minima,
                             args.tma, args.mode, args.splits)
        name = (f"tiled {args.mode} q {args.q} cache {args.cache} scales {args.scales} "
                f"G {args.group} D {args.head_dim} lanes {args.lanes} topk {args.topk} "
                f"warps {args.warps} stages {args.stages}"
                f"{' minima' if args.minima else ' sorted union'}"
                f"{f' {args.splits} splits' if args.splits > 1 else ''}"
                f"{' tma' if args.tma else ''}{revision(args)}")
    else:
        compiled = scorer(args.q, args.cache, args.head_dim, 1, args.block_q, args.warps,
                          args.stages)
        name = (f"scorer q {args.q} cache {args.cache} D {args.head_dim} block_q "
                f"{args.block_q} warps {args.warps} stages {args.stages}")
    print(summary(name, facts(compiled)) + f"\n  shared memory {compiled.metadata.shared} bytes")


if __name__ == "__main__":
    main()
