"""Sinks' runner: a consumer group per sink and cursor over every tenant's scores topic,
delivering batches to a streams.core.sinks ScoreSink (runner). A new sink is an adapter
(streams.adapters) implementing ScoreSink; nothing here changes for it."""
