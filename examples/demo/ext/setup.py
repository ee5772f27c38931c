"""The extension module is declared here; metadata lives in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("gpurl_demo_ext", sources=["gpurl_demo_ext.c"])])
