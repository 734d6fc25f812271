"""Test and benchmark helpers shipped with eyas (a fake SGLang server)."""
