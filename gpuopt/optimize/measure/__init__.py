"""gpuopt optimize's measures: faster (speed.py), the same training (verify.py), and when to
stop (policy.py).
"""
