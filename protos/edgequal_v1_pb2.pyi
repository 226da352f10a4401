from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RuntimeStatus(_message.Message):
    __slots__ = ("name", "available", "version", "reason", "distribution")
    NAME_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DISTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    available: bool
    version: str
    reason: str
    distribution: str
    def __init__(self, name: _Optional[str] = ..., available: _Optional[bool] = ..., version: _Optional[str] = ..., reason: _Optional[str] = ..., distribution: _Optional[str] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("run_id", "holder", "started_unix_ms", "expires_unix_ms", "purpose", "expected_end_unix_ms")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_END_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    holder: str
    started_unix_ms: int
    expires_unix_ms: int
    purpose: str
    expected_end_unix_ms: int
    def __init__(self, run_id: _Optional[str] = ..., holder: _Optional[str] = ..., started_unix_ms: _Optional[int] = ..., expires_unix_ms: _Optional[int] = ..., purpose: _Optional[str] = ..., expected_end_unix_ms: _Optional[int] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("max_artifact_bytes", "chunk_bytes", "max_receive_message_bytes", "quota_bytes")
    MAX_ARTIFACT_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_RECEIVE_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_artifact_bytes: int
    chunk_bytes: int
    max_receive_message_bytes: int
    quota_bytes: int
    def __init__(self, max_artifact_bytes: _Optional[int] = ..., chunk_bytes: _Optional[int] = ..., max_receive_message_bytes: _Optional[int] = ..., quota_bytes: _Optional[int] = ...) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("agent_version", "protocol", "fingerprint_json", "runtimes", "public_key_raw", "key_fingerprint", "busy", "lease", "limits")
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_JSON_FIELD_NUMBER: _ClassVar[int]
    RUNTIMES_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_RAW_FIELD_NUMBER: _ClassVar[int]
    KEY_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    agent_version: str
    protocol: str
    fingerprint_json: str
    runtimes: _containers.RepeatedCompositeFieldContainer[RuntimeStatus]
    public_key_raw: bytes
    key_fingerprint: str
    busy: bool
    lease: Lease
    limits: Limits
    def __init__(self, agent_version: _Optional[str] = ..., protocol: _Optional[str] = ..., fingerprint_json: _Optional[str] = ..., runtimes: _Optional[_Iterable[_Union[RuntimeStatus, _Mapping]]] = ..., public_key_raw: _Optional[bytes] = ..., key_fingerprint: _Optional[str] = ..., busy: _Optional[bool] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ...) -> None: ...

class StatRequest(_message.Message):
    __slots__ = ("digest",)
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    digest: str
    def __init__(self, digest: _Optional[str] = ...) -> None: ...

class StatResponse(_message.Message):
    __slots__ = ("digest", "committed_size", "complete")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_SIZE_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    digest: str
    committed_size: int
    complete: bool
    def __init__(self, digest: _Optional[str] = ..., committed_size: _Optional[int] = ..., complete: _Optional[bool] = ...) -> None: ...

class PushChunk(_message.Message):
    __slots__ = ("digest", "offset", "data", "total_size")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    digest: str
    offset: int
    data: bytes
    total_size: int
    def __init__(self, digest: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., total_size: _Optional[int] = ...) -> None: ...

class PushResponse(_message.Message):
    __slots__ = ("digest", "committed_size", "bytes_received", "complete")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_SIZE_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    digest: str
    committed_size: int
    bytes_received: int
    complete: bool
    def __init__(self, digest: _Optional[str] = ..., committed_size: _Optional[int] = ..., bytes_received: _Optional[int] = ..., complete: _Optional[bool] = ...) -> None: ...

class QualifyRequest(_message.Message):
    __slots__ = ("model_digest", "golden_digest", "plan_json", "nonce", "model_name", "golden_name", "holder", "extra_subjects_json", "lease_id")
    MODEL_DIGEST_FIELD_NUMBER: _ClassVar[int]
    GOLDEN_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PLAN_JSON_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    GOLDEN_NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    EXTRA_SUBJECTS_JSON_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    model_digest: str
    golden_digest: str
    plan_json: str
    nonce: str
    model_name: str
    golden_name: str
    holder: str
    extra_subjects_json: str
    lease_id: str
    def __init__(self, model_digest: _Optional[str] = ..., golden_digest: _Optional[str] = ..., plan_json: _Optional[str] = ..., nonce: _Optional[str] = ..., model_name: _Optional[str] = ..., golden_name: _Optional[str] = ..., holder: _Optional[str] = ..., extra_subjects_json: _Optional[str] = ..., lease_id: _Optional[str] = ...) -> None: ...

class QualifyMessage(_message.Message):
    __slots__ = ("run_id", "event_json", "envelope")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_JSON_FIELD_NUMBER: _ClassVar[int]
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    event_json: str
    envelope: bytes
    def __init__(self, run_id: _Optional[str] = ..., event_json: _Optional[str] = ..., envelope: _Optional[bytes] = ...) -> None: ...

class GetReportRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetReportResponse(_message.Message):
    __slots__ = ("run_id", "envelope")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    envelope: bytes
    def __init__(self, run_id: _Optional[str] = ..., envelope: _Optional[bytes] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("cancelled", "message")
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    message: str
    def __init__(self, cancelled: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class ProveRequest(_message.Message):
    __slots__ = ("challenge",)
    CHALLENGE_FIELD_NUMBER: _ClassVar[int]
    challenge: bytes
    def __init__(self, challenge: _Optional[bytes] = ...) -> None: ...

class ProveResponse(_message.Message):
    __slots__ = ("public_key_raw", "key_fingerprint", "signature")
    PUBLIC_KEY_RAW_FIELD_NUMBER: _ClassVar[int]
    KEY_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    public_key_raw: bytes
    key_fingerprint: str
    signature: bytes
    def __init__(self, public_key_raw: _Optional[bytes] = ..., key_fingerprint: _Optional[str] = ..., signature: _Optional[bytes] = ...) -> None: ...

class AcquireLeaseRequest(_message.Message):
    __slots__ = ("holder", "purpose", "ttl_s", "wait_s", "ticket")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    TICKET_FIELD_NUMBER: _ClassVar[int]
    holder: str
    purpose: str
    ttl_s: float
    wait_s: float
    ticket: str
    def __init__(self, holder: _Optional[str] = ..., purpose: _Optional[str] = ..., ttl_s: _Optional[float] = ..., wait_s: _Optional[float] = ..., ticket: _Optional[str] = ...) -> None: ...

class AcquireLeaseResponse(_message.Message):
    __slots__ = ("granted", "lease_id", "lease", "ticket", "position")
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    TICKET_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    lease_id: str
    lease: Lease
    ticket: str
    position: int
    def __init__(self, granted: _Optional[bool] = ..., lease_id: _Optional[str] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., ticket: _Optional[str] = ..., position: _Optional[int] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("lease_id", "ttl_s")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    ttl_s: float
    def __init__(self, lease_id: _Optional[str] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class RenewLeaseResponse(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class ReleaseLeaseRequest(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class ReleaseLeaseResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: _Optional[bool] = ...) -> None: ...
