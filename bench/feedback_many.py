"""Workspace.give_feedback_many against its floor, in one process, rounds alternating.

Per round, on a fresh set of command ids over the same runs:
1. floor: the records one batch of give_feedback_many writes (per feedback a ledger claim, the
   feedback event, the ledger outcome), encoded beforehand, produced in batches of the same
   size with one flush per batch: writing them as fast as Python can, nothing decided.
2. many, command ids: `give_feedback_many` with a command id per item.
3. many, no ids: `give_feedback_many` without command ids (only the events are written).
4. single calls: `give_feedback` with command ids, `--window` calls in flight (fewer items).

Prints feedback/s and process CPU µs per feedback per round, then the medians and the ratio
of each to the floor. Every answer is checked: anything but a recorded item fails the run.
`python -m bench.feedback_many --items 20000 --rounds 3`
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from confluent_kafka import Producer

from bench.surfaces import TENANT, _seed
from streams.adapters.kafka.admin import TenantAdmin
from streams.core.actors import UserActor
from streams.core.commands import LedgerEntry
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality
from streams.runtime.client.many import FeedbackItem, Given
from streams.runtime.client.workspace import StreamsClient, Workspace
from streams.runtime.root import Runtime
from streams.settings import Settings

Round = tuple[float, float]  # feedback/s, CPU µs per feedback


def _items(runs: list[str], count: int, tag: str | None) -> list[FeedbackItem]:
    return [FeedbackItem(TriageQuality(correct=True, severity="high"),
                         RunTarget(run_id=runs[n % len(runs)]),
                         command_id=None if tag is None else f"{tag}_{n}")
            for n in range(count)]


def _timed(began: tuple[float, float], count: int) -> Round:
    wall = time.perf_counter() - began[0]
    return count / wall, (time.process_time() - began[1]) / count * 1e6


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


async def many(ws: Workspace, runs: list[str], count: int, batch: int,
               tag: str | None) -> Round:
    items = _items(runs, count, tag)
    began = _now()
    answers = await ws.give_feedback_many(items, batch_size=batch)
    result = _timed(began, count)
    refused = [a for a in answers if not isinstance(a, Given)]
    if refused:
        raise SystemExit(f"{len(refused)} items refused, e.g. {refused[0]!r}")
    return result


async def single(ws: Workspace, runs: list[str], count: int, window: int, tag: str) -> Round:
    room = asyncio.Semaphore(window)

    async def one(item: FeedbackItem) -> None:
        async with room:
            await ws.give_feedback(item.value, on=item.on, command_id=item.command_id)

    items = _items(runs, count, tag)
    began = _now()
    await asyncio.gather(*(one(i) for i in items))
    return _timed(began, count)


def floor(settings: Settings, records: list[tuple[str, bytes, bytes]], batch: int) -> Round:
    """Produce pre-encoded records, a flush per `batch` feedback (3 records each)."""
    producer = Producer(Runtime(settings).producer_config())
    began = _now()
    step = batch * 3
    for start in range(0, len(records), step):
        for topic, key, value in records[start:start + step]:
            producer.produce(topic, value=value, key=key)
        if producer.flush(30.0):
            raise SystemExit("the floor's records were not all acknowledged in 30 s")
    result = _timed(began, len(records) // 3)
    return result


def floor_records(settings: Settings, event_values: list[tuple[bytes, bytes]],
                  count: int) -> list[tuple[str, bytes, bytes]]:
    """Per feedback: a claim, an event (a recorded one's bytes, re-used) and an outcome."""
    prefix = settings.topic_prefix
    commands, events = f"{prefix}.{TENANT}.commands", f"{prefix}.{TENANT}.events"
    records = []
    for n in range(count):
        key = f"prod\nuser:floor\nfloor_{n}".encode()
        claim = LedgerEntry(state="claimed", digest="d" * 64, claim=uuid.uuid4().hex,
                            owner="floor", at_ms=int(time.time() * 1000))
        done = claim.replace(state="recorded", partition=0, offset=n, event_id=f"evt_{n}")
        event_key, event_value = event_values[n % len(event_values)]
        records += [(commands, key, claim.encode()), (events, event_key, event_value),
                    (commands, key, done.encode())]
    return records


async def main_async(args: argparse.Namespace) -> None:
    settings = Settings.from_env(topic_prefix=f"bm{uuid.uuid4().hex[:8]}")
    TenantAdmin(settings).create_tenant(TENANT)
    client = StreamsClient(Runtime(settings))
    runs = await _seed(client, args.runs)
    ws = client.workspace(TENANT, "prod", actor=UserActor(id="bench"))
    await many(ws, runs, 2000, args.batch, "warm")  # connections, the ledger, the index
    # The floor writes the very bytes of recorded events, read back from the log.
    view = [e for e in await ws.read() if e.event_type == "feedback_given"][:200]
    values = [(e.correlation_id.encode(), client.serde.encode_envelope(
        e, f"{settings.topic_prefix}.{TENANT}.events")) for e in view]
    records = floor_records(settings, values, args.items)
    rounds: dict[str, list[Round]] = {"floor": [], "many, command ids": [],
                                      "many, no ids": [], "single calls, command ids": []}
    for r in range(args.rounds):
        rounds["floor"].append(await asyncio.to_thread(floor, settings, records, args.batch))
        rounds["many, command ids"].append(await many(ws, runs, args.items, args.batch,
                                                      f"r{r}"))
        rounds["many, no ids"].append(await many(ws, runs, args.items, args.batch, None))
        rounds["single calls, command ids"].append(
            await single(ws, runs, args.single, args.window, f"s{r}"))
        print(f"round {r + 1}: " + ", ".join(f"{name} {rate:,.0f}/s {cpu:.1f} µs"
                                             for name, ((rate, cpu)) in
                                             ((n, v[-1]) for n, v in rounds.items())),
              flush=True)
    client.close()
    base = statistics.median(rate for rate, _ in rounds["floor"])
    base_cpu = statistics.median(cpu for _, cpu in rounds["floor"])
    print(f"\n{args.items} feedback per round ({args.single} for single calls), batches of "
          f"{args.batch}, {args.runs} runs, {args.rounds} rounds; medians:")
    print(f"{'path':<28}{'feedback/s':>12}{'CPU µs/fb':>11}{'vs floor':>10}{'CPU ratio':>11}")
    for name, values in rounds.items():
        rate = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"{name:<28}{rate:>12,.0f}{cpu:>11.1f}{rate / base:>10.2f}{cpu / base_cpu:>11.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20000, help="feedback per round")
    parser.add_argument("--batch", type=int, default=1000, help="give_feedback_many's "
                        "batch_size, and the floor's feedback per flush")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=50, help="runs the feedback is spread on")
    parser.add_argument("--single", type=int, default=3000,
                        help="feedback per round through single give_feedback calls")
    parser.add_argument("--window", type=int, default=500,
                        help="single calls in flight")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
