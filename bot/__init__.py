"""Transports: the Slack bot and the local console. Listeners validate, record, acknowledge and hand off."""

from .console import run_console

__all__ = ["run_console"]
