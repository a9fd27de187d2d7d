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
