"""Dockerfile as code: a small frozen model, its renderer, a lint pass and the gpu-rl recipe."""
