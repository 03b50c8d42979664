"""Slow/fast pairs, one folder per technique."""
