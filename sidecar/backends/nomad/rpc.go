package nomad

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/vmihailenco/msgpack/v5"
)

// Nomad's HTTP API cannot write a job that is linked to its parent: a register through it
// drops ParentID (a periodic child then falls out of its parent's prohibit_overlap) and
// refuses a dispatched child outright (the HTTP job carries Dispatched=false, which the
// server reads as a change of a read-only field). The servers' own RPC takes the job as it is
// stored, so hetgpu reads a linked child there, changes only the fields it writes, and
// registers it back the same way: every link field stays byte for byte.
//
// The wire, from Nomad's source (helper/pool, nomad/rpc.go, net-rpc-msgpackrpc): a TCP
// connection to a server's RPC port opens with one byte naming the protocol (0x01 Nomad's
// net/rpc; 0x04 a TLS upgrade, after whose handshake the 0x01 follows inside TLS); then each
// call is a msgpack header {ServiceMethod, Seq} and the argument struct, each answer a header
// {ServiceMethod, Seq, Error} and the reply. Structs are msgpack maps keyed by Go field name,
// embedded structs (QueryOptions, WriteRequest) flattened into their parent.

const (
	rpcNomad = 0x01
	rpcTLS   = 0x04
)

// RPCConfig is how the backend reaches Nomad's servers over RPC for writes to linked
// children (see above). Without it those writes fall back to the HTTP API: a dispatched
// child is then reported undecidable and a pinned periodic child loses its ParentID.
type RPCConfig struct {
	// Address is a server's RPC address (host:port); empty asks the agent for the leader's
	// (/v1/status/leader), at each call, so a leader change is followed.
	Address string
	// Token is the ACL secret sent with each call (the HTTP client's token).
	Token string
	// TLS, when set, upgrades each connection to TLS (Nomad's tls.rpc). An empty ServerName
	// verifies the server as server.<region>.nomad, the name Nomad's server certificates carry.
	TLS *tls.Config
	// Timeout bounds one call (dial, handshake, request, answer); default 10 s.
	Timeout time.Duration
}

// rpcClient makes one call per connection: writes to linked children are rare (a pin, a
// re-hold, a release), so a pool would only hold sockets open.
type rpcClient struct {
	cfg RPCConfig
	api *api.Client
}

func newRPCClient(cfg *RPCConfig, c *api.Client) *rpcClient {
	if cfg == nil {
		return nil
	}
	rc := &rpcClient{cfg: *cfg, api: c}
	if rc.cfg.Timeout <= 0 {
		rc.cfg.Timeout = 10 * time.Second
	}
	return rc
}

// rpcHeader is net/rpc's request and response header as Nomad's codec writes it.
type rpcHeader struct {
	ServiceMethod string `msgpack:"ServiceMethod"`
	Seq           uint64 `msgpack:"Seq"`
	Error         string `msgpack:"Error,omitempty"`
}

// RPCError is an error a Nomad server answered a call with.
type RPCError struct {
	Method, Address, Message string
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("nomad RPC %s at %s: %s", e.Method, e.Address, e.Message)
}

// address is the server to call: the configured one, else the leader's.
func (r *rpcClient) address(ctx context.Context) (string, error) {
	if r.cfg.Address != "" {
		return r.cfg.Address, nil
	}
	leader, err := r.api.Status().Leader()
	if err != nil {
		return "", fmt.Errorf("nomad RPC: asking the agent for the leader's RPC address: %w (set nomad.rpc_address)", err)
	}
	if leader == "" {
		return "", errors.New("nomad RPC: the cluster has no leader")
	}
	return leader, ctx.Err()
}

// call sends one request and decodes the reply into reply.
func (r *rpcClient) call(ctx context.Context, region, method string, args, reply any) error {
	addr, err := r.address(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("nomad RPC %s: dial %s: %w (set nomad.rpc_address to a server's RPC address, port 4647 by default)", method, addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var rw net.Conn = conn
	if r.cfg.TLS != nil {
		if _, err := conn.Write([]byte{rpcTLS}); err != nil {
			return fmt.Errorf("nomad RPC %s at %s: %w", method, addr, err)
		}
		tc := r.cfg.TLS.Clone()
		if tc.ServerName == "" {
			tc.ServerName = "server." + region + ".nomad"
		}
		t := tls.Client(conn, tc)
		if err := t.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("nomad RPC %s at %s: TLS handshake (server name %s): %w", method, addr, tc.ServerName, err)
		}
		rw = t
	}
	bw := bufio.NewWriter(rw)
	enc := msgpack.NewEncoder(bw)
	if err := bw.WriteByte(rpcNomad); err != nil {
		return fmt.Errorf("nomad RPC %s at %s: %w", method, addr, err)
	}
	if err := enc.Encode(&rpcHeader{ServiceMethod: method, Seq: 1}); err != nil {
		return fmt.Errorf("nomad RPC %s: encode header: %w", method, err)
	}
	if err := enc.Encode(args); err != nil {
		return fmt.Errorf("nomad RPC %s: encode request: %w", method, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("nomad RPC %s at %s: send: %w", method, addr, err)
	}
	dec := msgpack.NewDecoder(bufio.NewReader(rw))
	var h rpcHeader
	if err := dec.Decode(&h); err != nil {
		if r.cfg.TLS != nil && strings.Contains(err.Error(), "bad certificate") {
			// Seen on a real agent: with verify_server_hostname a server refuses any peer
			// certificate that does not name a Nomad client or server of its region.
			return fmt.Errorf("nomad RPC %s at %s: the server refused the client certificate (with verify_server_hostname Nomad's servers accept only certificates for client.%s.nomad or server.%s.nomad): %w",
				method, addr, region, region, err)
		}
		return fmt.Errorf("nomad RPC %s at %s: read answer: %w", method, addr, err)
	}
	if h.Error != "" {
		return &RPCError{Method: method, Address: addr, Message: h.Error}
	}
	if err := dec.Decode(reply); err != nil {
		return fmt.Errorf("nomad RPC %s at %s: decode reply: %w", method, addr, err)
	}
	return nil
}

// rpcJobRequest is Nomad's JobSpecificRequest with its QueryOptions flattened.
type rpcJobRequest struct {
	JobID     string `msgpack:"JobID"`
	Region    string `msgpack:"Region"`
	Namespace string `msgpack:"Namespace"`
	AuthToken string `msgpack:"AuthToken"`
}

type rpcJobReply struct {
	Job   map[string]any `msgpack:"Job"`
	Index uint64         `msgpack:"Index"`
}

// rpcRegisterRequest is Nomad's JobRegisterRequest with its WriteRequest flattened. Job is
// the job as stored, decoded generically so that no field hetgpu does not know is lost.
type rpcRegisterRequest struct {
	Job            map[string]any `msgpack:"Job"`
	EnforceIndex   bool           `msgpack:"EnforceIndex"`
	JobModifyIndex uint64         `msgpack:"JobModifyIndex"`
	PreserveCounts bool           `msgpack:"PreserveCounts"`
	Region         string         `msgpack:"Region"`
	Namespace      string         `msgpack:"Namespace"`
	AuthToken      string         `msgpack:"AuthToken"`
}

type rpcRegisterReply struct {
	EvalID          string `msgpack:"EvalID"`
	EvalCreateIndex uint64 `msgpack:"EvalCreateIndex"`
	JobModifyIndex  uint64 `msgpack:"JobModifyIndex"`
	Warnings        string `msgpack:"Warnings"`
}

// getJob reads a job as the servers store it.
func (r *rpcClient) getJob(ctx context.Context, region, ns, id string) (map[string]any, error) {
	var reply rpcJobReply
	err := r.call(ctx, region, "Job.GetJob", &rpcJobRequest{JobID: id, Region: region, Namespace: ns, AuthToken: r.cfg.Token}, &reply)
	if err != nil {
		return nil, err
	}
	if reply.Job == nil {
		// The words the callers look for, as Nomad's HTTP API says them.
		return nil, fmt.Errorf("nomad RPC Job.GetJob %s/%s: job does not exist", ns, id)
	}
	return reply.Job, nil
}

// register writes a job back, enforcing the JobModifyIndex it was read at and keeping the
// groups' scaled counts, as the HTTP path does.
func (r *rpcClient) register(ctx context.Context, region, ns string, job map[string]any, modifyIndex uint64) (*api.JobRegisterResponse, error) {
	var reply rpcRegisterReply
	err := r.call(ctx, region, "Job.Register", &rpcRegisterRequest{Job: job, EnforceIndex: true, JobModifyIndex: modifyIndex,
		PreserveCounts: true, Region: region, Namespace: ns, AuthToken: r.cfg.Token}, &reply)
	if err != nil {
		return nil, err
	}
	return &api.JobRegisterResponse{EvalID: reply.EvalID, EvalCreateIndex: reply.EvalCreateIndex,
		JobModifyIndex: reply.JobModifyIndex, Warnings: reply.Warnings}, nil
}

// jobRegion is the region a job's calls go to.
func jobRegion(job *api.Job) string {
	if r := strings.TrimSpace(deref(job.Region, "")); r != "" {
		return r
	}
	return "global"
}
