"""Typed configuration: the run options (RunConfig, LaunchOptions) and what each backend reads."""
