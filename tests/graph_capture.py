"""CUDA-graph capture for the GPU tests (tools/common.py has the benchmarks' own)."""
from __future__ import annotations

import torch


def capture(fn, warmups: int = 2):
    """Call ``fn`` ``warmups`` times on a side stream (compiles outside the capture), then
    capture one call. Returns (graph, what the captured call returned)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def page16_outputs(attention_block_table, rows: int) -> dict:
    """index_decode's keyword arguments that emit the page-16 table and context lengths of
    ``rows`` query rows into static buffers (a graph's outputs)."""
    dev = attention_block_table.device
    return dict(attention_block_table=attention_block_table,
                sparse_block_table_out=torch.zeros((rows, 128), dtype=torch.int32, device=dev),
                sparse_context_lens_out=torch.zeros((rows,), dtype=torch.int32, device=dev),
                block_page_stride=16)


def replay_poisoned(graph, poisons):
    """Fill each (tensor, value) of ``poisons``, then replay ``graph``: an output a replay
    skips keeps its poison."""
    for t, value in poisons:
        t.fill_(value)
    graph.replay()
