#!/usr/bin/env python3
"""Schedule tasks from Python: write wire-format v1 records to the scheduler's Kafka topic.

No project code is needed, only confluent-kafka (see requirements.txt; `dev/python` installs it
into target/python-venv). The format is the table "Wire format v1" in design.md:

    {"version":1,"orderingId":"customer-7","scheduledTime":"2026-11-22T06:00:00.000Z",
     "uniquenessKey":"reminder-1","taskData":{...}}

plus, only when set, "taskType", "priority", "onConflict" and "maxWaitMs". Each record is keyed
by its orderingId and goes to partition (murmur2(orderingId) & 0x7fffffff) % partitions, which
is what librdkafka's `murmur2_random` partitioner computes for a keyed record (the Java
producer's default; librdkafka's own default, `consistent_random`, is CRC32 and would put tasks
where the nodes park them as misplaced). A task counts as scheduled only once the broker
acknowledged it (acks=all, idempotent producer).

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

Exit codes, as the `scheduler` command's: 0 every task acknowledged, 1 Kafka failed or did not
acknowledge in time, 2 bad usage or a task that breaks the format's limits (nothing is sent then).
"""

import argparse
import json
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
TASK_TYPE = re.compile(r"[A-Za-z0-9\-_.:/]+")
CONFLICT_MODES = ("replace", "keepTime", "debounce", "ifAbsent")
DEFAULT_TIMEOUT_S = 30.0


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


def format_time(when):
    """`when` (an aware datetime, or an ISO 8601 / RFC 3339 string with an offset) as the wire
    writes it: UTC, truncated to milliseconds, with `Z`, e.g. 2026-11-22T06:00:00.000Z."""
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when)
        except ValueError as e:
            raise TaskError(f"scheduledTime {when!r} is not an RFC 3339 time: {e}") from None
    if not isinstance(when, datetime):
        raise TaskError(f"scheduledTime must be a datetime or a string, not {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise TaskError(
            f"scheduledTime {when.isoformat()} has no time zone; "
            "use e.g. datetime.now(timezone.utc) or a string ending in Z or +hh:mm"
        )
    t = when.astimezone(timezone.utc)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
        f".{t.microsecond // 1000:03d}Z"
    )


def encode_task(
    ordering_id,
    scheduled_time,
    uniqueness_key,
    task_data,
    task_type=None,
    priority=None,
    on_conflict=None,
    max_wait_ms=None,
):
    """The task's wire-format v1 record value (UTF-8 JSON bytes), after checking the limits.

    Optional fields are written only when they differ from their defaults, as the Rust client
    does: for the same task (taskData's keys in the same order) the record is byte for byte the
    Rust client's."""
    _check_key("orderingId", ordering_id)
    _check_key("uniquenessKey", uniqueness_key)
    task_data = {} if task_data is None else task_data
    if not isinstance(task_data, dict):
        raise TaskError(f"taskData must be a JSON object (a dict), not {type(task_data).__name__}")
    _check_data(task_data, depth=1, path="taskData")
    record = {
        "version": WIRE_VERSION,
        "orderingId": ordering_id,
        "scheduledTime": format_time(scheduled_time),
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
    if priority is not None and priority != 0:
        if not _is_int(priority) or not -(2**31) <= priority < 2**31:
            raise TaskError(f"priority {priority!r} is not a 32-bit integer")
        record["priority"] = priority
    if on_conflict is not None:
        if on_conflict not in CONFLICT_MODES:
            raise TaskError(f"onConflict {on_conflict!r} is not one of {', '.join(CONFLICT_MODES)}")
        record["onConflict"] = on_conflict
        if on_conflict == "debounce":
            if not _is_int(max_wait_ms) or not 0 <= max_wait_ms < 2**64:
                raise TaskError("onConflict debounce needs maxWaitMs, a whole number of ms")
            record["maxWaitMs"] = max_wait_ms
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
    timeout_s=DEFAULT_TIMEOUT_S,
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
    )
    delivery = _send(producer, topic, ordering_id, value)
    _wait(producer, [delivery], timeout_s)
    return delivery.result()


def schedule_tasks(producer, topic, tasks, timeout_s=DEFAULT_TIMEOUT_S):
    """Schedules many tasks (dicts of schedule_task's keyword arguments) and returns their
    (partition, offset) in order once all are acknowledged: one wait for the whole batch.
    Every task is checked before the first is sent."""
    values = [(task["ordering_id"], encode_task(**task)) for task in tasks]
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


def _check_key(field, value):
    if not isinstance(value, str) or not value:
        raise TaskError(f"{field} must be a non-empty string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise TaskError(f"{field} is not valid Unicode: {e}") from None
    if size > MAX_KEY_BYTES:
        raise TaskError(f"{field} is {size} bytes, over the {MAX_KEY_BYTES}-byte limit")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


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
}


def _task_from_line(number, line):
    """A JSON line of wire-format fields as schedule_task's keyword arguments."""
    try:
        fields = json.loads(line)
    except json.JSONDecodeError as e:
        raise TaskError(f"line {number}: not JSON: {e}") from None
    if not isinstance(fields, dict):
        raise TaskError(f"line {number}: not a JSON object")
    if fields.pop("version", WIRE_VERSION) != WIRE_VERSION:
        raise TaskError(f"line {number}: version must be {WIRE_VERSION}")
    unknown = sorted(set(fields) - set(WIRE_FIELDS))
    if unknown:
        raise TaskError(f"line {number}: fields this producer does not write: {', '.join(unknown)}")
    for required in ("orderingId", "scheduledTime", "uniquenessKey"):
        if required not in fields:
            raise TaskError(f"line {number}: {required} is missing")
    task = {WIRE_FIELDS[name]: value for name, value in fields.items()}
    task.setdefault("task_data", {})
    return task


def _duration(text):
    match = re.fullmatch(r"(\d+)(ms|s|m|h)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 500ms, 10s, 5m, 2h")
    unit = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours"}[match[2]]
    return timedelta(**{unit: int(match[1])})


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Schedule tasks on the scheduler's Kafka topic (wire format v1).",
        epilog="Prints one JSON line per acknowledged task: its key, partition and offset.",
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:19092", help="Kafka bootstrap servers")
    parser.add_argument("--topic", default="scheduled-tasks", help="the scheduler's topic")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="seconds to wait for acknowledgement",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stdin", action="store_true", help="read tasks as JSON lines on stdin")
    source.add_argument("--ordering-id", help="one task: its orderingId (the Kafka key)")
    one = parser.add_argument_group("one task (with --ordering-id)")
    one.add_argument("--unique-key", help="uniquenessKey (default: py-<current ms>)")
    when = one.add_mutually_exclusive_group()
    when.add_argument("--at", help="scheduledTime, RFC 3339 with an offset (default: now)")
    when.add_argument(
        "--in", dest="delay", type=_duration, help="scheduledTime from now: 500ms, 10s, 5m, 2h"
    )
    one.add_argument("--data", default="{}", help="taskData, a JSON object")
    one.add_argument("--type", dest="task_type", help="taskType (picks the handler)")
    one.add_argument("--priority", type=int, help="priority among due tasks (higher first)")
    one.add_argument("--on-conflict", choices=CONFLICT_MODES, help="conflict mode of the identity")
    one.add_argument("--max-wait-ms", type=int, help="with --on-conflict debounce")
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
            "max_wait_ms": args.max_wait_ms,
        }
    ]


def main(argv=None):
    args = _parse_args(argv)
    try:
        tasks = _tasks_from_args(args)
        producer = make_producer(args.bootstrap, args.timeout)
        placed = schedule_tasks(producer, args.topic, tasks, args.timeout)
    except TaskError as e:
        print(f"produce.py: {e} (nothing sent)", file=sys.stderr)
        return 2
    except KafkaException as e:
        print(f"produce.py: Kafka at {args.bootstrap} failed: {e}", file=sys.stderr)
        return 1
    for task, (partition, offset) in zip(tasks, placed):
        line = {
            "orderingId": task["ordering_id"],
            "scheduledTime": format_time(task["scheduled_time"]),
            "uniquenessKey": task["uniqueness_key"],
            "partition": partition,
            "offset": offset,
        }
        print(json.dumps(line, ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
