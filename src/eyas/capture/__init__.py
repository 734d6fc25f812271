"""Target hidden states for drafter training, through the engine that serves the target."""
