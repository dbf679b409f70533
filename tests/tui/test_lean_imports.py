"""The app's loop is imported without TLS: OpenSSL is not mapped for a monitor that never
speaks TLS, yet the exporter's TLS and the fleet's HTTPS still have it when they ask."""

from __future__ import annotations

from tests.helpers.fresh import printed

_BUILD = """
import sys
from gputop.tui import build_app
build_app(object(), start=False)  # what `gputop` does before the app runs (no sampler here)
mapped = [line for line in open('/proc/self/maps') if 'libssl' in line or 'libcrypto' in line]
print('ssl' in sys.modules, bool(mapped))
import ssl, http.client, urllib.request
print(hasattr(http.client, 'HTTPSConnection'), hasattr(urllib.request, 'HTTPSHandler'))
"""


def test_building_the_app_leaves_openssl_unloaded_and_tls_still_there_for_who_asks() -> None:
    loaded, https = printed(_BUILD)[:2]
    assert loaded == "False False", "asyncio's import of ssl mapped OpenSSL for the app"
    assert https == "True True", "HTTPS was lost to the modules that import ssl later"


def test_a_run_that_loaded_tls_first_keeps_it() -> None:
    """The exporter with TLS (imported before the app) keeps a whole asyncio too."""
    code = "import ssl\n" + _BUILD.replace(
        "print('ssl' in sys.modules, bool(mapped))",
        "import asyncio.sslproto; print(asyncio.sslproto.ssl is ssl, bool(mapped))")
    assert printed(code)[0] == "True True"
