"""The harness, the only layer that starts processes: the measuring session, the group
runner, worker groups and their launchers, ranks, the device lock."""
