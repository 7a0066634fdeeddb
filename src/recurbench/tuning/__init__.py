"""Optuna studies over REM head counts, dilations and memory sizes."""
