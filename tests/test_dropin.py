"""Drop-in for every vLLM caller (issue 14; docs/KERNELS.md §14).

1. fp32 queries and an fp32 index cache in the decode indexer, in the configuration of vLLM's
   CUDA decode-indexer correctness test: H = 2, head_dim 16, topk 6, init 0, local 1, lengths
   7, 129, 1025 plus two padded requests, Q / Qmax ∈ {1/1, 1/4, 4/4}. Every variant (split,
   balanced, single launch, index_decode_scores) against an fp64 reference.
2. The bf16-weight router shape (hidden 7168, experts 896): x bf16 or fp32, M ≤ 9, fp32
   accumulation and logits against an fp64 reference; M ≥ 10 is a ValueError naming
   num_tokens and router_logits falls back to F.linear(x.float(), w.float()); the fp32-weight
   shapes still reject a bf16 weight with "float32".
CPU runs use Triton's interpreter; the same tests run on the GPU.
"""
from __future__ import annotations

import pytest
import torch

import generated
from decode_inputs import DEVICE
from reference_index import ref_decode_scores
from reference_topk import assert_topk_sets_match, cdiv

LENS = [7, 129, 1025, 0, 0]
D, H, TOPK = 16, 2, 6
CASES = [(1, 1), (1, 4), (4, 4)]  # (Q, Qmax)
SCORE_TOL = dict(rtol=1e-6, atol=1e-5)  # fp32 sums vs the fp64 reference rounded once


def _fp32_inputs(Q, seed=0):
    g = torch.Generator().manual_seed(seed)
    R = len(LENS)
    max_seq_len = max(LENS)
    max_block = cdiv(max_seq_len, 128)
    pages = R * max_block + 1
    return dict(
        idx_q=torch.randn((R * Q, H, D), generator=g).to(DEVICE),
        index_kv_cache=torch.randn((pages, 128, D), generator=g).to(DEVICE),
        block_table=torch.randperm(pages, generator=g)[: R * max_block].view(R, max_block)
        .to(torch.int32).to(DEVICE),
        seq_lens=torch.tensor(LENS, dtype=torch.int32, device=DEVICE),
        max_seq_len=max_seq_len), max_block


def _reference(inputs, Q):
    return ref_decode_scores(inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"],
                             inputs["seq_lens"], 0, 1, Q, inputs["max_seq_len"])


@pytest.mark.parametrize("Q,Qmax", CASES)
def test_fp32_scores_every_scorer(Q, Qmax):
    from generated import index_score

    inputs, max_block = _fp32_inputs(Q, seed=Q * 10 + Qmax)
    ref = _reference(inputs, Q)
    mask = ~torch.isnan(ref)
    got = {"table": generated.index_decode_scores(**inputs, init_blocks=0, local_blocks=1,
                                                  decode_query_len=Q, max_decode_query_len=Qmax)}
    args = (inputs["idx_q"], inputs["index_kv_cache"], inputs["block_table"],
            inputs["seq_lens"])
    for name, launch, kw in (("split", index_score.launch_score_split, {"num_kv_chunks": 3}),
                             ("balanced", index_score.launch_score_balanced,
                              {"program_budget": 4})):
        scores = torch.full_like(got["table"], float("nan"))
        launch(*args, scores, 0, 1, Q, Qmax, max_block=max_block, **kw)
        got[name] = scores
    for name, scores in got.items():
        torch.testing.assert_close(scores[mask.to(DEVICE)].cpu(), ref[mask], **SCORE_TOL,
                                   msg=lambda m: f"{name}: {m}")
    # split and balanced: bitwise the same (one per-block helper)
    assert torch.equal(got["split"][mask].view(torch.int32), got["balanced"][mask].view(torch.int32))


SCORERS = [
    None,  # the tables
    {"variant": "index_score_split", "kv_chunks": 4, "high_batch": False, "static_chunks": True,
     "num_warps": 4, "num_stages": 2},
    {"variant": "index_score_balanced", "program_budget": 5, "num_warps": 2, "num_stages": 1},
    {"variant": "index_decode_fused", "kv_chunks": 2, "topk_tile": 128},  # 9 blocks: 5 + 4
]


@pytest.mark.parametrize("Q,Qmax", CASES)
@pytest.mark.parametrize("scorer", range(len(SCORERS)))
def test_fp32_index_decode_every_variant(Q, Qmax, scorer):
    inputs, _ = _fp32_inputs(Q, seed=100 + Q * 10 + Qmax)
    ref = _reference(inputs, Q)
    ids = generated.index_decode_with_launch(
        SCORERS[scorer], None, **inputs, topk=TOPK, init_blocks=0, local_blocks=1,
        num_kv_heads=H, decode_query_len=Q, max_decode_query_len=Qmax)
    dense = torch.where(torch.isnan(ref), torch.tensor(float("-inf")), ref)
    assert_topk_sets_match(ids, dense, inputs["seq_lens"], Q, TOPK, tol=1e-6)


def test_fp32_mixed_with_bf16():
    """fp32 queries with a bf16 cache (and the reverse) compute in fp32: the bf16 side widens
    exactly, nothing is rounded to bf16."""
    inputs, _ = _fp32_inputs(1, seed=7)
    for q_dtype, cache_dtype in ((torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32)):
        mixed = dict(inputs, idx_q=inputs["idx_q"].to(q_dtype),
                     index_kv_cache=inputs["index_kv_cache"].to(cache_dtype))
        ref = ref_decode_scores(mixed["idx_q"], mixed["index_kv_cache"], mixed["block_table"],
                                mixed["seq_lens"], 0, 1, 1, mixed["max_seq_len"])
        got = generated.index_decode_scores(**mixed, init_blocks=0, local_blocks=1,
                                            decode_query_len=1, max_decode_query_len=1)
        mask = ~torch.isnan(ref)
        torch.testing.assert_close(got[mask.to(DEVICE)].cpu(), ref[mask], **SCORE_TOL)


@pytest.mark.parametrize("hw", ["gfx950", "sm_90", "generic"])
def test_fp32_has_a_row_on_every_hardware(hw):
    e = generated.explain_index_decode(hw, "fp32", "fp32", 16, 5, 9, 20, 2, 6, 4)
    assert e["scorer"] in ("split", "balanced") and e["score_rule"]


# ---- the bf16-weight router shape ------------------------------------------------------------

K_BF16W, N_BF16W, CAP = 7168, 896, 9


def _router_case(M, x_dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((M, K_BF16W), generator=g).to(x_dtype)
    w = (torch.randn((N_BF16W, K_BF16W), generator=g) * K_BF16W ** -0.5).bfloat16()
    return x.to(DEVICE), w.to(DEVICE)


def _fp64_logits(x, w):
    return (x.double().cpu() @ w.double().cpu().T)


# Every M ≤ 9 × both x dtypes on the GPU. The interpreter would run 896 programs per row tile
# one by one (minutes): on the CPU the same kernels run below on a 16-expert slice of the weight.
ROUTER_CASES = [(M, dt) for M in range(1, CAP + 1) for dt in (torch.bfloat16, torch.float32)]


@pytest.mark.gpu
@pytest.mark.parametrize("M,x_dtype", ROUTER_CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_bf16_weight_router_matches_fp64(M, x_dtype):
    x, w = _router_case(M, x_dtype, seed=M)
    out = generated.router_gemm(x, w)
    assert out.dtype == torch.float32 and out.shape == (M, N_BF16W)
    err = (out.double().cpu() - _fp64_logits(x, w)).abs().max().item()
    assert err <= 5e-4, err
    torch.testing.assert_close(generated.router_logits(x, w), out, rtol=0, atol=5e-4)


@pytest.mark.parametrize("kernel", ["per_expert", "splitk"])
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32], ids=["x_bf16", "x_fp32"])
def test_bf16_weight_kernels_on_a_weight_slice(kernel, x_dtype):
    """Both router kernels with a bf16 weight (hidden 7168; the first 16 experts), fp32 logits
    against fp64, through the launchers the dispatcher uses (the CPU's share of the test above)."""
    from generated import moe_router

    x, w = _router_case(3, x_dtype, seed=11)
    w = w[:16].contiguous()
    out = torch.full((3, 16), float("nan"), device=DEVICE)
    if kernel == "per_expert":
        moe_router.launch_router_gemm(x, w, out, block_m=2, block_e=4, block_k=1024,
                                      num_warps=4, num_stages=1)
    else:
        moe_router.launch_router_gemm_splitk(x, w, out, block_m=16, block_n=16, block_k=256,
                                             split_k=4, tf32x3=not torch.cuda.is_available() or
                                             torch.cuda.get_device_capability() >= (8, 0),
                                             num_warps=4, num_stages=2)
    err = (out.double().cpu() - _fp64_logits(x, w)).abs().max().item()
    assert err <= 5e-4, err


@pytest.mark.parametrize("hw", ["gfx950", "sm_90", "generic"])
def test_bf16_weight_router_has_rows_up_to_its_cap(hw):
    for M in range(1, CAP + 1):
        info = generated.explain_router_gemm(K_BF16W, N_BF16W, M, hw)
        assert info["variant"].endswith("k7168_n896")
    with pytest.raises(ValueError, match="^num_tokens: must be in 1..9"):
        generated.explain_router_gemm(K_BF16W, N_BF16W, CAP + 1, hw)
    with pytest.raises(ValueError, match="^num_tokens: the \\(7168, 896\\) router GEMM serves "
                                         "at most 9 tokens"):
        generated.dispatch.ROUTER_GEMM.lookup(hw, (K_BF16W, N_BF16W), "bf16", CAP + 1)


def test_bf16_weight_router_cap_and_fallback():
    x, w = _router_case(CAP + 1, torch.bfloat16)
    assert not generated.can_use_router_gemm(x, w)
    with pytest.raises(ValueError, match="^hidden_states: num_tokens .* 0..9"):
        generated.router_gemm(x, w)
    info = generated.explain_router_logits(x, w)
    assert info["path"] == "linear" and "num_tokens" in info["reason"]
    got = generated.router_logits(x, w)
    torch.testing.assert_close(got, torch.nn.functional.linear(x.float(), w.float()))
    x9, _ = _router_case(CAP, torch.float32)
    assert generated.can_use_router_gemm(x9, w)
    assert generated.explain_router_logits(x9, w)["path"] == "kernel"


def test_weight_dtypes_follow_the_shape():
    """fp32-weight shapes keep rejecting a bf16 weight with "float32"; the bf16 shape rejects
    an fp32 weight with "bfloat16"; both in §11's check order (before device/contiguity)."""
    x = torch.randn((2, 6144), device=DEVICE)
    with pytest.raises(ValueError, match="^router_weight: dtype must be float32, got bfloat16"):
        generated.router_gemm(x, torch.randn((128, 6144), device=DEVICE).bfloat16())
    x, w = _router_case(2, torch.float32)
    with pytest.raises(ValueError, match="^router_weight: dtype must be bfloat16, got float32"):
        generated.router_gemm(x, w.float())
    with pytest.raises(ValueError, match="^router_weight: dtype must be bfloat16"):
        generated.router_gemm(x, w.float().t().contiguous().t())  # dtype before contiguity
    assert generated.ROUTER_GEMM_LIMITS[(K_BF16W, N_BF16W)] == (torch.bfloat16, CAP)
    assert generated.ROUTER_GEMM_LIMITS[(6144, 128)] == (torch.float32, 32)
