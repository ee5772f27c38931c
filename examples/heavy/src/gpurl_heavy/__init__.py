"""The heavy workspace's own source package: installed from the workspace after the sync chain."""

__all__ = ["__version__", "greeting"]

__version__ = "0.1.0"


def greeting() -> str:
    """A value the build assert checks, so the import proves the installed source is ours."""
    return "gpurl-heavy"
