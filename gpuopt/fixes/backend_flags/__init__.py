"""The backend-flag fixes (cudnn-benchmark, tf32): ``torch.backends`` flags; their plans, their
run-time form and their codemod."""
