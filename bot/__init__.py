"""Transports: the Slack bot (``bot.slack``, served by ``bot.server``) and the local console (``bot.console``).
Listeners validate, record, acknowledge and hand off to the application. Nothing is imported here, so a command
that needs only the manifest (``bot.manifest``) loads nothing else."""
