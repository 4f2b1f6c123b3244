"""DeepSeek-V4 decode: config, quantized weight formats, checkpoint loading and a graph-ready model."""
