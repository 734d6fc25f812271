"""Serving engines eyas starts itself (single node: tests, CI, a workstation)."""
