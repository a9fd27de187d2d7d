"""Facts of the sm_90 code, compiled on the CPU (Triton's bundled ptxas), no GPU needed: the
sm_90-only instructions appear exactly where their switches ask for them, and the router's
per-expert kernel needs no more barriers for a bf16 x than for an fp32 one, nor for an expert
tile than for one expert."""
from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_sm90_instructions_follow_their_switches():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, os.path.join(HERE, "sm90_ptx.py")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    assert facts["selector_pdl_emit"] == {"griddepcontrol.wait": True,
                                          "griddepcontrol.launch_dependents": False,
                                          "prefetch.global.L2": True}
    assert not any(facts["selector_plain"].values())
    # sparse_decode_step's indexer lets the attention start early from its last kernel
    assert facts["selector_pdl_dependents"] == {"griddepcontrol.wait": True,
                                                "griddepcontrol.launch_dependents": True,
                                                "prefetch.global.L2": False}
    assert facts["fused_dependents"]["griddepcontrol.launch_dependents"]
    assert not any(facts["fused_plain"].values())
    # the attention waits for its programmatic predecessor (first thing, or before the ids)
    for case in ("attention_any", "attention_ids"):
        assert facts[case] == {"griddepcontrol.wait": True,
                               "griddepcontrol.launch_dependents": False,
                               "prefetch.global.L2": False}, case
    assert not any(facts["attention_plain"].values())
    # "any" reads nothing before the wait; "ids" loads q and seq_lens before it, and with
    # table_first the row's table entries too
    assert facts["attention_any_waits_before_any_load"]
    assert not facts["attention_ids_waits_before_any_load"]
    assert facts["attention_ids_table_first_loads_before_wait"] > \
        facts["attention_ids_loads_before_wait"] > 0
    # with a merge kernel the split kernel lets it start and has no arrival atomic; the merge
    # kernel reads the partials only after waiting for it
    assert facts["attention_merge_kernel"] == {"griddepcontrol.wait": True,
                                               "griddepcontrol.launch_dependents": True,
                                               "prefetch.global.L2": False}
    assert facts["attention_ids_atomic"] and not facts["attention_merge_kernel_atomic"]
    # tma: the K and V tiles come as bulk tensor copies (pipelined: one per stage ahead, waited
    # on by mbarrier), no per-thread async copy left; by pointers: async copies, no bulk copy.
    # An fp8 cache's V is read as 16-bit pairs by pointers either way: half the async copies.
    for cache in ("bf16", "fp8e4m3"):
        got = facts[f"attention_tma_{cache}"]
        assert got["pointers"]["bulk_tensor_copies"] == 0 and \
            got["pointers"]["async_copies"] > 0, got
        assert got["tma"]["mbarrier_waits"] > 0, got
        if cache == "bf16":
            assert got["tma"]["bulk_tensor_copies"] >= 4 and got["tma"]["async_copies"] == 0, got
        else:
            assert got["tma"]["bulk_tensor_copies"] >= 2 and \
                2 * got["tma"]["async_copies"] == got["pointers"]["async_copies"], got
    assert facts["merge_pdl"]["griddepcontrol.wait"] and facts["merge_pdl_waits_before_any_load"]
    assert not any(facts["merge_plain"].values())
    assert facts["scorer_dependents"] == {"griddepcontrol.wait": False,
                                          "griddepcontrol.launch_dependents": True,
                                          "prefetch.global.L2": False}
    assert not any(facts["scorer_plain"].values())
    # the router's per-expert kernel loads a bf16 x with fp32 w's elements per thread: it adds
    # no per-K-step layout conversion of w through shared memory (two barriers per step
    # before; 28 instead of 4 on this row) over an fp32 x
    bf16, fp32 = facts["router_bf16"], facts["router_fp32"]
    assert 0 < bf16["ptx_barriers"] <= fp32["ptx_barriers"], (bf16, fp32)
    assert 0 < bf16["sass_barriers"] <= fp32["sass_barriers"], (bf16, fp32)
    assert bf16["registers"] > 0 and bf16["spilled"] == fp32["spilled"] == 0, (bf16, fp32)
    # x and w loaded as 3-D tiles take the partials' layout: an expert tile adds no per-step
    # layout conversion (2-D loads broadcast afterwards converted through shared memory each step)
    one, tile = facts["router_block_e1"], facts["router_block_e4"]
    assert 0 < tile["sass_barriers"] <= one["sass_barriers"], (one, tile)
    assert tile["spilled"] == one["spilled"] == 0, (one, tile)
    # the attention streams K/V tiles with 16-byte asynchronous copies into shared memory
    # (the unit head-dim stride specialised, as the JIT does), not element by element
    loads = facts["attention_kv_loads"]
    assert loads.get("LDGSTS.E.BYPASS.128", 0) >= 32, loads
    assert not any(".U16" in op or ".U8" in op for op in loads), loads
    # one pass through its key loop (sm90_code's "main loop") holds a warp's quarter of the
    # step's two products: 16 lanes × 64 keys × 128 dims each, in m16n8k16 instructions
    assert facts["attention_kv64_loop_products"] == 2 * (16 * 64 * 128) // (16 * 8 * 16) // 4
    # an fp8 cache under a bf16 q: fp16 products, one conversion per pair of K or V elements
    # (128-key steps: 128 a thread), no bf16 widening and no byte loads of the V tile
    fp8 = facts["attention_fp8_ops"]
    assert fp8["pair_conversions"] == 128 and fp8["fp16_products"] == 64, fp8
    assert fp8["bf16_conversions"] == fp8["byte_loads"] == fp8["bf16_products"] == 0, fp8
    # one scale for the whole cache is read once per program, not at every key step (where
    # the 512-program rows' two-stage launch waited on it: 1.17x the time, 2026-12-03)
    scale_loads = facts["attention_scalar_scale_loads"]
    assert all(n == {"before_loop": 1, "in_loop": 0} for n in scale_loads.values()), scale_loads
    # per-token V scales: one range per split before the loop where the splits take several
    # steps (a max over each tile's 128 scales per step cost 1-15 %), each tile's own in the
    # loop where they take one step
    red = facts["attention_per_token_reductions"]
    assert red["2"]["in_loop"] < red["16"]["in_loop"] and \
        red["2"]["before_loop"] > red["16"]["before_loop"], red
    # the query-tiled kernel's sorted walk is pipelined and fits the SM (227 KiB of shared
    # memory a block) at the most keys it sorts; the walk by minima is not pipelined
    walks = facts["tiled_walks"]
    assert walks["sorted"]["async_copies"] > 0 and walks["sorted"]["bulk_tensor_copies"] == 0
    assert walks["sorted_tma"]["async_copies"] == 0 and \
        walks["sorted_tma"]["bulk_tensor_copies"] >= 2, walks
    for walk in ("sorted", "sorted_tma"):
        assert walks[walk]["shared"] <= 227 * 1024 and walks[walk]["spilled"] == 0, walks
    assert walks["minima"]["async_copies"] == walks["minima"]["bulk_tensor_copies"] == 0, walks
    # the fp8 query tile at G 8 (the table's launch) does not spill
    assert facts["tiled_fp8_g8_spilled"] == 0, facts["tiled_fp8_g8_spilled"]
    # fp16 prefill takes P·V as a bf16 q's does (1.04-1.05x its time when each product was
    # scaled back apart)
    ops = facts["tiled_16_bit_ops"]
    assert ops["fp16"] == ops["bf16"], ops
