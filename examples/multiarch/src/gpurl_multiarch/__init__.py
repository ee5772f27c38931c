"""The multi-platform fixture's own source package: installed from the workspace after the sync."""

__all__ = ["__version__", "greeting"]

__version__ = "0.1.0"


def greeting() -> str:
    """A value a build assert can check, so the import proves the installed source is ours."""
    return "gpurl-multiarch"
