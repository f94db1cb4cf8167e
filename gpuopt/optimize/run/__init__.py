"""gpuopt optimize's runs: each a gpuopt profile in a child process, and the analyses before
planning.
"""
