"""Text aimed at the assistant's future behaviour, told apart from what a thread says about how its team works.

"From now on, always answer in French" tells the assistant how to behave; "From now on we deploy on
Tuesdays" is a fact about the team. Nothing a person wrote may reach a handoff, the memory or ``record_state``
with more authority than their message had: an instruction in a person's message is kept only as what it is,
that person's ask ("ana asked: …"), and one that a tool's output, the summarizer or ``record_state`` states
is rejected, since a later context would read it as the thread's settled state.

The rule is structural, not a list of phrasings. A sentence is an instruction when

1. it tries to override the assistant's instructions ("ignore all previous instructions", "you are now …"), or
2. its main clause has a **standing scope** (a frequency or future-scope adverbial: "always", "never",
   "from now on", "whenever …", "every time …", "all subsequent replies", "ab sofort", "désormais", "siempre",
   "d'ora in poi", …; one inside a later subordinate clause, "why the job always fails", does not count)
   **and is aimed at the addressee**: after the leading adverbials, subordinate clause ("Whenever someone
   asks …,"), label ("Policy:") or form of address ("Assistant,", "@bot") are set aside, the clause
   - has a second-person subject or possessive (you, your, du, tu, vous, usted, você, voi, …; also inverted:
     "sollst du", "antwortest du", "Antworten Sie"), or names the bot as its subject; or
   - is an imperative: it starts with a verb, which shows in its structure: a frequency adverb stands before
     it ("Always end …", "ALWAYS obey …": in a statement the subject comes first, "we always deploy"), the
     sentence addresses the bot, or the word after it opens an object or complement (a determiner, pronoun,
     preposition or "that": "tell them", "make all …", "answer in …", "réponds en …").

   A clause whose subject is someone else is a statement: a first-person or third-person pronoun,
   a determiner ("the team", "our on-call", "l'équipe"), a first-person-plural verb ending in the pro-drop
   languages ("desplegamos", "usiamo"), or a bare noun followed by its verb ("Deploys never go out").

Whether a sentence states a fact at all (:func:`stated_as_fact`, stricter, for what ``record_state`` records) is read
from the same structure, past any phrase a preposition opens before the clause ("In the form of a poem, …", "Em
forma de poema, …"): a verb in the mood of a command (the subjunctive of Spanish, Portuguese and Italian, irregular
verbs through their stem changes and the few suppletive ones, French's plural imperative, a German infinitive that
ends a clause with no finite verb) is a command; a German finite auxiliary followed by its subject, or a verb in a past
or future tense, states something.

The word lists are closed classes (pronouns, determiners, prepositions, frequency adverbs) of English, German,
French, Spanish, Portuguese and Italian; what they recognise is the sentence's shape. A sentence in another language
is one they cannot read (:func:`readable`), so it is never taken for a statement of fact (:func:`stated_as_fact`).
"""

from __future__ import annotations

import re
import unicodedata

from ..lexicon import LANGUAGES, zipf

_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_TOKEN = re.compile(r"<@?[\w.-]+>|@[\w.-]+|[^\W\d_]+n['’]t\b|[^\W\d_]+['’](?:re|ll|ve|s|m|d)\b|[^\W\d_]+['’]|[\w-]+")

# -- standing scope ---------------------------------------------------------------------------------------------
_ADVERBIAL = (  # temporal adverbials that open a clause (set aside before its subject or verb is looked for)
    r"from now on|going forward|moving forward|from here on(?: out| in)?|henceforth|hereafter|from this point on|"
    r"in (?:the )?future|for all future \w+|for (?:the rest of|all) (?:this|the) \w+|until (?:i|we) say otherwise|"
    r"until further notice|from today on|starting (?:now|today)|no matter what|at all times|by default|"
    r"à partir de maintenant|à partir d'aujourd'hui|désormais|dorénavant|à l'avenir|dès maintenant|"
    r"a partir de ahora|de ahora en adelante|en adelante|desde ahora|a partir de hoy|"
    r"a partir de agora|daqui em diante|de agora em diante|daqui para frente|"
    r"ab jetzt|von nun an|ab sofort|ab heute|künftig|zukünftig|in zukunft|fortan|von jetzt an|"
    r"d'ora in poi|da ora in poi|d'ora in avanti|da adesso in poi|d'ora innanzi|in futuro|da oggi in poi")
_FREQUENCY = (  # frequency adverbs: standing scope, and a sign of an imperative when they stand before a verb
    r"always|never(?! ?mind)|ever|toujours|jamais|siempre|nunca|jamás|sempre|mai|immer|nie|niemals|stets")
_NOMINAL = (  # scope phrases that are part of a noun phrase or a subordinate clause
    r"whenever|every (?:single )?time|each time|any ?time|every (?:reply|answer|response|message|question)s?|"
    r"all (?:subsequent|future|further|following|later|your) \w+|subsequent|any more|anymore|ever again|"
    # a condition on anyone at all is a standing rule: "when anyone asks …", "si quelqu'un demande …"
    r"(?:when|if|wenn|falls|quand|si|cuando|quando|se) (?:anyone|someone|anybody|somebody|people|jemand|"
    r"quelqu'un|alguien|alguém|qualcuno)|"
    r"chaque fois|à chaque fois|toutes? (?:les|tes|vos) (?:réponses|messages)|cada vez|todas (?:las|tus) respuestas|"
    r"toda vez|sempre que|todas as respostas|jedes mal|jedesmal|jede antwort|alle antworten|ogni volta|"
    r"tutte le risposte|ogni risposta")
SCOPE = re.compile(rf"\b(?:{_ADVERBIAL}|{_FREQUENCY}|{_NOMINAL})\b")

OVERRIDE = re.compile(
    r"\b(?:ignore|disregard|forget|override)\b[^.!?\n]{0,40}\b(?:instructions?|rules|prompts?|guidelines|directions)\b|"
    r"\byou are now\b|\bsystem prompt\b|\bnew instructions?:|"
    # the command in each language's imperative or infinitive ("Ignora", "Ignorez", "Ignorar", "Ignorieren")
    r"\b(?:ignor(?:e[sz]?|er|a|ar|are|iere|ieren)|oublie[rz]?)\b[^.!?\n]{0,40}"
    r"\b(?:instructions|instrucciones|instruções|anweisungen|istruzioni)\b")

# -- what opens a clause ----------------------------------------------------------------------------------------
_SUBORDINATOR = re.compile(  # a leading subordinate clause ends at its comma
    r"(?:whenever|when|if|once|every (?:single )?time|each time|any ?time|as soon as|wenn|immer wenn|jedes mal wenn|"
    r"falls|sobald|quand|lorsque|chaque fois que|si|dès que|cuando|cada vez que|siempre que|en cuanto|quando|"
    r"sempre que|toda vez que|se|ogni volta che|appena)\b")
_LATER_SUBORDINATOR = re.compile(  # where the main clause's scope ends
    r"\b(?:why|what|which|who|whom|whose|how|where|because|since|whether|warum|weil|ob|wieso|pourquoi|parce que|"
    r"pourquoi|porque|por qué|por que|perché|poiché|quale|dove|come mai)\b")
_LEADING = re.compile(  # adverbials, courtesy and connectives set aside at the start of a clause
    rf"(?:{_ADVERBIAL}|please|pls|kindly|and|also|so|then|now|ok|okay|"
    r"bitte|und|auch|dann|jetzt|s'il te plaît|s'il vous plaît|et|alors|maintenant|por favor|y|entonces|ahora|"
    r"e|então|agora|per favore|quindi|poi|ora|adesso)\b[\s,;:!-]*")
_COURTESY_ANYWHERE = re.compile(r"(?i:\b(?:please|pls|kindly|s'il te plaît|s'il vous plaît|por favor|per favore)\b)|"
                                r"\bbitte\b")
"""Courtesy words anywhere in a sentence ask something of its reader ("bitte" in lowercase only: "die Bitte" is a
noun)."""
_COURTESY = re.compile(r"(?:please|pls|kindly|bitte|s'il te plaît|s'il vous plaît|por favor|per favore)\b")
_TRANSPARENT = frozenset("""always never ever only just also simply really please kindly
    immer nie niemals stets nur bitte auch doch mal toujours jamais seulement ne n' n’ siempre nunca jamás solo sólo
    sempre só somente mai solo solamente don't dont do not not non no não nicht""".split())
_FREQUENCY_WORDS = frozenset(word.split("(")[0] for word in _FREQUENCY.split("|"))
_LABEL = re.compile(r"[^\W\d_][\w ]{0,24}:\s+")  # "Policy: …", "Note to the bot: …"
_BOT = frozenset("""bot assistant ai threadkeeper chatbot assistent assistente asistente""".split())
_VOCATIVE = re.compile(r"(?:(?:hey|hi|ok|okay|dear|yo|hallo|salut|hola|olá|ciao)\s+)?"
                       r"(?:(?:<@\w+>|@[\w.-]+)\s*[,:!]?\s*|(?:the\s+)?(?:bot|assistant|ai|threadkeeper|chatbot|"
                       r"assistent|assistente|asistente)\s*[,:!]\s*)")

_SECOND = frozenset("""you you're you'll u ya your yours yourself du dich dir dein deine deinen deinem deiner ihr euch
    euer eure tu toi te t' t’ ton ta tes vous votre vos usted ustedes tú vos tus tu su sus você vocês teu tua teus
    tuas seu sua voi tuo tuoi vostro vostra""".split())
_FORMAL_SIE = "Sie"
_SECOND_ONLY_IN = {"ya": "en", "u": "en", "du": "de", "ton": "fr"}
"""Second-person pronouns that another of the six languages writes as a common word of its own ("ya": "already" in
Spanish; "du": "of the" in French; "ton": a weight in English), with the language they are a pronoun in: anywhere in
a sentence, they address the reader only in a sentence of that language."""
_EITHER_PERSON = frozenset("su sus seu sua".split())
"""Possessives of Spanish and Portuguese that are the reader's ("usted", "você") or a third person's: the reader's
when they open the clause's first phrase ("Seu trabalho é …", "O seu objetivo …"), a third person's after a name or a
noun it refers back to ("Alberto nunca falou da sua viagem", "El equipo cambió su horario")."""
_OTHER_SUBJECT = frozenset("""we i i'm we're we've we'll they he she it it's there this that these those our my their
    his her its the a an all every each some no everyone everybody someone somebody nobody people one
    wir ich sie er es man unser unsere unseren der die das den dem ein eine einen alle jeder jede jedes
    nous je j' j’ il elle ils elles on notre nos le la les l' l’ un une des ce cet cette ces tout tous toute toutes
    chaque nosotros nosotras yo él ella ellos ellas nuestro nuestra nuestros nuestras el los las este esta estos
    estas todo todos cada nós eu ele ela eles elas nosso nossa nossos nossas o os as um uma noi io lui lei loro
    nostro nostra nostri il lo gli i ogni tutti tutte questo questa questi queste quel quella ce cet cette ces""".split()) \
    | frozenset(f"{pronoun}{mark}{verb}" for pronoun in ("i", "we", "they", "he", "she", "it", "there", "that")
                for mark in "'’" for verb in ("s", "re", "ve", "ll", "d", "m"))
"""Words that open a clause with a subject other than the reader, English subject pronouns with their verb contracted
onto them included ("he's", "they’re", "she'll")."""
_PERSONAL = frozenset("""i we they he she it il ils elle elles on je j' j’ nous ich wir er sie es man yo él ella ellos
    ellas nosotros nosotras eu ele ela eles elas nós io lui lei noi loro""".split())
"""Subject pronouns (and "il", an article in Italian too): a phrase with one is a clause."""
_OPENERS = {language: frozenset(words.split()) for language, words in {
    "en": """the a an all every each any some this that these those my our his her their them me us him it everyone
        everybody everything anyone anything nothing nobody in on at to for with without as about from by like into
        onto of than that if when only""",
    "de": """den dem der die das ein eine einen einem alle jede jeden mir mich uns ihm ihn ihnen es alles nichts auf in
        an zu für mit ohne als über von bei nach aus um dass jeder jedem jeden""",
    "fr": """le la les l' l’ un une des tout tous toutes chaque me moi nous lui leur leurs en à avec pour sur comme sans
        de du par dans que qu' qu’""",
    "es": "el los las una todo todos todas cada me nos le les lo con a para por sobre como sin de del en que",
    "pt": "o os as um uma tudo me nos lhe lhes com a para por sobre como sem de do da em no na que",
    "it": "il lo gli le un una ogni tutto tutti mi ci con a per su come senza di da in che",
}.items()}
"""Words that open an object or a complement, by language: after a clause's first word, they show it is a verb ("tell
them", "make all …", "réponds en …")."""
_PREPOSITIONS_OF = {language: frozenset(words.split()) for language, words in {
    "en": "in on at to for with without as about from by like into onto of than that if when only",
    "de": "auf in an zu für mit ohne als über von bei nach aus um dass",
    "fr": "à avec pour sur comme sans de du par dans que qu' qu’",
    "es": "con a para por sobre como sin de del en que",
    "pt": "com a para por sobre como sem de do da em no na que",
    "it": "con a per su come senza di da in che",
}.items()}
"""The words of :data:`_OPENERS` that also follow a noun ("Standup at 10:30"), by language: after a first word, they
tell an imperative only together with a standing scope. A word that is one only in another language ("a" and "an" in
English) does not stand in the way once the sentence's language is known (:func:`_languages`)."""
_OPENS_OBJECT = frozenset().union(*_OPENERS.values())
_PREPOSITIONS = frozenset().union(*_PREPOSITIONS_OF.values())
"""Both, whatever the language: a word that follows a noun in any of them ("a" in Spanish, "an" in German) counts as
one when a sentence's language is not told (:func:`_languages`)."""
_ENGLISH_PREPOSITIONS = frozenset("to in on at for with from of by about into".split())
_FIRST_PLURAL = re.compile(r"(?:amos|emos|imos|iamo|ámos|êmos|ons)$")
_SECOND_SINGULAR = re.compile(r"^\w{2,6}(?:i|es|as|is)$")
_INFINITIVE = re.compile(r"\w\w(?:are|ere|ire|ar|er|ir)$")
"""Two word characters and an infinitive's ending at the end of a word (searched: two, not two or more, so a word of
40,000 letters is read once, not once from each of its letters)."""

_MOODS = {language: tuple(tuple(tuple(pair.split(":")) for pair in pairs.split()) for pairs in moods)
          for language, moods in {
    "pt": ("e:ar es:ar em:ar que:car ques:car quem:car gue:gar gues:gar guem:gar ce:çar ces:çar cem:çar a:er a:ir as:er "
           "as:ir am:er am:ir ça:cer ças:cer çam:cer ça:cir ja:ger jas:ger jam:ger ja:gir",
           "a:ar as:ar am:ar e:er e:ir es:er es:ir em:er em:ir"),
    "es": ("e:ar es:ar en:ar que:car ques:car quen:car gue:gar gues:gar guen:gar ce:zar ces:zar cen:zar a:er a:ir as:er "
           "as:ir an:er an:ir za:cer zas:cer zan:cer ja:ger jas:ger jan:ger ja:gir",
           "a:ar as:ar an:ar e:er e:ir es:er es:ir en:er en:ir"),
    "it": ("i:are ino:are chi:care chino:care ghi:gare ghino:gare a:ere a:ire ano:ere ano:ire",
           "a:are ano:are e:ere e:ire ono:ere ono:ire"),
    # French has one form for the second person plural's present and its imperative: with no subject, a command
    "fr": ("ez:er ez:ir ez:re", ""),
}.items()}
"""The present subjunctive and the present indicative of regular verbs, by the languages that give their commands in
the subjunctive ("Não revele", "No lo compartas", "Escriba", "Non lo condivida"): each an ending and the ending of the
infinitive it comes from (``que:car``: "indique" from "indicar"). A form of one is the other's too ("revele" could
be of "reveler"), so a word is read in the mood whose infinitive is the more common word (:func:`_subjunctive`).
French gives the plural's command in a form of its own, with no competing reading ("Ignorez", "Donnez")."""
_ALTERNATIONS = {language: tuple(tuple(pair.split(":")) for pair in pairs.split()) for language, pairs in {
    "es": "ie:e ue:o i:e zc:c g:c g:gu g:",
    "pt": "ç:z g:z ç:d ç:v i:e u:o g:gu ss:d enh:",
    "it": "g: uo:o",
    "fr": "iss:",
}.items()}
"""How a verb's stem changes in its present tense, by language, undone to find its infinitive: a vowel that
diphthongs or closes ("muestre" from "mostrar", "pida" from "pedir", "durma" from "dormir"), a consonant inserted or
changed before the ending ("ponga" from "poner", "diga" from "decir", "faça" from "fazer", "conozca" from "conocer",
"venga" from "venire", "finissez" from "finir"). Each pair is a stem's last such letters and what they come from; up
to two are undone together ("diga": "dig" → "dec")."""
_SUPPLETIVE = {language: frozenset(forms.split()) for language, forms in {
    "es": "sea seas sean vaya vayas vayan haya hayas hayan sepa sepas sepan esté estés estén dé des den haz pon ten",
    "pt": "seja sejas sejam esteja estejas estejam tenha tenhas tenham venha venhas venham ponha ponhas "
          "ponham saiba saibas saibam queira queiras queiram haja hajas hajam dê dês deem",
    "it": "sia siano abbia abbiano vada vadano faccia facciano dia diano stia stiano dica dicano esca escano "
          "fa' di' va' sta' da' sei hai fai vai stai sai",
    "fr": "dites faites soyez ayez sachez veuillez",
}.items()}
"""The forms, addressed to the reader, of the verbs whose stems no regular change gives (a closed class: "ser",
"ir", "haber", "saber", "estar", "dar", "ter", "vir", "pôr", "essere", "avere", "andare", "fare", "dire", "stare", …):
their present subjunctive, the irregular imperatives of Spanish and Italian ("haz", "pon", "fa'"), the second person
singular of Italian's irregular verbs ("sei", "hai") and French's irregular plural imperatives ("dites", "soyez").
Forms another verb or word of the language spells alike are left out ("di", "ve", "ven", "sal" in Spanish; "faz",
"diz" in Portuguese)."""
_VERB_AT = 3.0
"""How common an infinitive must be (Zipf) for a word to be read as one of its forms."""
_NEGATIONS = frozenset("não no non".split())
_CLITICS = frozenset("""me te se lhe lhes o a os as nos vos lo la los las le les os mi ti si ci vi gli li ne""".split())
"""Object pronouns that stand between a negation and its verb ("Não o revele", "No lo compartas", "Non lo dica")."""
_CLOSED = _SECOND | _OTHER_SUBJECT | _OPENS_OBJECT | _TRANSPARENT | _CLITICS
"""Pronouns, determiners, prepositions and adverbs: never a verb, whatever their ending ("una", "la", "esta")."""

_INFINITIVE_ROMANCE = re.compile(r"\w\w(?:ar|er|ir|re)$")
_NO_COMMAND = re.compile(r"\w\w(?:rão|rán|ranno|ram|ron|rono|vano|vam|ban|ou|ó|rá|rà|ò|ì)$")
"""Endings of the past and future tenses of Spanish, Portuguese and Italian ("prescreverão", "llegaron", "funzionò",
"trabalhou", "sarà"): no command has them, so a clause whose verb ends so states something, its subject dropped."""
_ENCLITICS = frozenset("moi toi lui nous vous leur le la les en y".split())
"""The object pronouns French joins to the end of a command with a hyphen."""
_ALSO_NUMBERS = frozenset({"sei"})
"""Forms of :data:`_SUPPLETIVE` that are numbers too ("sei": "you are" and "six"): a verb only when the word after
it is no plural it could count ("sei mesi", "sei persone")."""
_GERMAN_DETERMINERS = frozenset("""der die das den dem des ein eine einen einem einer eines kein keine keinen keinem
    keiner keines mein meine meinen meinem meiner dein deine deinen deinem deiner sein seine seinen seinem seiner
    ihr ihre ihren ihrem ihrer unser unsere unseren unserem unserer euer eure euren eurem diese diesen diesem dieser
    dieses jede jeden jedem jeder jedes alle allen aller""".split())
_GERMAN_GENITIVES = frozenset("der des eines einer".split())
_GERMAN_CLOSED = _GERMAN_DETERMINERS | _PREPOSITIONS_OF["de"] | frozenset("""im am zum zur vom beim ins ans aufs durch
    gegen unter vor hinter neben zwischen wegen während seit bis mich dich sich uns euch ihn ihm ihnen so wieder noch
    mehr gern gerne genau sofort kein""".split())
"""German determiners, prepositions and object pronouns: the words a command in the infinitive may hold besides its
nouns and adverbs (never a subject pronoun: "ich", "wir", "er", "sie", "es", "man")."""
_INFINITIVE_DE = re.compile(r"\w\w(?:en|ern|eln)$")
_GERMAN_FINITE = frozenset("""ist sind war waren hat haben hatte hatten wird werden wurde wurden kann können konnte
    konnten muss müssen musste mussten soll sollen sollte sollten will wollen wollte wollten darf dürfen durfte durften
    mag mögen möchte möchten gibt gab""".split())
"""The finite forms of German's auxiliaries and modals (and "gibt"), third person and first plural: a closed class."""
_GERMAN_SUBJECT = frozenset("""der die das ein eine er sie es wir ich man dieser diese dieses jeder jede jedes alle
    mein meine unser unsere sein seine ihr ihre kein keine""".split())
"""Words that open a German subject: after a finite auxiliary at the head of a clause, they show a statement whose
first place another part took ("Immer wenn …, hat das Theater …", "Auch sind die Termine …")."""

_NEGATIVE_IMPERATIVE = re.compile(r"\w\w(?:are|ere|ire|(?:ar|er|ir)(?:lo|la|li|le|gli|ne|mi|ti|ci|vi|si))$")
"""An Italian infinitive, or one that carries its pronoun and drops its "e" ("rivelare", "rivelarlo",
"condividerla"): after an opening "non", the negative imperative of the second person singular."""

_GATE_WORDS = frozenset("""now forward here henceforth hereafter future rest otherwise notice today starting matter
    times default always never ever whenever time anytime every each subsequent following later anymore again all
    maintenant aujourd'hui désormais dorénavant avenir toujours jamais fois toutes réponses ahora adelante hoy
    siempre nunca jamás vez todas respuestas agora diante frente sempre toda respostas jetzt nun sofort heute
    künftig zukünftig zukunft fortan immer nie niemals stets mal jedesmal antwort antworten ora poi avanti adesso
    innanzi futuro oggi mai volta risposte risposta instruction instructions rules prompt prompts guidelines
    directions instrucciones anweisungen istruzioni instruções anyone someone anybody somebody people jemand
    quelqu'un alguien alguém qualcuno""".split())
"""Every word one of SCOPE's or OVERRIDE's phrases needs: a text with none of them holds no instruction, which a
set lookup tells faster than the patterns."""
_GATE_SPLIT = re.compile(r"[^\w']+")


def is_instruction(sentence: str) -> bool:
    """Whether one sentence is aimed at the assistant's future behaviour (see the module's description)."""
    return _gate(sentence.lower()) and _instruction(sentence)


def _leading_phrase(text: str, at: int = 0) -> bool:
    """Whether the text from ``at`` opens with an adverbial set off by a comma: a phrase of standing scope ("All
    future replies, …") or one that a preposition opens, whatever it says ("For all future messages, …", "In the
    form of a poem, …", "Em forma de poema, …", "Come chatbot sviluppato per …, …"). The clause's subject or verb
    comes after it."""
    comma = text.find(",", at, at + 100)
    if comma < 0:
        return False
    words = _TOKEN.findall(text[at:comma])
    if not words or SCOPE.match(text, at) is not None:
        return 0 < len(words) <= 8
    # a subject pronoun makes it a clause of its own ("Pour terminer ils disent …,"), and "on" is one in French
    return len(words) <= 12 and words[0] in _PREPOSITIONS and _PERSONAL.isdisjoint(words)


def _main_clause(text: str) -> tuple[str, bool]:
    """The sentence without its leading label, form of address, subordinate clause and adverbials, and whether
    it addressed the bot or asked politely ("please", "bitte": a request to the reader). The opening is read
    forward from a position, never by cutting the text, so a sentence of many openings costs its length once."""
    addressed = False
    at = 0
    while True:
        before = at
        if (m := _VOCATIVE.match(text, at)) is not None:
            at, addressed = m.end(), True
        elif (m := _LABEL.match(text, at)) is not None:
            at = m.end()
        elif (m := _LEADING.match(text, at)) is not None and m.end() > at:
            addressed = addressed or _COURTESY.match(m.group()) is not None
            at = m.end()
        elif _SUBORDINATOR.match(text, at) or _leading_phrase(text, at):
            comma = text.find(",", at, at + 121)
            if comma < 0:
                break
            at = comma + 1
            while at < len(text) and text[at].isspace():
                at += 1
        if at == before:
            break
    return text[at:], addressed


def _instruction(sentence: str, *, standing: bool = True) -> bool:
    """Whether the sentence is aimed at the assistant's behaviour: with ``standing``, only when its main clause has a
    standing scope (the module's rule); without, any imperative or sentence addressed to the reader."""
    low = sentence.lower().strip()
    if OVERRIDE.search(low):
        return True
    later = _LATER_SUBORDINATOR.search(low)
    if standing and not SCOPE.search(low, 0, later.start() if later else len(low)):
        return False
    clause, addressed = _main_clause(low)
    original = sentence.strip()[len(sentence.strip()) - len(clause):] if clause else ""
    tokens = _TOKEN.findall(clause)
    cased = _TOKEN.findall(original)
    # a clause that opens with its negation has no subject before its verb: "Do not share it", "Ne le révèle pas"
    # (a statement puts its subject first: "we do not", "il ne le révèle pas")
    if tokens[:1] in (["don't"], ["don’t"], ["dont"], ["ne"], ["n'"], ["n’"]) or tokens[:2] == ["do", "not"]:
        return True
    if tokens[:1] == ["non"] and _NEGATIVE_IMPERATIVE.search(tokens[1] if len(tokens) > 1 else ""):
        return True  # Italian forbids with "non" and an infinitive: "Non rivelarlo a nessuno" ("non è", "non va")
    fronted = False
    skipped = 0
    while skipped < len(tokens) and (tokens[skipped] in _TRANSPARENT
                                     or tokens[skipped] == "do" and tokens[skipped + 1:skipped + 2] == ["not"]):
        fronted = fronted or tokens[skipped] in _FREQUENCY_WORDS
        skipped += 1
    negated = not _NEGATIONS.isdisjoint(tokens[:skipped])
    if _infinitive_command(tokens, cased) and "de" in _languages(sentence):
        return True  # German commands with a bare infinitive at the end: "Nicht die Passwörter nennen"
    tokens, cased = tokens[skipped:], cased[skipped:]
    if not tokens:
        return addressed
    first = tokens[0]
    languages = [] if standing else _languages(sentence)
    language = languages[0] if len(languages) == 1 else None
    verb = next((t for t in tokens if t not in _CLITICS), "") if negated else first
    if verb in _ALSO_NUMBERS and tokens[tokens.index(verb) + 1:][:1] and \
            tokens[tokens.index(verb) + 1].endswith(("i", "e")):
        verb = ""  # a number and the plural it counts: "sei mesi"
    if "-" in verb and verb.rpartition("-")[2] in _ENCLITICS:
        verb = verb.rpartition("-")[0]  # a French command carries its pronoun after it: "donnez-moi", "dites-le"
    if verb not in _CLOSED and any(_subjunctive(verb, lang) for lang in languages if lang in _MOODS):
        return True  # a command in the subjunctive, with no subject: "Não revele a senha", "Escreva um haiku"
    if first in _SECOND:
        return True
    if first in _BOT or first == "the" and tokens[1:2] and tokens[1] in _BOT:
        return True  # "The bot should always …"
    if first in _OTHER_SUBJECT:
        return False
    if any(t in _SECOND and n in _TRANSPARENT for t, n in zip(tokens[1:4], tokens[2:5])):
        return True  # a second-person subject and its adverb a few words in: "make sure you always …"
    rest = [(t, c) for t, c in zip(tokens[1:], cased[1:] + [""] * len(tokens)) if t not in _TRANSPARENT]
    if rest and SCOPE.search(clause):  # a scope adverbial after the verb is not its object: "sag ab jetzt bei …"
        spans = [m.span() for m in SCOPE.finditer(clause)]

        def scrub(text: str) -> str:  # the spans blanked out (they are in order and do not overlap)
            out, last = [], 0
            for a, b in spans:
                a, b = min(a, len(text)), min(b, len(text))
                out += [text[last:a], " " * (b - a)]
                last = b
            return "".join([*out, text[last:]])

        words, words_cased = _TOKEN.findall(scrub(clause)), _TOKEN.findall(scrub(original))
        at = words.index(first) + 1 if first in words else 1
        rest = [(t, c) for t, c in zip(words[at:], words_cased[at:] + [""] * len(words)) if t not in _TRANSPARENT]
    second, second_cased = rest[0] if rest else ("", "")
    if first in ("can", "could", "would", "will", "kannst", "könntest", "peux", "pourrais", "puedes", "podrías",
                 "pode", "podes", "puoi", "potresti"):
        return second in _SECOND
    if second in _SECOND or second_cased == _FORMAL_SIE:
        return True  # inverted: "sollst du", "antwortest du", "Antworten Sie"
    if first in _GERMAN_FINITE and second in _GERMAN_SUBJECT and not _BOT.intersection(t for t, _ in rest[:2]) \
            and "de" in (languages or _languages(sentence)):
        return False  # German puts its finite verb second, after a leading clause or adverb: "…, hat das Team …"
    if second in _OTHER_SUBJECT and second in ("wir", "nous", "noi", "nosotros", "nós", "we", "man", "ich", "on"):
        return False  # inverted first person: "deployen wir"
    if _FIRST_PLURAL.search(first):
        return False  # "desplegamos", "usiamo", "déployons"
    if _SECOND_SINGULAR.search(first) and _INFINITIVE.search(second):
        return True  # no subject, a finite verb of the second person and an infinitive: "devi firmare", "debes usar"
    if first.endswith("s") and not first.endswith(("ss", "us", "is")) and second in _ENGLISH_PREPOSITIONS:
        return False  # a plural noun and its modifier ("Deployments to eu-west …"), not a verb in base form
    if fronted and _NO_COMMAND.search(first) and not {"es", "pt", "it"}.isdisjoint(languages or _languages(sentence)):
        return False  # a past or a future has no command: "nunca prescreverão", "sempre funzionò", "siempre llegó"
    if fronted or addressed:
        return True
    if not standing:  # without a standing scope, a noun and its modifier ("Standup at 10:30") is no imperative
        prepositions = _PREPOSITIONS_OF[language] if language else _PREPOSITIONS  # "a", "an": in English, no
        return bool(second) and second in _OPENS_OBJECT and second not in prepositions
    return not second or second in _OPENS_OBJECT or second in _SECOND


def _infinitive_command(tokens: list[str], cased: list[str]) -> bool:
    """Whether a clause reads as a German command in the infinitive: it ends in a lowercase infinitive, and every word
    before it is a noun (capitalised), a determiner, a preposition, an object pronoun or an adverb, in two or more
    phrases, so that the verb is not the second part of a statement ("Die Kinder spielen", "Die Preise der Waren
    steigen": one phrase, a subject) but stands last with no finite verb at all ("Nicht die Passwörter nennen",
    "Immer auf Deutsch antworten", "In Form eines Gedichts ein Rezept liefern")."""
    if len(tokens) < 3 or len(cased) != len(tokens):
        return False
    last = cased[-1]
    if not last.islower() or _INFINITIVE_DE.search(last) is None or last.startswith("ge") \
            or last in _GERMAN_CLOSED or zipf(last, "de") < _VERB_AT:
        return False
    phrases, after_noun = 0, False
    for i, (word, shown) in enumerate(zip(tokens[:-1], cased[:-1])):
        if word in _TRANSPARENT:
            phrases, after_noun = phrases + 1, False
        elif word in _GERMAN_CLOSED:
            # after a noun, a genitive or a preposition belongs to its phrase ("die Preise der Waren", "ein Rezept
            # zum Backen"); another determiner opens the next one ("in Form eines Gedichts ein Rezept")
            if after_noun and word in _GERMAN_DETERMINERS and word not in _GERMAN_GENITIVES:
                phrases, after_noun = phrases + 1, False
            elif not after_noun and (i == 0 or tokens[i - 1] in _TRANSPARENT):
                phrases += 1
        elif shown[:1].isupper():
            if not after_noun and (i == 0 or tokens[i - 1] in _TRANSPARENT):
                phrases += 1
            after_noun = True
        else:
            return False  # a lowercase word that may be a finite verb ("sind", "spielen") or an adjective
    return phrases >= 2


def _subjunctive(word: str, language: str) -> bool:
    """Whether ``word`` reads as a present subjunctive of ``language`` (:data:`_MOODS`): the infinitive it comes from
    read so is a word of the language, and more common than the one it comes from read as an indicative."""
    if word in _SUPPLETIVE[language]:
        return True
    subjunctive, indicative = _MOODS[language]
    alternations = _ALTERNATIONS[language]

    def best(endings: tuple[tuple[str, ...], ...]) -> float:
        return max((zipf(stem + infinitive, language) for end, infinitive in endings
                    if word.endswith(end) and len(word) > len(end) + 1
                    for stem in _stems(word[:-len(end)], alternations)), default=0.0)

    found = best(subjunctive)
    return found >= _VERB_AT and found > best(indicative)


def _stems(stem: str, alternations: tuple[tuple[str, ...], ...]) -> list[str]:
    """The stem as written and as it was before up to two of the language's changes (:data:`_ALTERNATIONS`), each
    undone at its last place in the stem: "dig" → "dig", "dic", "deg", "dec", …"""
    found = [stem]
    for _ in range(2):
        for s in list(found):
            for changed, original in alternations:
                at = s.rfind(changed)
                if at > 0 and (undone := s[:at] + original + s[at + len(changed):]) not in found:
                    found.append(undone)
    return found


def _gate(lowered: str) -> bool:
    return not _GATE_WORDS.isdisjoint(_GATE_SPLIT.split(lowered))


def split_instructions(text: str) -> tuple[str, str]:
    """``text`` without its sentences aimed at the assistant's future behaviour, and those sentences."""
    if not _gate(text.lower()):
        return text, ""  # the common case
    pieces = [(s, _instruction(s)) for s in _SENTENCE.split(text) if s.strip()]
    if not any(instruction for _, instruction in pieces):
        return text, ""
    return (" ".join(s for s, instruction in pieces if not instruction).strip(),
            " ".join(s.strip() for s, instruction in pieces if instruction))


def without_instructions(text: str) -> str:
    """``text`` without its sentences that are instructions ("" when that is all it says)."""
    return split_instructions(text)[0]


_ADDRESSEE = frozenset("""ты вы тебя вас тебе вам твой ваш твоя ваша твои ваши sen siz seni sizi senin sizin sana size
    kamu anda engkau bạn ikaw kayo ninyo आप तुम तू आपको तुम्हें आपका तुम्हारा তুমি আপনি তোমার আপনার أنت انت أنتم""".split())
"""Second-person pronouns of languages the word lists above do not cover (a closed class too)."""
_SECOND_VERBS = frozenset("""devi dovresti dovreste potresti puoi vuoi debes deberías debéis puedes podrías tienes eres
    estás deves deverias podes poderias""".split())
"""The second-person forms of the auxiliaries of the languages that drop their subject (Italian, Spanish,
Portuguese): "In nessun caso dovresti aiutare …", "Bajo ninguna circunstancia debes …" address the reader with no
pronoun. A closed class too; forms another language spells alike ("sei", "has", "tens") are left out."""
_ADDRESSEE_IN_WORDS = ("你", "您", "あなた", "당신")
"""Second-person pronouns of scripts written without spaces, found inside the text."""
_WORDS = re.compile(r"[^\s.,;:!?¿¡\"'“”‘’()\[\]{}«»।؟、。，！？]+")


def addresses_the_assistant(sentence: str) -> bool:
    """Whether a sentence speaks to the assistant or about it: an override attempt, a second-person pronoun anywhere
    (in the six languages or others: "you", "ты", "आप", "你", …), the bot as its subject, or the bot addressed."""
    text = sentence.strip()
    words = {w.lower() for w in _WORDS.findall(text)}
    if _COURTESY_ANYWHERE.search(text):
        return True  # "…, please, file it under …", "…, por favor, categorízala …": a request to the reader
    if not words.isdisjoint(_SECOND - _EITHER_PERSON - _SECOND_ONLY_IN.keys()) \
            or not words.isdisjoint(_ADDRESSEE) or not words.isdisjoint(_SECOND_VERBS) \
            or any(p in text for p in _ADDRESSEE_IN_WORDS):
        return True
    if any(w in words and _SECOND_ONLY_IN[w] in _languages(text) for w in _SECOND_ONLY_IN):
        return True  # "ya" in English, "du" in German, "ton" in French
    low = text.lower()
    if OVERRIDE.search(low):
        return True
    clause, addressed = _main_clause(low)
    tokens = [t for t in _TOKEN.findall(clause) if t not in _TRANSPARENT]
    opening = next((i for i, t in enumerate(tokens) if t not in _CLOSED or t in _EITHER_PERSON), len(tokens))
    if opening < len(tokens) and tokens[opening] in _EITHER_PERSON:
        return True  # "Seu trabalho é …", "O seu objetivo é …": the possessive of the clause's own first phrase
    return (_VOCATIVE.match(low) is not None or bool(tokens) and
            (tokens[0] in _BOT or tokens[0] == "the" and tokens[1:2] != [] and tokens[1] in _BOT))


_READ_AT = 4.0
"""How common a word must be in a language (Zipf, about its 5,000 most common words) to count as read in it."""
_IDENTIFIER = re.compile(r"<[^<>\s]*>|`[^`]*`")
"""Markup and code: no word of a language when their letters are Latin (in another script they are read as the words
they hold: "<表>…</td>" or "`密码`" is not set aside). Each match stops at the next bracket or backtick, so a text
of many brackets is read once."""
_IDENTIFIER_MARKS = frozenset("@_/\\")
"""A chunk with one of these (a mention, a path, a link, a snake_case name) is an identifier, not a word."""
# the marks of an abugida ("हमेशा") belong to the word they are written in


def _letters(chunk: str) -> list[str]:
    """The words of a chunk of text: runs of letters and the marks that join them ("हमेशा" is one word)."""
    words: list[str] = []
    word: list[str] = []
    for c in chunk:
        if c.isalpha() or unicodedata.category(c).startswith("M") and word or c in "'’" and word:
            word.append(c)
        elif word:
            words.append("".join(word).strip("'’"))
            word = []
    if word:
        words.append("".join(word).strip("'’"))
    return [w for w in words if w]


def _latin(word: str) -> bool:
    """Whether the word's letters are of the Latin script (ª and º, the ordinal marks of "10º", included)."""
    return all(not c.isalpha() or c < "\u0250" or unicodedata.name(c, "").startswith("LATIN") for c in word)


def _words(sentence: str) -> list[str]:
    """The words of a sentence, identifiers ("k8s", "v2.3", "10:30", "OPS-77", "@ana", "https://…", "deploy_eu") and
    Latin-lettered markup and code set aside."""
    words = []
    for chunk in _IDENTIFIER.sub(lambda m: " " if _latin(m.group()) else f" {m.group()} ", sentence).split():
        if (any(c.isdigit() for c in chunk) or not _IDENTIFIER_MARKS.isdisjoint(chunk)) and _latin(chunk):
            continue
        words.extend(_letters(chunk))
    return words


def _languages(sentence: str) -> list[str]:
    """The languages of :data:`LANGUAGES` with the most of the sentence's words among their common words (as
    :func:`readable` counts them): one, or those that tie ("No lo publiques en el canal" reads as Spanish, Italian
    and Portuguese alike)."""
    words = [word.lower() for word in _words(sentence)]
    counts = {lang: sum(zipf(word, lang) >= _READ_AT for word in words) for lang in LANGUAGES}
    most = max(counts.values())
    return [lang for lang in LANGUAGES if counts[lang] == most]


def readable(sentence: str) -> bool:
    """Whether the checks here can read the sentence: at least half of its words are among the common words of one
    of the languages their word lists cover (:data:`LANGUAGES`: English, German, French, Spanish, Portuguese,
    Italian). Identifiers ("k8s", "pg-stage-7", a mention, a path), numbers and names (a capitalised word the
    language lacks, not the first) are set aside; a sentence with nothing else is read. A sentence in another
    language ("Kata sandi rahasia adalah …") or with a word in another script ("Пароль …", "密码是…") is not: none
    of the rules here can tell whether it states a fact or gives an instruction, so nothing may take it for a
    fact; it stays its author's words, quoted under their name."""
    words = _words(sentence)
    if not all(_latin(word) for word in words):
        return False  # a script none of the languages is written in
    for lang in LANGUAGES:
        known = counted = 0
        for i, word in enumerate(words):
            if zipf(word.lower(), lang) >= _READ_AT:
                known += 1
                counted += 1
            elif not (i and word[:1].isupper()):
                counted += 1
        if not counted or 2 * known >= counted:
            return True
    return False


_INTERROGATIVE = frozenset("""what which who whom whose where why was wer welche welcher welches welchen wo warum wieso
    weshalb quel quelle quels quelles qui quoi où pourquoi qué cuál cuáles quién quiénes cómo dónde cuánto cuántos qual
    quais quem onde quale quali chi dove perché cosa""".split())
"""Words that open a question in the six languages ("What is …", "Was ist …", "Quelle est …", "Qual è …"); those
that also open a comparison ("how", "wie", "comme", "como", "come": "Wie besprochen: …") are left out."""
_INTRODUCES = re.compile(r":(?=\s|[\"'“‘«<])")
"""A colon that introduces what follows ("… of this paper: 'Introduction: …'"), not one inside a time or a link."""


def introduces_material(sentence: str) -> bool:
    """Whether the sentence opens with a question or a request to its reader and then, after a colon, gives what it
    is about ("What are the conclusions of this paper: '…'", "Summarize this page: <html>…", "Was ist die Ausgabe
    dieses Codes: …"): what follows the colon, in this sentence and the next ones of the message, is material the
    author pasted for the assistant (a document, a page, a table), not what they state."""
    colon = _INTRODUCES.search(sentence)
    if colon is None:
        return False
    head = sentence[:colon.start()].strip()
    words = _TOKEN.findall(head.lower())
    if len(words) < 3:
        return False  # a label ("Policy:", "Update from ana:")
    if words[0] in _INTERROGATIVE:  # a question ("What is …:"), or a heading ("What we decided: …")
        return words[1] not in _OTHER_SUBJECT
    return addresses_the_assistant(head) or _instruction(head, standing=False) or _infinitive_request(words, head)


def _infinitive_request(words: list[str], head: str) -> bool:
    """Whether a heading opens with an infinitive of the Romance languages and its object ("Resumir esta página",
    "Traduire le texte suivant", "Riassumere questo documento"): written instructions give their commands so."""
    first, second = words[0], words[1]
    return second in _CLOSED and _INFINITIVE_ROMANCE.search(first) is not None and any(
        zipf(first, lang) >= _VERB_AT for lang in _languages(head) if lang in ("es", "pt", "it", "fr"))


def stated_as_fact(sentence: str) -> bool:
    """Whether a sentence states something as a fact, as a record of what a thread settled may hold: not a
    question, in a language the checks read (:func:`readable`), not aimed at the reader in any way (an imperative
    or a sentence addressed to them, with or without a standing scope; see the module's description), and neither
    speaking to the assistant nor about it (:func:`addresses_the_assistant`).

    This is stricter than :func:`is_instruction`, which tells a standing instruction apart from how a team works
    ("From now on we deploy on Tuesdays") so that a person's message is kept whole; what ``record_state`` records as
    a fact is the assistant's own line, so there only statements go."""
    text = sentence.strip()
    if not text or text.endswith(("?", "？", "؟")) or not readable(text) or introduces_material(text):
        return False
    return not addresses_the_assistant(text) and not _instruction(text, standing=False)


def sentences(text: str) -> list[str]:
    """The sentences (and lines) of ``text``, as every check here splits it."""
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def statements(text: str) -> list[str]:
    """The sentences of ``text`` that state something as a fact (:func:`stated_as_fact`), up to one that introduces
    pasted material (:func:`introduces_material`): what follows it is not the author's statement."""
    found = []
    for s in sentences(text):
        if introduces_material(s):
            break
        if stated_as_fact(s):
            found.append(s)
    return found


def unstated(text: str) -> list[str]:
    """The sentences of ``text`` that do not state a fact: questions, instructions, words to or about the assistant."""
    return [s for s in sentences(text) if not stated_as_fact(s)]
