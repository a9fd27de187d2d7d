"""topk 1 and 2: the selector keeps at least two keys per row (tl.topk needs k ≥ 2); the first
ids must equal the first ids of a wider selection (same total order)."""
from __future__ import annotations

import functools

import pytest
import torch

import generated

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
R, Q, BLOCKS = 2, 2, 6
HARDWARE = ("sm_90", "generic", "gfx950")


@functools.lru_cache(maxsize=None)
def _case(hardware):
    """Inputs of one hardware target and their topk-16 selection, shared by every topk."""
    g = torch.Generator(device="cpu").manual_seed(HARDWARE.index(hardware) + 1)
    cache = torch.randn((R * BLOCKS + 2, 128, 16), generator=g).to(torch.bfloat16).to(DEVICE)
    table = torch.randperm(R * BLOCKS + 2, generator=g)[: R * BLOCKS].view(R, BLOCKS)
    table = table.to(torch.int32).contiguous().to(DEVICE)
    q = torch.randn((R * Q, 1, 16), generator=g).to(torch.bfloat16).to(DEVICE)
    seq = torch.tensor([BLOCKS * 128, 300], dtype=torch.int32, device=DEVICE)
    args = (q, cache, table, seq, BLOCKS * 128)
    return args, generated.index_decode(*args, 16, 0, 1, 1, Q, Q, hardware=hardware)


@pytest.mark.parametrize("topk", [1, 2, 3])
@pytest.mark.parametrize("hardware", HARDWARE)
def test_small_topk_is_a_prefix_of_top16(topk, hardware):
    args, wide = _case(hardware)
    narrow = generated.index_decode(*args, topk, 0, 1, 1, Q, Q, hardware=hardware)
    assert narrow.shape == (1, R * Q, topk)
    assert torch.equal(narrow, wide[:, :, :topk])
