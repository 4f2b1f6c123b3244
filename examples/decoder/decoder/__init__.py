"""A small decoder-only transformer with a KV cache, top-1 MoE and a CUDA-graph runner."""
