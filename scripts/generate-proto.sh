#!/usr/bin/env bash
# Regenerates Sources/BeaconProtocol/Generated/*.pb.swift and the Python client's
# clients/python/beacon_signals/beacon_pb2.py from proto/*.proto.
# Needs protoc (Debian: protobuf-compiler) and protoc-gen-swift built from the same
# swift-protobuf version as Package.swift names (building it takes a few minutes, once).
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.39.0
plugin=${PROTOC_GEN_SWIFT:-}
if [ -z "$plugin" ]; then
  work=.build-protoc-gen-swift
  if [ ! -x "$work/bin/protoc-gen-swift" ]; then
    rm -rf "$work/src"
    git clone -q --branch "$version" https://github.com/apple/swift-protobuf.git "$work/src"
    swift build -c release --package-path "$work/src" --product protoc-gen-swift
    mkdir -p "$work/bin"
    cp "$(swift build -c release --package-path "$work/src" --show-bin-path)/protoc-gen-swift" "$work/bin/"
  fi
  plugin=$work/bin/protoc-gen-swift
fi
out=Sources/BeaconProtocol/Generated
mkdir -p "$out"
protoc --plugin=protoc-gen-swift="$plugin" --swift_out="$out" \
  --swift_opt=Visibility=Public --swift_opt=FileNaming=DropPath -I proto proto/*.proto
echo "generated into $out"
protoc --python_out=clients/python/beacon_signals -I proto proto/beacon.proto
echo "generated clients/python/beacon_signals/beacon_pb2.py"
