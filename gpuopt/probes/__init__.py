"""Probes: what runs inside the user's process to measure it (steps, DataLoader wait, samplers,
dispatch recorder, profiler window). Each is a :class:`gpuopt.probes.protocol.Probe`."""
