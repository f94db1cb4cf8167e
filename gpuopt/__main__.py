"""``python -m gpuopt`` is the same as ``gpuopt``."""

from gpuopt.cli import main

if __name__ == "__main__":
    main()
