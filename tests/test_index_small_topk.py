"""topk 1 and 2: the selector keeps at least two keys per row (tl.topk needs k ≥ 2); the first
ids must equal the first ids of a wider selection (same total order), which is the reference
selection of the call's scores.

Each hardware target's selector comes from its table; the scorer is one fixed split launch (the
scores are the same under every scorer, and the tables' wide scorer grids only cost
interpreter time here)."""
from __future__ import annotations

import functools

import pytest
import torch

import generated
from decode_inputs import DEVICE
from reference_topk import reference_topk

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
    return args, _decode(args, 16, hardware)


SCORER = {"variant": "index_score_split", "kv_chunks": 2, "high_batch": False,
          "num_warps": 4, "num_stages": 2}


def _decode(args, topk, hardware):
    """index_decode with the fixed scorer and the hardware table's selector."""
    return generated.index_decode_with_launch(SCORER, None, *args, topk, 0, 1, 1, Q, Q,
                                              hardware=hardware)


@pytest.mark.parametrize("hardware", HARDWARE)
def test_top16_is_the_reference_selection_of_its_scores(hardware):
    args, wide = _case(hardware)
    scores = generated.index_decode_scores(*args, 0, 1, Q, Q, hardware=hardware)
    assert torch.equal(wide.cpu(), reference_topk(scores, args[3], Q, 16))


@pytest.mark.parametrize("topk", [1, 2, 3])
@pytest.mark.parametrize("hardware", HARDWARE)
def test_small_topk_is_a_prefix_of_top16(topk, hardware):
    args, wide = _case(hardware)
    narrow = _decode(args, topk, hardware)
    assert narrow.shape == (1, R * Q, topk)
    assert torch.equal(narrow, wide[:, :, :topk])
