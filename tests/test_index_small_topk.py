"""topk 1 and 2: the selector keeps at least two keys per row (tl.topk needs k ≥ 2); the first
ids must equal the first ids of a wider selection (same total order)."""
from __future__ import annotations

import pytest
import torch

import generated

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("hardware", ["sm_90", "generic", "gfx950"])
@pytest.mark.parametrize("topk", [1, 2, 3])
def test_small_topk_is_a_prefix_of_top16(topk, hardware):
    g = torch.Generator(device="cpu").manual_seed(topk)
    R, Q, blocks = 2, 2, 6
    cache = torch.randn((R * blocks + 2, 128, 16), generator=g).to(torch.bfloat16).to(DEVICE)
    table = torch.randperm(R * blocks + 2, generator=g)[: R * blocks].view(R, blocks)
    table = table.to(torch.int32).contiguous().to(DEVICE)
    q = torch.randn((R * Q, 1, 16), generator=g).to(torch.bfloat16).to(DEVICE)
    seq = torch.tensor([blocks * 128, 300], dtype=torch.int32, device=DEVICE)
    args = (q, cache, table, seq, blocks * 128)
    wide = generated.index_decode(*args, 16, 0, 1, 1, Q, Q, hardware=hardware)
    narrow = generated.index_decode(*args, topk, 0, 1, 1, Q, Q, hardware=hardware)
    assert narrow.shape == (1, R * Q, topk)
    assert torch.equal(narrow, wide[:, :, :topk])
