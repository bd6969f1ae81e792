"""What the run tells the world: metrics and progress, trackers, the hang watchdog and stop signals."""
