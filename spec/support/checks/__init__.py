"""Plugins that judge a whole run: owned coverage, the golden files."""
