"""Prompt caching: the engine (real K/V blocks reused across requests), the scenarios (a
conversation, the traps and their fixes) and their playback on the model."""
