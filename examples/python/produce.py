#!/usr/bin/env python3
"""Schedule tasks from Python: write wire-format v1 records to the scheduler's Kafka topic.

No project code is needed, only confluent-kafka (see requirements.txt; `dev/python` installs it
into target/python-venv). The format is the table "Wire format v1" in design.md:

    {"version":1,"orderingId":"customer-7","scheduledTime":"2026-11-22T06:00:00.000Z",
     "uniquenessKey":"reminder-1","taskData":{...}}

plus, only when set, "taskType", "priority", "onConflict", "maxWaitMs", "group" and "limitKey" (the key
per-key limits count the task under, e.g. a tenant). Each record is keyed
by its orderingId and goes to partition (murmur2(orderingId) & 0x7fffffff) % partitions, which
is what librdkafka's `murmur2_random` partitioner computes for a keyed record (the Java
producer's default; librdkafka's own default, `consistent_random`, is CRC32 and would put tasks
where the nodes park them as misplaced). A task counts as scheduled only once the broker
acknowledged it (acks=all, idempotent producer).

Every task is checked first by the rules the Rust client, the `scheduler` command and HTTP
enqueue apply (one table of cases, scheduler-client/tests/producer_rules.json, is run through each
of them): RFC 3339 times as the nodes read them, not further in the past than the grace window
(10 s, as the Rust client's), every number within what the nodes' store holds.

As a library (copy `make_producer`, `schedule_task` and what they call):

    producer = make_producer("127.0.0.1:19092")
    partition, offset = schedule_task(
        producer, "scheduled-tasks", "customer-7",
        datetime.now(timezone.utc) + timedelta(minutes=5), "reminder-1",
        {"action": "remind"}, task_type="send-email", priority=5)

From a shell (prints one JSON line per task with the partition and offset it landed at):

    produce.py --bootstrap 127.0.0.1:19092 --topic scheduled-tasks \\
        --ordering-id customer-7 --unique-key reminder-1 --in 5m --data '{"action":"remind"}'
    produce.py --bootstrap 127.0.0.1:19092 --topic scheduled-tasks --stdin < tasks.jsonl

where each line of tasks.jsonl is an object with the wire format's fields (`version` optional):
{"orderingId":"c7","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"r1","taskData":{}}.
`--dry-run` checks the tasks and prints each record it would send, sending nothing.

Exit codes, as the `scheduler` command's: 0 every task acknowledged, 1 Kafka failed or did not
acknowledge in time, 2 bad usage or a task that breaks the format's limits (nothing is sent then).
"""

import argparse
import json
import os
import re
import sys
from datetime import datetime, timedelta, timezone

from confluent_kafka import KafkaException, Producer

WIRE_VERSION = 1
# The limits the nodes check (design.md, "Wire format v1"); a record breaking one is parked.
MAX_KEY_BYTES = 1024  # orderingId, uniquenessKey
MAX_TASK_TYPE_BYTES = 128
MAX_TASK_DATA_DEPTH = 64  # taskData itself is level 1
MAX_RECORD_BYTES = 512 * 1024  # the nodes' default scheduling.max_task_data_bytes
MAX_GROUP_ID_BYTES = 1024
MAX_LIMIT_KEY_BYTES = 256
# A group's index and total: at most the largest group (its join holds every outcome).
MAX_GROUP_NUMBER = 10_000
# The times the wire format carries and the engine holds (UTC): 1900-01-01 to 9999-12-31.
EARLIEST_TIME = datetime(1900, 1, 1, tzinfo=timezone.utc)
# The longest debounce wait: the span of those times (a longer one could never cap a time).
MAX_WAIT_MS = 255_611_289_599_999
TASK_TYPE = re.compile(r"[A-Za-z0-9\-_.:/]+")
CONFLICT_MODES = ("replace", "keepTime", "debounce", "ifAbsent")
GROUP_FIELDS = ("id", "index", "total", "failFast", "joinType")
DEFAULT_TIMEOUT_S = 30.0
# How far in the past a task may be: the Rust client's and the nodes' default grace window.
DEFAULT_GRACE_S = 10.0
# RFC 3339 as the nodes read it (chrono): `T`, `t` or a space between date and time, seconds
# required (60: a leap second), any number of fraction digits, `Z`, `z` or an offset +hh:mm
# (U+2212 MINUS SIGN taken for `-`). ASCII digits only.
RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:[Zz]|([+\-\u2212])([0-9]{2}):([0-9]{2}))"
)


class TaskError(ValueError):
    """The task breaks the wire format's limits: the nodes would park it, so it is not sent."""


def make_producer(bootstrap_servers, timeout_s=DEFAULT_TIMEOUT_S, **extra_config):
    """A producer that places tasks as the engine expects and waits for durable writes."""
    config = {
        "bootstrap.servers": bootstrap_servers,
        # Kafka's Java default partitioner for keyed records: the one the nodes check against.
        "partitioner": "murmur2_random",
        # Acknowledged means written to every in-sync replica, and never duplicated by the
        # producer's own retries (the same settings as the Rust client).
        "acks": "all",
        "enable.idempotence": True,
        # How long librdkafka keeps trying before it reports a task as failed.
        "message.timeout.ms": int(timeout_s * 1000),
    }
    config.update(extra_config)
    return Producer(config)


def wire_time(when, now=None, grace_s=DEFAULT_GRACE_S):
    """`when` (an aware datetime, or an RFC 3339 string) as the task's time: UTC, truncated to
    milliseconds, checked as the Rust client checks it: from 1900-01-01T00:00:00Z (the earliest
    time the engine holds) and not further than `grace_s` before `now` (default: the clock)."""
    t = _utc_millis(when)
    now = datetime.now(timezone.utc) if now is None else now
    late_by = now - t
    if late_by > timedelta(seconds=grace_s):
        raise TaskError(
            f"scheduledTime {format_time(t)} is {late_by // timedelta(milliseconds=1)} ms in the "
            f"past, beyond the {round(grace_s * 1000)} ms grace window"
        )
    return t


def _utc_millis(when):
    """`when` in UTC, truncated to milliseconds, within the times the engine holds."""
    if isinstance(when, str):
        when = _parse_time(when)
    if not isinstance(when, datetime):
        raise TaskError(f"scheduledTime must be a datetime or a string, not {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise TaskError(
            f"scheduledTime {when.isoformat()} has no time zone; "
            "use e.g. datetime.now(timezone.utc) or a string ending in Z or +hh:mm"
        )
    try:
        t = when.astimezone(timezone.utc)
    except OverflowError:
        raise TaskError(
            f"scheduledTime {when.isoformat()} is after 9999-12-31T23:59:59.999Z in UTC, "
            "the latest the wire format carries"
        ) from None
    t = t.replace(microsecond=t.microsecond // 1000 * 1000)
    if t < EARLIEST_TIME:
        raise TaskError(
            f"scheduledTime {format_time(t)} is before {format_time(EARLIEST_TIME)}, "
            "the earliest time the engine holds"
        )
    return t


def format_time(t):
    """A UTC datetime as the wire writes it: milliseconds and `Z`, e.g. 2026-11-22T06:00:00.000Z."""
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
        f".{t.microsecond // 1000:03d}Z"
    )


def _parse_time(text):
    """An RFC 3339 time, read as the nodes read it (see RFC3339), to the millisecond."""
    match = RFC3339.fullmatch(text)
    bad = f"scheduledTime {text!r} is not an RFC 3339 time such as 2026-11-22T06:00:00.000Z"
    if not match:
        raise TaskError(bad)
    year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
    millis = int(((match[7] or "") + "000")[:3])
    sign, offset_hours, offset_minutes = match[8], int(match[9] or 0), int(match[10] or 0)
    if offset_hours > 23 or offset_minutes > 59:
        raise TaskError(f"{bad}: its offset is beyond ±23:59")
    offset = timedelta(hours=offset_hours, minutes=offset_minutes)
    # Second 60 is a leap second: read as the next second's start, as the nodes read it.
    leap = second == 60
    try:
        local = datetime(
            year,
            month,
            day,
            hour,
            minute,
            59 if leap else second,
            millis * 1000,
            tzinfo=timezone(-offset if sign in ("-", "\u2212") else offset),
        )
        return local + timedelta(seconds=1) if leap else local
    except ValueError as e:  # 30 February, hour 24, year 0000...
        raise TaskError(f"{bad}: {e}") from None
    except OverflowError:
        raise TaskError(
            f"scheduledTime {text!r} is after 9999-12-31T23:59:59.999Z, the latest the wire "
            "format carries"
        ) from None


def encode_task(
    ordering_id,
    scheduled_time,
    uniqueness_key,
    task_data,
    task_type=None,
    priority=None,
    on_conflict=None,
    max_wait_ms=None,
    group=None,
    limit_key=None,
    now=None,
    grace_s=DEFAULT_GRACE_S,
):
    """The task's wire-format v1 record value (UTF-8 JSON bytes), after checking the limits.

    `group` makes it a member of a group: a dict of the wire format's `id`, `index` (from 1),
    optional `total`, `failFast` and `joinType`. `limit_key` (1 to 256 bytes) is the key per-key
    limits count the task under, independent of its orderingId. `scheduled_time` may be at most
    `grace_s` before `now` (default: the clock). Optional fields are written only when they differ from
    their defaults, as the Rust client does: for the same task (taskData's keys in the same
    order) the record is byte for byte the Rust client's."""
    _check_key("orderingId", ordering_id)
    _check_key("uniquenessKey", uniqueness_key)
    task_data = {} if task_data is None else task_data
    if not isinstance(task_data, dict):
        raise TaskError(f"taskData must be a JSON object (a dict), not {type(task_data).__name__}")
    _check_data(task_data, depth=1, path="taskData")
    record = {
        "version": WIRE_VERSION,
        "orderingId": ordering_id,
        "scheduledTime": format_time(wire_time(scheduled_time, now, grace_s)),
        "uniquenessKey": uniqueness_key,
        "taskData": task_data,
    }
    if task_type is not None and task_type != "default":
        if (
            not isinstance(task_type, str)
            or len(task_type) > MAX_TASK_TYPE_BYTES
            or not TASK_TYPE.fullmatch(task_type)
        ):
            raise TaskError(
                f"taskType {task_type!r} is not 1 to 128 ASCII letters, digits or -_.:/"
            )
        record["taskType"] = task_type
    if priority is not None:
        if not _is_int(priority) or not -(2**31) <= priority < 2**31:
            raise TaskError(f"priority {priority!r} is not a 32-bit integer")
        if priority != 0:
            record["priority"] = priority
    # The nodes read maxWaitMs as a 64-bit unsigned integer whatever the mode, and use it with
    # debounce only.
    if max_wait_ms is not None and (not _is_int(max_wait_ms) or not 0 <= max_wait_ms < 2**64):
        raise TaskError(f"maxWaitMs {max_wait_ms!r} is not a whole number of ms")
    if on_conflict is not None:
        if on_conflict not in CONFLICT_MODES:
            raise TaskError(f"onConflict {on_conflict!r} is not one of {', '.join(CONFLICT_MODES)}")
        record["onConflict"] = on_conflict
        if on_conflict == "debounce":
            if max_wait_ms is None:
                raise TaskError("onConflict debounce needs maxWaitMs, a whole number of ms")
            if max_wait_ms > MAX_WAIT_MS:
                raise TaskError(
                    f"onConflict debounce: maxWaitMs {max_wait_ms} is over {MAX_WAIT_MS}, the span "
                    "of the times the engine holds"
                )
            record["maxWaitMs"] = max_wait_ms
    if group is not None:
        if on_conflict is not None:
            raise TaskError(
                "group member with onConflict: a member superseded or ignored by its identity "
                "would never finish its group"
            )
        record["group"] = _group_record(group)
    if limit_key is not None:
        if not isinstance(limit_key, str):
            raise TaskError(f"limitKey {limit_key!r} is not a string")
        _check_key("limitKey", limit_key, MAX_LIMIT_KEY_BYTES, "limitKey is 0 bytes, not 1 to 256")
        record["limitKey"] = limit_key
    # Compact, UTF-8 as is (no \u escapes for non-ASCII), and no NaN or Infinity (not JSON).
    try:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        value = text.encode("utf-8")
    except (TypeError, ValueError) as e:  # a set, a datetime, NaN, a lone surrogate...
        raise TaskError(f"taskData is not JSON: {e}") from None
    if len(value) > MAX_RECORD_BYTES:
        raise TaskError(f"the record is {len(value)} bytes, over the {MAX_RECORD_BYTES}-byte limit")
    return value


def schedule_task(
    producer,
    topic,
    ordering_id,
    scheduled_time,
    uniqueness_key,
    task_data,
    task_type=None,
    priority=None,
    on_conflict=None,
    max_wait_ms=None,
    group=None,
    limit_key=None,
    timeout_s=DEFAULT_TIMEOUT_S,
    grace_s=DEFAULT_GRACE_S,
):
    """Schedules one task and returns (partition, offset) once the broker acknowledged it.

    Raises TaskError (nothing sent) for a task the nodes would refuse, and KafkaException when
    Kafka refused the write or did not acknowledge it within `timeout_s`."""
    value = encode_task(
        ordering_id,
        scheduled_time,
        uniqueness_key,
        task_data,
        task_type,
        priority,
        on_conflict,
        max_wait_ms,
        group,
        limit_key,
        grace_s=grace_s,
    )
    delivery = _send(producer, topic, ordering_id, value)
    _wait(producer, [delivery], timeout_s)
    return delivery.result()


def schedule_tasks(producer, topic, tasks, timeout_s=DEFAULT_TIMEOUT_S, grace_s=DEFAULT_GRACE_S):
    """Schedules many tasks (dicts of encode_task's keyword arguments) and returns their
    (partition, offset) in order once all are acknowledged: one wait for the whole batch.
    Every task is checked before the first is sent."""
    values = [(task["ordering_id"], encode_task(**task, grace_s=grace_s)) for task in tasks]
    deliveries = [_send(producer, topic, key, value) for key, value in values]
    _wait(producer, deliveries, timeout_s)
    return [delivery.result() for delivery in deliveries]


class _Delivery:
    """What the delivery callback reported for one record."""

    def __init__(self):
        self.done = False
        self.error = None
        self.partition = None
        self.offset = None

    def __call__(self, error, message):
        # Called from producer.poll() or producer.flush(), on this thread.
        self.done = True
        self.error = error
        if error is None:
            self.partition, self.offset = message.partition(), message.offset()

    def result(self):
        if self.error is not None:
            raise KafkaException(self.error)
        return self.partition, self.offset


def _send(producer, topic, ordering_id, value):
    delivery = _Delivery()
    while True:
        try:
            # The key picks the partition (murmur2_random); no explicit partition.
            key = ordering_id.encode("utf-8")
            producer.produce(topic, value=value, key=key, on_delivery=delivery)
            break
        except BufferError:
            # The local queue is full: let deliveries complete, then try again.
            producer.poll(0.1)
    producer.poll(0)
    return delivery


def _wait(producer, deliveries, timeout_s):
    # flush() serves the delivery callbacks until the queue is empty or the time is up.
    left = producer.flush(timeout_s + 5)
    if left or not all(d.done for d in deliveries):
        raise KafkaException(f"{left} record(s) not acknowledged within {timeout_s + 5:.0f} s")
    failed = [d.error for d in deliveries if d.error is not None]
    if failed:
        raise KafkaException(f"{len(failed)} of {len(deliveries)} record(s) failed: {failed[0]}")


def _check_key(field, value, max_bytes=MAX_KEY_BYTES, empty=None):
    if not isinstance(value, str) or not value:
        raise TaskError(empty or f"{field} must be a non-empty string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise TaskError(f"{field} is not valid Unicode: {e}") from None
    if size > max_bytes:
        raise TaskError(f"{field} is {size} bytes, over the {max_bytes}-byte limit")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _group_record(group):
    """`group` as the wire writes it, checked as the nodes check it: an id of 1 to 1,024 bytes,
    an index from 1 and a total (optional) from the index on, both within the group table's
    32-bit columns, failFast a boolean, joinType a task type."""
    if not isinstance(group, dict):
        raise TaskError("group must be an object with an id and an index")
    unknown = sorted(set(group) - set(GROUP_FIELDS))
    if unknown:
        raise TaskError(f"group has fields the wire format does not have: {', '.join(unknown)}")
    group_id = group.get("id")
    _check_key("group id", group_id, MAX_GROUP_ID_BYTES)
    index, total = group.get("index"), group.get("total")
    if not _is_int(index) or not 1 <= index <= MAX_GROUP_NUMBER:
        raise TaskError(f"group index {index!r} is not a whole number from 1 to {MAX_GROUP_NUMBER}")
    record = {"id": group_id, "index": index}
    if total is not None:
        if not _is_int(total) or not 1 <= total <= MAX_GROUP_NUMBER:
            raise TaskError(
                f"group total {total!r} is not a whole number from 1 to {MAX_GROUP_NUMBER}"
            )
        if index > total:
            raise TaskError(f"group index {index} is above the total {total}")
        record["total"] = total
    fail_fast = group.get("failFast", False)
    if not isinstance(fail_fast, bool):
        raise TaskError(f"group failFast {fail_fast!r} is not true or false")
    if fail_fast:
        record["failFast"] = True
    join_type = group.get("joinType")
    if join_type is not None:
        if not isinstance(join_type, str) or not TASK_TYPE.fullmatch(join_type) or len(join_type) > MAX_TASK_TYPE_BYTES:
            raise TaskError(f"group joinType {join_type!r} is not a task type")
        record["joinType"] = join_type
    return record


def _check_data(value, depth, path):
    """Nesting within MAX_TASK_DATA_DEPTH, integers within 64 bits (the nodes read numbers
    exactly and refuse larger integers), object keys strings."""
    if isinstance(value, (dict, list)):
        if depth > MAX_TASK_DATA_DEPTH:
            raise TaskError(f"taskData is nested deeper than {MAX_TASK_DATA_DEPTH} levels")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(value, dict) and not isinstance(key, str):
                raise TaskError(f"{path} has the non-string key {key!r}")
            _check_data(item, depth + 1, f"{path}.{key}")
    elif _is_int(value) and not -(2**63) <= value < 2**64:
        raise TaskError(f"{path} is {value}, beyond the 64-bit range the nodes read exactly")


# The command line.

WIRE_FIELDS = {
    "orderingId": "ordering_id",
    "scheduledTime": "scheduled_time",
    "uniquenessKey": "uniqueness_key",
    "taskData": "task_data",
    "taskType": "task_type",
    "priority": "priority",
    "onConflict": "on_conflict",
    "maxWaitMs": "max_wait_ms",
    "group": "group",
    "limitKey": "limit_key",
}


def _task_from_line(number, line):
    """A JSON line of wire-format fields as schedule_task's keyword arguments."""
    try:
        fields = json.loads(line)
    except json.JSONDecodeError as e:
        raise TaskError(f"line {number}: not JSON: {e}") from None
    if not isinstance(fields, dict):
        raise TaskError(f"line {number}: not a JSON object")
    version = fields.pop("version", WIRE_VERSION)
    if not _is_int(version) or version != WIRE_VERSION:
        raise TaskError(f"line {number}: version must be {WIRE_VERSION}")
    # As the nodes read records: a task (no `type`, or "task"), other fields ignored; `joinOf`
    # is the engine's, as HTTP enqueue says.
    if fields.get("type") not in (None, "task"):
        raise TaskError(f"line {number}: type {fields['type']!r}: only tasks are scheduled here")
    if "joinOf" in fields:
        raise TaskError(f"line {number}: joinOf is set by the engine on a group's join task")
    for required in ("orderingId", "scheduledTime", "uniquenessKey"):
        if required not in fields:
            raise TaskError(f"line {number}: {required} is missing")
    task = {WIRE_FIELDS[name]: value for name, value in fields.items() if name in WIRE_FIELDS}
    task.setdefault("task_data", {})
    return task


def _duration(text):
    match = re.fullmatch(r"(\d+)(ms|s|m|h)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 500ms, 10s, 5m, 2h")
    unit = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours"}[match[2]]
    return timedelta(**{unit: int(match[1])})


def _conflict_mode(text):
    """A conflict mode as the wire spells it, or as `scheduler schedule` does (keep-time)."""
    spelled = {"keep-time": "keepTime", "if-absent": "ifAbsent"}.get(text, text)
    if spelled not in CONFLICT_MODES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not one of {', '.join(CONFLICT_MODES)} (or keep-time, if-absent)")
    return spelled


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Schedule tasks on the scheduler's Kafka topic (wire format v1).",
        epilog="Prints one JSON line per acknowledged task: its key, partition and offset.",
    )
    # The same flags, environment and defaults as `scheduler schedule`.
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("SCHEDULER_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
        help="Kafka bootstrap servers (env SCHEDULER_KAFKA_BOOTSTRAP; default 127.0.0.1:9092)",
    )
    parser.add_argument(
        "--topic",
        default=os.environ.get("SCHEDULER_TOPIC", "scheduled-tasks"),
        help="the scheduler's topic (env SCHEDULER_TOPIC)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="seconds to wait for acknowledgement",
    )
    parser.add_argument(
        "--grace",
        type=_duration,
        default=timedelta(seconds=DEFAULT_GRACE_S),
        help="how far in the past a task may be (the nodes' grace window; default 10s)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the tasks and print each record that would be sent; send nothing",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stdin", action="store_true", help="read tasks as JSON lines on stdin")
    source.add_argument("--ordering-id", help="one task: its orderingId (the Kafka key)")
    one = parser.add_argument_group("one task (with --ordering-id)")
    one.add_argument("--unique", "--unique-key", dest="unique_key",
                     help="uniquenessKey (default: py-<current ms>)")
    when = one.add_mutually_exclusive_group()
    when.add_argument("--at", help="scheduledTime, RFC 3339 with an offset (default: now)")
    when.add_argument(
        "--in", dest="delay", type=_duration, help="scheduledTime from now: 500ms, 10s, 5m, 2h"
    )
    one.add_argument("--data", default="{}", help="taskData, a JSON object")
    one.add_argument("--type", dest="task_type", help="taskType (picks the handler)")
    one.add_argument("--priority", type=int, help="priority among due tasks (higher first)")
    one.add_argument("--on-conflict", type=_conflict_mode, metavar="{" + ",".join(CONFLICT_MODES) + "}",
                     help="conflict mode of the identity (keep-time and if-absent also read)")
    wait = one.add_mutually_exclusive_group()
    wait.add_argument("--max-wait", dest="max_wait", type=_duration,
                      help="with --on-conflict debounce: 500ms, 10s, 5m, 2h")
    wait.add_argument("--max-wait-ms", type=int, help="the same, in milliseconds")
    one.add_argument("--limit-key", help="the key per-key limits count the task under")
    return parser.parse_args(argv)


def _tasks_from_args(args):
    if args.stdin:
        lines = [(n, line) for n, line in enumerate(sys.stdin, start=1) if line.strip()]
        return [_task_from_line(n, line) for n, line in lines]
    now = datetime.now(timezone.utc)
    try:
        data = json.loads(args.data)
    except json.JSONDecodeError as e:
        raise TaskError(f"--data is not JSON: {e}") from None
    return [
        {
            "ordering_id": args.ordering_id,
            "scheduled_time": args.at or now + (args.delay or timedelta()),
            "uniqueness_key": args.unique_key or f"py-{int(now.timestamp() * 1000)}",
            "task_data": data,
            "task_type": args.task_type,
            "priority": args.priority,
            "on_conflict": args.on_conflict,
            "max_wait_ms": (
                int(args.max_wait.total_seconds() * 1000) if args.max_wait else args.max_wait_ms
            ),
            "limit_key": args.limit_key,
        }
    ]


def main(argv=None):
    args = _parse_args(argv)
    grace_s = args.grace.total_seconds()
    try:
        tasks = _tasks_from_args(args)
        if args.dry_run:
            values = [encode_task(**task, grace_s=grace_s) for task in tasks]
            for value in values:
                print(value.decode("utf-8"), flush=True)
            return 0
        producer = make_producer(args.bootstrap, args.timeout)
        placed = schedule_tasks(producer, args.topic, tasks, args.timeout, grace_s)
    except TaskError as e:
        print(f"produce.py: {e} (nothing sent)", file=sys.stderr)
        return 2
    except KafkaException as e:
        print(f"produce.py: Kafka at {args.bootstrap} failed: {e}", file=sys.stderr)
        return 1
    for task, (partition, offset) in zip(tasks, placed):
        line = {
            "orderingId": task["ordering_id"],
            "scheduledTime": format_time(_utc_millis(task["scheduled_time"])),
            "uniquenessKey": task["uniqueness_key"],
            "partition": partition,
            "offset": offset,
        }
        print(json.dumps(line, ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
