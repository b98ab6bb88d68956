"""Fake credentials of every shape the default redaction patterns cover, for the redaction
tests (test_redaction.py and test_redaction_differential.py)."""

from __future__ import annotations

# Fake credentials assembled at runtime so no scanner mistakes this file for a leak.
OPENAI = "sk-" + "A1b2C3d4" * 6
OPENAI_PROJ = "sk-proj-" + "Xy9_" * 12
ANTHROPIC = "sk-ant-api03-" + "q" * 40
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB = "ghp_" + "a" * 36
GITHUB_PAT = "github_pat_" + "11ABC" * 10
HUGGINGFACE = "hf_" + "aBcDeFgHiJ" * 3 + "kLmN"
GITLAB = "glpat-" + "xYz12AbC34dEf56GhI78"
NPM = "npm_" + "a1B2c3D4e5F6" * 3
SLACK = "xoxb-" + "1234567890-abcdefghij"
GOOGLE = "AIza" + "S" * 35
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_RK = "rk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabcDEF123+/=\n"
    "-----END RSA PRIVATE KEY-----"
)
