"""Comparison tables and figures from tracked runs."""
