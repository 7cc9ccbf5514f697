#!/usr/bin/env python3
"""A Python worker of a mixed fleet: production-agent-systems 1.0.1, unchanged.

Run by tests/it/mixed_fleet.rs beside a Rust worker on the same SQLite ledger.
It executes one operation per invoice of the arguments file, in the order
given, through a fake payment provider that lives in files shared with the
Rust worker (mixed_fleet.rs implements the same provider), and writes one JSON
line per caller: its answer, or the error it raised.

Arguments (one JSON object as argv[1]):
  ledger     the SQLite file
  provider   the provider's directory (effects.log, lock)
  arguments  a JSON file: a list of argument objects, each with invoice_id
  order      the indices of the arguments to execute, in order
  faults     "mixed": the first dispatch (in this process) of an index with
             index % 6 == 1 fails before the provider commits, of
             index % 6 == 3 loses its acknowledgement after the commit;
             "lost_ack": every first dispatch loses its acknowledgement;
             "none"
  probe      "provider" (authoritative) or "pending" (always pending)
  out        where to write the answers, one JSON line per caller
  listing    (optional) where to write, after the run, every operation the
             package lists in the ledger: its id, status and event types
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from production_agent_systems.effects import (
    EffectContract,
    EffectExecutor,
    OutcomeProbeResult,
    ProbeStatus,
    SQLiteEffectLedger,
)
from production_agent_systems.effect_models import OperationConflictError


PROVIDER_LATENCY = 0.003


class FileProvider:
    """Commits are lines `invoice_id<TAB>payment_id` in effects.log, under a lock."""

    def __init__(self, directory: Path) -> None:
        self.log = directory / "effects.log"
        self.lock = directory / "lock"

    @contextmanager
    def _locked(self):
        with open(self.lock, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _find(self, invoice_id: str) -> str | None:
        if not self.log.exists():
            return None
        for line in self.log.read_text(encoding="utf-8").splitlines():
            invoice, payment = line.split("\t")
            if invoice == invoice_id:
                return payment
        return None

    def capture(self, invoice_id: str) -> dict:
        time.sleep(PROVIDER_LATENCY)  # as in mixed_fleet.rs: the fleets overlap
        with self._locked():
            payment = f"pay-py-{os.getpid()}-{invoice_id}"
            with open(self.log, "a", encoding="utf-8") as log:
                log.write(f"{invoice_id}\t{payment}\n")
        return {"payment_id": payment, "invoice_id": invoice_id, "status": "captured"}

    def probe(self, invoice_id: str) -> OutcomeProbeResult:
        with self._locked():
            payment = self._find(invoice_id)
        if payment is None:
            return OutcomeProbeResult(
                status=ProbeStatus.NOT_COMMITTED,
                evidence={"source": "file_provider", "terminal": True},
            )
        return OutcomeProbeResult(
            status=ProbeStatus.COMMITTED,
            output={"payment_id": payment, "invoice_id": invoice_id, "status": "captured"},
            provider_operation_id=payment,
            evidence={"source": "file_provider"},
        )


def main() -> int:
    config = json.loads(sys.argv[1])
    provider = FileProvider(Path(config["provider"]))
    arguments = json.loads(Path(config["arguments"]).read_text(encoding="utf-8"))
    index_of = {args["invoice_id"]: i for i, args in enumerate(arguments)}
    faulted: set[str] = set()

    def handler(args, *, idempotency_key):
        invoice_id = args["invoice_id"]
        index = index_of[invoice_id]
        first = invoice_id not in faulted
        faulted.add(invoice_id)
        mixed = config["faults"] == "mixed" and first
        if mixed and index % 6 == 1:
            raise TimeoutError("injected failure before the provider commits")
        result = provider.capture(invoice_id)
        lost_ack = config["faults"] == "lost_ack" and first
        if lost_ack or (mixed and index % 6 == 3):
            raise TimeoutError("injected lost acknowledgement after the commit")
        return result

    def probe(args, *, idempotency_key):
        if config["probe"] == "pending":
            return OutcomeProbeResult(status=ProbeStatus.PENDING)
        return provider.probe(args["invoice_id"])

    contract = EffectContract(
        name="capture_payment",
        operation_id=lambda args: f"invoice:{args['invoice_id']}:capture",
        provider_idempotency_key=lambda args: f"capture:{args['invoice_id']}",
        outcome_probe=probe,
    )
    ledger = SQLiteEffectLedger(config["ledger"])
    executor = EffectExecutor(ledger=ledger)
    with open(config["out"], "w", encoding="utf-8") as out:
        for index in config["order"]:
            args = arguments[index]
            answer = {"invoice_id": args["invoice_id"], "side": "python"}
            try:
                result = executor.execute(contract=contract, arguments=args, handler=handler)
            except OperationConflictError as exc:
                answer.update(conflict=True, error=str(exc))
            except Exception as exc:  # every caller's answer is reported, errors too
                answer.update(error=f"{type(exc).__name__}: {exc}")
            else:
                answer.update(
                    status=result.status.value,
                    in_progress=result.in_progress,
                    duplicate_suppressed=result.duplicate_suppressed,
                    output=result.output,
                )
            out.write(json.dumps(answer) + "\n")
    if config.get("listing"):
        listing = [
            {
                "operation_id": record.operation_id,
                "status": record.status.value,
                "events": [event["event_type"] for event in ledger.events(record.operation_id)],
            }
            for record in ledger.list_operations(limit=1000)
        ]
        Path(config["listing"]).write_text(json.dumps(listing), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
