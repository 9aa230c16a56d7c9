"""The deepplan study (hetserve reproduce deepplan)."""
