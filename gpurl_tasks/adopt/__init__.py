"""Adopting a repository: `init` (gpurl init: [tool.gpurl] from the lock, the pyproject and
the pin table) and `shims` (the two files of one import each that a project commits).

Imports the basics and `plan`; the collection's `init` task calls it.
"""
