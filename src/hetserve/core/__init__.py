"""Data model shared by every layer (imports nothing else of hetserve)."""
