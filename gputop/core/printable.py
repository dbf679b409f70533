"""Text from outside gputop made safe to show: no character in it can steer a terminal.

Process names and arguments, usernames, a trainer's annotate() strings and NVML's names
come from other people. Sources pass them through `printable` once, where they enter the
model, so no renderer (the TUI, `--once`, the splash) can forget to. Imports only the stdlib:
every layer may use it.
"""

from __future__ import annotations

# Characters that reorder the text around them on screen (Trojan Source, CVE-2021-42574).
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_LINE_BREAKS = (0x2028, 0x2029)  # Unicode's own line and paragraph separators

_ESCAPES: dict[int, str] = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))},  # C0, DEL, C1
    **{code: f"\\u{code:04x}" for code in (*_BIDI, *_LINE_BREAKS)},
    **{code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)},  # lone surrogates
}


def printable(text: str) -> str:
    """`text` with every control, bidi-override and lone-surrogate character written as an escape.

    ESC becomes the four characters `\\x1b`, U+202E becomes `\\u202e`; all else is kept.
    """
    if text.isprintable():  # the common case: none of the escaped characters is printable
        return text
    return text.translate(_ESCAPES)
