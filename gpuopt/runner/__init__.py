"""Running the user's script or module under gpuopt: in-process, as ``python`` would run it."""
