"""The shepherd study (hetserve reproduce shepherd)."""
