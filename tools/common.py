"""Timing helpers shared by tools/bench.py and tools/tune/.

GPU timing method (every number the tools report):

* warm up the op eagerly on a side stream (Triton compiles, torch creates handles), then capture
  one call in a ``torch.cuda.CUDAGraph``;
* per sample: flush L2 (outside the timed region; FLUSH_MODE below, default "read": a 256 MB
  read, which leaves no dirty lines behind), record a start event, ``g.replay()``, record an
  end event; all samples are queued back to back and read after one synchronize, so the flush kernel (~60-100 µs) keeps the GPU busy while the host queues the
  next replay (no launch gap inside the timed region);
* report the median, p10 and p90 in µs.

The time therefore includes the graph's own launch cost on the device; ``empty_kernel_us()``
measures that floor the same way (a one-program Triton kernel that does nothing).

``--smoke`` runs (CPU, TRITON_INTERPRET=1) use :func:`time_cpu` (perf_counter, no graphs); the
numbers only prove the code paths.
"""
from __future__ import annotations

import datetime
import gc
import json
import math
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLUSH_BYTES = 256 << 20
# How replay_times empties L2 before each sample:
#   "write": zero a 256 MB buffer (triton.testing.do_bench's way). L2 is write-back, so part
#            of those zeros is still dirty in L2 when the timed region starts and the kernel
#            under test pays for writing it back as it evicts it (~8 µs at 128k, measured when
#            the indexer was first timed).
#   "read":  read a 256 MB buffer (a max). L2 then holds only clean lines of that buffer:
#            nothing of the kernel's inputs and no pending write-back.
FLUSH_MODES = ("write", "read")
FLUSH_MODE = os.environ.get("KSPEC_FLUSH", "read")
if FLUSH_MODE not in FLUSH_MODES:
    raise ValueError(f"KSPEC_FLUSH: one of {FLUSH_MODES}, got {FLUSH_MODE!r}")


# ---------------------------------------------------------------------------------------------
# process setup


def usage_unless_out_dir(doc: str) -> None:
    """For the studies run as `tool.py OUTDIR [options]`: with no arguments, or a first argument
    that is an option (`--help`), print the tool's docstring and exit (0 for -h/--help, 2
    otherwise) before anything sets up a device or makes a folder named after the option."""
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print(doc)
        sys.exit(0 if {"-h", "--help"} & set(sys.argv[1:]) else 2)


def setup(smoke: bool) -> None:
    """Put the repository on sys.path; for smoke runs switch Triton's interpreter on (before
    triton is imported; `import generated` then applies its interpreter fixes)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    if smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        if "triton" in sys.modules and not _interpreter_active():
            raise RuntimeError("--smoke: triton was imported before TRITON_INTERPRET=1 was set")


def _interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def say(*parts) -> None:
    """One progress line, flushed at once (a remote run may show only the output's tail)."""
    print(*parts, flush=True)


# ---------------------------------------------------------------------------------------------
# statistics


def summarize(samples_us: list) -> dict:
    xs = sorted(float(x) for x in samples_us)
    if not xs:
        return {"median_us": float("nan"), "p10_us": float("nan"), "p90_us": float("nan"), "n": 0}

    def pct(p):
        if len(xs) == 1:
            return xs[0]
        k = (len(xs) - 1) * p
        lo, hi = math.floor(k), math.ceil(k)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    return {"median_us": statistics.median(xs), "p10_us": pct(0.1), "p90_us": pct(0.9),
            "min_us": xs[0], "n": len(xs)}


# ---------------------------------------------------------------------------------------------
# GPU timing


_FLUSH = {}


def flush_buffer(device=None):
    import torch

    dev = torch.device(device) if device is not None else torch.device("cuda",
                                                                       torch.cuda.current_device())
    if dev not in _FLUSH:
        _FLUSH[dev] = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=dev)
    return _FLUSH[dev]


def capture_graph(fn, warmup: int = 2):
    """Warm ``fn`` up on a side stream, then capture one call. Returns the graph."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(max(1, warmup)):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def flush_l2(mode: str | None = None) -> None:
    """Empty L2 of everything a timed kernel reads (see FLUSH_MODE)."""
    import torch

    mode = FLUSH_MODE if mode is None else mode
    buf = flush_buffer()
    if mode == "write":
        buf.zero_()
    elif mode == "read":
        words = buf.view(torch.int32)
        key = ("sink", words.device)
        if key not in _FLUSH:
            _FLUSH[key] = torch.empty((), dtype=torch.int32, device=words.device)
        torch.amax(words, dim=0, out=_FLUSH[key])
    else:
        raise ValueError(f"flush mode: one of {FLUSH_MODES}, got {mode!r}")


# Discarded replays before any timing: the first kernel timed right after heavy torch work
# (multi-GB references, big allocations) runs ~13 % slow for a few milliseconds, whichever it is.
SETTLE_S = 0.02


def settle(replay, flush: bool = True, flush_mode: str | None = None) -> int:
    """Replay (L2 flushed as the timing will be) until SETTLE_S of wall time has passed, at
    least twice (the first replay also uploads a graph). Returns the number of replays."""
    import torch

    t0, n = time.perf_counter(), 0
    while n < 2 or time.perf_counter() - t0 < SETTLE_S:
        if flush:
            flush_l2(flush_mode)
        replay()
        torch.cuda.synchronize()
        n += 1
    return n


def replay_times(replay, reps: int, flush: bool = True, flush_mode: str | None = None,
                 settled: bool = False) -> list:
    """Per-sample µs of ``replay()`` (a graph replay or an eager call), L2 flushed before each,
    after the discarded replays of `settle` (``settled``: the caller settled already, e.g. the
    tuner's settle round; one discarded replay still uploads the graph)."""
    import torch

    if settled:
        replay()
        torch.cuda.synchronize()
    else:
        settle(replay, flush, flush_mode)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if flush:
            flush_l2(flush_mode)
        starts[i].record()
        replay()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]


def time_graph(fn, reps: int = 30, warmup: int = 2, flush: bool = True,
               allow_eager: bool = True, flush_mode: str | None = None) -> dict:
    """Median/p10/p90 µs of one call of ``fn`` by CUDA-graph replay with L2 flushed.

    If capture fails (an op that syncs the host, an uncapturable allocation...), falls back to
    timing eager calls the same way and says so (``graph: False``, ``capture_error``)."""
    import torch

    graph, error = None, None
    try:
        graph = capture_graph(fn, warmup)
    except Exception as e:  # noqa: BLE001 - reported, then eager timing
        error = f"{type(e).__name__}: {e}"
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            pass
        if not allow_eager:
            raise
    if graph is not None:
        samples = replay_times(graph.replay, reps, flush, flush_mode)
    else:
        samples = replay_times(fn, reps, flush, flush_mode)
    out = summarize(samples)
    out["graph"] = graph is not None
    if error:
        out["capture_error"] = error[:300]
    del graph
    return out


def time_graphs(fns: dict, reps: int = 30, rounds: int = 5, smoke: bool = False,
                flush_mode: str | None = None) -> dict:
    """name -> time_graph's summary of one call of each of ``fns``, timed interleaved in one
    process: each captured in a CUDA graph (an fn that cannot be captured is timed eagerly,
    ``graph: False`` and ``capture_error``, as time_graph does) and settled (`settle`), then
    ``rounds`` rounds of ``reps // rounds`` L2-flushed replays of every graph, the order
    rotated each round, after a discarded settle round (`tune.measure.interleave`, as the
    tuner and launch_compare time). The median is the median of the round medians
    (``rounds`` keeps them); p10/p90/min are over every timed sample. A state that slows
    every kernel for a while (after heavy work; on one H200 it put a share of 30 replays in a
    row ~1 µs above the rest) then falls on a round of every op, not on the whole timing of
    the op that happened to run then. ``flush_mode``: how L2 is emptied (`flush_l2`). Smoke
    runs take each fn's checked call's time (`smoke_us`)."""
    if smoke:
        return {k: dict(summarize([smoke_us(fn)]), graph=False) for k, fn in fns.items()}
    import torch
    from tools.tune.measure import interleave

    replays, errors = {}, {}
    for k, fn in fns.items():
        try:
            replays[k] = capture_graph(fn).replay
        except Exception as e:  # noqa: BLE001 - reported, then eager timing
            errors[k] = f"{type(e).__name__}: {e}"[:300]
            torch.cuda.synchronize()
            replays[k] = fn
        settle(replays[k], flush_mode=flush_mode)
    per_round = max(1, reps // rounds)
    samples = {k: [] for k in replays}

    def sampler(k):
        def take(n):
            got = replay_times(replays[k], n, flush_mode=flush_mode, settled=True)
            samples[k].append(got)
            return got
        return take

    medians = interleave({k: sampler(k) for k in replays}, rounds, per_round)
    out = {}
    for k, meds in medians.items():
        out[k] = summarize([t for batch in samples[k][1:] for t in batch])  # settle dropped
        out[k].update(median_us=statistics.median(meds), rounds=meds, graph=k not in errors)
        if k in errors:
            out[k]["capture_error"] = errors[k]
    del replays
    return out


def interleaved_medians(calls: dict, smoke: bool, per_round: int = 20, rounds: int = 5) -> dict:
    """name -> median µs of each call, captured in a CUDA graph and timed interleaved in
    rotating rounds (L2 flushed, `tune.measure.interleave`); with ``smoke`` one CPU call's time
    (`smoke_us`) stands for every sample (the code paths only)."""
    from tools.tune.measure import interleave

    samplers = {}
    for name, fn in calls.items():
        if smoke:
            once = smoke_us(fn)
            samplers[name] = lambda n, once=once: [once] * n
            continue
        import torch

        fn()
        torch.cuda.synchronize()
        graph = capture_graph(fn)
        samplers[name] = lambda n, graph=graph: replay_times(graph.replay, n, settled=True)
    times = interleave(samplers, rounds=1 if smoke else rounds, per_round=2 if smoke else per_round)
    return {k: statistics.median(v) for k, v in times.items()}

class Checked:
    """``fn`` that keeps the wall time of its last call (``last_us``). A tool wraps the calls it
    runs once to check their output; a smoke run (the interpreter: code paths, not speed)
    then takes that time as the call's (`smoke_us`) instead of interpreting it again. On a GPU
    the time is never read (launches are asynchronous; graphs time the call)."""

    def __init__(self, fn):
        self.fn, self.last_us = fn, None

    def __call__(self):
        t0 = time.perf_counter()
        got = self.fn()
        self.last_us = (time.perf_counter() - t0) * 1e6
        return got


def smoke_us(fn) -> float:
    """A smoke run's time of ``fn``: its checked call's (`Checked`), else one call timed now."""
    known = getattr(fn, "last_us", None)
    return known if known is not None else time_cpu(fn, reps=1, warmup=0)["median_us"]


def time_cpu(fn, reps: int = 3, warmup: int = 1) -> dict:
    """Smoke timing: perf_counter around eager calls (no device, no flush)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    out = summarize(samples)
    out["graph"] = False
    return out


def time_op(fn, *, smoke: bool, reps: int, warmup: int = 2) -> dict:
    """Graph-replay timing; smoke runs (the interpreter: code paths, not speed) call once."""
    return time_cpu(fn, reps=1, warmup=0) if smoke else time_graph(fn, reps, warmup)


def free_memory(collect: bool = True) -> None:
    if collect:
        gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001
        pass


# ---------------------------------------------------------------------------------------------
# machine floors


def _empty_kernel():
    import triton

    @triton.jit
    def _empty(ptr):
        pass

    return _empty


_EMPTY = None


def launch_empty(dummy) -> None:
    global _EMPTY
    if _EMPTY is None:
        _EMPTY = _empty_kernel()
    _EMPTY[(1,)](dummy, num_warps=1)


def empty_kernel_us(smoke: bool = False, reps: int = 50) -> dict:
    """Time of a one-program Triton kernel that does nothing, measured like every op (graph
    replay after an L2 flush): the launch floor included in every reported time."""
    import torch

    dummy = torch.zeros(16, dtype=torch.int32, device="cpu" if smoke else "cuda")
    return time_op(lambda: launch_empty(dummy), smoke=smoke, reps=reps)


def _latency_kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def _chase(chain_ptr, out_ptr, HOPS: tl.constexpr):
        # Each address is the value the previous load returned: HOPS dependent round trips to
        # a buffer that the flush has just evicted from L2.
        idx = tl.load(chain_ptr)
        for _ in tl.static_range(HOPS - 1):
            idx = tl.load(chain_ptr + idx)
        tl.store(out_ptr, idx)

    @triton.jit
    def _row_sums(w_ptr, out_ptr, K: tl.constexpr, SPLITS: tl.constexpr,
                  BLOCK_K: tl.constexpr):
        # The router's weight read without x and without the products: program (row, s) sums
        # the s-th of SPLITS contiguous pieces of a row, every load issued before the first
        # add (static loop).
        row = tl.program_id(0)
        piece = tl.program_id(1)
        cols = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
        for k0 in tl.static_range(0, K // SPLITS, BLOCK_K):
            acc += tl.load(w_ptr + row * K + piece * (K // SPLITS) + k0 + cols)
        tl.store(out_ptr + row * SPLITS + piece, tl.sum(acc, axis=0))

    return _chase, _row_sums


_LATENCY = None


def _latency():
    global _LATENCY
    if _LATENCY is None:
        _LATENCY = _latency_kernels()
    return _LATENCY


CHASE_STRIDE = 1 << 20  # int32 elements (4 MB) between hops: every hop is its own DRAM access


def dependent_loads_us(hops: int, smoke: bool = False, reps: int = 50) -> dict:
    """Time of a one-warp kernel doing ``hops`` dependent loads from cold memory (then one
    store), measured like every op: the latency part of a kernel's time that no amount of
    bandwidth removes (compare with empty_kernel_us)."""
    import torch

    chase, _ = _latency()
    device = "cpu" if smoke else "cuda"
    chain = torch.zeros(hops * CHASE_STRIDE + 1, dtype=torch.int32, device=device)
    chain[0] = CHASE_STRIDE
    for h in range(1, hops):
        chain[h * CHASE_STRIDE] = (h + 1) * CHASE_STRIDE
    out = torch.zeros(1, dtype=torch.int32, device=device)
    t = time_op(lambda: chase[(1,)](chain, out, HOPS=hops, num_warps=1), smoke=smoke,
                reps=reps)
    if int(out.item()) != hops * CHASE_STRIDE:
        raise RuntimeError(f"dependent_loads_us({hops}): chain ended at {int(out.item())}")
    return t


ROW_READ_SPLITS = (1, 2, 4, 8, 16)


def row_read_us(rows: int, cols: int, smoke: bool = False, reps: int = 30,
                beside: dict | None = None) -> dict:
    """Time to read an fp32 [rows, cols] matrix (the router weight) with one 16-warp program
    per row piece, no x, no products, no cross-program reduction: the best over
    ROW_READ_SPLITS pieces per row (the per-expert kernel's layout is 1). A floor for any
    one-pass router kernel. Returns the best timing plus ``by_splits``; ``beside``: name ->
    fn timed in the same rotating rounds as the reads (`time_graphs`: a kernel judged
    against this floor is then timed in the same state as it), under ``beside``."""
    import torch

    _, row_sums = _latency()
    device = "cpu" if smoke else "cuda"
    w = torch.randn((rows, cols), dtype=torch.float32, device=device)
    calls = {}
    for splits in ROW_READ_SPLITS:
        piece = cols // splits
        out = torch.empty(rows * splits, dtype=torch.float32, device=device)
        block = math.gcd(piece, 2048)

        def launch(out=out, splits=splits, block=block):
            row_sums[(rows, splits)](w, out, K=cols, SPLITS=splits, BLOCK_K=block,
                                     num_warps=16)
        read = Checked(launch)  # a smoke run takes the checked call's time
        read()
        want = w.view(rows, splits, piece).sum(dim=2).flatten()
        if not torch.allclose(out, want, rtol=1e-4, atol=1e-3):
            raise RuntimeError(f"row_read_us: wrong row sums (splits {splits})")
        calls[("read", splits)] = read
    for name, fn in (beside or {}).items():
        calls[("beside", name)] = fn
    times = time_graphs(calls, reps, smoke=smoke)
    by_splits = {s: times[("read", s)] for s in ROW_READ_SPLITS}
    best = min(by_splits, key=lambda k: by_splits[k]["median_us"])
    return {**by_splits[best], "splits": best,
            "by_splits": {k: v["median_us"] for k, v in by_splits.items()},
            "beside": {name: times[("beside", name)] for name in beside or {}}}


def copy_bandwidth(smoke: bool = False, nbytes: int = 1 << 30, reps: int = 10) -> dict:
    """Device-to-device copy bandwidth: (bytes read + bytes written) / median time."""
    import torch

    if smoke:
        nbytes = 64 << 20
    device = "cpu" if smoke else "cuda"
    # fp32 elements: a byte-typed copy does not reach the device's copy bandwidth.
    src = torch.randn((nbytes // 4,), dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    # An elementwise kernel, not cudaMemcpy: in a CUDA graph a D2D memcpy becomes a copy-engine
    # node (~2.7 TB/s on the H200), while kernels (ours included) move data with the SMs.
    t = time_op(lambda: torch.mul(src, 1.0, out=dst), smoke=smoke, reps=reps)
    bw = 2 * nbytes / (t["median_us"] * 1e-6)
    del src, dst
    free_memory()
    return {"bytes_per_s": bw, "tb_per_s": bw / 1e12, "nbytes": nbytes, "time": t}


def env_info(smoke: bool = False) -> dict:
    import torch
    import triton

    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "smoke": smoke,
        "l2_flush": FLUSH_MODE,
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }
    if not smoke and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info.update(device=props.name, capability=f"{props.major}.{props.minor}",
                    machine=machine_label(props),
                    sms=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2**30, 1),
                    l2_mib=round(getattr(props, "L2_cache_size", 0) / 2**20, 1))
    else:
        info.update(device="cpu (TRITON_INTERPRET=1)", sms=None)
    return info


def machine_label(props) -> str | None:
    """A GPU's label in results and run files: 'GPU-' and the first 8 hex digits of its UUID
    (two runs on one physical GPU share it); None when torch reports no UUID."""
    uuid = str(getattr(props, "uuid", "") or "")
    return ("GPU-" + uuid.replace("GPU-", "")[:8]) if uuid else None


def num_sms(smoke: bool = False) -> int:
    import torch

    if smoke or not torch.cuda.is_available():
        return 132  # H200 SXM; only used to size candidate lists
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def detected_hardware(smoke: bool) -> str:
    """The dispatch target `generated` picks for this device (sm_90 on an H200; generic, with
    a warning, on a device no target matches)."""
    if smoke:
        return "generic"
    import torch
    from generated import _runtime

    return _runtime.detect_hardware(torch.device("cuda", torch.cuda.current_device()))


# ---------------------------------------------------------------------------------------------
# output


def write_json(path: str, data, indent=1) -> None:
    """Strict JSON (NaN/inf become null), written atomically (its folder made if missing)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(_clean(data), f, indent=indent, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def _clean(o):
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if o is None or isinstance(o, (str, int, bool)):
        return o
    if hasattr(o, "tolist"):
        return _clean(o.tolist())
    return str(o)


def torch_dtype(name: str):
    """The torch dtype of a dispatch-table dtype name ("bf16", "fp8e4m3", ...): the generated
    package's own mapping (the runtime's DTYPE_KEYS, read backwards)."""
    from generated.precompile import TORCH_DTYPES

    return TORCH_DTYPES[name]


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def pow2ceil(x: int) -> int:
    return 1 if x <= 1 else 1 << (int(x) - 1).bit_length()


def int_list(text: str) -> tuple:
    """Command-line "8,16,32" -> (8, 16, 32)."""
    return tuple(int(v) for v in text.split(","))


def int_groups(text: str) -> tuple:
    """Command-line "11:131072:1,16:131072:4" -> ((11, 131072, 1), (16, 131072, 4))."""
    return tuple(tuple(int(v) for v in item.split(":")) for item in text.split(","))


def tb_per_s(nbytes: int, time_us: float, empty_us: float) -> float:
    """Read rate of ``nbytes`` over the time beyond the empty kernel's (launch floor), TB/s."""
    return nbytes / ((time_us - empty_us) * 1e-6) / 1e12 if time_us > empty_us else math.nan


def fmt_us(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if x >= 1000:
        return f"{x:.0f}"
    if x >= 100:
        return f"{x:.1f}"
    return f"{x:.2f}"
