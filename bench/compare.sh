#!/usr/bin/env bash
# keel vs etcd on this machine: 3 nodes of each on loopback, data dirs in one temp dir,
# default fsync behaviour for both, driven by the same load generator (bench/loadgen),
# results side by side. Run through `make bench-compare` (which builds bin/keel first).
# Each system runs twice, interleaved (etcd, keel, etcd, keel): the table shows every
# run, the spread and each run's error count, and a target is met only if the worse
# round meets it.
#
#   bash bench/compare.sh                      # the full run (~30 min on 2 cores)
#   bash bench/compare.sh -rounds 3            # extra flags go to `loadgen compare`
#   bash bench/compare.sh -mem-keys 200000
#
# Raw results land in bench/results/<run>/ (gitignored); the table is also written into
# bench/README.md between the table markers, after a full run with the default protocols.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
KEEL_BIN=${KEEL_BIN:-$ROOT/bin/keel}
RUN=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-$ROOT/bench/results/$RUN}
LOADGEN=$ROOT/bench/results/bin/loadgen
WORK=$(mktemp -d /tmp/keel-bench.XXXXXX)
PIDS=$WORK/pids
LG_PID=""

# Stop exactly the processes this run started: the load generator and every server
# whose PID it recorded (it also sets PDEATHSIG, this is the second line of defence).
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n "$LG_PID" ]] && kill -0 "$LG_PID" 2>/dev/null; then
		kill -TERM "$LG_PID" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$LG_PID" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$LG_PID" 2>/dev/null || true
	fi
	if [[ -f "$PIDS" ]]; then
		while read -r pid; do
			[[ -n "$pid" ]] && kill -TERM "$pid" 2>/dev/null || true
		done <"$PIDS"
		sleep 1
		while read -r pid; do
			[[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null || true
		done <"$PIDS"
	fi
	# Keep the node logs next to the results, then drop the data dirs.
	if [[ -d "$OUT" ]]; then
		mkdir -p "$OUT/logs"
		for d in "$WORK"/*/; do
			[[ -d "$d" ]] || continue
			for f in "$d"*.log; do [[ -f "$f" ]] && cp "$f" "$OUT/logs/$(basename "$d")-$(basename "$f")"; done
		done
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT INT TERM

# etcd: $ETCD_BIN when set (e.g. ETCD_BIN=/usr/bin/etcd for Debian's 3.4), otherwise
# etcd's own server at the release of the clientv3 the load generator uses, built from
# the module proxy by the wrapper module bench/etcd (seconds once the modules are cached).
ensure_etcd() {
	if [[ -n "${ETCD_BIN:-}" ]]; then
		return
	fi
	ETCD_BIN=$ROOT/bench/results/bin/etcd
	echo "== building etcd from bench/etcd ($(awk '/etcd\/server/ {print $NF}' bench/etcd/go.mod))"
	mkdir -p "$(dirname "$ETCD_BIN")"
	(cd bench/etcd && go build -o "$ETCD_BIN" .)
}

ensure_etcd
if pgrep -x etcd >/dev/null 2>&1; then
	echo "warning: an etcd process not started by this script is running; it will skew the figures" >&2
fi
if [[ ! -x "$KEEL_BIN" ]]; then
	echo "no keel binary at $KEEL_BIN (run: make build)" >&2
	exit 1
fi

echo "== building the load generator"
mkdir -p "$(dirname "$LOADGEN")" "$OUT"
(cd bench/loadgen && go build -o "$LOADGEN" .)

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "nproc: $(nproc)"
	echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "kernel: $(uname -sr)"
	echo "cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
	echo "data dir filesystem: $(df -T "$WORK" | awk 'NR==2 {print $2" on "$1}')"
	echo "etcd: $("$ETCD_BIN" --version | head -1)"
	echo "keel: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
	echo "go: $(go version | awk '{print $3}')"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/env.txt"
cat "$OUT/env.txt"

echo "== running (results in $OUT)"
"$LOADGEN" compare -etcd-bin "$ETCD_BIN" -keel-bin "$KEEL_BIN" -work "$WORK" -out "$OUT" -pids "$PIDS" "$@" \
	> >(tee "$OUT/run.log") 2>&1 &
LG_PID=$!
wait "$LG_PID"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/env.txt"

# The README's table is the full default suite: a subset (-only, -systems) or another
# protocol (-keel-protocol, -etcd-protocol) leaves it alone.
for arg in "$@"; do
	case "$arg" in
	-only | -only=* | -systems | -systems=* | -keel-protocol | -keel-protocol=* | -etcd-protocol | -etcd-protocol=*)
		echo "== partial or other-protocol run: bench/README.md left as it is; raw results in $OUT"
		exit 0
		;;
	esac
done
"$LOADGEN" readme -out "$OUT" -readme "$ROOT/bench/README.md"
echo "== table written to bench/README.md; raw results in $OUT"
