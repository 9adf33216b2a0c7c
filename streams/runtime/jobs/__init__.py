"""Operator jobs that run to an end: reading and re-driving dead letters (deadletters),
reading a workspace's log for the report (log_read) with the garbage collector paused (heap),
installing, archiving and backfilling rules as data (rules)."""
