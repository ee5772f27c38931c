"""gpurl: build, push, verify and pin a large GPU RL training image.

The top level holds the shared basics (config, errors, proc, files, units, cli, git, redact,
imageref, steps); the sub-packages follow the pipeline, and imports point one way:
basics <- plan <- dockerfile <- oci <- rebuild <- cluster / local <- tasks.py
(`tests/test_architecture.py` enforces it).
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
