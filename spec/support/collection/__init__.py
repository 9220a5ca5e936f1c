"""Which spec runs for which version, and why: the one rule (rule.py) and what it reads."""
