"""Redaction's maintained rules (detect-secrets) are read when a text is first redacted, not when the rules load."""

from __future__ import annotations

import subprocess
import sys


def test_detect_secrets_rules_are_read_on_the_first_text_redacted() -> None:
    """Importing the safety rules does not import detect-secrets (its plugins and ``requests``: 9 MB); the first
    redaction does, and finds what its rules find."""
    probe = ("import sys\n"
             "from threadkeeper.services.safety import redact\n"
             "print('detect_secrets' in sys.modules)\n"
             "print(redact('aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'), "
             "'detect_secrets' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.splitlines()
    assert before == "False"
    assert "wJalrXUtnFEMI" not in after and after.endswith(" True"), after
