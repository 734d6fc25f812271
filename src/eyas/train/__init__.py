"""EAGLE-3 drafter training: data, online target capture, TTT loss, loop, checkpoints."""
