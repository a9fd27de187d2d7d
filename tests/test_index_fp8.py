"""fp8 e4m3 index cache (the extra variant of the scorers): values against the reference on the
upcast cache (fp8 is used unscaled), and end-to-end selection equal to the same call on a bf16
copy of the cache (every fp8 value is exact in bf16, so the two must agree bit for bit)."""
from __future__ import annotations

import pytest
import torch

import generated
from reference_index import ref_decode_scores

pytestmark = pytest.mark.gpu


def _inputs(R, ctx, Q, H, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    blocks = ctx // 128
    pages = R * blocks + 8
    cache8 = (torch.randn((pages, 128, 128), device="cuda", generator=g) * 2).to(
        torch.float8_e4m3fn)
    table = torch.randperm(pages, device="cuda", generator=g)[: R * blocks].to(torch.int32)
    table = table.view(R, blocks).contiguous()
    q = torch.randn((R * Q, H, 128), device="cuda", generator=g).to(torch.bfloat16)
    seq = torch.randint(1, ctx + 1, (R,), device="cuda", generator=g, dtype=torch.int32)
    seq[0] = ctx
    return q, cache8, table, seq


@pytest.mark.parametrize("R,ctx,Q,H", [(1, 8192, 4, 1), (4, 32768, 1, 2), (11, 65536, 4, 4)])
def test_fp8_cache_scores_match_reference(R, ctx, Q, H):
    q, cache8, table, seq = _inputs(R, ctx, Q, H, seed=R + ctx)
    scores = generated.index_decode_scores(q, cache8, table, seq, ctx, 0, 1, Q, Q)
    ref = ref_decode_scores(q, cache8.to(torch.bfloat16), table, seq, 0, 1, Q, ctx, device="cuda")
    written = ~torch.isnan(ref)
    torch.testing.assert_close(scores[written], ref[written], rtol=1e-5, atol=2e-3)


@pytest.mark.parametrize("hardware", ["sm_90", "generic", "gfx950"])
def test_fp8_cache_selection_equals_bf16_copy(hardware):
    R, ctx, Q = 4, 32768, 4
    q, cache8, table, seq = _inputs(R, ctx, Q, 1, seed=7)
    args = (table, seq, ctx, 16, 0, 1, 1, Q, Q)
    got = generated.index_decode(q, cache8, *args, hardware=hardware)
    want = generated.index_decode(q, cache8.to(torch.bfloat16), *args, hardware=hardware)
    assert torch.equal(got, want)
