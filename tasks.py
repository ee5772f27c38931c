"""invoke tasks of this repository's image: gpurl's collection (`invoke --list`)."""

from gpurl_tasks.collection import ns  # noqa: F401
