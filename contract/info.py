"""What the agent says about itself (``Info``), in one typed form for every transport.

gRPC ``Info`` sends :meth:`AgentInfo.as_pb2`; ``edgequal-agent info --json`` (what
the SSH transport reads) prints :meth:`AgentInfo.to_json`. Both come from the
same :class:`AgentInfo`, so a host sees the same fields, limits and lease
whichever transport carried them, and converts back with ``from_pb2`` or
``from_json``.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from .lease import Lease
from .runtimes import RuntimeStatus

PROTOCOL = "edgequal.v1"
CHUNK_BYTES = 1024 * 1024
"""Push chunk size the agent suggests (Info.limits.chunk_bytes)."""
MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024 + 64 * 1024
"""Largest message the agent accepts: a 4 MiB chunk plus its envelope; clients stream, not inflate."""
MAX_SEND_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest message the agent sends; a stored report is kept under it (runs.MAX_REPORT_BYTES)."""


@dataclass
class Limits:
    """Limits the agent enforces, so a host can size its uploads."""

    max_artifact_bytes: int
    chunk_bytes: int = CHUNK_BYTES
    max_receive_message_bytes: int = MAX_RECEIVE_MESSAGE_BYTES
    quota_bytes: int = 0
    """0: only free disk space limits the store."""

    @classmethod
    def of_store(cls, store) -> Limits:
        """The limits of an :class:`~edgequal.agent.service.store.ArtifactStore`."""
        return cls(max_artifact_bytes=store.max_artifact_bytes, quota_bytes=store.quota_bytes or 0)


@dataclass
class AgentInfo:
    """The agent's version, protocol, device fingerprint, runtimes, key, lease and limits."""

    agent_version: str
    fingerprint: dict
    runtimes: list[RuntimeStatus]
    public_key_raw: bytes
    key_fingerprint: str
    limits: Limits
    lease: Lease | None = None
    protocol: str = PROTOCOL
    extra: dict = field(default_factory=dict)
    """JSON only (not on the wire): e.g. every probe reading, for ``info --json``."""

    @property
    def busy(self) -> bool:
        """True while a run holds the device."""
        return self.lease is not None

    def to_json(self) -> dict:
        """A JSON object; the key travels as ``public_key_b64``."""
        body = dict(self.extra)
        body.update(
            agent_version=self.agent_version,
            protocol=self.protocol,
            fingerprint=self.fingerprint,
            runtimes=[r.to_json() for r in self.runtimes],
            public_key_b64=base64.b64encode(self.public_key_raw).decode("ascii"),
            key_fingerprint=self.key_fingerprint,
            busy=self.busy,
            lease=self.lease.to_json() if self.lease is not None else None,
            limits=vars(self.limits).copy(),
        )
        return body

    @classmethod
    def from_json(cls, data: dict) -> AgentInfo:
        """The inverse of :meth:`to_json`; unknown keys are kept in ``extra``."""
        known = {
            "agent_version", "protocol", "fingerprint", "runtimes", "public_key_b64",
            "key_fingerprint", "busy", "lease", "limits",
        }  # fmt: skip
        limits = data.get("limits") or {}
        return cls(
            agent_version=str(data.get("agent_version", "")),
            protocol=str(data.get("protocol", "")),
            fingerprint=dict(data.get("fingerprint") or {}),
            runtimes=[RuntimeStatus.from_json(r) for r in data.get("runtimes") or []],
            public_key_raw=base64.b64decode(data.get("public_key_b64") or ""),
            key_fingerprint=str(data.get("key_fingerprint", "")),
            limits=Limits(**{k: int(v) for k, v in limits.items() if k in Limits.__annotations__}),
            lease=Lease.from_json(data["lease"]) if data.get("lease") else None,
            extra={k: v for k, v in data.items() if k not in known},
        )

    def as_pb2(self):
        """The protobuf ``InfoResponse``."""
        from edgequal.protos import edgequal_v1_pb2 as pb

        response = pb.InfoResponse(
            agent_version=self.agent_version,
            protocol=self.protocol,
            fingerprint_json=json.dumps(self.fingerprint, sort_keys=True, default=str),
            runtimes=[pb.RuntimeStatus(**r.to_json()) for r in self.runtimes],
            public_key_raw=self.public_key_raw,
            key_fingerprint=self.key_fingerprint,
            limits=pb.Limits(**vars(self.limits)),
            busy=self.busy,
        )
        if self.lease is not None:
            response.lease.CopyFrom(pb.Lease(**self.lease.to_json()))
        return response

    @classmethod
    def from_pb2(cls, r) -> AgentInfo:
        """The inverse of :meth:`as_pb2` (a fingerprint that is not JSON becomes ``{"error": ...}``)."""
        try:
            fingerprint = json.loads(r.fingerprint_json) if r.fingerprint_json else {}
        except json.JSONDecodeError:
            fingerprint = {"error": "agent sent a fingerprint that is not JSON"}
        lease = None
        if r.busy:
            lease = Lease(
                r.lease.run_id,
                r.lease.holder,
                r.lease.started_unix_ms,
                r.lease.expires_unix_ms,
                r.lease.purpose,
                r.lease.expected_end_unix_ms,
            )
        return cls(
            agent_version=r.agent_version,
            protocol=r.protocol,
            fingerprint=fingerprint,
            runtimes=[
                RuntimeStatus(rt.name, rt.available, rt.version, rt.reason, rt.distribution)
                for rt in r.runtimes
            ],
            public_key_raw=bytes(r.public_key_raw),
            key_fingerprint=r.key_fingerprint,
            limits=Limits(
                max_artifact_bytes=r.limits.max_artifact_bytes,
                chunk_bytes=r.limits.chunk_bytes,
                max_receive_message_bytes=r.limits.max_receive_message_bytes,
                quota_bytes=r.limits.quota_bytes,
            ),
            lease=lease,
        )
