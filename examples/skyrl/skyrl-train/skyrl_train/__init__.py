"""A stand-in for SkyRL's `skyrl_train` package: the fixture's workspace project (gpurl only
needs it to exist and import; the real package is SkyRL's)."""

__version__ = "0.3.1"


def greeting() -> str:
    return "skyrl-train"
