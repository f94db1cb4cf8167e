"""The syncs fix: per-step device reads accumulated on the device, read where the script uses
them.
"""
