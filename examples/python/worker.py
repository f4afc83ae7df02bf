#!/usr/bin/env python3
"""Run the scheduler's tasks in Python: a remote worker that claims due tasks from nodes over HTTP.

No project code and no dependency beyond the standard library: the worker speaks the documented
worker protocol of a node's admin listener (design.md "Remote workers", the OpenAPI document at
/api/v1/openapi.json):

    POST /api/v1/workers/poll               {"worker", "types", "capacity", "waitMs"}
                                             -> {"claims": [claim, ...]} (a long poll)
    POST /api/v1/claims/{claimId}/heartbeat  -> {"expiresAt", "ttlMs"}, or 409: the claim is gone
    POST /api/v1/claims/{claimId}/complete   {"outcome": "success", "result"?}
                                             {"outcome": "retry", "error", "retryAfterMs"?}
                                             {"outcome": "invalid", "error"}
                                             -> 200 taken by the owner, or 409: refused

A claim carries the task (`orderingId`, `scheduledTime`, `uniquenessKey`, `taskType`, `priority`,
`taskData`), its `attempt`, the partition's fencing `epoch` and when it expires; a group's join
also carries its finished `group` (`id`, `total`, `failedBy`, `members` with each one's `status`,
`result` and `error`), which the handler finds in `task["group"]`. The worker
heartbeats every third of the claim's time to live; a claim that expired (the worker paused, lost
its network) or whose partition moved to another node cannot commit: the node answers 409 and
records nothing, and the task runs again elsewhere. So a handler must be safe to run twice, as
every at-least-once handler is.

As a library (copy this file):

    def resize(task):                     # task: the claim's "task" object
        ...                               # raise Retry("busy", after=30) or Invalid("bad size")
        return {"width": 640}             # an optional small result, recorded with the task

    Worker(["http://127.0.0.1:8080"], {"resize": resize}, capacity=4,
           token=os.environ.get("SCHEDULER_ADMIN_TOKEN")).run()

From a shell, a demonstration worker that appends each task it runs to a JSON-lines file and
sleeps `taskData.sleepMs` (used by the project's tests):

    worker.py --url http://127.0.0.1:8080 --type echo --log ran.jsonl
"""

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("scheduler-worker")


class Retry(Exception):
    """A transient failure: the task is tried again, after `after` seconds if given."""

    def __init__(self, reason, after=None):
        super().__init__(reason)
        self.after = after


class Invalid(Exception):
    """The task can never succeed: not retried, it becomes a dead letter."""


class Refused(Exception):
    """The node refused a claim's heartbeat or completion: the claim is no longer live."""


class Node:
    """One node's admin listener."""

    def __init__(self, url, token=None, timeout=10.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def post(self, path, body, timeout=None):
        data = json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method="POST")
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            answer = e.read().decode(errors="replace")
            if e.code in (404, 409, 410):
                raise Refused("%s %s: %s" % (e.code, path, answer)) from None
            raise


class Worker:
    """Claims tasks of `handlers`' types from `urls` (nodes) and runs up to `capacity` at once."""

    def __init__(self, urls, handlers, capacity=4, token=None, name=None, wait_ms=20000):
        if isinstance(urls, str):
            urls = [urls]
        self.nodes = [Node(url, token) for url in urls]
        self.handlers = dict(handlers)
        self.capacity = capacity
        self.name = name or "py-%s-%s" % (os.uname().nodename, uuid.uuid4().hex[:8])
        self.wait_ms = wait_ms
        self.free = threading.Semaphore(capacity)
        self.running = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=capacity, thread_name_prefix="task")

    def run(self):
        """Polls every node, each in a thread of its own, until `stop` (or SIGTERM/SIGINT)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                signal.signal(sig, lambda *_: self.stop())
            except ValueError:
                pass  # not the main thread: the caller stops us
        pollers = [threading.Thread(target=self._poll, args=(node,), daemon=True)
                   for node in self.nodes]
        for poller in pollers:
            poller.start()
        while not self.stopping.wait(0.5):
            pass
        self.pool.shutdown(wait=True)

    def stop(self):
        self.stopping.set()

    def _poll(self, node):
        backoff = 0.5
        while not self.stopping.is_set():
            with self.lock:
                room = self.capacity - self.running
            if room <= 0:
                time.sleep(0.01)
                continue
            body = {"worker": self.name, "types": sorted(self.handlers),
                    "capacity": room, "waitMs": self.wait_ms}
            try:
                answer = node.post("/api/v1/workers/poll", body,
                                   timeout=self.wait_ms / 1000 + 10)
                backoff = 0.5
            except Exception as e:  # the node is down or restarting: try again
                log.warning("poll of %s failed: %s; again in %.1fs", node.url, e, backoff)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 10)
                continue
            for claim in answer.get("claims", []):
                with self.lock:
                    self.running += 1
                self.pool.submit(self._run, node, claim)

    def _run(self, node, claim):
        claim_id = claim["claimId"]
        task = claim["task"]
        if "group" in claim:  # a group's join: its finished group beside the task
            task = dict(task, group=claim["group"])
        done = threading.Event()
        beating = threading.Thread(target=self._heartbeat, args=(node, claim, done), daemon=True)
        beating.start()
        try:
            try:
                result = self.handlers[task["taskType"]](task)
                outcome = {"outcome": "success"}
                if result is not None:
                    outcome["result"] = result
            except Retry as e:
                outcome = {"outcome": "retry", "error": str(e)}
                if e.after is not None:
                    outcome["retryAfterMs"] = int(e.after * 1000)
            except Invalid as e:
                outcome = {"outcome": "invalid", "error": str(e)}
            except Exception as e:  # any other failure is worth another try
                outcome = {"outcome": "retry", "error": "%s: %s" % (type(e).__name__, e)}
            done.set()
            try:
                node.post("/api/v1/claims/%s/complete" % claim_id, outcome)
            except Refused as e:
                log.warning("completion of %s refused (it runs again elsewhere): %s",
                            claim_id, e)
            except Exception as e:
                log.warning("completion of %s not sent (it runs again after its claim "
                            "expires): %s", claim_id, e)
        finally:
            done.set()
            with self.lock:
                self.running -= 1

    def _heartbeat(self, node, claim, done):
        every = max(claim.get("ttlMs", 30000) / 3000.0, 0.05)
        while not done.wait(every):
            try:
                answer = node.post("/api/v1/claims/%s/heartbeat" % claim["claimId"], {})
                every = max(answer.get("ttlMs", 30000) / 3000.0, 0.05)
            except Refused as e:
                log.warning("claim %s lost: %s", claim["claimId"], e)
                return
            except Exception as e:
                log.warning("heartbeat of %s failed: %s", claim["claimId"], e)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", action="append", required=True,
                        help="a node's admin listener (repeat for each node)")
    parser.add_argument("--type", action="append", required=True, help="a task type to run")
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--name", help="the worker's name (default: host and a random id)")
    parser.add_argument("--wait-ms", type=int, default=20000, help="a poll's longest wait")
    parser.add_argument("--log", help="append each task run to this JSON-lines file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    write = threading.Lock()

    def echo(task):
        started = time.time()
        if args.log:
            with write, open(args.log, "a") as out:
                out.write(json.dumps({"event": "start", "at": started, "task": task}) + "\n")
        time.sleep(task.get("taskData", {}).get("sleepMs", 0) / 1000)
        if args.log:
            with write, open(args.log, "a") as out:
                out.write(json.dumps({"event": "end", "at": time.time(), "task": task}) + "\n")
        outcome = task.get("taskData", {}).get("outcome")
        if outcome == "retry":
            raise Retry("asked to retry", after=0.1)
        if outcome == "invalid":
            raise Invalid("asked to fail")
        return {"echo": task.get("taskData", {}), "worker": args.name}

    token = os.environ.get("SCHEDULER_ADMIN_TOKEN")
    Worker(args.url, {t: echo for t in args.type}, args.capacity, token, args.name,
           args.wait_ms).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
