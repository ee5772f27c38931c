"""Stand-in for the team's RL trainer package: the image installs it from source and imports it."""

__all__ = ["__version__"]

__version__ = "0.1.0"
