"""Redaction by table: each secret format is removed, and ordinary text (prose, ids, links without
credentials, numbers) comes through unchanged."""

from __future__ import annotations

import pytest

from threadkeeper.services.safety import redact, secrets_in

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
