"""A stand-in for SkyRL's `skyrl_gym` package, reached by skyrl-train through a symlink."""

__version__ = "0.1.1"
