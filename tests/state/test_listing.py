"""``held_objects`` (``GET debug/objects``) lets the event loop run while it copies a big cluster,
and a store changed meanwhile neither breaks it nor changes what it had already listed."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

from extender.backends.embedded import EmbeddedBackend
from extender.views.listing import held_objects

DEMO = Path(__file__).parents[2] / "deploy" / "examples" / "demo-cluster.yaml"


class StoreOnly:
    """The embedded backend's store without its ``list_objects``: the store path of the listing."""

    def __init__(self, backend: EmbeddedBackend) -> None:
        self.store = backend.store


async def test_the_listing_pauses_between_objects_and_survives_a_change_meanwhile() -> None:
    backend = EmbeddedBackend.from_paths(DEMO)
    source = StoreOnly(backend)
    whole = await held_objects(source, slice_seconds=3600.0)  # never pauses
    turns = 0
    stop = False
    claims = backend.store.raw_claims

    async def meanwhile() -> None:
        nonlocal turns
        while not stop:
            turns += 1
            if turns == 3:  # a watch event in the middle: a new claim arrives
                extra = copy.deepcopy(next(iter(claims.values())))
                extra["metadata"]["name"] = "arrived-meanwhile"
                extra["metadata"]["uid"] = "uid-arrived-meanwhile"
                extra.pop("status", None)
                backend.store.upsert(extra)
            await asyncio.sleep(0)

    task = asyncio.create_task(meanwhile())
    await asyncio.sleep(0)
    paced = await held_objects(source, slice_seconds=0.0)  # a pause after every object
    stop = True
    await task
    copied = len(whole["items"]) - len(backend.store.nodes)
    assert turns >= copied  # the loop ran at least once per object copied
    names = [(i["kind"], i["metadata"]["name"]) for i in paced["items"]]
    assert len(names) == len(set(names))
    before = [(i["kind"], i["metadata"]["name"]) for i in whole["items"]]
    assert set(before) <= set(names) <= set(before) | {("ResourceClaim", "arrived-meanwhile")}
