"""Dockerfile as code: a frozen model and its renderer (`model`), the recipe built from the
config and the plan (`recipe`), a lint pass (`lint`), the layers an image will have
(`layers`), what the lock tells before anything is written (`checks`: asserts, torch, path
sources), the one writer (`generate`), what a Dockerfile bakes (`inputs`, `provenance`), the
build context's rules (`context`; `ignore`: .dockerignore matched as the builders do), what a
hand-written Dockerfile's build reads (`handwritten`), the compiled-wheel rules (`wheels`) and
the package-set proof that runs in the image (`envcheck`, stdlib only).

Pure except `generate`, which writes through `files`. Imports the basics and `plan`.
"""
