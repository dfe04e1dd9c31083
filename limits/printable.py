"""User-supplied text made safe to show: control and bidirectional-override characters become
visible escapes.

A label, a slot or run id, a limit name read from another installation, a username: any of them
can hold characters that act instead of showing. On a terminal, ESC and BEL drive the terminal
and a newline forges a table row; on a terminal or a web page, a right-to-left override shows
the rest of the text reversed. `printable()` writes each such character as its escape (`\\x1b`,
`\\n`, `\\u202e`), so the value is shown exactly as it is stored and cannot change what is around
it. The CLI passes every user-supplied value through it (JSON output is safe already); Studio
uses it as the `printable` template filter (limits.templatetags.limits_ui).

No Django here: the `stackbone` script uses it before (or without) setting Django up.
"""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls (NEL, CSI ...); the line and paragraph separators; and every
# bidirectional formatting character: the Arabic letter mark, the LRM/RLM marks, the embeddings
# and overrides (U+202A-U+202E) and the isolates (U+2066-U+2069).
_ACTIVE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Kept as they are by printable(text, lines=True): a multi-line value (an error, a JSON input)
# shown in a block that keeps its lines.
_LINE_BREAKS = frozenset("\n\t")


def _escape(char: str) -> str:
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def printable(value: object, *, lines: bool = False) -> str:
    """`value` as text, with every control or bidirectional-formatting character escaped
    (`\\x1b`, `\\u202e`). With `lines=True`, newlines and tabs stay (for multi-line blocks)."""
    text = value if isinstance(value, str) else str(value)
    if lines:
        return _ACTIVE.sub(lambda match: match[0] if match[0] in _LINE_BREAKS else _escape(match[0]), text)
    return _ACTIVE.sub(lambda match: _escape(match[0]), text)
