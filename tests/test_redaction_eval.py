"""The redaction eval's loader, on a small checkout written here in the layout of the gitleaks rule files (never the
real rules): it finds each rule's true-positive secrets (literal, drawn from a regex, through a variable), its false
positives and descriptions, splits vendors into a tuning half and a held-out half, and scores the bot's redaction
beside an entropy rule."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_budget_and_cli import cli

from threadkeeper.evals.redaction import (
    HARD,
    LOOK_ALIKE,
    PHRASINGS,
    SPLIT_PHRASINGS,
    RedactionInputError,
    alone,
    chat_pairs,
    evaluate,
    generate,
    load_gitleaks,
    removed,
    report,
    split_scores,
)

ALPHA = '''package rules

func Alpha() *config.Rule {
	r := config.Rule{
		Description: "Found an Alpha API key, which may expose the \\"alpha\\" account.",
		RuleID:      "alpha-api-key",
	}
	// validate
	tps := utils.GenerateSampleSecrets("alpha", "alpha_"+secrets.NewSecret(utils.AlphaNumeric("32")))
	tps = append(tps, `alpha_key = "Zq8vN2xLpwR4tY7uK1mB3nC5"`)
	fps := []string{
		`alpha_key = "${ALPHA_KEY}"`, // a reference
	}
	return utils.Validate(r, tps, fps)
}
'''
BETA = '''package rules

func Beta() *config.Rule {
	r := config.Rule{
		Description: "Detected a Beta token.",
	}
	secret := secrets.NewSecret(utils.Hex("40"))
	tps := []string{
		"bt-" + secrets.NewSecret(`[A-Z0-9]{24}`),
		utils.GenerateSampleSecret("beta", secret),
		utils.GenerateSampleSecret("beta", unknownHelper()),
	}
	return utils.Validate(r, tps, nil)
}
'''
GENERIC = '''package rules

func Generic() *config.Rule {
	r := config.Rule{Description: "A generic key."}
	fps := []string{
		`credentialsId: 'deploy-bot-2024'`,
	}
	return utils.Validate(r, nil, fps)
}
'''


def _checkout(root: Path) -> Path:
    rules = root / "cmd" / "generate" / "config" / "rules"
    rules.mkdir(parents=True)
    for name, text in (("alpha.go", ALPHA), ("beta.go", BETA), ("generic.go", GENERIC)):
        (rules / name).write_text(text, encoding="utf-8")
    return root


def _committed(root: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    env = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", *env, "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", *env, "-C", str(root), "commit", "-qm", "add the alpha and beta rules"], check=True)
    return root


def test_loader_reads_each_kind_of_sample_from_a_checkout(tmp_path: Path) -> None:
    corpus = load_gitleaks(_checkout(tmp_path))
    assert corpus.vendors == ["alpha", "beta"], "a file with no true positive is no vendor"
    assert [corpus.held_out(v) for v in corpus.vendors] == [False, True], "the second half, alphabetically, is held out"
    alpha = [s.value for s in corpus.secrets if s.vendor == "alpha"]
    beta = [s.value for s in corpus.secrets if s.vendor == "beta"]
    assert len(alpha) == 2 and re.fullmatch(r"alpha_[a-z0-9]{32}", alpha[0])
    assert alpha[1] == "Zq8vN2xLpwR4tY7uK1mB3nC5", "a snippet's secret is its value, not the line"
    assert len(beta) == 2 and re.fullmatch(r"bt-[A-Z0-9]{24}", beta[0]) and re.fullmatch(r"[a-f0-9]{40}", beta[1])
    assert corpus.skipped == {"tps sample not evaluated": 1}, "a sample built by an unknown function is counted"
    kinds = {(n.kind, n.text) for n in corpus.negatives}
    assert (LOOK_ALIKE, 'alpha_key = "${ALPHA_KEY}"') in kinds
    assert (HARD, "credentialsId: 'deploy-bot-2024'") in kinds
    assert ("rule description", 'Found an Alpha API key, which may expose the "alpha" account.') in kinds
    assert not any(n.kind == "commit" for n in corpus.negatives), "a tree without history has no commits"
    assert load_gitleaks(tmp_path, seed=1).secrets == corpus.secrets, "the same seed draws the same secrets"


def test_loader_reads_a_bare_git_directory_and_its_commits(tmp_path: Path) -> None:
    root = _committed(_checkout(tmp_path / "tree"))
    from_tree, from_git = load_gitleaks(root), load_gitleaks(root / ".git")
    assert from_git.secrets == from_tree.secrets and from_git.vendors == from_tree.vendors
    commits = [n.text for n in from_git.negatives if n.kind == "commit"]
    assert len(commits) == 1 and "add the alpha and beta rules" in commits[0]
    assert re.search(r"\b[0-9a-f]{40}\b", commits[0]), "a commit hash is pasted whole beside its subject"


def test_a_folder_that_is_no_checkout_is_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(RedactionInputError, match="no cmd/generate/config/rules"):
        load_gitleaks(tmp_path)


def test_generated_secrets_match_their_regex() -> None:
    import random

    rng = random.Random(3)
    for pattern in (r"[a-z0-9_-]{32}", r"sq0csp-[0-9A-Za-z\-_]{43}", r"(?:ab|cd)[A-Z2-7]{16}", r"\d{4}\w{8}"):
        assert re.fullmatch(pattern, generate(pattern, rng)), pattern


def test_a_secret_counts_as_removed_only_when_no_piece_of_it_survives() -> None:
    secret = "Zq8vN2xLpwR4tY7uK1mB3nC5"
    assert removed(secret, "the key is [REDACTED]")
    assert not removed(secret, "the key is [REDACTED]R4tY7uK1mB3nC5"), "a tail of 8 characters is a leak"


def test_evaluation_scores_every_phrasing_and_sets_the_baseline_to_the_same_false_positive_rate(tmp_path: Path) -> None:
    corpus = load_gitleaks(_checkout(tmp_path))
    result = evaluate(corpus)
    ours = result["ours"]
    assert ours["halves"]["tuning"].secrets == 2 * len(PHRASINGS) and ours["halves"]["held-out"].secrets == 2 * len(PHRASINGS)
    assert ours["phrasings"][("tuning", "named")].share == 1.0, "the bot's redaction removes a named key"
    assert result["baseline"] is not None and result["intact_target"] == 1.0
    kept = [s for kind, s in result["baseline"]["intact"].items() if kind != LOOK_ALIKE]
    assert sum(s.removed for s in kept) == sum(s.secrets for s in kept), "the baseline keeps as many negatives"
    json.dumps(report(result))


def test_a_secret_over_two_messages_is_scored_alone_and_with_its_authors_previous_message(tmp_path: Path) -> None:
    corpus = load_gitleaks(_checkout(tmp_path))
    before, after = split_scores(corpus, alone), split_scores(corpus)
    named = ("tuning", "named, the value next")
    assert after["phrasings"][named].secrets == 2 and after["phrasings"][named].share == 1.0
    assert sum(s.removed for s in after["phrasings"].values()) > sum(s.removed for s in before["phrasings"].values())
    assert {k for _, k in after["phrasings"]} == set(SPLIT_PHRASINGS)


def test_chat_pairs_count_what_the_previous_message_changes() -> None:
    chats = [[("ann", "the staging db password is"), ("bob", "lunch?"), ("ann", "Xq9-vB7mKt2w"),
              ("bob", "Here's a photo of the fireworks"), ("bob", "Absolutely! it was great")]]
    pairs = chat_pairs(chats)
    assert pairs["consecutive"].secrets == 3 and pairs["consecutive"].removed == 1, "only ann's value"
    assert pairs["after_name"].secrets == 5 and pairs["beyond_value"].removed == 0
    assert pairs["after_name"].removed == 1, "a message ending in a secret's name costs a sentence nothing"


def test_eval_redaction_command_prints_the_table_and_writes_json(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "tree")
    out = tmp_path / "report.json"
    done = cli("eval", "redaction", "--source", "gitleaks", "--path", str(root), "--by-vendor", "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "held-out" in done.stdout and "beta" in done.stdout and "samples skipped: 1" in done.stdout
    data = json.loads(out.read_text())
    assert data["secrets"] == 4 and data["vendors"] == ["alpha", "beta"]
    assert set(data["ours"]["halves"]) == {"tuning", "held-out"}
    assert "a secret over two messages" in done.stdout and data["split"]["with context"]["phrasings"]
    bad = cli("eval", "redaction", "--path", str(tmp_path / "nowhere"))
    assert bad.returncode != 0 and "gitleaks checkout" in bad.stderr and "Traceback" not in bad.stderr
