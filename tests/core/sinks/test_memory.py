from streams.core.sinks.contracts import check_score_config_store, check_score_sink
from streams.core.sinks.memory import InMemoryScoreConfigStore, InMemoryScoreSink


async def test_in_memory_sink_meets_the_contract() -> None:
    sink = InMemoryScoreSink()

    async def stored() -> set[tuple[str, str, str]]:
        return set(sink.scores)

    await check_score_sink(sink, stored=stored)
    assert sink.flushes == 2


async def test_in_memory_store_meets_the_contract() -> None:
    await check_score_config_store(InMemoryScoreConfigStore())


async def test_contract_catches_a_duplicating_sink() -> None:
    import pytest

    from streams.core.sinks.memory import replacement_key

    class Duplicating(InMemoryScoreSink):
        """Appends instead of replacing."""

        def __init__(self) -> None:
            super().__init__()
            self.kept: list[tuple[str, str, str]] = []

        async def record(self, scores, /):  # type: ignore[no-untyped-def]
            self.kept += [replacement_key(s) for s in scores]
            return []

    sink = Duplicating()

    async def stored() -> list[tuple[str, str, str]]:
        return sink.kept

    with pytest.raises(AssertionError, match="stored once"):
        await check_score_sink(sink, stored=stored)
