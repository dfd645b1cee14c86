"""Text from users (uploaded files' names, environments' and profiles' names, record fields, the errors that quote
them) made safe for Streamlit's markdown: :func:`md` escapes every character markdown (and Streamlit's LaTeX and
colour directives) give a meaning to, so that such text shows as written and never as links, images, emphasis,
math or HTML."""

from __future__ import annotations

import re
from typing import Any

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def md(text: Any) -> str:
    """``text`` with markdown's special characters backslash-escaped (newlines kept as spaces)."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).splitlines()))
