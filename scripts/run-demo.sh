#!/usr/bin/env bash
# make run: beacond on embedded defaults (journal and sockets under $2), a short tour with
# the beacon CLI, then the daemon stays in the foreground until Ctrl-C (or exits at once when
# BEACON_DEMO_ONLY=1).
set -euo pipefail
bin=$1
dir=$2
export BEACON_RUNTIME_DIR="$dir/run" BEACON_STATE_DIR="$dir/state"
mkdir -p "$dir"
"$bin/beacond" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT
for _ in $(seq 50); do "$bin/beacon" stats --timeout 100 >/dev/null 2>&1 && break; sleep 0.1; done

echo "== beacond is running: journal $BEACON_STATE_DIR/journal.sqlite, sockets in $BEACON_RUNTIME_DIR"
echo "== a subscriber watches 'demo.' while a writer changes it:"
"$bin/beacon" watch demo. --count 5 &
watcher=$!
sleep 0.3
"$bin/beacon" set demo.link up
# Compare-and-set on the version the first write made (the journal in $dir keeps earlier runs).
version=$("$bin/beacon" set demo.volume 30 --json | sed -n 's/.*"version":\([0-9]*\).*/\1/p')
echo "demo.volume = 30 at version $version"
"$bin/beacon" set demo.volume 45 --if-version "$version"
"$bin/beacon" set demo.session '{"user":"ada"}' --ttl 500
"$bin/beacon" delete demo.link
wait $watcher
sleep 0.7
echo "== beacon-example, a process using the client library: area = width × height of two remote"
echo "   signals, printed by an effect whenever another process writes them:"
"$bin/beacon-example" &
example=$!
sleep 0.5
"$bin/beacon" set demo.width 4 >/dev/null
sleep 0.2
"$bin/beacon" set demo.height 3 >/dev/null
sleep 0.3
kill $example; wait $example 2>/dev/null || true
echo "== after the session key's TTL ran out:"
"$bin/beacon" ls demo.
echo "== journaled history of demo.:"
"$bin/beacon" history demo. --prefix
echo "== daemon stats:"
"$bin/beacon" stats
if [ "${BEACON_DEMO_ONLY:-0}" = 1 ]; then exit 0; fi
echo "== beacond keeps running (try: BEACON_RUNTIME_DIR=$BEACON_RUNTIME_DIR $bin/beacon watch); Ctrl-C stops it."
wait $daemon
