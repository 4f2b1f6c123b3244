"""Building blocks of the DeepSeek-V4 decode step (spec sections 2-6), shared by the eager and graph-ready paths."""
