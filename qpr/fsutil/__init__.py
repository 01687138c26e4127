"""Crash-safe writes: atomic files and directories, groups of files placed together, recovery of leftovers."""
