"""Run updates for hosts that watch a run: ``resources/subscribe`` (protocol 2025-11-25) and
``subscriptions/listen`` (2026-07-28) on kforge://runs/{run_id} and its /best and /report.

Runs change in this server (loop tools), in a CLI run-loop or another server on the same home, so
the store is polled while someone listens: a run whose status, attempt count or update time moved
gets ``notifications/resources/updated`` for each of its URIs, and kforge://runs with it."""

from __future__ import annotations

import logging
import re
from collections import defaultdict

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
from mcp_types import EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.store import RunStore
from kforge_mcp.tools.common import App, invalid_params

POLL_S = 1.0
RUNS = "kforge://runs"
RUN_URI = re.compile(r"^kforge://runs/(?P<run_id>[^/]+)(?:/(?:best|report))?$")
logger = logging.getLogger("kforge_mcp.server")


class ListenerCount(InMemorySubscriptionBus):
    """The SDK's bus, counting open ``subscriptions/listen`` streams so the store is read only
    while one is open."""

    def __init__(self):
        super().__init__()
        self.listeners = 0

    def subscribe(self, listener):
        unsubscribe = super().subscribe(listener)
        self.listeners += 1
        done = False

        def once():
            nonlocal done
            if not done:
                done = True
                self.listeners -= 1
            unsubscribe()

        return once


class RunWatch:
    def __init__(self, app: App, bus: ListenerCount):
        self.app, self.bus = app, bus
        # URI -> {connection: its latest session}: 2025-11-25 subscribers (a session object is per request)
        self.sessions: dict[str, dict] = defaultdict(dict)
        self.seen: dict[str, tuple] = {}

    def store(self) -> RunStore:
        return RunStore.for_home(self.app.engine.home)

    def states(self) -> dict[str, tuple]:
        """(status, attempts, updated) of the runs anyone could be watching."""
        ids = {m["run_id"] for uri in self.sessions if (m := RUN_URI.match(uri))}
        runs = self.store().list_runs() if self.bus.listeners or RUNS in self.sessions else []
        states = {r.id: (r.status, r.attempts, r.updated) for r in runs}
        for run_id in ids - states.keys():
            try:
                r = self.store().get_run(run_id)
            except InputError:  # deleted with its home: nothing more will change
                continue
            states[r.id] = (r.status, r.attempts, r.updated)
        return states

    async def poll(self) -> None:
        while True:
            await anyio.sleep(POLL_S)
            if not (self.sessions or self.bus.listeners):
                continue
            try:
                states = await anyio.to_thread.run_sync(self.states)
            except KforgeError as e:  # an unreadable home: the calls that need it say so
                logger.warning("run updates paused: %s", e)
                continue
            changed = [i for i, s in states.items() if i in self.seen and self.seen[i] != s]
            new = [i for i in states if i not in self.seen]
            first = not self.seen
            self.seen.update(states)
            uris = [f"{RUNS}/{i}{tail}" for i in changed for tail in ("", "/best", "/report")]
            if changed or (new and not first):
                uris.append(RUNS)
            for uri in uris:
                await self.bus.publish(ResourceUpdated(uri=uri))
                for key, session in list(self.sessions.get(uri, {}).items()):
                    try:
                        await session.send_resource_updated(uri)
                    except Exception:  # noqa: BLE001  (a client that went away: forget it)
                        self.sessions[uri].pop(key, None)


def register(mcp: MCPServer, app: App) -> None:
    watch = RunWatch(app, app.bus)
    app.background.append(watch.poll)

    def checked(uri: str) -> str:
        m = RUN_URI.match(uri)
        if uri != RUNS and m is None:
            raise invalid_params(
                f"cannot subscribe to {uri}: only kforge://runs and kforge://runs/{{run_id}}[/best|/report]"
            )
        if m is not None:
            try:
                r = watch.store().get_run(m["run_id"])
            except InputError as e:
                raise invalid_params(str(e)) from None
            watch.seen.setdefault(r.id, (r.status, r.attempts, r.updated))  # a change from now on is news
        return uri

    def connection(ctx):
        return getattr(ctx.session, "_connection", ctx.session)  # the SDK keeps it private

    async def subscribe(ctx, params: SubscribeRequestParams) -> EmptyResult:
        watch.sessions[checked(params.uri)][connection(ctx)] = ctx.session
        return EmptyResult()

    async def unsubscribe(ctx, params: UnsubscribeRequestParams) -> EmptyResult:
        watch.sessions.get(params.uri, {}).pop(connection(ctx), None)
        if not watch.sessions.get(params.uri):
            watch.sessions.pop(params.uri, None)
        return EmptyResult()

    mcp._lowlevel_server.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
    mcp._lowlevel_server.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)
