"""The fixes gpuopt optimize knows: their catalogue (catalogue.py), the planner (plan.py:
findings -> fixes), the run-time applier (runtime.py) and one module or folder per fix.
"""
