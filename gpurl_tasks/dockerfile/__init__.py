"""Dockerfile as code: a frozen model and its renderer (`model`), the recipe built from the
config and the plan (`recipe`), a lint pass, the one writer (`generate`), what a Dockerfile
bakes (`inputs`, `provenance`) and the compiled-wheel rules (`wheels`).

Pure except `generate`, which writes through `files`. Imports the basics and `plan`.
"""
