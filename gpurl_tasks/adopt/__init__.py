"""Adopting a repository: `gpurl init` (its [tool.gpurl] from the lock, the pyproject and the
pin table) and the two files of one import each that a project commits."""
