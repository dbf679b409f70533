"""The built-in hashes give hashlib's digests and uuid's UUIDs, and load no OpenSSL."""

from __future__ import annotations

import hashlib
import uuid

from gputop.core.hashes import blake2b, name_uuid
from tests.helpers.fresh import printed


def test_a_name_uuid_is_uuid5s() -> None:
    namespace = uuid.UUID("6f1c2a52-5d1e-4c57-9a43-000000000000")
    for name in ("0/0", "0/7", "42/3", "naïve/ü", ""):
        assert name_uuid(namespace.bytes, name) == str(uuid.uuid5(namespace, name))


def test_blake2b_is_hashlibs() -> None:
    for text in (b"", b"gputop", "ü".encode() * 99):
        assert blake2b(text, digest_size=4).digest() == hashlib.blake2b(
            text, digest_size=4).digest()


def test_simulated_gpus_and_recording_keys_map_no_openssl() -> None:
    code = ("import sys\n"
            "from gputop.sources.simulated import SimulatedGpuSource\n"
            "from gputop.recording.schema import text_hash\n"
            "SimulatedGpuSource('mixed', count=8).sample(); text_hash('x')\n"
            "print('_hashlib' in sys.modules,"
            " any('libcrypto' in line for line in open('/proc/self/maps')))")
    assert printed(code) == ["False False"]
