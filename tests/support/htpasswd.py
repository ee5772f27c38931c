"""A bcrypt htpasswd file for the real registry's Basic auth, hashed by the system's libcrypt."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

__all__ = ["basic_auth_yaml"]


def _bcrypt(secret: str) -> str:
    lib = ctypes.CDLL(ctypes.util.find_library("crypt") or "libcrypt.so.1")
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt_gensalt.restype = ctypes.c_char_p
    salt = lib.crypt_gensalt(b"$2b$", 5, os.urandom(16), 16)
    hashed = lib.crypt(secret.encode(), salt)
    if not hashed or not hashed.startswith(b"$2b$"):
        raise RuntimeError("libcrypt cannot make bcrypt hashes here")
    return str(hashed.decode())


def basic_auth_yaml(workdir: Path, username: str, secret: str) -> str:
    """Write the htpasswd file and return the registry's `auth:` section for it."""
    path = workdir / "htpasswd"
    path.write_text(f"{username}:{_bcrypt(secret)}\n")
    return f"auth:\n  htpasswd:\n    realm: gpurl-test\n    path: {path}\n"
