"""The annotation store's repositories, one per concern, all writing through one ``GroupCommitWriter``."""
