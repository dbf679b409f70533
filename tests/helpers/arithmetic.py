"""Checks that the arithmetic an advice item prints holds as printed."""

from __future__ import annotations

import math
import re

from gputop.advice.context import ceil_div

NUMBER = r"(\d+(?:\.\d+)?)"
PRODUCT = re.compile(rf"{NUMBER}((?: x {NUMBER})+) = {NUMBER}")
QUOTIENT = re.compile(rf"{NUMBER} / {NUMBER} = {NUMBER} → (\d+) workers?( \(at most \d+\))?")


def _places(text: str) -> int:
    return len(text.partition(".")[2])


def printed_arithmetic(text: str) -> int:
    """Assert each "a x b = c" is exact and each "a / b = q → N workers" has q, a / b rounded
    up at q's printed precision, and N its ceiling (unless capped); returns how many."""
    checked = 0
    for match in PRODUCT.finditer(text):
        factors = [match.group(1), *re.findall(NUMBER, match.group(2))]
        product = math.prod(float(f) for f in factors)
        assert math.isclose(product, float(match.group(match.lastindex or 0)),
                            rel_tol=1e-9), f"{match.group(0)!r}: the product is {product}"
        checked += 1
    for match in QUOTIENT.finditer(text):
        a, b, q, n, capped = match.groups()
        exact = float(a) / float(b)
        step = 10.0 ** -_places(q)
        assert exact - 1e-9 <= float(q) < exact + step, f"{match.group(0)!r}: a / b = {exact}"
        if not capped:
            assert int(n) == ceil_div(float(q), 1.0), match.group(0)
        checked += 1
    return checked
