"""NodePrepareResources / NodeUnprepareResources over the driver's unix socket, as the kubelet
calls them: bookings in the ledger, one CDI spec per claim, idempotence, every claim answered."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from accelkit.bridge.dra.api import dra_v1_pb2 as pb
from accelkit.events import WorkloadPhase
from accelkit.types import DeviceName

from .conftest import AGENT, DRIVER, POOL, claim, result, serving


def ref(made: Any) -> pb.Claim:
    meta = made.metadata
    return pb.Claim(namespace=meta.namespace, name=meta.name, uid=meta.uid)


def booked(served: Any) -> dict[str, Any]:
    """The ledger's records, by workload id: allocation, handle runtime and owner."""
    records = served.node.bookkeeper.ledger.scan().records
    return {w: r for (_a, w), r in records.items()}


async def handed_over(served: Any) -> None:
    """Wait until the claims answered are handed over (the write follows the answer)."""
    while served.preparer.hand_overs.pending:
        await asyncio.sleep(0.01)


def test_a_claim_is_booked_prepared_and_answered_with_its_cdi_device(
    dra_node: Path, short_root: Path
) -> None:
    async def main() -> tuple[Any, Any, dict[str, Any], dict[str, Any], Any, dict[str, Any]]:
        async with serving(dra_node, short_root) as served:
            one = served.claims.add(claim("one", "uid-1", [result("cuda1")]))
            first = await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[ref(one)])
            )
            spec = json.loads(served.specs.path("uid-1").read_text())
            await handed_over(served)
            after_first = booked(served)
            again = await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[ref(one)])
            )
            done = await served.stub.NodeUnprepareResources(
                pb.NodeUnprepareResourcesRequest(claims=[ref(one)])
            )
            return first, again, spec, after_first, done, booked(served)

    first, again, spec, records, done, after = asyncio.run(main())
    answer = first.claims["uid-1"]
    assert answer.error == ""
    [device] = answer.devices
    assert (list(device.request_names), device.pool_name, device.device_name) == (
        ["gpu"],
        POOL,
        "cuda1",
    )
    assert list(device.cdi_device_ids) == [f"{DRIVER}/claim=uid-1"]
    assert again == first  # prepared already: the same answer, nothing booked twice
    assert spec["kind"] == f"{DRIVER}/claim"
    [entry] = spec["devices"]
    assert entry["name"] == "uid-1"
    assert set(entry["containerEdits"]["env"]) == {
        "MOCK_CUDA_DEVICES=cuda1",
        "ACCELKIT_CLAIM=default/one",
    }
    [(workload, record)] = records.items()
    assert workload == "k8s-claim:default/one:uid-1"
    assert record.agent_id == AGENT
    assert record.allocation == {DeviceName("cuda"): {"cuda.device": {"cuda1": 1}}}
    assert record.handle.runtime == "k8s-claims"
    assert record.handle.details["uid"] == "uid-1"
    assert record.owner is None  # handed over: the claim's pods outlive the driver
    assert done.claims["uid-1"].error == ""
    assert after == {}


def test_unpreparing_twice_or_a_claim_never_prepared_is_done(
    dra_node: Path, short_root: Path
) -> None:
    async def main() -> list[Any]:
        async with serving(dra_node, short_root) as served:
            one = served.claims.add(claim("one", "uid-1", [result("cuda0")]))
            await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[ref(one)])
            )
            request = pb.NodeUnprepareResourcesRequest(
                claims=[ref(one), pb.Claim(namespace="default", name="never", uid="uid-x")]
            )
            answers = [await served.stub.NodeUnprepareResources(request) for _ in range(2)]
            assert not served.specs.exists("uid-1")
            return answers

    for answer in asyncio.run(main()):
        assert {uid: a.error for uid, a in answer.claims.items()} == {"uid-1": "", "uid-x": ""}


def test_every_claim_is_answered_and_only_the_good_ones_are_booked(
    dra_node: Path, short_root: Path
) -> None:
    async def main() -> tuple[Any, dict[str, Any], list[str]]:
        async with serving(dra_node, short_root) as served:
            made = [
                served.claims.add(claim("good", "u-good", [result("cuda0")])),
                served.claims.add(claim("lacking", "u-lack", [result("cuda9")])),
                served.claims.add(claim("elsewhere", "u-pool", [result("cuda1", pool="node-b")])),
                served.claims.add(
                    claim("other", "u-other", [result("gpu-0", driver="gpu.example.com")])
                ),
                served.claims.add(claim("unallocated", "u-none", None)),
            ]
            refs = [*map(ref, made), pb.Claim(namespace="default", name="gone", uid="u-gone")]
            answer = await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=refs)
            )
            return answer, booked(served), served.specs.uids()

    answer, records, specs = asyncio.run(main())
    errors = {uid: a.error for uid, a in answer.claims.items()}
    assert errors["u-good"] == ""
    assert errors["u-lack"] == (
        "claim default/lacking names device 'cuda9' of pool 'node-a', which this node (pool "
        "'node-a') does not have (it has: cuda0, cuda1, vgpu0)"
    )
    assert "names device 'cuda1' of pool 'node-b'" in errors["u-pool"]
    assert errors["u-other"] == (
        "claim default/other has no device of driver 'accelkit.io' (its drivers: gpu.example.com)"
    )
    assert errors["u-none"] == "claim default/unallocated is not allocated"
    assert errors["u-gone"] == "claim default/gone does not exist"
    assert list(records) == ["k8s-claim:default/good:u-good"]
    assert specs == ["u-good"]


def test_quarter_shares_add_up_to_one_gpu_and_a_fifth_is_refused(
    dra_node: Path, short_root: Path
) -> None:
    async def main() -> tuple[Any, dict[str, Any]]:
        async with serving(dra_node, short_root) as served:
            made = [
                served.claims.add(
                    claim(f"q{i}", f"u-q{i}", [result("vgpu0", shares="250m", share_id=f"s{i}")])
                )
                for i in range(5)
            ]
            answers = {}
            for one in made:  # one at a time, as five pods would come
                reply = await served.stub.NodePrepareResources(
                    pb.NodePrepareResourcesRequest(claims=[ref(one)])
                )
                answers.update(reply.claims)
            return answers, booked(served)

    answers, records = asyncio.run(main())
    assert [answers[f"u-q{i}"].error for i in range(4)] == [""] * 4
    assert [answers[f"u-q{i}"].devices[0].share_id for i in range(4)] == ["s0", "s1", "s2", "s3"]
    assert answers["u-q4"].error.startswith("claim default/q4: cannot book its devices:")
    assert sorted(records) == [f"k8s-claim:default/q{i}:u-q{i}" for i in range(4)]
    for record in records.values():
        assert record.allocation == {DeviceName("vgpu"): {"vgpu.shares": {"vgpu0": 0.25}}}


def test_a_share_off_the_quantum_or_a_claim_made_anew_is_refused(
    dra_node: Path, short_root: Path
) -> None:
    async def main() -> tuple[Any, dict[str, Any]]:
        async with serving(dra_node, short_root) as served:
            odd = served.claims.add(claim("odd", "u-odd", [result("vgpu0", shares="260m")]))
            served.claims.add(claim("anew", "u-new", [result("cuda0")]))
            stale = pb.Claim(namespace="default", name="anew", uid="u-old")
            answer = await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[ref(odd), stale])
            )
            return answer, booked(served)

    answer, records = asyncio.run(main())
    assert answer.claims["u-odd"].error == (
        "device 'vgpu0': consumed capacity 260m is not a multiple of 0.05 within 1"
    )
    assert answer.claims["u-old"].error == (
        "claim default/anew has uid u-new, not u-old (made anew)"
    )
    assert records == {}


def test_a_cdi_directory_that_cannot_be_written_books_nothing(
    dra_node: Path, short_root: Path
) -> None:
    (short_root / "cdi").write_text("a file where the directory should be")

    async def main() -> tuple[Any, dict[str, Any]]:
        async with serving(dra_node, short_root) as served:
            one = served.claims.add(claim("one", "uid-1", [result("cuda0")]))
            answer = await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[ref(one)])
            )
            return answer, booked(served)

    answer, records = asyncio.run(main())
    assert answer.claims["uid-1"].error.startswith(
        f"claim default/one: cannot write its CDI spec in {short_root / 'cdi'}:"
    )
    assert records == {}


def test_a_device_another_workload_holds_is_refused_naming_it(
    dra_node: Path, short_root: Path
) -> None:
    from decimal import Decimal

    from accelkit.types import SlotName, Workload

    async def main() -> tuple[Any, dict[str, Any]]:
        async with serving(dra_node, short_root) as served:
            await served.node.bookkeeper.book_devices(
                AGENT,
                Workload.process_tree("pid:4242"),
                {DeviceName("cuda"): {SlotName("cuda.device"): {"cuda0": Decimal(1)}}},
            )
            one = served.claims.add(claim("one", "uid-1", [result("cuda0")]))
            answer = await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[ref(one)])
            )
            return answer, booked(served)

    answer, records = asyncio.run(main())
    error = answer.claims["uid-1"].error
    assert error.startswith("claim default/one: cannot book its devices:")
    assert error.endswith("(held by pid:4242 of agent agent-1)")
    assert list(records) == ["pid:4242"]


def test_specs_of_claims_no_longer_booked_are_removed_at_start(
    dra_node: Path, short_root: Path
) -> None:
    from types import SimpleNamespace

    from accelkit.bridge.dra.driver import DraDriver, DraSettings
    from accelkit.types import WorkloadConfig

    async def main() -> tuple[list[str], list[str]]:
        async with serving(dra_node, short_root) as served:
            one = served.claims.add(claim("kept", "u-kept", [result("cuda0")]))
            await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[ref(one)])
            )
            served.specs.write("u-stale", "default/stale", WorkloadConfig())
            settings = DraSettings(
                node_name=POOL,
                kubeconfig="unused",
                cdi_dir=short_root / "cdi",
            )
            api = SimpleNamespace(configuration=SimpleNamespace(host="https://unused"))
            driver = DraDriver(served.node, AGENT, settings, api=api)
            return driver.remove_stale_specs(), served.specs.uids()

    removed, left = asyncio.run(main())
    assert removed == ["u-stale"]
    assert left == ["u-kept"]


def test_a_hook_that_cannot_be_made_after_the_intent_is_booked_leaves_nothing_held(
    dra_node: Path, short_root: Path, monkeypatch: Any
) -> None:
    """The booking carries pre_create's intent; a plugin whose hook then fails to be made
    refuses the claim with the devices free and no record left (none given up as unfinished)."""

    async def main() -> tuple[Any, dict[str, Any], Any, Any]:
        async with serving(dra_node, short_root) as served:
            context = served.node.agents[AGENT].contexts[DeviceName("cuda")]
            made = type(context).create_lifecycle_hook
            written: list[tuple[str, Any]] = []
            synced: list[bool] = []
            ledger = served.node.bookkeeper.ledger
            write, transaction = ledger.write, ledger.transaction

            def recorded(record: Any, **kwargs: Any) -> None:
                written.append((record.workload.id.split(":")[-1], dict(record.started)))
                write(record, **kwargs)

            def begun(*, durable: bool = True) -> Any:
                if not ledger.in_transaction:
                    synced.append(durable)
                return transaction(durable=durable)

            def broken(self: Any, workload: Any, device_alloc: Any) -> Any:
                raise AttributeError("no attribute 'uuid'")

            monkeypatch.setattr(ledger, "write", recorded)
            monkeypatch.setattr(ledger, "transaction", begun)
            monkeypatch.setattr(type(context), "create_lifecycle_hook", broken)
            one = served.claims.add(claim("one", "uid-1", [result("cuda0")]))
            refused = await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[ref(one)])
            )
            after_refusal = booked(served)
            monkeypatch.setattr(type(context), "create_lifecycle_hook", made)
            synced.clear()
            two = served.claims.add(claim("two", "uid-2", [result("cuda0")]))
            taken = await served.stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=[ref(two)])
            )
            return refused, after_refusal, taken, (written, synced)

    refused, after_refusal, taken, (written, synced) = asyncio.run(main())
    assert refused.claims["uid-1"].error == (
        "claim default/one: pre_create refused it: plugin 'cuda' create_lifecycle_hook: "
        "AttributeError: no attribute 'uuid'"
    )
    assert after_refusal == {}
    assert taken.claims["uid-2"].error == ""  # the device was free again
    assert not (short_root / "cdi" / f"{DRIVER}-claim_uid-1.json").exists()
    # the first write of each claim's record holds pre_create's intent, and the whole
    # prepare of the second is two ledger transactions (booking, hand-over), one synced
    intent = {"cuda": (WorkloadPhase.PRE_CREATE,)}
    assert next(w for w in written if w[0] == "uid-1")[1] == intent
    assert next(w for w in written if w[0] == "uid-2")[1] == intent
    assert synced == [True, False]
