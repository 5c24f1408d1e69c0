package nomad

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/hetgpu/hetgpu/internal/testcerts"
)

// rpcServer stands in for a Nomad server's RPC listener as the real agent behaved in
// e2e TestDispatchedChildrenPinned and TestPeriodicOverlapKept: the protocol byte (and the
// TLS upgrade), msgpack net/rpc framing, Job.GetJob answering the stored job, Job.Register
// enforcing the modify index and refusing any job that carries a payload.
type rpcServer struct {
	t     *testing.T
	ln    net.Listener
	tls   *tls.Config // nil: plaintext
	token string

	mu   sync.Mutex
	jobs map[string]map[string]any // by "ns/id"
	regs int
}

func newRPCServer(t *testing.T, tlsCfg *tls.Config) *rpcServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rpcServer{t: t, ln: ln, tls: tlsCfg, token: "s3cret", jobs: map[string]map[string]any{}}
	t.Cleanup(func() { ln.Close() })
	go s.serve()
	return s
}

func (s *rpcServer) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.conn(c)
	}
}

func (s *rpcServer) conn(c net.Conn) {
	defer c.Close()
	var rw net.Conn = c
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil {
		return
	}
	if b[0] == rpcTLS {
		if s.tls == nil {
			return
		}
		tc := tls.Server(c, s.tls)
		if tc.Handshake() != nil {
			return
		}
		rw = tc
		if _, err := rw.Read(b); err != nil {
			return
		}
	} else if s.tls != nil {
		return // Nomad with tls.rpc closes a plaintext connection
	}
	if b[0] != rpcNomad {
		return
	}
	dec := msgpack.NewDecoder(bufio.NewReader(rw))
	bw := bufio.NewWriter(rw)
	enc := msgpack.NewEncoder(bw)
	for {
		var h rpcHeader
		if dec.Decode(&h) != nil {
			return
		}
		var args map[string]any
		if dec.Decode(&args) != nil {
			return
		}
		reply, err := s.handle(h.ServiceMethod, args)
		out := rpcHeader{ServiceMethod: h.ServiceMethod, Seq: h.Seq}
		if err != nil {
			out.Error, reply = err.Error(), struct{}{}
		}
		_ = enc.Encode(&out)
		_ = enc.Encode(reply)
		_ = bw.Flush()
	}
}

func (s *rpcServer) handle(method string, args map[string]any) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if args["AuthToken"] != s.token {
		return nil, errors.New("Permission denied")
	}
	switch method {
	case "Job.GetJob":
		return map[string]any{"Job": s.jobs[fmt.Sprintf("%v/%v", args["Namespace"], args["JobID"])], "Index": uint64(100)}, nil
	case "Job.Register":
		job, _ := args["Job"].(map[string]any)
		k := fmt.Sprintf("%v/%v", job["Namespace"], job["ID"])
		old := s.jobs[k]
		if p, _ := job["Payload"].(string); p != "" {
			return nil, errors.New("1 error occurred:\n\t* job can't be submitted with a payload, only dispatched\n\n")
		}
		if old != nil && args["EnforceIndex"] == true && uintOf(args["JobModifyIndex"]) != uintOf(old["JobModifyIndex"]) {
			return nil, fmt.Errorf("Enforcing job modify index %d: job exists with conflicting job modify index: %d", uintOf(args["JobModifyIndex"]), uintOf(old["JobModifyIndex"]))
		}
		if old != nil && old["Dispatched"] != job["Dispatched"] {
			return nil, errors.New("field 'Dispatched' is read-only")
		}
		s.regs++
		job["JobModifyIndex"] = uintOf(old["JobModifyIndex"]) + 10
		job["Version"] = uintOf(old["Version"]) + 1
		s.jobs[k] = job
		return map[string]any{"JobModifyIndex": job["JobModifyIndex"], "EvalID": "eval-1"}, nil
	}
	return nil, fmt.Errorf("rpc: can't find method %s", method)
}

// storedChild is a dispatched child as Nomad's servers encode it: fields hetgpu does not
// model (the idempotency token, a task's driver config with numbers of several widths, a
// field from a future Nomad) must come back from a pin as they went.
func storedChild() map[string]any {
	hold := map[string]any{"LTarget": "${meta.hetgpu.queue}", "RTarget": "waiting-for-hetgpu", "Operand": "="}
	return map[string]any{
		"ID": "train/dispatch-1-abcd", "Name": "train/dispatch-1-abcd", "Namespace": "default", "Region": "global",
		"ParentID": "train", "Dispatched": true, "DispatchIdempotencyToken": "tok-1", "Payload": "\x00",
		"Meta": map[string]any{"run": "1", "hetgpu.steps": "30"}, "Priority": int8(50), "JobModifyIndex": uint64(7), "Version": uint64(0),
		"ParameterizedJob": map[string]any{"Payload": "optional", "MetaOptional": []any{"run"}},
		"Constraints":      []any{hold},
		"TaskGroups": []any{map[string]any{
			"Name": "train", "Count": int8(1),
			"Tasks": []any{map[string]any{
				"Name": "train", "Driver": "hetgpu",
				"Config":      map[string]any{"args": []any{"-steps", "30"}, "workers": int8(3), "lr": 0.5, "big": uint64(1) << 40},
				"KillTimeout": int64(5e9),
				"Resources":   map[string]any{"CPU": int16(100), "Devices": []any{map[string]any{"Name": "nvidia/gpu", "Count": uint8(2)}}},
			}},
		}},
		"FromAFutureNomad": map[string]any{"Nested": []any{"x", uint8(1), nil}},
	}
}

// childAPI is the same child as the HTTP API gives it (what hetgpu's rewrites work on).
func childAPI() *api.Job {
	id, ns, region, parent, group, gpu := "train/dispatch-1-abcd", "default", "global", "train", "train", "nvidia/gpu"
	count := uint64(2)
	mi := uint64(7)
	return &api.Job{ID: &id, Namespace: &ns, Region: &region, ParentID: &parent, Dispatched: true, JobModifyIndex: &mi,
		Constraints: []*api.Constraint{holdConstraint()},
		TaskGroups: []*api.TaskGroup{{Name: &group, Tasks: []*api.Task{{Name: "train",
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: gpu, Count: &count}}}}}}}}
}

func rpcClientFor(s *rpcServer, tlsCfg *tls.Config) *rpcClient {
	return newRPCClient(&RPCConfig{Address: s.ln.Addr().String(), Token: "s3cret", TLS: tlsCfg, Timeout: 5 * time.Second}, nil)
}

// TestRegisterLinkedKeepsEverything: a pin of a linked child through the RPC changes exactly
// the fields hetgpu writes (constraints, ui, version tag; the empty payload goes, as Nomad
// refuses any register with one) and carries every other field back as stored.
func TestRegisterLinkedKeepsEverything(t *testing.T) {
	s := newRPCServer(t, nil)
	s.jobs["default/train/dispatch-1-abcd"] = storedChild()
	job := childAPI()
	if err := PinJob(job, []GroupPin{{Group: "train", NodeIDs: []string{"node-1"}, DeviceIDs: []string{"GPU-a", "GPU-b"}, Line: "pinned"}}, UI{ExplainURL: "http://hetgpu/why"}); err != nil {
		t.Fatal(err)
	}
	tag := &api.JobVersionTag{Name: "hetgpu-pin-v1", Description: "pinned"}
	resp, err := reregister(context.Background(), nil, rpcClientFor(s, nil), "default", job, 7, tag)
	if err != nil {
		t.Fatal(err)
	}
	if resp.JobModifyIndex != 17 || resp.EvalID != "eval-1" {
		t.Errorf("register answer %+v, want JobModifyIndex 17 and the eval", resp)
	}
	got := s.jobs["default/train/dispatch-1-abcd"]
	want := storedChild()
	// What the pin writes.
	for _, k := range []string{"Constraints", "UI", "VersionTag", "JobModifyIndex", "Version", "Payload", "TaskGroups"} {
		delete(want, k)
	}
	for k, v := range want {
		if !reflect.DeepEqual(numbersAsJSON(got[k]), numbersAsJSON(v)) {
			t.Errorf("field %s: %#v after the pin, %#v before", k, got[k], v)
		}
	}
	if got["Payload"] != nil {
		t.Errorf("Payload %q registered; Nomad refuses any", got["Payload"])
	}
	if c := got["Constraints"]; c != nil {
		t.Errorf("job constraints %v after the pin, want the hold gone", c)
	}
	tg := got["TaskGroups"].([]any)[0].(map[string]any)
	task := tg["Tasks"].([]any)[0].(map[string]any)
	wantTask := storedChild()["TaskGroups"].([]any)[0].(map[string]any)["Tasks"].([]any)[0].(map[string]any)
	if !reflect.DeepEqual(numbersAsJSON(task["Config"]), numbersAsJSON(wantTask["Config"])) || uintOf(task["KillTimeout"]) != 5e9 {
		t.Errorf("task config %v kill timeout %v after the pin, want %v and 5s", task["Config"], task["KillTimeout"], wantTask["Config"])
	}
	if fmt.Sprint(tg["Constraints"]) != "[map[LTarget:${node.unique.id} Operand:= RTarget:node-1]]" {
		t.Errorf("group constraints %v, want the node pin", tg["Constraints"])
	}
	dev := task["Resources"].(map[string]any)["Devices"].([]any)[0].(map[string]any)
	if fmt.Sprint(dev["Constraints"]) != "[map[LTarget:${device.ids} Operand:set_contains_any RTarget:GPU-a,GPU-b]]" || uintOf(dev["Count"]) != 2 {
		t.Errorf("device request %v, want the GPU pin and its count", dev)
	}
	ui := got["UI"].(map[string]any)
	if !strings.Contains(ui["Description"].(string), "pinned") || fmt.Sprint(ui["Links"]) != "[map[Label:hetgpu: why here Url:http://hetgpu/why]]" {
		t.Errorf("ui %v, want hetgpu's line and link (Nomad's field is Url)", ui)
	}
	if vt := got["VersionTag"].(map[string]any); vt["Name"] != "hetgpu-pin-v1" || vt["TaggedTime"] == int64(0) {
		t.Errorf("version tag %v, want hetgpu-pin-v1 with its time", vt)
	}
}

// numbersAsJSON compares decoded values by what they mean, not by the integer width msgpack
// chose for them.
func numbersAsJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestRPCRefusals: what the servers refuse reaches the caller in words it acts on.
func TestRPCRefusals(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(s *rpcServer, job *api.Job, rc *rpcClient)
		check  func(error) bool
		expect string
	}{
		{"changed since read", func(s *rpcServer, _ *api.Job, _ *rpcClient) {
			s.jobs["default/train/dispatch-1-abcd"]["JobModifyIndex"] = uint64(9)
		}, isConflict, "a conflict (decide again)"},
		{"payload", func(s *rpcServer, _ *api.Job, _ *rpcClient) {
			s.jobs["default/train/dispatch-1-abcd"]["Payload"] = "\x05hello"
		}, func(err error) bool { return errors.Is(err, errDispatchedPayload) }, "errDispatchedPayload"},
		{"gone", func(s *rpcServer, _ *api.Job, _ *rpcClient) { delete(s.jobs, "default/train/dispatch-1-abcd") },
			func(err error) bool { return strings.Contains(err.Error(), "job does not exist") }, "job does not exist"},
		{"token", func(_ *rpcServer, _ *api.Job, rc *rpcClient) { rc.cfg.Token = "wrong" },
			func(err error) bool {
				var re *RPCError
				return errors.As(err, &re) && re.Method == "Job.GetJob" && re.Message == "Permission denied"
			}, "the server's Permission denied"},
		{"group renamed", func(s *rpcServer, _ *api.Job, _ *rpcClient) {
			s.jobs["default/train/dispatch-1-abcd"]["TaskGroups"].([]any)[0].(map[string]any)["Name"] = "other"
		}, func(err error) bool { return strings.Contains(err.Error(), `the stored job has no group "train"`) }, "the missing group named"},
		{"no server", func(_ *rpcServer, _ *api.Job, rc *rpcClient) { rc.cfg.Address = "127.0.0.1:1" },
			func(err error) bool { return strings.Contains(err.Error(), "nomad.rpc_address") }, "a hint at nomad.rpc_address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newRPCServer(t, nil)
			s.jobs["default/train/dispatch-1-abcd"] = storedChild()
			job, rc := childAPI(), rpcClientFor(s, nil)
			tt.setup(s, job, rc)
			_, err := reregister(context.Background(), nil, rc, "default", job, 7, nil)
			if err == nil || !tt.check(err) {
				t.Fatalf("error %v, want %s", err, tt.expect)
			}
			if s.regs != 0 {
				t.Errorf("%d registers went through", s.regs)
			}
		})
	}
}

// TestRPCOverTLS: with TLS the connection is upgraded (0x04, handshake, then 0x01 inside);
// without a configured server name the server must present server.<region>.nomad.
func TestRPCOverTLS(t *testing.T) {
	certs := testcerts.MustWrite(t, t.TempDir())
	s := newRPCServer(t, &tls.Config{Certificates: []tls.Certificate{testcerts.Pair(t, certs.ServerCert, certs.ServerKey)}})
	s.jobs["default/train/dispatch-1-abcd"] = storedChild()
	pool := testcerts.Pool(t, certs.CA)

	if _, err := rpcClientFor(s, nil).getJob(context.Background(), "global", "default", "train/dispatch-1-abcd"); err == nil {
		t.Error("a plaintext call to a TLS server succeeded")
	}
	_, err := rpcClientFor(s, &tls.Config{RootCAs: pool}).getJob(context.Background(), "global", "default", "train/dispatch-1-abcd")
	if err == nil || !strings.Contains(err.Error(), "server name server.global.nomad") {
		t.Errorf("default server name: %v, want the handshake to check server.global.nomad", err)
	}
	got, err := rpcClientFor(s, &tls.Config{RootCAs: pool, ServerName: "localhost"}).getJob(context.Background(), "global", "default", "train/dispatch-1-abcd")
	if err != nil || got["ParentID"] != "train" {
		t.Fatalf("over TLS: %v %v", got["ParentID"], err)
	}
}

// TestDispatchedDecidable: a held dispatched child is decided for when the backend reaches
// the servers' RPC and the child has no payload; otherwise it is undecidable, with why.
func TestDispatchedDecidable(t *testing.T) {
	tests := []struct {
		name    string
		rpc     bool
		payload []byte
		want    error
	}{
		{"no RPC", false, []byte{0}, errDispatched},
		{"RPC, dispatched without a payload", true, []byte{0}, nil},
		{"RPC, no payload field", true, nil, nil},
		{"RPC, a payload", true, []byte{5, 16, 'h', 'e', 'l', 'l', 'o'}, errDispatchedPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &Backend{}
			if tt.rpc {
				b.rpc = newRPCClient(&RPCConfig{}, nil)
			}
			job := childAPI()
			job.Payload = tt.payload
			job.Meta = map[string]string{}
			_, err := b.pendingJob(job, job.TaskGroups[0], time.Time{})
			if !errors.Is(err, tt.want) && (tt.want != nil || err != nil) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
		})
	}
}

// TestRewritesTouchOnlyWrittenFields: every rewrite hetgpu makes changes only the fields a
// write to a linked child carries onto the stored job (transplant): constraints at every
// level and the ui block. A rewrite that changed anything else would be lost on a child.
func TestRewritesTouchOnlyWrittenFields(t *testing.T) {
	rich := func() *api.Job {
		job := childAPI()
		two, gpuGroup, cpuGroup := 2, "train", "launcher"
		job.Meta = map[string]string{"hetgpu.steps": "30", "team": "vision"}
		job.Priority = &two
		job.UI = &api.JobUIConfig{Description: "the user's words", Links: []*api.JobUILink{{Label: "runbook", URL: "https://example.com"}}}
		job.TaskGroups[0].Count = &two
		job.TaskGroups[0].Meta = map[string]string{"hetgpu.batch_size": "64"}
		job.TaskGroups[0].Tasks[0].Constraints = []*api.Constraint{api.NewConstraint("${attr.kernel.name}", "=", "linux")}
		job.TaskGroups[0].Tasks[0].Config = map[string]any{"args": []any{"-steps", "30"}}
		job.TaskGroups[0].Name = &gpuGroup
		job.TaskGroups = append(job.TaskGroups, &api.TaskGroup{Name: &cpuGroup, Tasks: []*api.Task{{Name: "launch"}}})
		return job
	}
	pin := []GroupPin{{Group: "train", NodeIDs: []string{"n1"}, DeviceIDs: []string{"GPU-a"}, Line: "pinned"}}
	ui := UI{ExplainURL: "http://hetgpu/why"}
	tests := []struct {
		name    string
		rewrite func(*api.Job) error
	}{
		{"pin", func(j *api.Job) error { return PinJob(j, pin, ui) }},
		{"re-hold", func(j *api.Job) error {
			if err := PinJob(j, pin, ui); err != nil {
				return err
			}
			return ReholdJob(j, "train", "re-held", ui)
		}},
		{"re-hold gang", func(j *api.Job) error {
			if err := PinJob(j, pin, ui); err != nil {
				return err
			}
			return ReholdGang(j, []string{"train"}, true, map[string]string{"train": "preempted"}, ui)
		}},
		{"release", func(j *api.Job) error {
			if !ReleaseJob(j, "released") {
				return errors.New("nothing to release")
			}
			return nil
		}},
		{"waiting note", func(j *api.Job) error { SetGroupLine(j, "train", "held: rank 2 of 3", ui); return nil }},
	}
	strip := func(t *testing.T, j *api.Job) string {
		t.Helper()
		c, err := copyJob(j)
		if err != nil {
			t.Fatal(err)
		}
		c.Constraints, c.UI, c.VersionTag = nil, nil, nil
		for _, tg := range c.TaskGroups {
			tg.Constraints = nil
			for _, task := range tg.Tasks {
				task.Constraints = nil
				if task.Resources != nil {
					for _, d := range task.Resources.Devices {
						d.Constraints = nil
					}
				}
			}
		}
		return numbersAsJSON(c)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, after := rich(), rich()
			if err := tt.rewrite(after); err != nil {
				t.Fatal(err)
			}
			if numbersAsJSON(before) == numbersAsJSON(after) {
				t.Fatal("the rewrite changed nothing")
			}
			if b, a := strip(t, before), strip(t, after); b != a {
				t.Errorf("the rewrite changed a field a linked child's write does not carry:\n before %s\n after  %s", b, a)
			}
		})
	}
}
