"""Dockerfile as code: a frozen model and its renderer (`model`), the recipe built from the
config and the plan (`recipe`), a lint pass, what the lock tells before anything is written
(`checks`: asserts, torch, path sources), the one writer (`generate`), what a Dockerfile bakes
(`inputs`, `provenance`), the build context's rules (`context`) and the compiled-wheel rules
(`wheels`).

Pure except `generate`, which writes through `files`. Imports the basics and `plan`.
"""
