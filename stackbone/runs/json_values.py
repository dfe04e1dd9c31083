"""What a run keeps as JSON (its input, each step's result, its output): values every database of
the box stores and gives back unchanged.

Python's json writes more than PostgreSQL's jsonb reads: NaN and Infinity (a number too large for
a float, such as 1e999, reads as Infinity), text holding NUL (\\u0000), and text holding a lone
surrogate (\\ud800, which is not Unicode text). SQLite would keep them all, so the rule is ours,
checked before anything is written, the same on both databases (errors.check_json). Text a run
keeps that no caller wrote (a failure's message) is escaped instead (storable_text).
"""

from __future__ import annotations

import json
import re

# Reasons a value is refused (tests assert on them).
NOT_A_JSON_NUMBER = "NaN, Infinity and numbers too large for a float (such as 1e999) are not JSON numbers"
NUL_IN_TEXT = "text must not contain the NUL character (\\u0000)"
SURROGATE_IN_TEXT = "text must not contain a lone surrogate (\\ud800 to \\udfff)"
TOO_DEEP = "it is nested too deeply"

# In json.dumps' output a NUL in a string is the escape \u0000 after an even number of backslashes
# (an odd number is a literal backslash followed by "u0000"); a surrogate stays as it is.
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_SURROGATE = re.compile("[\ud800-\udfff]")


def unstorable(value: object) -> str | None:
    """Why `value` cannot be kept as a run's JSON, or None if it can."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except ValueError as error:
        return NOT_A_JSON_NUMBER if str(error).startswith("Out of range float") else str(error)
    except TypeError as error:
        return str(error)
    except RecursionError:
        return TOO_DEEP
    if "\\u0000" in text and _NUL.search(text):
        return NUL_IN_TEXT
    if _SURROGATE.search(text):
        return SURROGATE_IN_TEXT
    return None


def storable_text(text: str) -> str:
    """`text` as every database stores it: NUL and lone surrogates (which an exception's message
    may carry) written as escapes, so recording a step's failure never fails itself."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
