"""Generation: the async orchestrator, multi-turn regeneration, and the stage entry points."""
