"""gpurl: build, push, verify and pin a large GPU RL training image."""

__all__ = ["__version__"]

__version__ = "0.1.0"
