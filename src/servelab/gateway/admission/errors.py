"""The one way a count fails: the request is then long (fail closed), and the reason is recorded."""

from __future__ import annotations


class Uncountable(Exception):
    """This request's prompt tokens cannot be counted as the engine would count them; the message says why."""
