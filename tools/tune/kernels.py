"""The tuner's view of a GPU: inputs, launches of the generated kernels with explicit launch
parameters, correctness checks, and timing (CUDA-graph replay with L2 flushed, tools/common.py).

`measure.py` only talks to a device through these methods, so the CPU tests drive it with a
fake device (tests/test_tune.py) and this module is the GPU-only part.
"""
from __future__ import annotations

import importlib

import common  # tools/common.py

from .space import ATTN_STEP_CONTEXT


class GpuDevice:
    """One CUDA/ROCm device. ``space`` gives the decode shape (inputs: dtypes and head_dim;
    topk; block size)."""

    def __init__(self, space, device="cuda"):
        import torch

        self.torch, self.space = torch, space
        self.device = torch.device(device)
        self.sms = common.num_sms(False)
        self._moe = importlib.import_module("generated.moe_router")
        self._decode = importlib.import_module("generated.decode_indexer").index_decode_with_launch
        self._prefill = importlib.import_module(
            "generated.prefill_indexer").index_prefill_with_launch
        attention = importlib.import_module("generated.sparse_attention")
        self._attn = attention.sparse_attn_with_launch
        self._step = attention.sparse_decode_step_with_launch

    # -- router ----------------------------------------------------------------------------
    def router_weight(self, K, N):
        """The shape's weight, in its weight dtype (ROUTER_GEMM_LIMITS)."""
        g = self.torch.Generator(device=self.device).manual_seed(11 + K + N)
        w_dtype = self._moe.ROUTER_GEMM_LIMITS[(K, N)][0]
        return (self.torch.randn((N, K), generator=g, device=self.device) * K ** -0.5).to(w_dtype)

    def router_case(self, w, M, x_dtype):
        torch = self.torch
        g = torch.Generator(device=self.device).manual_seed(7 * M)
        x = torch.randn((M, w.shape[1]), generator=g, device=self.device)
        x = x.to(common.torch_dtype(x_dtype))
        return {"x": x, "w": w, "want": torch.nn.functional.linear(x.float(), w.float()),
                "out": torch.empty((M, w.shape[0]), device=self.device)}

    def router_call(self, case, kernel, params):
        launch = (self._moe.launch_router_gemm_splitk if kernel == "splitk"
                  else self._moe.launch_router_gemm)
        return lambda: launch(case["x"], case["w"], case["out"], **params)

    def router_problem(self, case, fn):
        """Run ``fn`` once on a poisoned output; why its result is unusable (None: right)."""
        case["out"].fill_(float("nan"))
        fn()
        got, want = case["out"], case["want"]
        err = float((got - want).norm() / want.norm())
        if not err < 1e-4:
            return f"wrong result (relative error {err:.2e})"
        clear = True
        for counter in self._moe._COUNTERS.values():  # split-K arrival counters
            if bool(counter.any()):
                counter.zero_()
                clear = False
        return None if clear else "split-K counter left non-zero"

    # -- decode ----------------------------------------------------------------------------
    def decode_case(self, R, Q, ctx, seed=0, mixed=False):
        """Context ``ctx`` per request (``mixed``: lengths uniform in [ctx / 8, ctx], fixed
        seed) on random distinct pages (as tools/bench.py)."""
        torch, sp = self.torch, self.space
        g = torch.Generator().manual_seed(seed + 31 * R + Q)
        mb = common.cdiv(ctx, sp.block)
        num_pages = R * mb + 16
        bt = torch.randperm(num_pages, generator=g).to(torch.int32)[:R * mb].view(R, mb)
        attn = torch.randperm(num_pages, generator=g)[:R * mb].to(torch.int32).view(R, mb)
        dg = torch.Generator(device=self.device).manual_seed(seed + 3)
        total_q, dev = R * Q, self.device
        q_dtype, cache_dtype = (common.torch_dtype(sp.inputs[k])
                                for k in ("q_dtype", "cache_dtype"))
        return {
            "R": R, "Q": Q, "ctx": ctx,
            "idx_q": torch.randn((total_q, 1, sp.head_dim), generator=dg,
                                 device=dev).to(q_dtype),
            "cache": torch.randn((num_pages, sp.block, sp.head_dim), generator=dg,
                                 device=dev).to(cache_dtype),
            "block_table": bt.contiguous().to(dev),
            "seq_lens": (torch.randint(ctx // 8, ctx + 1, (R,), generator=g, dtype=torch.int32)
                         .to(dev) if mixed else
                         torch.full((R,), ctx, dtype=torch.int32, device=dev)),
            "attn_table": attn.contiguous().to(dev),
            "out": torch.full((1, total_q, sp.topk), -7, dtype=torch.int32, device=dev),
            "table": torch.full((total_q, sp.topk * 8), -7, dtype=torch.int32, device=dev),
            "ctx_out": torch.full((total_q,), -7, dtype=torch.int32, device=dev),
            "counter": torch.zeros((1, total_q), dtype=torch.int32, device=dev),
        }

    def decode_call(self, inp, variant, params, selector):
        sel = None if variant == "index_decode_fused" else dict(selector)  # fused selects itself
        score = {"variant": variant, **params}

        def fn():
            return self._decode(score, sel, inp["idx_q"], inp["cache"], inp["block_table"],
                                inp["seq_lens"], inp["ctx"], self.space.topk, 0, 1, 1, inp["Q"],
                                inp["Q"], inp["out"], attention_block_table=inp["attn_table"],
                                sparse_block_table_out=inp["table"],
                                sparse_context_lens_out=inp["ctx_out"], block_page_stride=8,
                                completion_counter=inp["counter"])
        return fn

    def decode_reference(self, inp, fn):
        fn()
        return tuple(inp[k].clone() for k in ("out", "table", "ctx_out"))

    def decode_problem(self, inp, ref, fn):
        """Run ``fn`` once on poisoned outputs; why its result is unusable (None: identical to
        the reference, bit for bit: every scorer computes the same scores)."""
        inp["counter"].zero_()
        for k in ("out", "table", "ctx_out"):
            inp[k].fill_(-7)
        fn()
        wrong = [k for k, want in zip(("out", "table", "ctx_out"), ref)
                 if not self.torch.equal(inp[k], want)]
        if wrong:
            return f"result differs from the default launch {wrong}"
        if int(inp["counter"].abs().sum()) != 0:
            return "completion counter not returned to zero"
        return None

    # -- prefill ---------------------------------------------------------------------------
    def prefill_case(self, inputs, R, prefix, chunk, seed=0):
        """R requests of ``chunk`` query tokens after ``prefix`` keys each, on random distinct
        pages (as tools/bench_prefill.py), and a poisoned ids buffer."""
        torch, sp = self.torch, self.space
        g = torch.Generator().manual_seed(seed + 17 * R + chunk)
        mb = common.cdiv(prefix + chunk, sp.block)
        num_pages = R * mb + 16
        bt = torch.randperm(num_pages, generator=g).to(torch.int32)[:R * mb].view(R, mb)
        dg = torch.Generator(device=self.device).manual_seed(seed + 5)
        H, D, T, dev = inputs["num_heads"], inputs["head_dim"], R * chunk, self.device
        return {
            "idx_q": torch.randn((T, H, D), generator=dg, device=dev).to(
                common.torch_dtype(inputs["q_dtype"])),
            "cache": torch.randn((num_pages, sp.block, D), generator=dg, device=dev).to(
                common.torch_dtype(inputs["cache_dtype"])),
            "block_table": bt.contiguous().to(dev),
            "cu": (torch.arange(R + 1, dtype=torch.int32) * chunk).to(dev),
            "seq_lens": torch.full((R,), prefix + chunk, dtype=torch.int32, device=dev),
            "prefix": torch.full((R,), prefix, dtype=torch.int32, device=dev),
            "max_query_len": chunk, "max_seq_len": prefix + chunk, "H": H,
            "out": torch.full((H, T, sp.topk), -7, dtype=torch.int32, device=dev),
        }

    def prefill_call(self, inp, launch):
        """One `index_prefill` with an explicit launch (index_prefill_with_launch's forms)."""
        def fn():
            return self._prefill(launch, inp["idx_q"], inp["cache"], inp["block_table"],
                                 inp["cu"], inp["seq_lens"], inp["prefix"],
                                 inp["max_query_len"], inp["max_seq_len"], inp["H"],
                                 self.space.topk, 0, 1, inp["out"])
        return fn

    def prefill_reference(self, inp, fn):
        inp["out"].fill_(-7)
        fn()
        return inp["out"].clone()

    def prefill_problem(self, inp, ref, fn):
        """Run ``fn`` once on poisoned ids; why they are unusable (None: identical to the
        reference, bit for bit: every tile and split scores each block with the same code)."""
        inp["out"].fill_(-7)
        fn()
        return None if self.torch.equal(inp["out"], ref) else "ids differ from the default launch"

    # -- attention -------------------------------------------------------------------------
    def attn_case(self, mode, inputs, programs, kv_heads, Q=1, ctx=32768, topk=16, seed=0,
                  own_lists=False):
        """``programs`` rows · ``kv_heads`` at a ``ctx`` context: decode requests of ``Q`` rows
        each (the context's last Q tokens), or one prefill request of rows / Hkv tokens after
        ctx keys; a run of 64 rows shares its lists but for each token's own block (as an
        indexer's are: a request's Q lists are mostly the same), or with ``own_lists`` each
        row draws its own (as vLLM's benchmark rows do: a request's Q rows then read up to Q
        times the blocks)."""
        torch, sp = self.torch, self.space
        G, D = inputs["group"], inputs["head_dim"]
        Hkv = kv_heads
        T = max(Q, programs // Hkv // Q * Q)
        g = torch.Generator().manual_seed(seed + programs + 1000 * (Q - 1))
        dev = self.device
        R, prefix = (T // Q, ctx) if mode == "decode" else (1, ctx)
        mb = common.cdiv(prefix + (T if mode == "prefill" else 0), sp.block)
        ids = torch.full((Hkv, T, topk), -1, dtype=torch.int32)
        run = 1 if own_lists else 64
        for t0 in range(0, T, run):
            pos0 = ctx - Q if mode == "decode" else prefix + t0
            shared = torch.randperm(max(pos0 // sp.block, 1), generator=g)[:topk - 1]
            for t in range(t0, min(t0 + run, T)):
                pos = ctx - Q + t % Q if mode == "decode" else prefix + t
                row = torch.unique(torch.cat([torch.tensor([pos // sp.block]), shared]))[:topk]
                ids[:, t, :row.numel()] = row.to(torch.int32)
        # Only listed blocks are read: each request's listed blocks get distinct pages of a
        # cache that holds just them; its other table entries point anywhere in it.
        listed = [torch.unique(ids[0, r * Q:(r + 1) * Q] if mode == "decode" else ids[0])
                  for r in range(R)]
        listed = [b[b >= 0] for b in listed]
        pages = sum(b.numel() for b in listed) + 4
        table = torch.randint(0, pages, (R, mb), generator=g, dtype=torch.int32)
        fresh = torch.randperm(pages, generator=g).to(torch.int32)
        used = 0
        for r, b in enumerate(listed):
            table[r, b.long()] = fresh[used:used + b.numel()]
            used += b.numel()
        gd = torch.Generator(dev).manual_seed(seed + programs)
        kv = torch.randn((pages, 2, sp.block, Hkv, D), generator=gd, device=dev).to(
            common.torch_dtype(inputs["kv_dtype"]))
        case = {"mode": mode, "q": torch.randn((T, Hkv * G, D), generator=g).to(
                    common.torch_dtype(inputs["q_dtype"])).to(dev),
                "kv": kv, "topk_idx": ids.to(dev), "block_table": table.to(dev),
                "num_kv_heads": Hkv, "sm_scale": D ** -0.5}
        case["output"] = torch.empty(case["q"].shape, dtype=case["q"].dtype, device=dev)
        case.update(self._attn_scales(inputs.get("scales", "none"), kv, gd))
        if mode == "decode":
            case.update(seq_lens=torch.full((R,), ctx, dtype=torch.int32, device=dev),
                        decode_query_len=Q)
        else:
            case.update(cu_seqlens_q=torch.tensor([0, T], dtype=torch.int32, device=dev),
                        seq_lens=torch.tensor([prefix + T], dtype=torch.int32, device=dev),
                        prefix_lens=torch.tensor([prefix], dtype=torch.int32, device=dev),
                        max_query_len=T)
        return case

    def _attn_scales(self, mode, kv, generator) -> dict:
        """k_scale / v_scale of scale ``mode`` over cache ``kv``: none, one each (near one),
        or one per (KV head, slot) in [0.5, 1.5)."""
        torch = self.torch
        if mode == "none":
            return {}
        shape = (1,) if mode == "scalar" else (kv.shape[3], kv.shape[0] * kv.shape[2])
        return {name: torch.rand(shape, generator=generator, device=kv.device) + 0.5
                for name in ("k_scale", "v_scale")}

    def attn_step_case(self, case, seed=1):
        """A decode ``case`` inside `sparse_decode_step`, its contexts cut to ATTN_STEP_CONTEXT
        (the attention reads topk blocks whatever the context): an index cache of 128-token
        bf16 pages for each request's context, index heads = KV heads. The attention reads the
        indexer's ids, any of a request's blocks, so the KV cache holds every block on a page
        of its own (the case's holds only its listed blocks: other table entries alias)."""
        torch, dev, block = self.torch, self.device, self.space.block
        T, _, D = case["q"].shape
        Hkv, R = case["num_kv_heads"], case["seq_lens"].shape[0]
        ctx = min(int(case["seq_lens"].max()), ATTN_STEP_CONTEXT)
        mb, topk = common.cdiv(ctx, block), case["topk_idx"].shape[2]
        g = torch.Generator(dev).manual_seed(seed)
        pages = R * mb + 1

        def table():
            return torch.randperm(pages, generator=g, device=dev)[:R * mb].view(R, mb).to(
                torch.int32)

        step = {"idx_q": torch.randn((T, Hkv, D), generator=g, device=dev, dtype=torch.bfloat16),
                "index_kv_cache": torch.randn((pages, block, D), generator=g, device=dev,
                                              dtype=torch.bfloat16),
                "index_block_table": table(), "max_seq_len": ctx, "topk": topk,
                "topk_out": torch.empty((Hkv, T, topk), dtype=torch.int32, device=dev),
                "completion_counter": torch.zeros((Hkv, T), dtype=torch.int32, device=dev)}
        kv = torch.randn((pages, *case["kv"].shape[1:]), generator=g, device=dev).to(
            case["kv"].dtype)
        mode = "none" if "k_scale" not in case else \
            "scalar" if case["k_scale"].numel() == 1 else "per_token"
        return {**case, "kv": kv, "block_table": table(), "step": step,
                "seq_lens": torch.full((R,), ctx, dtype=torch.int32, device=dev),
                **self._attn_scales(mode, kv, g)}

    def attn_call(self, case, variant, params):
        launch = {"variant": variant, **params}
        if "step" in case:  # attn_step_case
            s, Q = case["step"], case["decode_query_len"]
            # timed as the indexer's programmatic dependent with as many programs per SM as
            # fit, whatever the step's table says (tools/step_study.py decides that): one way
            # for every run of "step 8k"
            return lambda: self._step(
                launch, s["idx_q"], s["index_kv_cache"], s["index_block_table"], case["q"],
                case["kv"], case["block_table"], case["seq_lens"], s["max_seq_len"], s["topk"],
                0, 1, case["num_kv_heads"], Q, Q, case["sm_scale"], case["output"],
                topk_out=s["topk_out"], completion_counter=s["completion_counter"],
                k_scale=case.get("k_scale"), v_scale=case.get("v_scale"), attention_pdl=True,
                attention_per_sm=0)
        args = {k: v for k, v in case.items() if k != "mode"}
        return lambda: self._attn(launch, case["mode"], **args)

    def attn_reference(self, case, fn):
        fn()
        return case["output"].clone()

    def attn_problem(self, case, ref, fn):
        """Run ``fn`` once on a poisoned output; why it is unusable (None: within the 16-bit
        rounding of probabilities of the default launch's)."""
        case["output"].fill_(float("nan"))
        fn()
        out = case["output"]
        if not bool(self.torch.isfinite(out).all()):
            return "non-finite output"
        err = float((out.float() - ref.float()).abs().max())
        return None if err <= 2e-2 else f"output differs from the default launch ({err:.3g})"

    # -- timing ----------------------------------------------------------------------------
    def sampler(self, fn):
        """Capture ``fn`` once in a CUDA graph; the sampler times n replays (L2 flushed before
        each, common.replay_times) and returns their µs."""
        graph = common.capture_graph(fn, warmup=1)
        # measure.interleave settles every candidate of a bucket once before its rounds
        return lambda n: common.replay_times(graph.replay, n, settled=True)

    def release(self):
        common.free_memory(collect=True)
