"""Parsers fuzzed for a bounded time: whatever the bytes, only the documented errors.

Each parser that reads input a host or a device could forge is fed random and
mutated inputs by hypothesis (a fixed number of examples, no deadline, so a busy
machine is slower but never fails):

- the golden-set reader (``agent.golden.read_golden``, ``load_npz_arrays``): BadInput;
- the plan loader (``agent.plan.Plan.from_json``): BadInput;
- the device-profile loader (``host.profiles``): ProfileError;
- the known-devices loader (``host.trust``): UsageError;
- the report verifier (``host.verify.verify_envelope``): VerificationFailed
  (UntrustedDevice is one) — never a crash, and never a pass for a changed byte.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from edgequal.contract.errors import BadInput
from edgequal.contract.golden import GoldenCase, load_npz_arrays, read_golden, write_golden
from edgequal.contract.keys import DeviceKey
from edgequal.contract.plan import DEFAULTS, PRESETS, Plan
from edgequal.contract.signing import build_statement, sign_envelope
from edgequal.host.devices.profiles import ProfileError, _parse, load_profile, profile_from_dict
from edgequal.host.devices.trust import KnownDevices, parse_line
from edgequal.host.devices.verify import verify_envelope
from edgequal.host.errors import UsageError, VerificationFailed
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

# Thousands of generated inputs in all (about 6 CPU-s with hypothesis's import): the full
# suite's, not the fast loop's (-m "not slow" does not even import this module).
pytestmark = pytest.mark.slow

FUZZ = settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# JSON values, nested a little: what a forged manifest, plan or statement can hold.
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    """``data`` with some bytes overwritten (position modulo length) and maybe truncated."""
    out = bytearray(data)
    for pos, value in edits:
        if out:
            out[pos % len(out)] = value
    if cut is not None and out:
        del out[cut % len(out) :]
    return bytes(out)


byte_edits = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=6)
cuts = st.none() | st.integers(0, 1 << 20)


# -- golden-set reader ---------------------------------------------------------


def _golden_bytes(tmp: Path) -> bytes:
    cases = [
        GoldenCase(
            f"c{i}", {"x": np.arange(6, dtype=np.float32).reshape(2, 3) + i}, {"y": np.ones(2)}
        )
        for i in range(2)
    ]
    manifest = {
        "inputs": [{"name": "x", "dtype": "float32", "shape": [2, 3]}],
        "outputs": [{"name": "y", "dtype": "float64", "shape": [2]}],
        "decision": "argmax",
    }
    write_golden(tmp / "seed.npz", manifest, cases)
    return (tmp / "seed.npz").read_bytes()


def _npz_with(members: dict[str, bytes], compressed: bool = False) -> bytes:
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _npy_header_only(shape: tuple[int, ...], descr: str, tail: bytes) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return buf.getvalue() + tail


def _read_ok_or_bad_input(path: Path) -> None:
    """read_golden either refuses with BadInput or returns a set every reader can use."""
    try:
        golden = read_golden(path)
    except BadInput:
        return
    # A set that was read must be usable by what the worker does with it.
    golden.inputs, golden.outputs, golden.decision, golden.tolerances  # noqa: B018
    golden.shape_groups()


@FUZZ
@given(edits=byte_edits, cut=cuts)
def test_golden_reader_on_mutated_files(tmp_path_factory, edits, cut):
    tmp = tmp_path_factory.mktemp("golden-fuzz")
    path = tmp / "g.npz"
    path.write_bytes(_mutate(_golden_bytes(tmp), edits, cut))
    _read_ok_or_bad_input(path)


@FUZZ
@given(data=st.binary(max_size=600))
def test_golden_reader_on_random_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("golden-fuzz") / "g.npz"
    path.write_bytes(data)
    _read_ok_or_bad_input(path)


member_names = st.sampled_from(
    [
        "__manifest__.npy",
        "inputs/c0/x.npy",
        "outputs/c0/y.npy",
        "inputs/c0.npy",
        "x.npy",
        "inputs//x.npy",
        "junk",
    ]
)


@FUZZ
@given(
    manifest=json_values
    | st.fixed_dictionaries(
        {"format": st.just("edgequal.golden/v1")},
        optional={
            "cases": json_values,
            "inputs": json_values,
            "outputs": json_values,
            "tolerances": json_values,
            "decision": json_values,
        },
    ),
    others=st.dictionaries(
        member_names,
        st.sampled_from(
            [
                _npy(np.zeros((2, 3), np.float32)),
                _npy(np.array(3.5)),
                _npy(np.array(["a", "b"])),
                _npy(np.zeros(0, np.int8)),
                b"\x93NUMPY\x03\x00\x10\x00\x00\x00{}              \n",
                b"not an array",
            ]
        ),
        max_size=3,
    ),
    compressed=st.booleans(),
)
@example(manifest=[1, 2], others={}, compressed=False)
@example(manifest={"format": "edgequal.golden/v1", "cases": 5}, others={}, compressed=False)
@example(manifest={"format": "edgequal.golden/v1", "cases": [[1]]}, others={}, compressed=False)
def test_golden_reader_on_forged_manifests(tmp_path_factory, manifest, others, compressed):
    text = json.dumps(manifest).encode()
    members = {"__manifest__.npy": _npy(np.frombuffer(text, dtype=np.uint8)), **others}
    path = tmp_path_factory.mktemp("golden-fuzz") / "g.npz"
    path.write_bytes(_npz_with(members, compressed))
    _read_ok_or_bad_input(path)


@FUZZ
@given(
    shape=st.lists(st.integers(0, 2**40), min_size=0, max_size=4).map(tuple),
    descr=st.sampled_from(["<f4", "<f8", "|u1", "<i8", "|O", "<U10"]),
    tail=st.binary(max_size=64),
)
@example(shape=(10**12,), descr="<f8", tail=b"\0" * 16)
def test_golden_reader_on_array_headers_that_lie(tmp_path_factory, shape, descr, tail):
    """An array header declaring more than the file holds (terabytes) is refused, not allocated."""
    manifest = json.dumps({"format": "edgequal.golden/v1", "cases": ["c0"]}).encode()
    members = {
        "__manifest__.npy": _npy(np.frombuffer(manifest, dtype=np.uint8)),
        "inputs/c0/x.npy": _npy_header_only(shape, descr, tail),
    }
    path = tmp_path_factory.mktemp("golden-fuzz") / "g.npz"
    path.write_bytes(_npz_with(members))
    _read_ok_or_bad_input(path)
    try:
        load_npz_arrays(path)
    except BadInput:
        pass


def test_a_bare_npy_file_is_not_a_golden_set(tmp_path):
    path = tmp_path / "g.npz"
    path.write_bytes(_npy(np.zeros(3)))
    with pytest.raises(BadInput, match="is not a golden set file"):
        read_golden(path)


def test_terabyte_header_is_refused_in_one_line(tmp_path):
    manifest = json.dumps({"format": "edgequal.golden/v1", "cases": ["c0"]}).encode()
    members = {
        "__manifest__.npy": _npy(np.frombuffer(manifest, dtype=np.uint8)),
        "inputs/c0/x.npy": _npy_header_only((10**12,), "<f8", b"\0" * 16),
    }
    path = tmp_path / "g.npz"
    path.write_bytes(_npz_with(members))
    with pytest.raises(BadInput, match=r"declares 8000000000000 bytes but holds 16") as e:
        read_golden(path)
    assert "\n" not in str(e.value)
    with pytest.raises(BadInput, match="not a readable .npz file"):
        load_npz_arrays(path)


# -- plan loader -----------------------------------------------------------------

PLAN_KEYS = sorted(set(DEFAULTS) | set(PRESETS["soak"]))
plan_values = (
    json_values
    | st.sampled_from(sorted(PRESETS))
    | st.integers(-5, 2_000_000)
    | st.floats(-1, 1e6)
    | st.lists(st.integers(-2, 300), max_size=4)
    | st.dictionaries(st.text(max_size=4), st.lists(st.integers(-2, 300), max_size=4), max_size=2)
)


@FUZZ
@given(
    plan=st.dictionaries(st.sampled_from(PLAN_KEYS) | st.text(max_size=6), plan_values, max_size=6)
)
def test_plan_loader_on_forged_plans(plan):
    try:
        loaded = Plan.from_json(plan)
    except BadInput:
        return
    # A plan that loads round-trips through its JSON form.
    assert Plan.from_json(loaded.to_json()) == loaded


@FUZZ
@given(plan=json_values)
def test_plan_loader_on_any_json(plan):
    try:
        Plan.from_json(plan)
    except BadInput:
        pass


@pytest.mark.parametrize("preset", [[1], {"a": 1}])
def test_plan_preset_of_any_json_type_is_bad_input(preset):
    with pytest.raises(BadInput, match="preset"):
        Plan.from_json({"preset": preset})


def test_plan_integer_beyond_a_float_is_bad_input():
    with pytest.raises(BadInput, match="cold_runs"):
        Plan.from_json(json.loads('{"cold_runs": 1' + "0" * 400 + "}"))


@pytest.mark.parametrize("field", ["cold_runs", "phase_timeout_s"])
def test_plan_null_for_a_required_number_is_bad_input(field):
    with pytest.raises(BadInput, match=field):
        Plan.from_json({field: None})


# -- device-profile loader -------------------------------------------------------


def _profile_toml() -> str:
    return (Path(__file__).parents[1] / "device_profiles" / "raspberry-pi" / "5.toml").read_text()


@FUZZ
@given(edits=byte_edits, cut=cuts)
def test_profile_loader_on_mutated_toml(edits, cut):
    text = _mutate(_profile_toml().encode(), edits, cut).decode("utf-8", "replace")
    try:
        _parse(text, "fuzz.toml")
    except ProfileError:
        pass


@FUZZ
@given(
    overrides=st.dictionaries(
        st.sampled_from(
            [
                "name",
                "architecture",
                "cores",
                "memory_mb",
                "match",
                "runtimes",
                "trip_c",
                "max_c",
                "throttle_indicators",
                "default_threads",
                "plans",
                "extra",
            ]
        ),
        json_values,
        max_size=4,
    ),
    plan_overrides=st.dictionaries(
        st.sampled_from(["quick", "standard", "soak", "x"]), json_values, max_size=2
    ),
)
def test_profile_loader_on_forged_tables(overrides, plan_overrides):
    data = tomllib.loads(_profile_toml())
    data.update(overrides)
    if isinstance(data.get("plans"), dict):
        data["plans"] = {**data["plans"], **plan_overrides}
    try:
        profile_from_dict(data, "fuzz.toml")
    except ProfileError:
        pass


@FUZZ
@given(data=st.binary(max_size=300))
def test_profile_file_of_random_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("profile-fuzz") / "p.toml"
    path.write_bytes(data)
    try:
        load_profile(path)
    except ProfileError:
        pass


# -- known-devices loader --------------------------------------------------------

UNICODE = st.characters(exclude_categories=["Cs"])
"""Characters UTF-8 can encode (no lone surrogates)."""
KEY_B64 = base64.b64encode(bytes(range(32))).decode()
line_words = st.sampled_from(
    [
        "pi5",
        "grpc://10.0.0.7:50051",
        "ed25519",
        KEY_B64,
        "token_file=/t",
        "x=y",
        "=",
        "#",
        "rsa",
        "AAAA",
        "-",
        "",
    ]
) | st.text(UNICODE, max_size=10)


@FUZZ
@given(
    lines=st.lists(
        st.lists(line_words, max_size=7).map(" ".join) | st.text(UNICODE, max_size=40), max_size=5
    )
)
def test_known_devices_loader_on_forged_files(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("known-fuzz") / "known_devices"
    path.write_bytes("\n".join(lines).encode("utf-8", "strict"))
    try:
        entries = KnownDevices(path).list()
    except UsageError:
        return
    for entry in entries:
        assert parse_line(entry.to_line()) == entry


@FUZZ
@given(text=st.text(UNICODE, max_size=300))
def test_known_devices_file_of_random_text(tmp_path_factory, text):
    # Any text: bytes that are not UTF-8 are a known defect (test_known_devices_not_utf8...).
    data = text.encode("utf-8")
    path = tmp_path_factory.mktemp("known-fuzz") / "known_devices"
    path.write_bytes(data)
    try:
        KnownDevices(path).list()
    except UsageError:
        pass


def test_known_devices_not_utf8_is_usage_error(tmp_path):
    path = tmp_path / "known_devices"
    path.write_bytes(b"pi5 grpc://h:1 ed25519 \x80\n")
    with pytest.raises(UsageError, match="known_devices"):
        KnownDevices(path).list()


# -- report verifier -------------------------------------------------------------

_KEY = DeviceKey.generate()
_MODEL = b"model bytes"


def _known(tmp: Path) -> KnownDevices:
    known = KnownDevices(tmp / "known_devices")
    known.trust("pi5", "grpc://127.0.0.1:50051", _KEY.public_key_raw())
    return known


@pytest.fixture(scope="module")
def pinned(tmp_path_factory) -> KnownDevices:
    """:func:`_known` once for the module: the verifier only reads it, so every example of
    every test shares the one file (writing it costs two fsyncs)."""
    return _known(tmp_path_factory.mktemp("verify-fuzz"))


def _envelope(predicate_extra: dict | None = None) -> bytes:
    predicate = {"nonce": "ab" * 16, "run_id": "run-1", "status": "passed", "reason": None}
    predicate.update(predicate_extra or {})
    statement = build_statement(
        [{"name": "m.onnx", "sha256": hashlib.sha256(_MODEL).hexdigest()}], predicate
    )
    return sign_envelope(_KEY, statement)


def _verify_or_refuse(envelope: bytes, known: KnownDevices, **kwargs) -> bool:
    """True when it verified; False when refused with the documented errors."""
    try:
        verify_envelope(envelope, known=known, **kwargs)
    except VerificationFailed:
        return False
    return True


def _payload_bytes(envelope: bytes) -> bytes:
    text = json.loads(envelope)["payload"].replace("-", "+").replace("_", "/")
    return base64.b64decode(text + "=" * (-len(text) % 4))


@FUZZ
@given(edits=byte_edits.filter(bool), cut=cuts, device=st.sampled_from([None, "pi5", "other"]))
def test_verifier_on_mutated_envelopes(pinned, edits, cut, device):
    original = _envelope()
    forged = _mutate(original, edits, cut)
    verified = _verify_or_refuse(forged, pinned, device=device)
    if verified:
        # Only a change the envelope's encoding allows (base64 alphabet or padding, JSON
        # spacing, the keyid hint) may still verify: the signed statement is the same bytes.
        assert _payload_bytes(forged) == _payload_bytes(original)


@FUZZ
@given(
    envelope=json_values
    | st.fixed_dictionaries(
        {"payloadType": st.just("application/vnd.in-toto+json") | json_values},
        optional={
            "payload": json_values
            | st.binary(max_size=80).map(lambda b: base64.b64encode(b).decode()),
            "signatures": json_values,
        },
    )
)
def test_verifier_on_forged_envelope_json(pinned, envelope):
    assert not _verify_or_refuse(json.dumps(envelope).encode(), pinned)


@FUZZ
@given(
    statement=json_values
    | st.fixed_dictionaries(
        {
            "_type": st.just("https://in-toto.io/Statement/v1"),
            "predicateType": st.just("https://edgequal.dev/qualification/v1"),
        },
        optional={"subject": json_values, "predicate": json_values},
    )
)
def test_verifier_on_validly_signed_forged_statements(pinned, statement):
    """A statement signed by the pinned key but malformed is refused by name, never a crash."""
    from edgequal.contract.signing import PAYLOAD_TYPE, pae

    payload = json.dumps(statement, allow_nan=True).encode()
    envelope = json.dumps(
        {
            "payloadType": PAYLOAD_TYPE,
            "payload": base64.b64encode(payload).decode(),
            "signatures": [
                {
                    "keyid": _KEY.keyid(),
                    "sig": base64.b64encode(_KEY.sign(pae(PAYLOAD_TYPE, payload))).decode(),
                }
            ],
        }
    ).encode()
    try:
        verify_envelope(envelope, known=pinned, expected_nonce="n", expected_run_id="r")
    except VerificationFailed:
        pass


def test_verifier_on_deeply_nested_json(tmp_path):
    """Nesting deeper than the JSON parser can go is a failed check (exit 1), not a crash."""
    from edgequal.contract.signing import PAYLOAD_TYPE, pae

    known = _known(tmp_path)
    for depth in (10_000, 200_000):
        with pytest.raises(VerificationFailed, match="nested too deeply"):
            verify_envelope(b"[" * depth + b"]" * depth, known=known)
    payload = b"[" * 100_000 + b"]" * 100_000
    envelope = json.dumps(
        {
            "payloadType": PAYLOAD_TYPE,
            "payload": base64.b64encode(payload).decode(),
            "signatures": [
                {"sig": base64.b64encode(_KEY.sign(pae(PAYLOAD_TYPE, payload))).decode()}
            ],
        }
    ).encode()
    with pytest.raises(VerificationFailed, match="statement: .*nested too deeply") as e:
        verify_envelope(envelope, known=known)
    assert e.value.exit_code == 1
