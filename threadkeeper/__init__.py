"""Threadkeeper: the command line and the composition root that wires bot, services and persistence."""
