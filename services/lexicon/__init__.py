"""How common a word is in general use: one source of word frequencies (``wordfreq``'s small lists, about 30,000
words a language), asked by every rule that tells common words from the rest (a password that is a plain word, the
words a recorded entry must share with its evidence, how much a note's word says)."""

from .frequency import LANGUAGES, common, load, zipf

__all__ = ["LANGUAGES", "common", "load", "zipf"]
