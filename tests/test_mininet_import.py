"""Importing Mininet leaves this package's logging alone: every message once, on a
line of its own (Mininet's own logger makes later loggers write without newlines)."""

from __future__ import annotations

import logging

import pytest

from ina.lab.mininet import import_mininet


def test_loggers_made_after_mininet_is_imported_are_plain_loggers() -> None:
    try:
        import_mininet()
    except ImportError:
        pytest.skip("Mininet is not installed (apt-get install mininet)")
    logger = logging.getLogger("ina.test.after-mininet")
    assert type(logger) is logging.Logger and not logger.handlers
