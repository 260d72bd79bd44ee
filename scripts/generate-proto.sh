#!/usr/bin/env bash
# Regenerates Sources/BeaconProtocol/Generated/*.pb.swift and the Python client's
# clients/python/beacon_signals/beacon_pb2.py from proto/*.proto, and the etcd client's messages
# and gRPC stubs in Sources/BeaconEtcd/Generated from proto/etcd/rpc.proto.
# Needs protoc (Debian: protobuf-compiler), protoc-gen-swift and protoc-gen-grpc-swift-2 built
# from the same swift-protobuf and grpc-swift-protobuf versions as Package.resolved names
# (building them takes a few minutes, once).
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.39.0
grpc_version=2.4.1
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
grpc_plugin=${PROTOC_GEN_GRPC_SWIFT:-}
if [ -z "$grpc_plugin" ]; then
  work=.build-protoc-gen-grpc-swift
  if [ ! -x "$work/bin/protoc-gen-grpc-swift-2" ]; then
    rm -rf "$work/src"
    git clone -q --branch "$grpc_version" https://github.com/grpc/grpc-swift-protobuf.git "$work/src"
    swift build -c release --package-path "$work/src" --product protoc-gen-grpc-swift-2
    mkdir -p "$work/bin"
    cp "$(swift build -c release --package-path "$work/src" --show-bin-path)/protoc-gen-grpc-swift-2" "$work/bin/"
  fi
  grpc_plugin=$work/bin/protoc-gen-grpc-swift-2
fi
etcd_out=Sources/BeaconEtcd/Generated
mkdir -p "$etcd_out"
protoc --plugin=protoc-gen-swift="$plugin" --swift_out="$etcd_out" \
  --swift_opt=Visibility=Package --swift_opt=FileNaming=DropPath -I proto/etcd proto/etcd/rpc.proto
protoc --plugin=protoc-gen-grpc-swift="$grpc_plugin" --grpc-swift_out="$etcd_out" \
  --grpc-swift_opt=Visibility=Package --grpc-swift_opt=Server=false --grpc-swift_opt=FileNaming=DropPath \
  -I proto/etcd proto/etcd/rpc.proto
# Built only with the Etcd trait (Package.swift): the stubs need gRPC, which the lean build has not.
for file in "$etcd_out"/*.swift; do
  { echo '#if Etcd  // etcd fronts are built with the Etcd trait (Package.swift)'; cat "$file"; echo '#endif'; } > "$file.wrapped"
  mv "$file.wrapped" "$file"
done
echo "generated into $etcd_out"
protoc --python_out=clients/python/beacon_signals --pyi_out=clients/python/beacon_signals -I proto proto/beacon.proto
echo "generated clients/python/beacon_signals/beacon_pb2.py and its type stub, beacon_pb2.pyi"
