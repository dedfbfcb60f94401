"""Standing instructions to the assistant, told apart from what a thread says about how its team works.

"From now on, always answer in French" tells the assistant how to behave; "From now on we deploy on
Tuesdays" is a fact about the team. A handoff carries facts, decisions and asks; it must never carry an
instruction, whoever wrote it (a person, a tool's output, the summarizer, ``record_state``), because a later
context would read it as the thread's settled state. A sentence is an instruction when it has a standing
scope ("from now on", "always", "every time", "désormais", "ab jetzt", …) and is aimed at the assistant (it
tells someone to answer, reply, write, sign, … ; it says "you" must; it names the bot), unless the team is
named before that, as its subject ("we", "our team", "nous", "wir", Spanish first-person plural verbs, …). Attempts to override the
assistant's instructions ("ignore all previous instructions") are instructions whatever their form.

English, French, Spanish, German, Portuguese and Italian phrasings are recognised.
"""

from __future__ import annotations

import re

from .extract import _Cue


SCOPE = _Cue(
    r"\b(?:from now on|going forward|from here on(?: out)?|henceforth|hereafter|in (?:the )?future|for all future|"
    r"every (?:single )?time|each time|always|never|whenever|until (?:i|we) say otherwise|for the rest of (?:this|the)|"
    # French
    r"à partir de maintenant|désormais|dorénavant|à l'avenir|toujours|jamais|chaque fois|"
    # Spanish / Portuguese
    r"a partir de ahora|de ahora en adelante|en adelante|siempre|nunca|cada vez|a partir de agora|daqui em diante|"
    r"sempre|toda vez|"
    # German
    r"ab jetzt|von nun an|ab sofort|künftig|zukünftig|immer|nie|niemals|jedes mal|"
    # Italian
    r"d'ora in poi|da ora in poi|d'ora in avanti|ogni volta|mai)\b")

AIMED = _Cue(
    # what the assistant does with its replies, as an imperative (base form only: "answers" is a fact)
    r"\b(?:answer|reply|respond|write|speak|talk|sign|format|translate|summari[sz]e|greet|address me|call me|"
    r"refer to me|end (?:your|every|each|all)|start (?:your|every|each|all)|begin (?:your|every|each|all)|"
    r"act as|pretend|behave|roleplay|role-play|"
    r"you (?:must|should|will|shall|need to|have to|are to|are now)|the (?:bot|assistant|ai)|threadkeeper|"
    # French
    r"réponds|répondez|écris|écrivez|parle|parlez|signe|signez|traduis|traduisez|résume|résumez|appelle-moi|"
    r"tu dois|vous devez|tu vas|"
    # Spanish / Portuguese
    r"responde|contesta|escribe|habla|firma|traduce|resume|llámame|debes|tienes que|responda|escreva|fale|"
    r"você deve|"
    # German
    r"antworte|antworten sie|schreib|schreibe|sprich|unterschreibe|übersetze|fasse|nenn mich|du sollst|"
    r"sollst du|du musst|musst du|"
    # Italian
    r"rispondi|scrivi|parla|firma|traduci|riassumi|devi)\b")

TEAM = _Cue(
    r"\b(?:we|we're|we've|we'll|our|the team|our team|"
    r"nous|notre|nos|l'équipe|"
    r"nosotros|nuestro|nuestra|el equipo|nós|a equipe|"
    r"wir|unser|unsere|das team|"
    r"noi|il team|la squadra)\b|\b\w+(?:amos|emos|imos|iamo)\b")

OVERRIDE = _Cue(
    r"\b(?:ignore|disregard|forget|override)\b[^.!?\n]{0,40}\b(?:instructions?|rules|prompts?|guidelines|directions)\b|"
    r"\byou are now\b|\bsystem prompt\b|\bnew instructions?:|"
    r"\bignore[sz]?\b[^.!?\n]{0,40}\binstructions\b|\bignora\b[^.!?\n]{0,40}\binstrucciones\b|"
    r"\bignoriere?\b[^.!?\n]{0,40}\banweisungen\b|\bignora\b[^.!?\n]{0,40}\bistruzioni\b|"
    r"\b(?:oublie|oubliez)\b[^.!?\n]{0,40}\binstructions\b")

_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_WORDS = re.compile(r"[^\W\d_]+")
_GATE = frozenset("""now forward here henceforth hereafter future time always never whenever otherwise rest
    maintenant désormais dorénavant avenir toujours jamais fois ahora adelante siempre nunca vez agora diante
    sempre jetzt nun sofort künftig zukünftig immer nie niemals mal ora poi avanti volta mai
    instruction instructions rules prompt prompts guidelines directions instrucciones anweisungen istruzioni""".split())
"""Every word one of SCOPE's or OVERRIDE's phrases needs: a text with none of them holds no instruction, which
a set lookup tells faster than the patterns."""


def is_instruction(sentence: str) -> bool:
    """Whether one sentence is a standing instruction to the assistant (see the module's description)."""
    return _instruction(sentence.lower())


def _instruction(lowered: str) -> bool:
    if OVERRIDE.pattern.search(lowered):
        return True
    aimed = AIMED.pattern.search(lowered) if SCOPE.pattern.search(lowered) else None
    if aimed is None:
        return False
    return TEAM.pattern.search(lowered, 0, aimed.start()) is None  # the team as the subject: before what is aimed


def without_instructions(text: str) -> str:
    """``text`` without its sentences that are standing instructions ("" when that is all it says)."""
    lowered = text.lower()
    if _GATE.isdisjoint(_WORDS.findall(lowered)) or not (SCOPE.pattern.search(lowered)
                                                         or OVERRIDE.pattern.search(lowered)):
        return text  # the common case
    pieces = [s for s in _SENTENCE.split(text) if s.strip()]
    kept = [s for s in pieces if not _instruction(s.lower())]
    return text if len(kept) == len(pieces) else " ".join(kept).strip()
