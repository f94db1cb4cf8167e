"""The user's script run as python would run it: in this process (target.py, from rewritten
private copies: sources.py) or a gpuopt module in a child process of its own (child_process.py,
interrupts.py); the model among its objects (model_finder.py).
"""
