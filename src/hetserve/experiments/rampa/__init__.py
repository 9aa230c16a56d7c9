"""RAMPA (TCC 2025): validation by serving (and, to come, the evaluation)."""
