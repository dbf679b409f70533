"""SHA-1 and BLAKE2b from CPython's own hash modules, without `import hashlib`.

hashlib loads OpenSSL (`_hashlib`, libcrypto: ~2 MiB resident and ~5 ms) the moment it is
imported, whatever hash is then asked for; the simulated GPUs' UUIDs (SHA-1, as uuid5) and
a recording's text keys (BLAKE2b) need neither. Where an interpreter was built without the
built-in modules, hashlib's are used: the same digests.
"""

from __future__ import annotations

try:  # the modules hashlib itself falls back to
    from _blake2 import blake2b
    from _sha1 import sha1
except ImportError:  # pragma: no cover - a CPython built with OpenSSL's hashes only
    from hashlib import blake2b, sha1

__all__ = ["blake2b", "name_uuid"]


def name_uuid(namespace: bytes, name: str) -> str:
    """`str(uuid.uuid5(UUID(bytes=namespace), name))`: the name-based UUID (RFC 4122, SHA-1)."""
    digest = bytearray(sha1(namespace + name.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC's variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
