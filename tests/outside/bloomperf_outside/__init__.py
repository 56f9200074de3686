"""bloomperf extensions that live outside bloomperf/: one module per extension point."""
