"""Secret-looking values in command lines masked, for everything written to disk or served.

The live screen shows command lines whole, as htop does; recordings, reports and /metrics
take them through `mask_secrets` (argv words) or `mask_command` (a line already joined).
Imports only the stdlib: every layer may use it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MASK = "***"
# A name is secret when one of its words (split at - _ .) is secret: it starts with "secret",
# ends in "token" or "apikey", holds "passw" (PGPASSWORD, passwd) or is "credentials"; or it
# ends in "<one of these> key" (an `*_KEY` assignment whatever the word before).
SECRET_STARTS = ("secret",)
SECRET_ENDS = ("token", "apikey")
SECRET_INSIDE = ("passw", "passphrase")
KEY_QUALIFIERS = frozenset({"api", "access", "secret", "private", "auth", "client", "signing",
                            "encryption", "ssh", "license"})
OPTION = re.compile(r"(--?)([A-Za-z][\w.-]*)(?:=(.*))?", re.DOTALL)
ASSIGNMENT = re.compile(r"([A-Za-z_+~][\w.-]*)=(.*)", re.DOTALL)  # ENV=x, hydra a.b=x
URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]+:)([^\s/?#]+)(@)")
WORD_BREAKS = re.compile(r"(\s+)")


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[-_.]", name.lower()) if w]


def _secret_word(word: str) -> bool:
    return (word.startswith(SECRET_STARTS) or word.endswith(SECRET_ENDS)
            or any(part in word for part in SECRET_INSIDE) or word == "credentials")


def _secret_name(name: str, any_key: bool) -> bool:
    """Whether a name looks like it holds a secret; `any_key`: every `*_KEY` does."""
    words = _words(name)
    if any(_secret_word(w) for w in words):
        return True
    if len(words) < 2 or words[-1] != "key":
        return False
    return any_key or words[-2] in KEY_QUALIFIERS


def _masked_urls(word: str) -> str:
    """`word` with the password of each scheme://user:password@host masked (user kept)."""
    return URL_PASSWORD.sub(lambda m: m[1] + MASK + m[3], word)


def mask_secrets(argv: Sequence[str]) -> list[str]:
    """`argv` with secret-looking values masked: `--password=x`, `--token x` (the next word),
    `API_KEY=x`, `db.password=x`, and the password of a `scheme://user:password@host`."""
    out: list[str] = []
    mask_next = False
    for word in argv:
        if mask_next and not word.startswith("--"):
            out.append(MASK)
            mask_next = False
            continue
        mask_next = False
        option = OPTION.fullmatch(word)
        if option is not None and option[1] == "--" and _secret_name(option[2], False):
            mask_next = option[3] is None
            out.append(word if mask_next else f"--{option[2]}={MASK}")
            continue
        assignment = None if word.startswith("-") else ASSIGNMENT.fullmatch(word)
        if assignment is not None and _secret_name(assignment[1], True):
            out.append(f"{assignment[1]}={MASK}")
            continue
        out.append(_masked_urls(word))
    return out


def mask_command(line: str) -> str:
    """A command line already joined into one string, masked as `mask_secrets` masks words
    (the spaces between them kept as they were)."""
    parts = WORD_BREAKS.split(line)
    words = mask_secrets(parts[0::2])
    parts[0::2] = words
    return "".join(parts)


def mask_fact(name: str, value: object) -> object:
    """A named fact (a probe's argv, an annotate() value): masked whole when its name looks
    secret, a string masked as a command line; anything else as it is."""
    if _secret_name(name, True):
        return MASK
    return mask_command(value) if isinstance(value, str) else value
