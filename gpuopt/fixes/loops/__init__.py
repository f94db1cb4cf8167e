"""The loop rewrites: vectorize, padding and padding-batch, planned together and checked side by
side with the loops in a child process.
"""
