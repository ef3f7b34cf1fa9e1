"""Widgets of the rankvisor UI."""
