"""One cell of a fleet run (a model on a board) on its opened device: the plan it runs
(a re-qualification's, else the preset, profile and flags), each attempt under the board's
lease with retries and backoff, and the report judged (``fleet_judging.py``). The fleet
runner (``fleet.py``) works the devices and hands each its cells."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from edgequal.contract.plan import Plan, make_plan

from ..devices.reproduce import write_sidecar
from ..errors import DeviceBusy, HostError, TransportError, VerificationFailed
from ..transport import Transport
from .fleet_judging import CellJudge
from .inventory import FleetModel, LabDevice
from .leases import LeaseKeeper, first_waiting_text, waiting_text
from .results import RETRY_STATUSES, RunRecord, run_file_stem

if TYPE_CHECKING:
    from ..devices.qualify import Qualification

log = logging.getLogger(__name__)


def fleet_plan(preset: str, profile_name: str | None, overrides: dict | None = None) -> Plan:
    """The plan of one run: the preset, then the device profile's board fields (never a
    phase: see ``make_plan``), then overrides (the command's flags)."""
    board = None
    if profile_name:
        from ..devices.profiles import load_profile

        board = load_profile(profile_name).plan_fields(preset)
    return make_plan(preset, board, **(overrides or {}))


class CellRunner:
    """Runs the cells of one fleet run: ``runner`` the fleet runner whose options, trust,
    output folder, policy, pairs and callbacks it uses (``set_state`` is its record
    update, ``on_event`` its event sink); ``record_report`` the history's recorder."""

    def __init__(self, runner, record_report: Callable | None):
        self.options = runner.options
        self.known = runner.known
        self.out = runner.out
        self.policy = runner.policy
        self.pairs = runner.pairs
        self.lab_name = runner.lab.name
        self.runner = runner  # its on_event and sleep are read when called: a caller may swap them
        self.set_state = runner._set
        self.judge = CellJudge(
            runner.options, runner.known, runner.policy, runner.out, runner.pairs,
            record_report, runner.cell_prefix,
        )  # fmt: skip

    def run_one(
        self,
        transport: Transport,
        device: LabDevice,
        profile: str | None,
        model: FleetModel,
        record: RunRecord,
    ) -> None:
        opts = self.options
        started = time.monotonic()
        fixed = (self.pairs or {}).get((model.name, device.name))
        if fixed is not None and fixed.plan is not None:
            plan = Plan.from_json(fixed.plan)
        else:
            # --gate's policy is committed in the plan the device signs (host/judge/claims.py).
            committed = {"policy_sha256": self.policy.sha256} if self.policy is not None else {}
            plan = fleet_plan(
                model.plan or opts.plan, profile, {**opts.plan_overrides, **committed}
            )
        final_path = self.out / "reports" / f"{run_file_stem(model.name, device.name)}.json"
        attempts = 1 + max(0, opts.retries)
        for attempt in range(1, attempts + 1):
            self.set_state(record, attempts=attempt, state="running", error=None)
            try:
                outcome, tmp = self.attempt_leased(transport, device, model, record, plan)
                predicate = outcome.report.predicate
            except DeviceBusy as e:
                # Waiting was the caller's choice (--wait); a busy device is not retried.
                self.set_state(record, state="error", error=str(e))
                break
            except (TransportError, VerificationFailed) as e:
                transport_failed = isinstance(e, TransportError)
                if transport_failed and attempt < attempts:
                    self.set_state(record, state="retrying", error=str(e))
                    self.runner.sleep(opts.backoff_s * 2 ** (attempt - 1))
                    continue
                self.set_state(record, state="error", error=str(e))
                break
            except HostError as e:  # a bad model or golden set: no retry makes it good
                self.set_state(record, state="error", error=str(e))
                break
            tmp.replace(final_path)
            write_sidecar(
                final_path, outcome.envelope, device.name, outcome.artifacts, opts.command
            )
            gate_retry = self.finish_record(
                record,
                final_path,
                predicate,
                decide_more=functools.partial(
                    self._repeat_until_decided, transport, device, model, record, plan
                ),
            )
            retry = record.status in RETRY_STATUSES or gate_retry
            if retry and attempt < attempts:
                self.set_state(record, state="retrying")
                self.runner.sleep(opts.backoff_s * 2 ** (attempt - 1))
                continue
            break
        self.set_state(record, duration_s=round(time.monotonic() - started, 3))

    def attempt_leased(
        self,
        transport: Transport,
        device: LabDevice,
        model: FleetModel,
        record: RunRecord,
        plan: Plan,
    ) -> tuple[Qualification, Path]:
        """One qualification under the device's lease (inside its labgrid place, held by
        the fleet runner, when the lab is on labgrid); returns it and its report file
        (a temporary name)."""
        from ..devices.qualify import qualify

        keeper = None
        leased = device.transport_kind == "grpc"
        if leased:
            held = first_waiting_text(transport, device.name)
            if held is not None:  # only a lease someone holds is waited for
                self.set_state(record, state="waiting", waiting_for=held)

            def waiting(w: dict) -> None:
                self.set_state(record, state="waiting", waiting_for=waiting_text(device.name, w))
                self.runner.on_event(record, {"type": "wait", **w})

            transport.acquire_lease(
                f"fleet run {self.lab_name}: {model.name}",
                self.options.lease_ttl_s,
                wait_s=self.options.wait_s,
                on_wait=waiting,
            )
            keeper = LeaseKeeper(transport, self.options.lease_ttl_s)
            self.set_state(record, state="running", waiting_for=None)
        tmp = self.out / "reports" / f".{run_file_stem(model.name, device.name)}.json.part"
        try:
            outcome = qualify(
                transport,
                model.path,
                model.golden,
                plan,
                known=self.known,
                device_name=device.name,
                on_event=lambda e: self._event(record, e),
                out=tmp,
                model_signature=model.signature,
                sidecar=False,  # written once the report has its own name
            )
        finally:
            if keeper is not None:
                keeper.stop()
            if leased:
                try:
                    transport.release_lease()
                except HostError as e:  # gone with the device; the lease expires by itself
                    log.info("releasing the lease of %s failed: %s", device.name, e)
        return outcome, tmp

    def _event(self, record: RunRecord, event: dict) -> None:
        if event.get("type") == "run":
            self.set_state(record, run_id=event.get("run_id"))
        self.runner.on_event(record, event)

    def _repeat_until_decided(
        self,
        transport: Transport,
        device: LabDevice,
        model: FleetModel,
        record: RunRecord,
        plan: Plan,
        gate,
        baseline: Path,
        predicate: dict,
        prior=None,
    ):
        """The gate of a run whose verdict against ``baseline`` is UNKNOWN or a regression,
        decided by pairs run on this board (:meth:`CellJudge.repeat_until_decided`)."""

        def attempt(side: FleetModel):
            return self.attempt_leased(transport, device, side, record, plan)

        def on_pair(result) -> None:
            self.set_state(record, repeat_pairs=result.pairs)
            self.runner.on_event(record, {"type": "repeat", **result.to_json()})

        return self.judge.repeat_until_decided(
            gate, baseline, predicate, model, device.name, attempt, on_pair, prior
        )

    def finish_record(
        self,
        record: RunRecord,
        path: Path,
        predicate: dict,
        resumed: bool = False,
        decide_more: Callable | None = None,
    ) -> bool:
        """The report judged (:meth:`CellJudge.judge`: gate, page, history) and the record's
        final state set; returns whether the gate asks for the run again (interference)."""
        fields, retry = self.judge.judge(
            record, path, predicate, resumed=resumed, decide_more=decide_more
        )
        self.set_state(record, **fields)
        return retry
