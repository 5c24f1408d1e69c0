// Package proto_test checks that our generated descriptors carry exactly Nomad's wire identity
// (proto packages, service and method names, field numbers and types) as listed in
// shared/docs/nomad-integration.md §3-§5. A mismatch here means Nomad cannot talk to us.
package proto_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
	"github.com/hetgpu/hetgpu/plugin/proto/hclspec"
	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

// Importing the packages registers their files; these references keep the imports used.
var _ = []any{base.File_base_base_proto, device.File_device_device_proto, drivers.File_drivers_driver_proto,
	hclspec.File_hclspec_hcl_spec_proto, structs.File_structs_structs_proto}

const (
	pkgBase    = "hashicorp.nomad.plugins.base.proto"
	pkgDevice  = "hashicorp.nomad.plugins.device"
	pkgDrivers = "hashicorp.nomad.plugins.drivers.proto"
	pkgHCL     = "hashicorp.nomad.plugins.shared.hclspec"
	pkgStructs = "hashicorp.nomad.plugins.shared.structs"
)

// methods lists every RPC as "full method name" -> "Request -> Response" with "stream " markers,
// transcribed from the facts document.
var methods = map[string]string{
	"/" + pkgBase + ".BasePlugin/PluginInfo":   "PluginInfoRequest -> PluginInfoResponse",
	"/" + pkgBase + ".BasePlugin/ConfigSchema": "ConfigSchemaRequest -> ConfigSchemaResponse",
	"/" + pkgBase + ".BasePlugin/SetConfig":    "SetConfigRequest -> SetConfigResponse",

	"/" + pkgDevice + ".DevicePlugin/Fingerprint": "FingerprintRequest -> stream FingerprintResponse",
	"/" + pkgDevice + ".DevicePlugin/Reserve":     "ReserveRequest -> ReserveResponse",
	"/" + pkgDevice + ".DevicePlugin/Stats":       "StatsRequest -> stream StatsResponse",

	"/" + pkgDrivers + ".Driver/Init":              "InitRequest -> InitResponse",
	"/" + pkgDrivers + ".Driver/TaskConfigSchema":  "TaskConfigSchemaRequest -> TaskConfigSchemaResponse",
	"/" + pkgDrivers + ".Driver/Capabilities":      "CapabilitiesRequest -> CapabilitiesResponse",
	"/" + pkgDrivers + ".Driver/Fingerprint":       "FingerprintRequest -> stream FingerprintResponse",
	"/" + pkgDrivers + ".Driver/RecoverTask":       "RecoverTaskRequest -> RecoverTaskResponse",
	"/" + pkgDrivers + ".Driver/StartTask":         "StartTaskRequest -> StartTaskResponse",
	"/" + pkgDrivers + ".Driver/WaitTask":          "WaitTaskRequest -> WaitTaskResponse",
	"/" + pkgDrivers + ".Driver/StopTask":          "StopTaskRequest -> StopTaskResponse",
	"/" + pkgDrivers + ".Driver/DestroyTask":       "DestroyTaskRequest -> DestroyTaskResponse",
	"/" + pkgDrivers + ".Driver/InspectTask":       "InspectTaskRequest -> InspectTaskResponse",
	"/" + pkgDrivers + ".Driver/TaskStats":         "TaskStatsRequest -> stream TaskStatsResponse",
	"/" + pkgDrivers + ".Driver/TaskEvents":        "TaskEventsRequest -> stream DriverTaskEvent",
	"/" + pkgDrivers + ".Driver/Shutdown":          "ShutdownRequest -> ShutdownResponse",
	"/" + pkgDrivers + ".Driver/SignalTask":        "SignalTaskRequest -> SignalTaskResponse",
	"/" + pkgDrivers + ".Driver/ExecTask":          "ExecTaskRequest -> ExecTaskResponse",
	"/" + pkgDrivers + ".Driver/ExecTaskStreaming": "stream ExecTaskStreamingRequest -> stream ExecTaskStreamingResponse",
	"/" + pkgDrivers + ".Driver/CreateNetwork":     "CreateNetworkRequest -> CreateNetworkResponse",
	"/" + pkgDrivers + ".Driver/DestroyNetwork":    "DestroyNetworkRequest -> DestroyNetworkResponse",
}

// messages lists every message's fields as in the facts document: "N name: type" separated by ";".
// Types: scalars, "repeated T", "map<K, V>", google.protobuf types by short name, structs.X / hclspec.X
// for the shared packages, and names relative to the message's own package otherwise.
// A field inside a oneof is written "N name: type (oneof o)".
var messages = map[string]string{
	pkgBase + ".PluginInfoRequest":    "",
	pkgBase + ".PluginInfoResponse":   "1 type: PluginType; 2 plugin_api_versions: repeated string; 3 plugin_version: string; 4 name: string",
	pkgBase + ".ConfigSchemaRequest":  "",
	pkgBase + ".ConfigSchemaResponse": "1 spec: hclspec.Spec",
	pkgBase + ".SetConfigRequest":     "1 msgpack_config: bytes; 2 nomad_config: NomadConfig; 3 plugin_api_version: string",
	pkgBase + ".SetConfigResponse":    "",
	pkgBase + ".NomadConfig":          "1 driver: NomadDriverConfig",
	pkgBase + ".NomadDriverConfig":    "1 ClientMaxPort: uint32; 2 ClientMinPort: uint32; 3 Topology: ClientTopology",
	pkgBase + ".ClientTopology": "1 node_ids: repeated uint32; 2 distances: ClientTopologySLIT; 3 cores: repeated ClientTopologyCore; " +
		"4 override_total_compute: uint64; 5 override_withold_compute: uint64",
	pkgBase + ".ClientTopologySLIT": "1 dimension: uint32; 2 values: repeated uint32",
	pkgBase + ".ClientTopologyCore": "1 socket_id: uint32; 2 node_id: uint32; 3 core_id: uint32; 4 core_grade: CoreGrade; " +
		"5 disable: bool; 6 base_speed: uint64; 7 max_speed: uint64; 8 guess_speed: uint64",

	pkgHCL + ".Spec": "1 object: Object (oneof block); 2 array: Array (oneof block); 3 Attr: Attr (oneof block); " +
		"4 block_value: Block (oneof block); 5 block_attrs: BlockAttrs (oneof block); 6 block_list: BlockList (oneof block); " +
		"7 block_set: BlockSet (oneof block); 8 block_map: BlockMap (oneof block); 9 default: Default (oneof block); " +
		"10 literal: Literal (oneof block)",
	pkgHCL + ".Attr":       "1 name: string; 2 type: string; 3 required: bool",
	pkgHCL + ".Block":      "1 name: string; 2 required: bool; 3 nested: Spec",
	pkgHCL + ".BlockAttrs": "1 name: string; 2 type: string; 3 required: bool",
	pkgHCL + ".BlockList":  "1 name: string; 2 min_items: uint64; 3 max_items: uint64; 4 nested: Spec",
	pkgHCL + ".BlockSet":   "1 name: string; 2 min_items: uint64; 3 max_items: uint64; 4 nested: Spec",
	pkgHCL + ".BlockMap":   "1 name: string; 2 labels: repeated string; 3 nested: Spec",
	pkgHCL + ".Literal":    "1 value: string",
	pkgHCL + ".Default":    "1 primary: Spec; 2 default: Spec",
	pkgHCL + ".Object":     "1 attributes: map<string, Spec>",
	pkgHCL + ".Array":      "1 values: repeated Spec",

	pkgStructs + ".Attribute": "1 float_val: double (oneof value); 2 int_val: int64 (oneof value); " +
		"3 string_val: string (oneof value); 4 bool_val: bool (oneof value); 5 unit: string",
	pkgStructs + ".StatObject": "1 nested: map<string, StatObject>; 2 attributes: map<string, StatValue>",
	pkgStructs + ".StatValue": "1 float_numerator_val: DoubleValue; 2 float_denominator_val: DoubleValue; " +
		"3 int_numerator_val: Int64Value; 4 int_denominator_val: Int64Value; 5 string_val: StringValue; " +
		"6 bool_val: BoolValue; 7 unit: string; 8 desc: string",
	pkgStructs + ".RecoverableError": "1 recoverable: bool",

	pkgDevice + ".FingerprintRequest":  "",
	pkgDevice + ".FingerprintResponse": "1 device_group: repeated DeviceGroup",
	pkgDevice + ".DeviceGroup": "1 vendor: string; 2 device_type: string; 3 device_name: string; " +
		"4 devices: repeated DetectedDevice; 5 attributes: map<string, structs.Attribute>",
	pkgDevice + ".DetectedDevice":       "1 ID: string; 2 healthy: bool; 3 health_description: string; 4 hw_locality: DeviceLocality",
	pkgDevice + ".DeviceLocality":       "1 pci_bus_id: string",
	pkgDevice + ".ReserveRequest":       "1 device_ids: repeated string",
	pkgDevice + ".ReserveResponse":      "1 container_res: ContainerReservation",
	pkgDevice + ".ContainerReservation": "1 envs: map<string, string>; 2 mounts: repeated Mount; 3 devices: repeated DeviceSpec",
	pkgDevice + ".Mount":                "1 task_path: string; 2 host_path: string; 3 read_only: bool",
	pkgDevice + ".DeviceSpec":           "1 task_path: string; 2 host_path: string; 3 permissions: string",
	pkgDevice + ".StatsRequest":         "1 collection_interval: Duration",
	pkgDevice + ".StatsResponse":        "1 groups: repeated DeviceGroupStats",
	pkgDevice + ".DeviceGroupStats":     "1 vendor: string; 2 type: string; 3 name: string; 4 instance_stats: map<string, DeviceStats>",
	pkgDevice + ".DeviceStats":          "1 summary: structs.StatValue; 2 stats: structs.StatObject; 3 timestamp: Timestamp",

	pkgDrivers + ".InitRequest":              "",
	pkgDrivers + ".InitResponse":             "",
	pkgDrivers + ".TaskConfigSchemaRequest":  "",
	pkgDrivers + ".TaskConfigSchemaResponse": "1 spec: hclspec.Spec",
	pkgDrivers + ".CapabilitiesRequest":      "",
	pkgDrivers + ".CapabilitiesResponse":     "1 capabilities: DriverCapabilities",
	pkgDrivers + ".FingerprintRequest":       "",
	pkgDrivers + ".FingerprintResponse": "1 attributes: map<string, structs.Attribute>; 2 health: FingerprintResponse.HealthState; " +
		"3 health_description: string; 4 err: string",
	pkgDrivers + ".RecoverTaskRequest":  "1 task_id: string; 2 handle: TaskHandle",
	pkgDrivers + ".RecoverTaskResponse": "",
	pkgDrivers + ".StartTaskRequest":    "1 task: TaskConfig",
	pkgDrivers + ".StartTaskResponse": "1 result: StartTaskResponse.Result; 2 driver_error_msg: string; 3 handle: TaskHandle; " +
		"4 network_override: NetworkOverride",
	pkgDrivers + ".WaitTaskRequest":        "1 task_id: string",
	pkgDrivers + ".WaitTaskResponse":       "1 result: ExitResult; 2 err: string",
	pkgDrivers + ".StopTaskRequest":        "1 task_id: string; 2 timeout: Duration; 3 signal: string",
	pkgDrivers + ".StopTaskResponse":       "",
	pkgDrivers + ".DestroyTaskRequest":     "1 task_id: string; 2 force: bool",
	pkgDrivers + ".DestroyTaskResponse":    "",
	pkgDrivers + ".InspectTaskRequest":     "1 task_id: string",
	pkgDrivers + ".InspectTaskResponse":    "1 task: TaskStatus; 2 driver: TaskDriverStatus; 3 network_override: NetworkOverride",
	pkgDrivers + ".TaskStatsRequest":       "1 task_id: string; 2 collection_interval: Duration",
	pkgDrivers + ".TaskStatsResponse":      "1 stats: TaskStats",
	pkgDrivers + ".TaskEventsRequest":      "",
	pkgDrivers + ".ShutdownRequest":        "",
	pkgDrivers + ".ShutdownResponse":       "",
	pkgDrivers + ".SignalTaskRequest":      "1 task_id: string; 2 signal: string",
	pkgDrivers + ".SignalTaskResponse":     "",
	pkgDrivers + ".ExecTaskRequest":        "1 task_id: string; 2 command: repeated string; 3 timeout: Duration",
	pkgDrivers + ".ExecTaskResponse":       "1 stdout: bytes; 2 stderr: bytes; 3 result: ExitResult",
	pkgDrivers + ".CreateNetworkRequest":   "1 alloc_id: string; 2 hostname: string",
	pkgDrivers + ".CreateNetworkResponse":  "1 isolation_spec: NetworkIsolationSpec; 2 created: bool",
	pkgDrivers + ".DestroyNetworkRequest":  "1 alloc_id: string; 2 isolation_spec: NetworkIsolationSpec",
	pkgDrivers + ".DestroyNetworkResponse": "",
	pkgDrivers + ".DriverCapabilities": "1 send_signals: bool; 2 exec: bool; 3 fs_isolation: DriverCapabilities.FSIsolation; " +
		"4 network_isolation_modes: repeated NetworkIsolationSpec.NetworkIsolationMode; 5 must_create_network: bool; " +
		"6 mount_configs: DriverCapabilities.MountConfigs; 8 disable_log_collection: bool; 9 dynamic_workload_users: bool",
	pkgDrivers + ".NetworkIsolationSpec": "1 mode: NetworkIsolationSpec.NetworkIsolationMode; 2 path: string; " +
		"3 labels: map<string, string>; 4 hostsConfig: HostsConfig",
	pkgDrivers + ".HostsConfig": "1 hostname: string; 2 address: string",
	pkgDrivers + ".DNSConfig":   "1 servers: repeated string; 2 searches: repeated string; 3 options: repeated string",
	pkgDrivers + ".TaskConfig": "1 id: string; 2 name: string; 3 msgpack_driver_config: bytes; 4 env: map<string, string>; " +
		"5 device_env: map<string, string>; 6 resources: Resources; 7 mounts: repeated Mount; 8 devices: repeated Device; " +
		"9 user: string; 10 alloc_dir: string; 11 stdout_path: string; 12 stderr_path: string; 13 task_group_name: string; " +
		"14 job_name: string; 15 alloc_id: string; 16 network_isolation_spec: NetworkIsolationSpec; 17 dns: DNSConfig; " +
		"18 job_id: string; 19 namespace: string; 20 node_name: string; 21 node_id: string; 22 parent_job_id: string",
	pkgDrivers + ".Resources": "1 allocated_resources: AllocatedTaskResources; 2 linux_resources: LinuxResources; " +
		"3 ports: repeated PortMapping",
	pkgDrivers + ".AllocatedTaskResources":   "1 cpu: AllocatedCpuResources; 2 memory: AllocatedMemoryResources; 5 networks: repeated NetworkResource",
	pkgDrivers + ".AllocatedCpuResources":    "1 cpu_shares: int64",
	pkgDrivers + ".AllocatedMemoryResources": "2 memory_mb: int64; 3 memory_max_mb: int64",
	pkgDrivers + ".NetworkResource": "1 device: string; 2 cidr: string; 3 ip: string; 4 mbits: int32; " +
		"5 reserved_ports: repeated NetworkPort; 6 dynamic_ports: repeated NetworkPort",
	pkgDrivers + ".NetworkPort": "1 label: string; 2 value: int32",
	pkgDrivers + ".PortMapping": "1 label: string; 2 value: int32; 3 to: int32; 4 host_ip: string",
	pkgDrivers + ".LinuxResources": "1 cpu_period: int64; 2 cpu_quota: int64; 3 cpu_shares: int64; 4 memory_limit_bytes: int64; " +
		"5 oom_score_adj: int64; 6 cpuset_cpus: string; 8 PercentTicks: double; 9 cpuset_cgroup: string",
	pkgDrivers + ".Mount": "1 task_path: string; 2 host_path: string; 3 readonly: bool; 4 propagation_mode: string; " +
		"5 selinux_label: string; 6 request_name: string",
	pkgDrivers + ".Device":          "1 task_path: string; 2 host_path: string; 3 cgroup_permissions: string",
	pkgDrivers + ".TaskHandle":      "1 version: int32; 2 config: TaskConfig; 3 state: TaskState; 4 driver_state: bytes",
	pkgDrivers + ".NetworkOverride": "1 port_map: map<string, int32>; 2 addr: string; 3 auto_advertise: bool",
	pkgDrivers + ".ExitResult":      "1 exit_code: int32; 2 signal: int32; 3 oom_killed: bool",
	pkgDrivers + ".TaskStatus": "1 id: string; 2 name: string; 3 state: TaskState; 4 started_at: Timestamp; " +
		"5 completed_at: Timestamp; 6 result: ExitResult",
	pkgDrivers + ".TaskDriverStatus": "1 attributes: map<string, string>",
	pkgDrivers + ".TaskStats": "1 id: string; 2 timestamp: Timestamp; 3 agg_resource_usage: TaskResourceUsage; " +
		"4 resource_usage_by_pid: map<string, TaskResourceUsage>",
	pkgDrivers + ".TaskResourceUsage": "1 cpu: CPUUsage; 2 memory: MemoryUsage",
	pkgDrivers + ".CPUUsage": "1 system_mode: double; 2 user_mode: double; 3 total_ticks: double; 4 throttled_periods: uint64; " +
		"5 throttled_time: uint64; 6 percent: double; 7 measured_fields: repeated CPUUsage.Fields",
	pkgDrivers + ".MemoryUsage": "1 rss: uint64; 2 cache: uint64; 3 max_usage: uint64; 4 kernel_usage: uint64; " +
		"5 kernel_max_usage: uint64; 6 measured_fields: repeated MemoryUsage.Fields; 7 usage: uint64; 8 swap: uint64",
	pkgDrivers + ".DriverTaskEvent": "1 task_id: string; 2 alloc_id: string; 3 task_name: string; 4 timestamp: Timestamp; " +
		"5 message: string; 6 annotations: map<string, string>",
	pkgDrivers + ".ExecTaskStreamingIOOperation":          "1 data: bytes; 2 close: bool",
	pkgDrivers + ".ExecTaskStreamingRequest":              "1 setup: ExecTaskStreamingRequest.Setup; 2 tty_size: ExecTaskStreamingRequest.TerminalSize; 3 stdin: ExecTaskStreamingIOOperation",
	pkgDrivers + ".ExecTaskStreamingRequest.Setup":        "1 task_id: string; 2 command: repeated string; 3 tty: bool",
	pkgDrivers + ".ExecTaskStreamingRequest.TerminalSize": "1 height: int32; 2 width: int32",
	pkgDrivers + ".ExecTaskStreamingResponse": "1 stdout: ExecTaskStreamingIOOperation; 2 stderr: ExecTaskStreamingIOOperation; " +
		"3 exited: bool; 4 result: ExitResult",
}

// enums lists every enum's values as "NAME=N" separated by ", ".
var enums = map[string]string{
	pkgBase + ".PluginType":                                   "UNKNOWN=0, DRIVER=2, DEVICE=3",
	pkgBase + ".CoreGrade":                                    "Performance=0, Efficiency=1",
	pkgDrivers + ".FingerprintResponse.HealthState":           "UNDETECTED=0, UNHEALTHY=1, HEALTHY=2",
	pkgDrivers + ".StartTaskResponse.Result":                  "SUCCESS=0, RETRY=1, FATAL=2",
	pkgDrivers + ".DriverCapabilities.FSIsolation":            "NONE=0, CHROOT=1, IMAGE=2, UNVEIL=3",
	pkgDrivers + ".DriverCapabilities.MountConfigs":           "UNKNOWN_MOUNTS=0, ANY_MOUNTS=0, NO_MOUNTS=1",
	pkgDrivers + ".NetworkIsolationSpec.NetworkIsolationMode": "HOST=0, GROUP=1, TASK=2, NONE=3",
	pkgDrivers + ".TaskState":                                 "UNKNOWN=0, RUNNING=1, EXITED=2",
	pkgDrivers + ".CPUUsage.Fields":                           "SYSTEM_MODE=0, USER_MODE=1, TOTAL_TICKS=2, THROTTLED_PERIODS=3, THROTTLED_TIME=4, PERCENT=5",
	pkgDrivers + ".MemoryUsage.Fields":                        "RSS=0, CACHE=1, MAX_USAGE=2, KERNEL_USAGE=3, KERNEL_MAX_USAGE=4, USAGE=5, SWAP=6",
}

// reserved lists reserved field numbers and names the facts document names.
var reserved = map[string]string{
	pkgDrivers + ".DriverCapabilities": "7 remote_tasks",
	pkgDrivers + ".LinuxResources":     "7 cpuset_mems",
}

var ourPackages = []string{pkgBase, pkgDevice, pkgDrivers, pkgHCL, pkgStructs}

func TestMethods(t *testing.T) {
	w := newFactWalk(t, "method", methods)
	for _, pkg := range ourPackages {
		eachFile(pkg, func(fd protoreflect.FileDescriptor) {
			for i := 0; i < fd.Services().Len(); i++ {
				sd := fd.Services().Get(i)
				for j := 0; j < sd.Methods().Len(); j++ {
					md := sd.Methods().Get(j)
					full := "/" + string(sd.FullName()) + "/" + string(md.Name())
					want, ok := w.fact(full)
					if !ok {
						continue
					}
					if got := renderMethod(md); got != want {
						t.Errorf("method %s: got %q, want %q", full, got, want)
					}
				}
			}
		})
	}
	w.done()
}

// factWalk checks the descriptors of one kind that a walk over ours meets against the facts
// document's.
type factWalk struct {
	t     *testing.T
	kind  string
	facts map[string]string
	seen  map[string]bool
}

func newFactWalk(t *testing.T, kind string, facts map[string]string) *factWalk {
	return &factWalk{t: t, kind: kind, facts: facts, seen: map[string]bool{}}
}

// fact is the document's fact on name, which the walk meets; without one the test fails and
// ok is false.
func (w *factWalk) fact(name string) (fact string, ok bool) {
	w.t.Helper()
	w.seen[name] = true
	fact, ok = w.facts[name]
	if !ok {
		w.t.Errorf("%s %s is not in the facts document", w.kind, name)
	}
	return fact, ok
}

// done fails for every fact that the walk did not meet.
func (w *factWalk) done() {
	w.t.Helper()
	for name := range w.facts {
		if !w.seen[name] {
			w.t.Errorf("%s %s missing from our descriptors", w.kind, name)
		}
	}
}

func TestMessages(t *testing.T) {
	w := newFactWalk(t, "message", messages)
	for _, pkg := range ourPackages {
		eachFile(pkg, func(fd protoreflect.FileDescriptor) {
			walkMessages(fd.Messages(), func(md protoreflect.MessageDescriptor) {
				if md.IsMapEntry() {
					return
				}
				name := string(md.FullName())
				want, ok := w.fact(name)
				if !ok {
					return
				}
				if got := renderFields(md); got != want {
					t.Errorf("message %s fields:\n got  %s\n want %s", name, got, want)
				}
				if got, want := renderReserved(md), reserved[name]; got != want {
					t.Errorf("message %s reserved: got %q, want %q", name, got, want)
				}
			})
		})
	}
	w.done()
}

func TestEnums(t *testing.T) {
	w := newFactWalk(t, "enum", enums)
	check := func(eds protoreflect.EnumDescriptors) {
		for i := 0; i < eds.Len(); i++ {
			ed := eds.Get(i)
			name := string(ed.FullName())
			want, ok := w.fact(name)
			if !ok {
				continue
			}
			var vals []string
			for j := 0; j < ed.Values().Len(); j++ {
				v := ed.Values().Get(j)
				vals = append(vals, fmt.Sprintf("%s=%d", v.Name(), v.Number()))
			}
			if got := strings.Join(vals, ", "); got != want {
				t.Errorf("enum %s: got %q, want %q", name, got, want)
			}
		}
	}
	for _, pkg := range ourPackages {
		eachFile(pkg, func(fd protoreflect.FileDescriptor) {
			check(fd.Enums())
			walkMessages(fd.Messages(), func(md protoreflect.MessageDescriptor) { check(md.Enums()) })
		})
	}
	w.done()
}

// TestPackedSLIT: Nomad declares ClientTopologySLIT.values packed; proto3 packs by default, but an
// explicit [packed=false] would change the wire bytes.
func TestPackedSLIT(t *testing.T) {
	md := (&base.ClientTopologySLIT{}).ProtoReflect().Descriptor()
	if !md.Fields().ByName("values").IsPacked() {
		t.Fatal("ClientTopologySLIT.values must be packed")
	}
}

func eachFile(pkg string, fn func(protoreflect.FileDescriptor)) {
	protoregistry.GlobalFiles.RangeFilesByPackage(protoreflect.FullName(pkg), func(fd protoreflect.FileDescriptor) bool {
		fn(fd)
		return true
	})
}

func walkMessages(mds protoreflect.MessageDescriptors, fn func(protoreflect.MessageDescriptor)) {
	for i := 0; i < mds.Len(); i++ {
		md := mds.Get(i)
		fn(md)
		walkMessages(md.Messages(), fn)
	}
}

func renderMethod(md protoreflect.MethodDescriptor) string {
	in, out := string(md.Input().Name()), string(md.Output().Name())
	if md.IsStreamingClient() {
		in = "stream " + in
	}
	if md.IsStreamingServer() {
		out = "stream " + out
	}
	return in + " -> " + out
}

func renderFields(md protoreflect.MessageDescriptor) string {
	fields := md.Fields()
	parts := make([]string, 0, fields.Len())
	idx := make([]int, fields.Len())
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return fields.Get(idx[a]).Number() < fields.Get(idx[b]).Number() })
	for _, i := range idx {
		fd := fields.Get(i)
		s := fmt.Sprintf("%d %s: %s", fd.Number(), fd.Name(), renderType(md, fd))
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			s += fmt.Sprintf(" (oneof %s)", od.Name())
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func renderReserved(md protoreflect.MessageDescriptor) string {
	var parts []string
	for i := 0; i < md.ReservedRanges().Len(); i++ {
		r := md.ReservedRanges().Get(i)
		for n := r[0]; n < r[1]; n++ {
			parts = append(parts, fmt.Sprint(n))
		}
	}
	for i := 0; i < md.ReservedNames().Len(); i++ {
		parts = append(parts, string(md.ReservedNames().Get(i)))
	}
	return strings.Join(parts, " ")
}

func renderType(owner protoreflect.MessageDescriptor, fd protoreflect.FieldDescriptor) string {
	if fd.IsMap() {
		return fmt.Sprintf("map<%s, %s>", renderType(owner, fd.MapKey()), renderType(owner, fd.MapValue()))
	}
	var s string
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		s = typeName(owner, fd.Message().FullName(), fd.Message().ParentFile().Package())
	case protoreflect.EnumKind:
		s = typeName(owner, fd.Enum().FullName(), fd.Enum().ParentFile().Package())
	default:
		s = fd.Kind().String()
	}
	if fd.IsList() {
		s = "repeated " + s
	}
	return s
}

func typeName(owner protoreflect.MessageDescriptor, full, pkg protoreflect.FullName) string {
	rel := strings.TrimPrefix(string(full), string(pkg)+".")
	switch {
	case pkg == "google.protobuf":
		return rel
	case pkg == owner.ParentFile().Package():
		return rel
	case pkg == pkgStructs:
		return "structs." + rel
	case pkg == pkgHCL:
		return "hclspec." + rel
	}
	return string(full)
}
