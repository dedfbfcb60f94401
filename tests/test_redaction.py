"""Redaction by table: each secret format is removed, and ordinary text (prose, ids, links without
credentials, numbers) comes through unchanged."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from threadkeeper.services.safety import redact, redact_after, secrets_in, tail

# (text, what must not survive)
SECRETS = [
    ("alerts go to https://hooks.slack.com/services/T0123ABCD/B0456EFGH/abcdefghijklmnopqrstuvwx from now on",
     "abcdefghijklmnopqrstuvwx"),
    ("the password for the staging db is bluebird42, don't share it", "bluebird42"),
    ("the password for the staging db is swordfish", "swordfish"),
    ("btw the admin password was Tr0ub4dor&3 until yesterday", "Tr0ub4dor&3"),
    ("das Passwort für die Staging-DB ist Sommerwiese2024", "Sommerwiese2024"),
    ("le mot de passe du serveur de test est kX9pQ2rTz", "kX9pQ2rTz"),
    ("la contraseña de la base de datos es perrito77", "perrito77"),
    ("a senha do banco de staging é jabuticaba99", "jabuticaba99"),
    ("la password del database di prova è girasole55", "girasole55"),
    ("cache at redis://:s3cretPw@cache.internal:6379/0", "s3cretPw"),
    ("use rediss://default:Zq8vN2xLpw@redis-12345.cloud.example.com:12345", "Zq8vN2xLpw"),
    ("connect with postgres://admin:hunter2hunter2@db.internal:5432/app", "hunter2hunter2"),
    ("DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=lJzRc1YdHaAA2KCNJJ1tkYwF/+mKK6Ygw0NGe170Xu592euJv2w"
     "YUtBlV8z+qnlcNQSnIYVTkLWntUOB7WQ5Lg==;EndpointSuffix=core.windows.net", "lJzRc1YdHaAA2KCNJJ1tkYwF"),
    ("AccountKey=shortTestKey42xyz;", "shortTestKey42xyz"),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==' https://api.example.com/v1", "dXNlcjpwYXNzd29yZDEyMw"),
    ("header Authorization: Bearer abc.def-ghi_jkl.mno123456789", "abc.def-ghi_jkl.mno123456789"),
    ("sendgrid 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 for mail", "SG.ngeVfQFYQlKU0ufo8x5d1A"),
    ("gitlab glpat-AbCdEf1234567890XyZw for CI", "glpat-AbCdEf1234567890XyZw"),
    ("access key id AKIAIOSFODNN7EXAMPLE for the billing bucket", "AKIAIOSFODNN7EXAMPLE"),
    ("the prod AWS creds: aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("ci uses ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrstuvwxyz"),
    ("fine-grained github_pat_11ABCDEFG0123456789_abcdefghijkl", "github_pat_11ABCDEFG"),
    ("the bot token is xoxb-111111111111-2222222222-abcdefABCDEF", "xoxb-111111111111"),
    ("user token xoxp-1234567890-abcdefghij", "xoxp-1234567890"),
    ("app token xapp-1-A0123456789-1234567890123-abcdef", "xapp-1-A0123456789"),
    ("stripe live key sk_live_51HxYzABCDEFGHIJKLMNOPQRS for checkout", "sk_live_51HxYz"),
    ("OPENAI key sk-proj-ABCDEFGHIJKLMNOPQRSTUV1234 for the summarizer", "sk-proj-ABCDEFGH"),
    ("claude key sk-ant-api03-abcdefghijklmnopqrstuvwx", "sk-ant-api03-abcdefgh"),
    ("maps key AIzaSyA1234567890abcdefghijklmnopqrstu", "AIzaSyA1234567890"),
    ("session jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "dozjgNryP4J3jVmNHl0w5N"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx4Z\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEAx4Z"),
    ("set DB_PASSWORD=correct-horse-battery in the staging env", "correct-horse-battery"),
    ("export SESSION_TOKEN=bluebird-apple-42 before the run", "bluebird-apple-42"),
    ("set refresh_token=plainwordvalue in the env", "plainwordvalue"),
    ("deploy_token: orange-tiger-sunset", "orange-tiger-sunset"),
    ('config {"api_key": "abcd1234efgh5678"} for the search cluster', "abcd1234efgh5678"),
    ("twilio SK0123456789abcdef0123456789abcdef", "SK0123456789abcdef"),
    ("npm //registry.npmjs.org/:_authToken=npm_AbCdEf0123456789AbCdEf0123456789abcd", "npm_AbCdEf0123456789"),
    ("here is the signing value k8Hd02kLmQ9zX7pW3vB1nR5t, keep it safe", "k8Hd02kLmQ9zX7pW3vB1nR5t"),
    ("signed link https://files.example.com/report.pdf?sig=Qm9vZ2x5U2lnbmF0dXJlMTIzNDU2Nzg5MA2k&se=2026",
     "Qm9vZ2x5U2lnbmF0dXJlMTIzNDU2Nzg5MA2k"),
]

# Ordinary text that must come through unchanged.
ORDINARY = [
    "Can you review ABC-123 before Friday? The deploy is at 14:30 UTC.",
    "The password policy is documented in the wiki.",
    "the password reset page is broken since 3.2.1",
    "The password is stored in the team vault, ask Dana for access.",
    "Das Passwort ist im Tresor gespeichert.",
    "We rotate the API key every 90 days; the token budget is 4096.",
    "max_tokens: 4096 and temperature = 0.2",
    "Deploy 4f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 to prod.",
    "Request id 550e8400-e29b-41d4-a716-446655440000 failed with HTTP 503.",
    "Ticket OPS-1234, user U0123ABCDEF, channel C09ABCDEF12, ts 1700000000.123456.",
    "Budget is $12,345.67 for Q3, up 4.5% from 2025-06-30.",
    "See https://docs.google.com/document/d/1aBcD3eFgH4iJkL5mNoP6qRsT7uVwX8yZ/edit for the plan.",
    "PR https://github.com/acme/api/pull/1234 and http://localhost:8080/healthz?verbose=1",
    "Open https://acme.atlassian.net/browse/PLAT-2291 and https://example.com/a/b/c?page=2&sort=desc",
    "Renamed getUserByIdHandler2024Async in src/components/Button2Component.tsx",
    "the token refresh job runs at 02:00 and takes 35 minutes",
    "Authorization is handled by the gateway team.",
    "Bearer tokens expire after one hour.",
    "Call +1 415 555 0100 or write to ops@example.com.",
    "The secret sauce is good documentation.",
    "IP 10.0.0.5 and 203.0.113.42 are the two load balancers.",
    "version v2.14.0-rc.3 ships on 2026-12-01",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
]


# Formats with a rule of their own are named by it, whether or not they also look random.
NAMED = [
    ("maps key AIzaSyA1234567890abcdefghijklmnopqrstu", "maps key [REDACTED API KEY]"),
    ("firebase config AIzaSyBOti4mM-6x9WDnZIjIeyEU21OpBXqWBgw ok", "firebase config [REDACTED API KEY] ok"),
    ("OPENAI key sk-proj-ABCDEFGHIJKLMNOPQRSTUV1234 for the summarizer", "OPENAI key [REDACTED API KEY] for the summarizer"),
    ("access key id AKIAIOSFODNN7EXAMPLE for the billing bucket", "access key id [REDACTED AWS ACCESS KEY] for the billing bucket"),
]


@pytest.mark.parametrize(("text", "expected"), NAMED, ids=[t[:24] for t, _ in NAMED])
def test_a_format_with_its_own_rule_is_named_by_it(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(("text", "secret"), SECRETS, ids=[s[:24] for _, s in SECRETS])
def test_no_secret_reaches_the_ledger_or_the_handoff(text: str, secret: str) -> None:
    """The whole path: a person's message folded into the ledger (as an ask, a note and the term statistics)
    and rendered as a handoff keeps none of the secret."""
    from threadkeeper.persistence import Message, MessageFlags, TextPart
    from threadkeeper.services import Tokenizer
    from threadkeeper.services.handoff import LedgerBuilder, render_handoff

    said = Message(id="1700000000.000100", role="user", author="ann", parts=[TextPart(text=f"{text} please check")],
                   flags=MessageFlags(addressed=True), tokens=40, created_at=1_700_000_000.0)
    ledger = LedgerBuilder().fold([said]).build()
    tokenizer = Tokenizer("gpt-4o")
    rendered = render_handoff(ledger, [], {}, cap_tokens=2000, count=tokenizer.count, now=1_700_000_100.0)
    assert secret not in ledger.model_dump_json()
    assert secret not in rendered.text and "check" in rendered.text, "the words around it are kept"


@pytest.mark.parametrize(("text", "secret"), SECRETS, ids=[s[:24] for _, s in SECRETS])
def test_each_secret_format_is_redacted(text: str, secret: str) -> None:
    clean = redact(text)
    assert secret not in clean, clean
    assert "[REDACTED" in clean
    assert any(secret in found or found in secret for found in secrets_in(text)), secrets_in(text)


@pytest.mark.parametrize("text", ORDINARY, ids=[t[:24] for t in ORDINARY])
def test_ordinary_text_is_not_redacted(text: str) -> None:
    assert redact(text) == text
    assert secrets_in(text) == set()


def test_redaction_keeps_the_words_around_a_secret() -> None:
    assert redact("cache at redis://:s3cretPw@cache.internal:6379/0 today") == \
        "cache at redis://:[REDACTED]@cache.internal:6379/0 today"
    assert redact("the password for the staging db is bluebird42, don't share it") == \
        "the password for the staging db is [REDACTED], don't share it"
    assert redact("hook https://hooks.slack.com/services/T0123ABCD/B0456EFGH/abcdefghijklmnopqrstuvwx ok") == \
        "hook [REDACTED SLACK TOKEN] ok"
    assert redact("AccountName=acme;AccountKey=shortTestKey42xyz;Suffix=x") == \
        "AccountName=acme;AccountKey=[REDACTED];Suffix=x"


# Generic rules: each row fails when its rule is taken out (tests/mutations.py names which).
SHAPES = [
    # one case with digits in many places, beyond hex
    ("for the mailer use q7hz2kx9w4mt3vb8np6r until friday", "q7hz2kx9w4mt3vb8np6r"),
    ("license K7QX-9MZT-4WPL-8RNB-2VHC for the build agent", "K7QX-9MZT-4WPL-8RNB-2VHC"),
    # a long part of both cases without digits, after a prefix
    ("try 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 in the notebook", "QwErTyUiOpAsDfGhJkLzXcVbNmQaWsEdRf"),
    # keys and tokens named in other languages and in plain words: hex and UUIDs found by their name
    ("der Schlüssel für den Mailer lautet 0afae57f3ccfd9d7f5767067bc48b30f", "0afae57f3ccfd9d7f5767067bc48b30f"),
    ("la clé du service de paiement est 6d2fabeb6add229bc199fab", "6d2fabeb6add229bc199fab"),
    ("the mailer key is 5eb4223e-5008-46e5-be67-c7b8f2732305 for now", "5eb4223e-5008-46e5-be67-c7b8f2732305"),
    # an assignment whose name holds a secret word and goes on to a word that is not about it
    ("set client_secret_value=plainwordvalue and token_value: orange-tiger-sunset", "plainwordvalue"),
]


@pytest.mark.parametrize(("text", "secret"), SHAPES, ids=[s[:16] for _, s in SHAPES])
def test_a_secret_is_found_by_its_shape_or_its_name_whatever_its_vendor(text: str, secret: str) -> None:
    clean = redact(text)
    assert secret not in clean and "[REDACTED" in clean, clean
    assert all(part not in clean for part in secret.split("-") if len(part) >= 8), clean


def test_a_random_token_is_removed_whole_with_its_base64_parts() -> None:
    clean = redact("here: Kq8Lm3Zx9Rt2Wv5Np7Qs4/Yb6Hj1Df0Gk2Ml9=Xc8Vb3 thanks")
    assert clean == "here: [REDACTED HIGH ENTROPY STRING] thanks"


# Identifiers near secret words and identifiers that look a little random: ordinary, left alone.
LOOK_ALIKES = [
    "the key ticket is OPS-4471",
    "the key change is in PR-1234, the key date is 2026-12-01",
    "jenkins credentialsId: 'deploy-bot-2024-ssh'",
    "access_token_url=https://auth.example.com/oauth/token",
    "GITHUB_API_KEY=\nREGION=eu-west-1",
    "see build rc0.15.0_20231217_1420-SNAPSHOT",
    'const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"',
    "upgrade org.neo4j.neo4j-graphdb-api to 3.5.12",
    "attached api-c99e353f761d318322c853c03e.gif to the ticket",
    "la clé du problème est le cache, der Schlüssel liegt im Tresor",
    "ssh key: ~/.ssh/id_ed25519 on the bastion; the TLS key: /etc/ssl/private/server2024.key",
    "password: ${DB_PASSWORD} from the environment",
    "the bootstrap-master-keying:arm64-linux=pass job is green",
    "Request id 550e8400-e29b-41d4-a716-446655440000 failed; deploy 4f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
]


@pytest.mark.parametrize("text", LOOK_ALIKES, ids=[t[:24] for t in LOOK_ALIKES])
def test_identifiers_near_secret_words_are_not_redacted(text: str) -> None:
    assert redact(text) == text


# A secret over two messages of one person: (their previous message, their message now, what must go, what must stay).
SPLIT = [
    ("the staging db password is", "Xq9-vB7mKt2w", "Xq9-vB7mKt2w", ""),
    ("token for the deploy bot:", "Rk2x7Qm9Tz4w", "Rk2x7Qm9Tz4w", ""),
    ("ok here it is. the new admin password is", "Summer2024! don't share it", "Summer2024", "! don't share it"),
    ("the password is", "swordfish", "swordfish", ""),
    ("set this in the env:\nAPI_KEY=", "abcd1234efgh5678", "abcd1234efgh5678", ""),
    ("der Schlüssel für den Mailer lautet", "`0afae57f3ccf`", "0afae57f3ccf", "`"),
    ("la clé du service est", "6d2fabeb6add229bc, merci", "6d2fabeb6add229bc", ", merci"),
]


@pytest.mark.parametrize(("earlier", "text", "secret", "kept"), SPLIT, ids=[s[:16] for _, _, s, _ in SPLIT])
def test_a_value_named_at_the_end_of_the_previous_message_is_redacted(earlier: str, text: str, secret: str,
                                                                      kept: str) -> None:
    assert secret in text and redact(text) == text, "alone, the message holds nothing a rule finds"
    before, clean = redact_after(earlier, text)
    assert secret not in clean and "[REDACTED" in clean and before == earlier, clean
    assert all(part in clean for part in kept.split()), clean


def test_a_key_split_over_two_messages_loses_both_halves() -> None:
    assert redact("here is the billing key AKIAIOSFODNN") == "here is the billing key AKIAIOSFODNN"
    assert redact_after("here is the billing key AKIAIOSFODNN", "7EXAMPLE") == \
        ("here is the billing key [REDACTED]", "[REDACTED]")
    before, clean = redact_after("try Kq8Lm3Zx9Rt2W", "v5Np7Qs4Yb6Hj1Df0 and tell me")
    assert "Kq8Lm3Zx9Rt2W" not in before and clean == "[REDACTED] and tell me"


# Two messages of one person that hold no secret: the second comes through as it does alone.
HARMLESS_PAIRS = [
    ("my password is", "not something I share here"),
    ("my password is", "Bailey, my dog's name, don't laugh"),
    ("my password is", "Here's the thing: I forgot it again"),
    ("the deploy token:", "Absolutely! ask Dana for it"),
    ("API_KEY=", "History-wise, we never had one"),
    ("the key is", "patience, honestly"),
    ("the key is", "Fluffy"),
    ("the deploy token:", "Anyways"),
    ("the reset token:", "World* sorry, typo"),
    ("what's the deploy token:", "Interesting...i thought you had it"),
    ("the password policy is", "documented in the wiki"),
    ("the deploy is at", "14:30 UTC today"),
    ("see you", "tomorrow"),
    ("build abc123", "def456 done"),
    ("ok", "thanks"),
    ("Request id 550e8400-e29b-41d4", "-a716-446655440000 failed again"),
    ("the token budget is", "4096"),
]


@pytest.mark.parametrize(("earlier", "text"), HARMLESS_PAIRS, ids=[f"{e[:10]}|{t[:10]}" for e, t in HARMLESS_PAIRS])
def test_a_message_after_a_harmless_previous_one_comes_through_unchanged(earlier: str, text: str) -> None:
    assert redact_after(earlier, text) == (earlier, text)


ENDINGS = ["my password is", "the api key is", "deploy token:", "API_KEY=", "der Schlüssel lautet",
           "le mot de passe est", "the secret for the staging db is"]
WORDS = ["the", "build", "is", "green", "again", "Here's", "Absolutely!", "we", "shipped", "it", "on", "Friday,",
         "History-wise", "lunch", "was", "great", "Thanks!", "e.g.", "Dana", "asked", "about", "World*"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ENDINGS), st.lists(st.sampled_from(WORDS), min_size=2, max_size=12))
def test_prose_after_a_message_ending_in_a_secret_name_is_never_redacted(earlier: str, words: list[str]) -> None:
    """Whatever sentence of words follows a message that ends in a secret's name, none of it is taken for the
    value."""
    text = " ".join(words)
    assert redact_after(earlier, text)[1] == text


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ENDINGS), st.lists(st.sampled_from(WORDS), max_size=8),
       st.text(alphabet="abcdefghkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ", min_size=3, max_size=6))
def test_only_the_value_goes_after_a_message_ending_in_a_secret_name(earlier: str, words: list[str],
                                                                     letters: str) -> None:
    """A value shaped like one (letters and digits, 12 to 18 characters) leaves the message, and nothing after it."""
    value = "".join(f"{c}{n % 10}" for n, c in enumerate(letters * 3))[:18]
    rest = " ".join(words)
    text = f"{value} {rest}".strip()
    clean = redact_after(earlier, text)[1]
    assert value not in clean and clean.startswith("[REDACTED") and clean.endswith(rest), clean


_FRAGMENTS = st.sampled_from(["the password for the staging db cluster in eu-west-1 is", "api_key", "token:", "=", " ",
                              "\n", "  ", "AKIAIOSFODNN", "7EXAMPLE", "Xq9-vB7mKt2w", "well", "is", "Zq8rT5vwX2yB7nM4",
                              "'", "é", "x" * 40])


@settings(max_examples=200, deadline=None)
@given(earlier=st.lists(_FRAGMENTS, max_size=12).map("".join), text=st.lists(_FRAGMENTS, max_size=6).map("".join))
def test_the_end_of_a_previous_message_redacts_the_next_as_the_whole_message_does(earlier: str, text: str) -> None:
    """What is kept of a person's last message to read their next one with (``tail``) redacts it as the whole
    message does: a name 63 characters back, a token split at its end, space after it."""
    assert redact_after(tail(earlier), text)[1] == redact_after(earlier, text)[1]
    long = "the password for the staging db cluster of our team in eu-west-1 is"  # 63 characters from its name
    assert redact_after(tail(long + " "), "Xq9-vB7mKt2w")[1] == redact_after(long, "Xq9-vB7mKt2w")[1] == "[REDACTED]"
