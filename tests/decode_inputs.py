"""Random decode-indexer inputs shared by the selector and single-launch tests, and tensors
over address space never written (for strides past int32)."""
import pytest
import torch

from reference_topk import cdiv

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ATTN_PAGE_BASE = 100000  # attention-table page ids, disjoint from the index table's


def virtual_tensor(elements, dtype):
    """A tensor of that many elements, never written (its pages are not committed), or a skip
    where the host refuses the address space."""
    try:
        return torch.empty(elements, dtype=dtype, device=DEVICE)
    except (RuntimeError, MemoryError):
        pytest.skip(f"no {elements}-element allocation on this host")


def make_decode_inputs(H, Q, lens, D=16, seed=0, extra_tokens=5, dtype=torch.bfloat16,
                       device=DEVICE, attention_table=False):
    """(index_decode kwargs, max_block), or (kwargs, attention table, max_block) with
    attention_table: a [R, max_block] int32 page table drawn after the query, ids ≥ 100000."""
    g = torch.Generator().manual_seed(seed)
    R = len(lens)
    max_seq_len = max(lens) + extra_tokens
    max_block = cdiv(max_seq_len, 128)
    num_pages = R * max_block + 3
    cache = torch.randn((num_pages, 128, D), generator=g).to(dtype)
    block_table = torch.randperm(num_pages, generator=g)[: R * max_block].reshape(R, max_block)
    q = torch.randn((R * Q, H, D), generator=g).to(dtype)
    inputs = dict(idx_q=q.to(device), index_kv_cache=cache.to(device),
                  block_table=block_table.to(torch.int32).to(device),
                  seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),
                  max_seq_len=max_seq_len)
    if not attention_table:
        return inputs, max_block
    attn = torch.randperm(R * max_block * 4, generator=g)[: R * max_block].reshape(R, max_block)
    return inputs, (attn + ATTN_PAGE_BASE).to(torch.int32).to(device), max_block
