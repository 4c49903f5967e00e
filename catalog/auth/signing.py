"""The development signing key: an Ed25519 pair created once in `<data dir>/keys` (mode 0600).

Creation is atomic (written to a private temporary file, then linked into place), so two
processes starting at once end up with the same key.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PRIVATE_KEY_FILE = "dev_ed25519.pem"


def _write_private(path: Path, pem: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another process won the race: keep theirs
    except FileExistsError:
        pass
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def ensure_dev_key(keys_dir: Path) -> Ed25519PrivateKey:
    keys_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = keys_dir / PRIVATE_KEY_FILE
    if not path.exists():
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        _write_private(path, pem)
    return load_dev_private_key(keys_dir)


def load_dev_private_key(keys_dir: Path) -> Ed25519PrivateKey:
    path = keys_dir / PRIVATE_KEY_FILE
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 private key")
    return key


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]
