"""Integrations with frameworks; each imports its framework, which pgqueue itself never does."""
