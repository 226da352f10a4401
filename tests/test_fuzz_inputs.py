"""The files users feed the CLI, fuzzed through ``edgequal``'s own ``main``: a pipeline.toml,
an input contract (``--preprocessing``), a raw directory's cases.csv, a lab file and a gate
policy. Whatever hypothesis writes, the command ends in exit 0 (a valid file) or exit 2 with
one line on stderr: never a traceback, never exit 3 (an internal error), and memory stays
bounded (the pipeline's sizes are refused before they are allocated).

Each test runs a few dozen examples (a few CPU-seconds) on tiny real models; the slow suite
runs them.
"""

from __future__ import annotations

import csv
import io
import json
import re
import resource

import numpy as np
import pytest
from edgequal.cli.main import main
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow

FEW = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
MEMORY_GROWTH_LIMIT_BYTES = 768 << 20
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")

# -- TOML from hypothesis values -------------------------------------------------------

scalars = (
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.sampled_from([0, 1, 3, 8, 10**9, 10**12, 2**40, -1])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)


NUMBERS = st.sampled_from([0, 1, 3, 8, 16000, 10**9, 10**12, 2**40, 2**63 - 1, -1, -(2**63)]) | (
    st.floats(allow_nan=True, allow_infinity=True)
)
WORDS = st.sampled_from(["", "x", "quick", "standard", "soak", "p50", "center", "RGB", "NCHW"])


def _values(keys):
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
        max_leaves=6,
    )


def _string(text: str) -> str:
    """A TOML basic string: no surrogate-pair escapes (TOML refuses them), DEL escaped."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _key(k: str) -> str:
    return k if _BARE_KEY.fullmatch(k) else _string(k)


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return (
            "nan"
            if v != v
            else ("inf" if v > 0 else "-inf")
            if v in (float("inf"), float("-inf"))
            else repr(v)
        )
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"


def toml_text(tables: dict[tuple, dict]) -> str:
    """``{(): top-level keys, ("inputs", "x"): keys, ...}`` as TOML text."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in tables.get((), {}).items()]
    for path, keys in tables.items():
        if path:
            lines.append("[" + ".".join(_key(p) for p in path) + "]")
            lines += [f"{_key(k)} = {_value(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def tables_of(vocabulary, table_paths, plausible=None):
    """TOML documents: tables from ``table_paths``, keys mostly from ``vocabulary``, each
    value mostly a plausible one for its key (``plausible``: key → strategy), so the
    examples get past the syntax to the checks behind it."""
    plausible = plausible or {}
    known = st.sampled_from(vocabulary)
    keys = st.one_of(known, known, known, known, st.text(max_size=8))  # mostly known keys
    anything = _values(keys)

    @st.composite
    def table(draw):
        out = {}
        for k in draw(st.lists(keys, max_size=6, unique=True)):
            likely = plausible.get(k, NUMBERS | WORDS)
            out[k] = draw(st.one_of(likely, likely, likely, anything))
        return out

    return st.dictionaries(table_paths, table(), max_size=4)


def mutated(text: str, edits, cut) -> bytes:
    """``text``'s bytes with some overwritten and maybe cut short (non-UTF-8 included)."""
    out = bytearray(text.encode())
    for pos, value in edits:
        if out:
            out[pos % len(out)] = value
    if cut is not None and out:
        del out[cut % len(out) :]
    return bytes(out)


byte_edits = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=4)
cuts = st.none() | st.integers(0, 1 << 16)
sometimes = st.integers(0, 3).map(lambda i: i == 0)  # a quarter of the files mutated


def exit_0_or_one_line_2(capsys, args) -> int:
    """Run ``edgequal ARGS``; assert exit 0, or exit 2 with exactly one line on stderr."""
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert rc in (0, 2), f"exit {rc}: {err[-3000:]}"
    if rc == 2:
        assert len(err.strip().splitlines()) == 1, err[-3000:]
        assert "Traceback" not in err and "internal error" not in err, err
    return rc


@pytest.fixture
def bounded_memory():
    """The test's peak RSS grows by less than MEMORY_GROWTH_LIMIT_BYTES."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    yield
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grown < MEMORY_GROWTH_LIMIT_BYTES, f"peak RSS grew by {grown >> 20} MiB"


# -- models and raw files ---------------------------------------------------------------


@pytest.fixture(scope="module")
def setup(tmp_path_factory, test_helper):
    """One-input models per decoder (dynamic sizes, so a declared size reaches the stages),
    a raw file each, a tokenizer, a prepared-tensor NPZ and a models file."""
    raw = test_helper("raw_files")
    d = tmp_path_factory.mktemp("fuzz-inputs")
    kinds = {
        "image": ("float32", [1, 3, "h", "w"], "img.png", raw.encode_image(raw.gradient(8, 8))),
        "audio": ("float32", [1, "n"], "clip.wav", raw.wav_bytes(raw.tone(100))),
        "text": ("int64", [1, "s"], "t.txt", b"the board runs"),
    }
    for kind, (dtype, shape, name, data) in kinds.items():
        raw.build_one_input_model(d / f"{kind}.onnx", dtype, shape)
        (d / kind).mkdir()
        (d / kind / name).write_bytes(data)
        (d / kind / "tokenizer.json").write_text(raw.tokenizer_json())
    raw.build_one_input_model(d / "fixed.onnx", "float32", [1, 3, 8, 8])
    np.savez(d / "inputs.npz", x=np.zeros((1, 3, 8, 8), np.float32))
    return d


# -- pipeline.toml -----------------------------------------------------------------------

PIPELINE_KEYS = [
    "decode", "resize", "crop", "interpolation", "color_order", "layout", "scale", "mean",
    "std", "quant_scale", "quant_zero_point", "sample_rate", "channels", "frame", "tokenizer",
    "max_length", "truncation", "padding", "field", "dtype", "range",
]  # fmt: skip
SIZES = st.sampled_from([1, 8, 224, 100000, 2**40, 10**12, 0, -3])
PIPELINE_VALUES = {
    "decode": st.sampled_from(["image", "audio", "text", "video"]),
    "resize": st.lists(SIZES, min_size=2, max_size=2) | st.lists(SIZES, max_size=3),
    "crop": st.sampled_from(["center", "none", "top"]),
    "interpolation": st.sampled_from(["bilinear", "nearest", "bicubic", "area", "lanczos"]),
    "color_order": st.sampled_from(["RGB", "BGR", "GRAY", "CMYK"]),
    "layout": st.sampled_from(["NCHW", "NHWC", "CHW"]),
    "mean": st.lists(NUMBERS, min_size=1, max_size=3),
    "std": st.lists(NUMBERS, min_size=1, max_size=3),
    "frame": SIZES,
    "max_length": SIZES,
    "channels": SIZES,
    "sample_rate": st.sampled_from([16000, 8000, 0]),
    "tokenizer": st.sampled_from(
        ["tokenizer.json", "missing.json", "../image/img.png", "/etc/hostname"]
    ),
    "truncation": st.booleans(),
    "padding": st.booleans(),
    "field": st.sampled_from(["ids", "attention_mask", "type_ids", "offsets"]),
    "dtype": st.sampled_from(["float32", "int64", "uint8"]),
    "range": st.lists(NUMBERS, min_size=2, max_size=2),
}


@st.composite
def pipelines(draw):
    kind = draw(st.sampled_from(["image", "audio", "text"]))
    paths = st.sampled_from([("inputs", "x"), ("inputs", "x"), (), ("inputs", "y")])
    tables = draw(tables_of(PIPELINE_KEYS, paths, PIPELINE_VALUES))
    if draw(st.booleans()):  # mostly a decoder that fits, so the stages run
        tables.setdefault(("inputs", "x"), {})["decode"] = kind
        if kind == "text" and draw(st.booleans()):
            tables[("inputs", "x")]["tokenizer"] = "tokenizer.json"
    return kind, toml_text(tables)


@FEW
@given(case=pipelines(), edits=byte_edits, cut=cuts, mutate=sometimes)
# A key that is a record separator: str.splitlines() ends a line there.
@example(case=("image", '[inputs.x]\n"\\u001e" = 0\n'), edits=[], cut=None, mutate=False)
# The sizes the host allocated before it checked them (MemoryError, OverflowError, SIGABRT).
@example(
    case=("image", '[inputs.x]\ndecode = "image"\nresize = [100000, 100000]\n'),
    edits=[],
    cut=None,
    mutate=False,
)
@example(
    case=("audio", '[inputs.x]\ndecode = "audio"\nframe = 1000000000000\n'),
    edits=[],
    cut=None,
    mutate=False,
)
@example(
    case=(
        "text",
        '[inputs.x]\ndecode = "text"\ntokenizer = "tokenizer.json"\nmax_length = 1000000000\n',
    ),
    edits=[],
    cut=None,
    mutate=False,
)
def test_pipeline_toml(setup, tmp_path_factory, capsys, bounded_memory, case, edits, cut, mutate):
    kind, text = case
    d = setup
    p = d / kind / "pipeline.toml"
    p.write_bytes(mutated(text, edits, cut) if mutate else text.encode())
    out = tmp_path_factory.mktemp("g") / "g.npz"
    exit_0_or_one_line_2(
        capsys,
        ["golden", "make", d / f"{kind}.onnx", "--raw", d / kind, "--pipeline", p, "-o", out],
    )


# -- input contracts (--preprocessing) --------------------------------------------------------

CONTRACT_KEYS = ["layout", "range", "mean", "std", "scale", "color_order", "resize", "decode"]


@FEW
@given(
    tables=tables_of(
        CONTRACT_KEYS, st.sampled_from([(), ("inputs", "x"), ("inputs", "z")]), PIPELINE_VALUES
    ),
    edits=byte_edits,
    cut=cuts,
    mutate=sometimes,
)
def test_input_contract(
    setup, tmp_path_factory, capsys, bounded_memory, tables, edits, cut, mutate
):
    d = setup
    text = toml_text(tables)
    p = tmp_path_factory.mktemp("c") / "pre.toml"
    p.write_bytes(mutated(text, edits, cut) if mutate else text.encode())
    exit_0_or_one_line_2(
        capsys,
        ["golden", "make", d / "fixed.onnx", "--inputs", d / "inputs.npz",
         "--preprocessing", p, "-o", p.with_suffix(".npz")],
    )  # fmt: skip


# -- cases.csv names ---------------------------------------------------------------------------

names = st.sampled_from(
    ["img.png", "../img.png", "/etc/hostname", "", ".", "img.png/..", "a,b"]
) | st.text(max_size=16)


@FEW
@given(
    header=st.just(["case", "x"])
    | st.lists(st.sampled_from(["case", "x", "y"]) | st.text(max_size=6), max_size=4),
    rows=st.lists(
        st.tuples(st.text(max_size=12) | st.sampled_from(["c0", "../c", "a/b"]), names)
        | st.lists(names, max_size=4),
        min_size=1,
        max_size=5,
    ),
    raw_text=st.one_of(st.none(), st.none(), st.none(), st.text(max_size=80)),
)
def test_cases_csv(setup, tmp_path_factory, capsys, bounded_memory, header, rows, raw_text):
    d = setup
    work = tmp_path_factory.mktemp("csv")
    (work / "raw").mkdir()
    (work / "raw" / "img.png").write_bytes((d / "image" / "img.png").read_bytes())
    (work / "pipeline.toml").write_text('[inputs.x]\ndecode = "image"\nresize = [8, 8]\n')
    if raw_text is None:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(header)
        w.writerows(rows)
        raw_text = buf.getvalue()
    (work / "raw" / "cases.csv").write_text(raw_text, encoding="utf-8", errors="surrogatepass")
    exit_0_or_one_line_2(
        capsys,
        ["golden", "make", d / "image.onnx", "--raw", work / "raw",
         "--pipeline", work / "pipeline.toml", "-o", work / "g.npz"],
    )  # fmt: skip


# -- lab files -----------------------------------------------------------------------------------

LAB_KEYS = [
    "name", "history_url_env", "history_url_file", "lease_ttl_s", "address", "profile", "tags",
    "token_env", "token_file", "ssh_key_file", "known_hosts_file", "agent_cmd", "token",
    "password",
]  # fmt: skip


ADDRESSES = st.sampled_from(
    [
        "grpc://127.0.0.1:1",
        "grpc://h:0",
        "grpc://h:99999",
        "ssh://u@h",
        "ssh://u:pw@h",
        "local",
        "x",
    ]
)
LAB_VALUES = {
    "address": ADDRESSES,
    "tags": st.lists(st.sampled_from(["pi", "arm64", "a b", ""]), max_size=3),
    "token_env": st.sampled_from(["EQ_TOKEN", "1BAD", "HOME"]),
    "token_file": st.sampled_from(["/nonexistent", "../t", "/etc/hostname"]),
    "profile": st.sampled_from(["raspberry-pi/5", "nope/x", "../x"]),
    "lease_ttl_s": NUMBERS,
}


@st.composite
def labs(draw):
    paths = st.sampled_from(
        [("lab",), ("devices", "pi-a"), ("devices", "pi-a"), ("devices", "b b"), ("devices",)]
    )
    tables = draw(tables_of(LAB_KEYS, paths, LAB_VALUES))
    if draw(st.booleans()):
        tables.setdefault(("devices", "pi-a"), {})["address"] = draw(ADDRESSES)
    return toml_text(tables)


@FEW
@given(text=labs(), edits=byte_edits, cut=cuts, mutate=sometimes)
@example(text='[lab]\n"\\u2028" = 1\n', edits=[], cut=None, mutate=False)
def test_lab_file(tmp_path_factory, capsys, bounded_memory, text, edits, cut, mutate):
    work = tmp_path_factory.mktemp("lab")
    (work / "lab.toml").write_bytes(mutated(text, edits, cut) if mutate else text.encode())
    # A missing models file: a lab that parses ends in that one-line error, nothing is run.
    exit_0_or_one_line_2(
        capsys,
        ["fleet", "run", work / "lab.toml", "--models", work / "missing.toml", "--out", work / "o"],
    )


# -- gate policies -------------------------------------------------------------------------------

POLICY_TABLES = [
    (), ("latency",), ("drift",), ("status",), ("baseline",), ("memory",), ("sustained",),
    ("cold_load",), ("findings",), ("edge_shapes",), ("coload",), ("pipeline",),
    ("runtime_envs",), ("edge_shapes", "labels", "largest"),
]  # fmt: skip
POLICY_KEYS = [
    "name", "requires_plan", "max_p50_ms", "max_p99_ms", "max_cv", "max_flip_count",
    "require_passed", "require_same", "allowed_kinds", "max_count", "statistic", "confidence",
    "iterations", "seed", "min_effect", "max_p50_ratio", "max_peak_rss_mb", "min_stability",
    "max_throughput_drop", "max_total_ms", "allowed", "required", "require_all_ran",
]  # fmt: skip


@FEW
@given(
    tables=tables_of(
        POLICY_KEYS,
        st.sampled_from(POLICY_TABLES),
        {
            "requires_plan": st.sampled_from(["quick", "standard", "soak", "daily"]),
            "statistic": st.sampled_from(["p50", "p99", "mean", "max"]),
            "require_same": st.lists(st.sampled_from(["golden", "model", "runtime", "x"])),
            "allowed_kinds": st.lists(st.sampled_from(["model_rejected", "x"])),
        },
    ),
    edits=byte_edits,
    cut=cuts,
    mutate=sometimes,
)
def test_policy_file(tmp_path_factory, capsys, bounded_memory, tables, edits, cut, mutate):
    work = tmp_path_factory.mktemp("policy")
    text = toml_text(tables)
    (work / "p.toml").write_bytes(mutated(text, edits, cut) if mutate else text.encode())
    # A missing report: a policy that parses ends in that one-line error.
    exit_0_or_one_line_2(
        capsys, ["gate", work / "missing.report.json", "--policy", work / "p.toml"]
    )


def test_the_toml_writer_round_trips():
    """The strategies' TOML is TOML (so the fuzzing reaches the parsers behind the syntax)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    text = toml_text(
        {(): {"a": [1, 2.5, "x\n"], "b b": {"c": True}}, ("inputs", "x y"): {"d": float("inf")}}
    )
    assert tomllib.loads(text) == {
        "a": [1, 2.5, "x\n"],
        "b b": {"c": True},
        "inputs": {"x y": {"d": float("inf")}},
    }
