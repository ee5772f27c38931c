"""The extension module is declared here; metadata lives in pyproject.toml.

Like a CUDA extension's build, the compile reads TORCH_CUDA_ARCH_LIST from its environment;
the module records it (`gpurl_demo_ext.ARCH_LIST`), so the image proves what its compile got.
"""

import os

from setuptools import Extension, setup

ARCH_LIST = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
setup(ext_modules=[Extension("gpurl_demo_ext", sources=["gpurl_demo_ext.c"],
                             define_macros=[("GPURL_ARCH_LIST", f'"{ARCH_LIST}"')])])
