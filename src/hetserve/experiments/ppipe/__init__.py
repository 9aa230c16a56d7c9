"""The ppipe study (hetserve reproduce ppipe)."""
