"""Size parsing and ranges."""

from __future__ import annotations

import pytest

import costmodels as cm


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("100MiB", 100 * 2**20), ("100MB", 100 * 10**6), ("1.5GiB", 3 * 2**29), ("64K", 65536), ("1G", 2**30),
     ("8", 8), ("512B", 512), ("2kb", 2000), (" 4 KiB ", 4096), (1024, 1024), ("1e3", 1000)],
)
def test_parse_size(text, nbytes: int) -> None:
    assert cm.parse_size(text) == nbytes


@pytest.mark.parametrize(
    ("text", "message"),
    [("100XB", "unknown size unit 'XB'"), ("abc", "cannot read size 'abc'"), ("-5MB", "cannot read size"),
     ("0.5B", "not a whole number of bytes"), (True, "size must be a number")],
)
def test_parse_size_errors(text, message: str) -> None:
    with pytest.raises(cm.CommscopeError, match=message):
        cm.parse_size(text)


def test_size_range_is_nccl_tests_like() -> None:
    assert cm.size_range(2**20, 2**26, 2) == [2**k for k in range(20, 27)]
    assert cm.size_range(1000, 10**6, 10) == [1000, 10**4, 10**5, 10**6]
    with pytest.raises(cm.CommscopeError, match="factor must be > 1"):
        cm.size_range(1, 8, 1)
    with pytest.raises(cm.CommscopeError, match="smaller than min size"):
        cm.size_range(8, 1)


def test_format_size() -> None:
    assert cm.format_size(2**20) == "1MiB" and cm.format_size(1536) == "1.5KiB" and cm.format_size(7) == "7B"
