"""The wording of generated threads: chatter and planted-item templates, per style and language.

Planted items vary their wording (several templates per family) and chatter never uses their cue
phrases, so a thread does not reward a rule that looks for one phrase. Chatter also includes ordinary
Slack that trips naive rules in both directions: short asks, offers that look like asks, questions that
mention deciding, and a "nvm" from someone who is not the asker. Every message addressed to the bot
starts with :data:`BOT` (it is a mention, so it expects a reply); nothing else does.
"""

from __future__ import annotations

BOT = "@threadkeeper"
LANGS = ("es", "de", "ja")
"""The languages a multilingual thread mixes into English (about a third of its messages)."""

PEOPLE = ["alice", "bob", "carol", "dan", "erin", "farid"]
FRIENDS = ["maya", "jonas", "priya", "tomas", "lena"]
SERVICES = ["billing", "payments-api", "ledger", "search", "notifications", "auth-gateway", "checkout", "reporting"]
PROJECTS = ["OPS", "PAY", "INFRA", "SRCH", "DATA", "SEC"]
TOOLS = [("Kafka", "NATS"), ("Postgres 16", "CockroachDB"), ("Terraform", "Pulumi"), ("gRPC", "REST"),
         ("blue-green deploys", "canary deploys"), ("Datadog", "Grafana Cloud"), ("Redis Streams", "SQS")]
DELIVERABLES = ["rollback checklist", "migration runbook", "incident timeline", "load test plan", "on-call summary"]

CUE_PHRASES = ("decided to go with", "decision from", "lock it in", "final call", "reversing", "change of plan",
               "scratch that", "never mind the", "skip the", "done:", "closing the loop", "pinned:", "rate limit",
               "req/s", "we must", "must not ship", "prefers", "decidimos", "entschieden", "決まりました",
               "i adopted", "we moved to", "my birthday")
"""Phrases planted items use; chatter never contains them (checked by the tests)."""

# Work chatter -------------------------------------------------------------------------------------------

SMALL_TALK = {
    "en": ["morning all", "coffee run, anyone?", "lol", "brb, standup", "nice", "happy friday!",
           "who's at the offsite next week?", "my build is still running…", "ugh, vpn again", "thanks!", "ok",
           "on it", "anyone seen the new dashboard colors?", "back", "lunch?", "+1",
           "Let me know if you need anything else :)", "Have we decided where to go for dinner?",
           "nvm, found my headphones", "can you help me with the flaky test later?", "Can you help?",
           "could someone review my PR when you get a sec?", "does anyone know who owns the staging certs?"],
    "es": ["buenos días a todos", "¿alguien quiere café?", "jaja", "vuelvo en 5", "gracias!", "¿comemos juntos?",
           "mi build sigue corriendo…", "otra vez la vpn", "¿alguien sabe quién tiene los certificados de staging?",
           "avisadme si necesitáis algo más :)"],
    "de": ["Morgen zusammen", "Kaffee, jemand?", "bin gleich zurück", "danke!", "Mittagessen?",
           "mein Build läuft immer noch…", "schon wieder das VPN", "wer ist nächste Woche beim Offsite?",
           "kann mir jemand kurz beim Review helfen?", "sagt Bescheid, wenn ihr noch was braucht :)"],
    "ja": ["おはようございます", "コーヒー行く人いますか？", "ちょっと席外します", "ありがとうございます！",
           "ビルドがまだ終わらない…", "またVPNが切れた", "お昼どうします？", "来週のオフサイト誰が行きますか？",
           "レビューお願いできますか？", "他に何かあれば言ってください :)"],
}
STATUS = {
    "en": ["{svc} deploy finished, error rate back to normal", "looking at the {svc} alerts now",
           "{svc} latency looks a bit higher than yesterday but within SLO", "reviewing the {svc} PR this afternoon",
           "{svc} canary is healthy so far", "I think the flaky test in {svc} is back", "pairing with {p} on {svc}",
           "the {svc} dashboard is slow to load again", "rebased the {svc} branch, CI is green"],
    "es": ["el deploy de {svc} terminó, la tasa de errores volvió a la normalidad", "mirando las alertas de {svc}",
           "la latencia de {svc} está un poco más alta que ayer", "reviso el PR de {svc} esta tarde"],
    "de": ["{svc} Deploy ist durch, Fehlerrate wieder normal", "schaue mir gerade die {svc} Alerts an",
           "die Latenz von {svc} ist etwas höher als gestern", "ich pairre mit {p} an {svc}"],
    "ja": ["{svc}のデプロイ完了、エラー率は正常に戻りました", "{svc}のアラートを確認中です",
           "{svc}のレイテンシが昨日より少し高いです", "{svc}のPRは午後にレビューします"],
}

# Planted work items: (template, answer template) where the answer must be verbatim in the text ------------

IDENTIFIERS = {
    "en": {"ticket key": ["Filed {v} for the {svc} timeouts, please add notes there.",
                          "tracking the {svc} timeouts in {v}", "{v} is the ticket for the {svc} timeouts fwiw"],
           "URL": ["The dashboard for {svc} is {v}", "bookmark this one for {svc}: {v}",
                   "{svc} overview lives at {v} now"],
           "commit SHA": ["The regression came in with commit {v} in {svc}.", "bisected {svc}: {v} is the culprit",
                          "{svc} broke at {v}, reverting"],
           "file path": ["The retry settings live in {v} if anyone needs to change them.",
                         "{svc} retry config moved to {v}", "if you touch retries in {svc}, edit {v}"],
           "quantity": ["Measured p99 for {svc} at {v} after the cache change.",
                        "{svc} p99 is down to {v} since the cache change", "new p99 number for {svc}: {v}"]},
    "es": {"ticket key": ["Abrí {v} por los timeouts de {svc}, dejad notas ahí."],
           "URL": ["El dashboard de {svc} está en {v}"],
           "commit SHA": ["La regresión de {svc} entró con el commit {v}."],
           "file path": ["La configuración de reintentos de {svc} está en {v}"],
           "quantity": ["Medí el p99 de {svc}: {v} después del cambio de caché."]},
    "de": {"ticket key": ["Ich habe {v} für die {svc} Timeouts angelegt, bitte dort Notizen ergänzen."],
           "URL": ["Das Dashboard für {svc} ist {v}"], "commit SHA": ["Die Regression in {svc} kam mit Commit {v}."],
           "file path": ["Die Retry-Einstellungen für {svc} liegen in {v}"],
           "quantity": ["p99 für {svc} liegt nach der Cache-Änderung bei {v}."]},
    "ja": {"ticket key": ["{svc}のタイムアウトについて{v}を起票しました。メモはそちらへ。"],
           "URL": ["{svc}のダッシュボードは {v} です"], "commit SHA": ["{svc}のリグレッションはコミット {v} で入りました。"],
           "file path": ["{svc}のリトライ設定は {v} にあります"],
           "quantity": ["キャッシュ変更後の{svc}のp99は {v} でした。"]},
}
IDENTIFIER_QUESTIONS = {"ticket key": "What is the ticket for the {svc} timeouts?",
                        "URL": "Where is the {svc} dashboard?", "commit SHA": "Which commit broke {svc}?",
                        "file path": "Where do the {svc} retry settings live?",
                        "quantity": "What is the p99 for {svc} since the cache change?"}
"""How a person asks later for a planted identifier: naming what it belongs to, in their own words (which
are not always the words of the message that holds it)."""
DECISIONS = {
    "en": [("We decided to go with {x} for {t}.", "go with {x} for {t}"),
           ("Decision from the sync: {x} for {t}, everyone signed off.", "{x} for {t}"),
           ("ok, lock it in: {t} goes with {x}", "{t} goes with {x}"),
           ("Final call after the bake-off is {x} for {t}.", "{x} for {t}")],
    "es": [("Decidimos usar {x} para {t}.", "{x} para {t}"), ("Queda decidido: {t} va con {x}.", "{t} va con {x}")],
    "de": [("Wir haben entschieden: {x} für {t}.", "{x} für {t}"), ("Entschieden im Sync: {t} bekommt {x}.",
                                                                     "{t} bekommt {x}")],
    "ja": [("{t}は{x}でいくことに決まりました。", "{t}は{x}"), ("{t}については{x}を採用すると決まりました。", "{x}を採用")],
}
REVERSALS = {
    "en": [("Reversing the decision on {t}: we go with {new} instead of {old}.", "go with {new}"),
           ("Change of plan for {t}: {old} is out, {new} for {t} it is.", "{new} for {t}"),
           ("after the load test we're switching {t} to {new}, {old} didn't hold up", "switching {t} to {new}")],
    "es": [("Cambio de planes en {t}: usamos {new} en vez de {old}.", "usamos {new}")],
    "de": [("Planänderung bei {t}: doch {new} statt {old}.", "{new} statt {old}")],
    "ja": [("{t}はやはり{old}ではなく{new}にすることに決まりました。", "{new}にする")],
}
ASKS = {
    "en": ["{bot} can you draft the {d} for {svc} before the freeze?",
           "{bot} could you put together a {d} for {svc}? need it before the freeze",
           "{bot} please write up the {d} for {svc}, freeze starts thursday",
           "{bot} Can you help? need a {d} for {svc} before the freeze"],
    "es": ["{bot} ¿puedes preparar el {d} para {svc} antes del freeze?"],
    "de": ["{bot} kannst du bis zum Freeze das {d} für {svc} entwerfen?"],
    "ja": ["{bot} フリーズ前に{svc}の{d}を作ってもらえますか？"],
}
SUPERSEDES = {
    "en": ["{bot} scratch that, instead can you draft the capacity plan for {svc} for Q3?",
           "{bot} actually never mind the {old}, a capacity plan for {svc} for Q3 is more urgent",
           "{bot} change of plans: skip the {old} and do the capacity plan for {svc} for Q3"],
    "es": ["{bot} olvida el {old}, mejor prepara el capacity plan para {svc} del Q3"],
    "de": ["{bot} vergiss das {old}, mach stattdessen den capacity plan für {svc} für Q3"],
    "ja": ["{bot} {old}はもういいので、代わりに{svc}のQ3の capacity plan をお願いします"],
}
RESOLVES = {
    "en": ["Done: the {d} for {svc} is drafted and linked in the runbook.",
           "closing the loop on the {d} for {svc}, it's in the runbook now"],
    "es": ["Listo: el {d} de {svc} ya está en el runbook."], "de": ["Erledigt: das {d} für {svc} ist im Runbook."],
    "ja": ["{svc}の{d}は完了して、runbookにリンクしました。"],
}
CONSTRAINTS = {
    "en": ["We must keep {svc} under 2 GB of memory per pod until the migration is done.",
           "Reminder: {svc} changes must not ship on Fridays this quarter.",
           "Carol prefers Terraform modules over raw HCL for anything touching {svc}.",
           "hard requirement from security: {svc} must not log request bodies"],
    "es": ["Recordatorio: los cambios de {svc} no se despliegan los viernes este trimestre."],
    "de": ["Wichtig: {svc} muss bis zur Migration unter 2 GB Speicher pro Pod bleiben."],
    "ja": ["注意：移行が終わるまで{svc}はPodあたり2GB未満に抑える必要があります。"],
}
PINS = {
    "en": ["Pinned: on-call handbook for {svc} is {url}", "Pinned: {svc} on-call handbook → {url}"],
    "es": ["Pinned: el manual de guardia de {svc} está en {url}"],
    "de": ["Pinned: das On-Call-Handbuch für {svc} ist {url}"], "ja": ["Pinned: {svc}のオンコール手順書は {url} です"],
}
LIMITS = {
    "en": ["The public rate limit for {svc} is {n} req/s.", "fyi the {svc} public rate limit is {n} req/s",
           "Heads up: public clients of {svc} get a rate limit of {n} req/s."],
    "es": ["El rate limit público de {svc} es {n} req/s."],
    "de": ["Das öffentliche rate limit für {svc} ist {n} req/s."],
    "ja": ["{svc}の公開 rate limit は {n} req/s です。"],
}

# Casual chats among friends -----------------------------------------------------------------------------

CASUAL_EXCHANGES = [
    ("how was your weekend?", ["pretty chill, mostly slept", "went hiking, legs are dead", "family stuff, you?"]),
    ("what type of guitar? been playing long?",
     ["just a cheap acoustic, couple of months", "an old strat, on and off"]),
    ("anyone watching anything good?", ["rewatching the office lol", "that new heist show, it's fun"]),
    ("Have we decided where to go for dinner?", ["not yet", "somewhere with vegetarian options pls"]),
    ("how's the new job going?", ["busy but good", "still learning everyone's names"]),
    ("are you coming saturday?", ["yes!", "maybe, depends on the trains", "can't, sorry"]),
    ("can you help me move the couch next week?", ["sure, just tell me when", "my back says no but ok"]),
    ("did you finish that book?", ["almost, the ending is dragging", "gave up halfway tbh"]),
    ("how's your mum doing?", ["much better, thanks for asking", "back home now"]),
]
CASUAL_CHATTER = ["haha", "omg", "same", "😂", "true", "night!", "morning", "ugh mondays", "brb", "lol yes",
                  "nvm, found my headphones", "Let me know if you need anything else :)", "sounds good",
                  "sorry, was driving", "pics or it didn't happen", "wait really?", "so jealous", "Can you help?"]
PETS = [("greyhound", ["Biscuit", "Pepper", "Juniper"]), ("tabby cat", ["Miso", "Waffles", "Clementine"]),
        ("rabbit", ["Nugget", "Pistachio", "Bramble"]), ("parrot", ["Kiwi", "Captain", "Mango"])]
CITIES = ["Porto", "Tromsø", "Ljubljana", "Valparaíso", "Kraków", "Hobart", "Oaxaca", "Ghent", "Tbilisi"]
INSTRUMENTS = ["Yamaha FG800", "Fender Telecaster", "Martin D-28", "Gibson SG", "Ibanez RG550"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October"]
CASUAL_FACTS = [
    ("I adopted a {pet} called {v} last spring", "What is the name of {who}'s {pet}?", "pet"),
    ("we finally got a {pet}! her name is {v}", "What is the name of {who}'s {pet}?", "pet"),
    ("we moved to {v} in {month}, still unpacking", "Where did {who} move to?", "city"),
    ("my sister lives in {v}, visiting her in {month}", "Where does {who}'s sister live?", "city"),
    ("my birthday's on {v} btw, you're all invited", "When is {who}'s birthday?", "date"),
    ("ran the half marathon in {v}!! new PB", "What was {who}'s half marathon time?", "time"),
    ("rent for the new flat is {v} a month, ouch", "How much is {who}'s rent?", "money"),
    ("my guitar is a {v}, got it secondhand years ago", "What guitar does {who} play?", "instrument"),
]
CASUAL_PLANS = [("ok booked: dinner at {v} on Friday at 8", "Where are we having dinner on Friday?"),
                ("let's do the cabin near {v} for the long weekend, I'll pay the deposit",
                 "Where is the long-weekend cabin?")]
RESTAURANTS = ["Lupa", "Casa Mono", "Bao Bar", "Taverna Kyma", "Ramen Ichiro", "Little Saigon"]
CASUAL_ASKS = ["{bot} can you find a ramen place near {v} that takes reservations for four?",
               "{bot} what's a good day hike near {v}? nothing too steep",
               "{bot} can you make a packing list for a weekend in {v}?"]
CASUAL_CONSTRAINTS = ["heads up I'm vegetarian now, so no steakhouses for me",
                      "I can't do anything before 10 on weekends, we must plan around that",
                      "no flights for me this year, trains only"]
