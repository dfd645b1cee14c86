"""Text from users (uploaded files' names, environments' and profiles' names, record fields, the errors that quote
them) made safe for Streamlit's markdown: :func:`md` escapes every character markdown (and Streamlit's LaTeX and
colour directives) give a meaning to, so that such text shows as written and never as links, images, emphasis,
math or HTML."""

from __future__ import annotations

import re
from typing import Any

_SPECIAL = re.compile(r"([\\`*_\[\]<>~$|])")  # what makes markup inline: links and images need "[", colours too


def md(text: Any) -> str:
    """``text`` with the characters that make inline markup backslash-escaped (newlines become spaces, so that no
    line of it starts a heading or a list): a link, an image or a ``:red[...]`` directive needs ``[``, emphasis
    ``*`` or ``_``, code a backtick, math ``$``, HTML ``<``, a table ``|``, strike-through ``~``."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).splitlines()))
