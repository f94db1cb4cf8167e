"""The pinned-copies fix: host-to-device copies from pinned memory with ``non_blocking=True``; its
plan, its run-time form and its codemod."""
