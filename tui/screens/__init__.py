"""Screens of the rankvisor UI."""
