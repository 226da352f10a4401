#!/usr/bin/env bash
# Regenerate the checked-in Python stubs from protos/edgequal_v1.proto.
#
#   scripts/gen_protos.sh [OUT_DIR]     (default OUT_DIR: protos/)
#
# The generator version is pinned because the stubs are checked in and
# tests/test_protos.py asserts that regenerating changes nothing. The generated
# code also sets the runtime floor: it requires grpcio >= the generator's
# version and protobuf >= the protobuf gencode version it was built with.
# PYTHON selects the interpreter (default: python3).
set -euo pipefail

GRPCIO_TOOLS_VERSION="1.85.1"
PYTHON="${PYTHON:-python3}"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo/protos}"

installed="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))' 2>/dev/null || true)"
if [ "$installed" != "$GRPCIO_TOOLS_VERSION" ]; then
    echo "gen_protos.sh: needs grpcio-tools==$GRPCIO_TOOLS_VERSION for $PYTHON, found ${installed:-none}" \
        "(pip install grpcio-tools==$GRPCIO_TOOLS_VERSION)" >&2
    exit 2
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Relative -I and file name so the generated "source:" comment does not depend on the checkout path.
(cd "$repo/protos" && "$PYTHON" -m grpc_tools.protoc -I. \
    --python_out="$tmp" --pyi_out="$tmp" --grpc_python_out="$tmp" edgequal_v1.proto)

# The stubs live in the package edgequal.protos: make the grpc module's import relative.
sed -e 's/^import edgequal_v1_pb2 as /from . import edgequal_v1_pb2 as /' \
    "$tmp/edgequal_v1_pb2_grpc.py" >"$tmp/edgequal_v1_pb2_grpc.py.rel"
if ! grep -q '^from \. import edgequal_v1_pb2 as ' "$tmp/edgequal_v1_pb2_grpc.py.rel"; then
    echo "gen_protos.sh: could not make the import in edgequal_v1_pb2_grpc.py relative" >&2
    exit 1
fi
mv "$tmp/edgequal_v1_pb2_grpc.py.rel" "$tmp/edgequal_v1_pb2_grpc.py"

mkdir -p "$out"
for f in edgequal_v1_pb2.py edgequal_v1_pb2.pyi edgequal_v1_pb2_grpc.py; do
    cp "$tmp/$f" "$out/$f"
done
echo "gen_protos.sh: wrote edgequal_v1_pb2.py, edgequal_v1_pb2.pyi, edgequal_v1_pb2_grpc.py to $out"
