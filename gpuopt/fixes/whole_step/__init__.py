"""The whole-step fixes: cuda-graphs and aot."""
