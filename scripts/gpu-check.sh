#!/usr/bin/env bash
# hetgpu's real-GPU check (docs/gpu-check.md). `make gpu-check` copies this script next to the
# test binaries it builds (dist/gpu-check/{device,driver}.test); on a GPU machine run
#
#   OUT=/some/folder bash dist/gpu-check/run.sh
#
# It runs the device plugin's and the task driver's TestGPUCheck* tests against the node's
# NVML (HETGPU_GPU_CHECK=real; `make gpu-check-dry` runs it with =fake, the fake NVML) and
# writes into $OUT: system.txt (nvidia-smi), <binary>.log (go test -v output), the tests'
# JSON results and summary.txt. About 1-2 minutes; every test binary is bounded by 4 minutes.
# Exit status 0 when every check passed or skipped with its reason.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${HETGPU_GPU_CHECK:-real}
out=${OUT:-$here/out}
mkdir -p "$out"
export HETGPU_GPU_CHECK=$mode HETGPU_GPU_CHECK_OUT=$out
{
	echo "mode: $mode"
	date -u
	uname -a
	if [ "$mode" = real ]; then
		if command -v nvidia-smi >/dev/null; then
			nvidia-smi -L
			nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,power.draw,power.limit,mig.mode.current --format=csv
			nvidia-smi -q
		else
			echo "nvidia-smi not in PATH"
		fi
	fi
} >"$out/system.txt" 2>&1
rc=0
: >"$out/summary.txt"
for t in device driver; do
	bin=$here/$t.test
	if [ ! -x "$bin" ]; then
		echo "gpu-check: $bin is missing; run make gpu-check first" | tee -a "$out/summary.txt" >&2
		rc=1
		continue
	fi
	# The test binary runs in its own folder (the driver's doubles as its task shim).
	(cd "$out" && timeout 240 "$bin" -test.run '^TestGPUCheck' -test.v -test.count 1 -test.timeout 220s) >"$out/$t.log" 2>&1
	st=$?
	[ $st -eq 0 ] || rc=1
	grep -E '^(=== RUN|--- (PASS|FAIL|SKIP)|ok|FAIL|PASS)|^\s+\S+_test\.go:[0-9]+: ' "$out/$t.log" | grep -v '^=== RUN' | sed "s/^/$t: /" >>"$out/summary.txt"
	echo "$t: exit status $st" >>"$out/summary.txt"
done
cat "$out/summary.txt"
if [ $rc -eq 0 ]; then
	echo "gpu-check ($mode): PASS; results in $out"
else
	echo "gpu-check ($mode): FAIL; results in $out (see the logs there)"
fi
exit $rc
