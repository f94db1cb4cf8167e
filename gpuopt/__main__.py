"""``python -m gpuopt`` is the same as ``gpuopt``."""

from gpuopt.commands.entry import main

if __name__ == "__main__":
    main()
