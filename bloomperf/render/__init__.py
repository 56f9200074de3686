"""Rendering: terminal and markdown text, GitHub output, the report and the history site."""
