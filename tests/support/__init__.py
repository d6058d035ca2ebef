"""Fixtures and helpers shared by every test tier."""
