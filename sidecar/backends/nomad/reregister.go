package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// What a re-registration carries, as measured on a real Nomad 2.0 agent (e2e
// TestReregisterRoundTrip): every field a job read from Jobs().Info comes back with, but
//   - ParentID and Dispatched, which the HTTP API ignores on a register: a periodic child
//     re-registered loses its link to its parent, and a dispatched child cannot be
//     re-registered at all ("field 'Dispatched' is read-only"); such children go through the
//     servers' RPC instead (rpc.go, linked.go);
//   - the submitted source, which Nomad copies forward to the new version by itself;
//   - the implicit `${attr.nomad.version} semver >= 1.7.0-a` group constraint, which Nomad's
//     admission appends to a group with workload identities without looking for one already
//     there: registered back as read, a group gains one more copy at each write.

// implicitIdentityConstraint is the constraint Nomad adds to groups with workload identities.
var implicitIdentityConstraint = api.Constraint{LTarget: "${attr.nomad.version}", Operand: "semver", RTarget: ">= 1.7.0-a"}

// prepareRegister readies a job read from Nomad for registering it back: it drops the
// implicit identity constraint from groups Nomad adds it to again, so that the job does not
// grow by one constraint per hetgpu write.
func prepareRegister(job *api.Job) {
	// The version read carries its tag, and Nomad would copy it onto the new version (seen on
	// a real agent): two versions would then show one tag name.
	job.VersionTag = nil
	for _, tg := range job.TaskGroups {
		if tg == nil || !hasIdentities(tg) {
			continue
		}
		var keep []*api.Constraint
		for _, c := range tg.Constraints {
			if c != nil && *c == implicitIdentityConstraint {
				continue
			}
			keep = append(keep, c)
		}
		tg.Constraints = keep
	}
}

// hasIdentities mirrors Nomad's test for adding the implicit identity constraint: a task with
// extra workload identities or a service with its own.
func hasIdentities(tg *api.TaskGroup) bool {
	for _, s := range tg.Services {
		if s != nil && s.Identity != nil {
			return true
		}
	}
	for _, t := range tg.Tasks {
		if t == nil {
			continue
		}
		if len(t.Identities) > 0 {
			return true
		}
		for _, s := range t.Services {
			if s != nil && s.Identity != nil {
				return true
			}
		}
	}
	return false
}

// reregister registers a job hetgpu rewrote back to Nomad, enforcing the JobModifyIndex it was
// read at (a job changed meanwhile is refused) and keeping scaled counts; tag, when set, tags
// the new version in the same write. A child linked to its parent goes through the servers'
// RPC when rpc is set (linked.go), so the link survives; otherwise through the HTTP API.
func reregister(ctx context.Context, c *api.Client, rpc *rpcClient, ns string, job *api.Job, modifyIndex uint64, tag *api.JobVersionTag) (*api.JobRegisterResponse, error) {
	prepareRegister(job)
	job.VersionTag = tag
	if rpc != nil && linkedChild(job) {
		return rpc.registerLinked(ctx, ns, job, modifyIndex)
	}
	wq := (&api.WriteOptions{Namespace: ns}).WithContext(ctx)
	resp, _, err := c.Jobs().RegisterOpts(job, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: modifyIndex, PreserveCounts: true}, wq)
	return resp, err
}

// tagInRegister reports whether a job's new version must be tagged in the register itself:
// Nomad's tag endpoint splits its path on "/", so it cannot name a child (parent/periodic-…,
// parent/dispatch-…) and answers 404 "invalid job tag endpoint" (seen on a real agent).
func tagInRegister(id string) bool { return strings.Contains(id, "/") }

// registerTag is the tag a register carries for a job tagInRegister names, or nil. The
// register does not know the JobModifyIndex it will get, so such a tag is named after the new
// version: prefix-vN.
func registerTag(id, prefix string, version uint64, desc string) *api.JobVersionTag {
	if !tagInRegister(id) {
		return nil
	}
	return &api.JobVersionTag{Name: fmt.Sprintf("%s-v%d", prefix, version), Description: desc}
}

// tagVersion is Jobs().TagVersion reading Nomad's answer to its end. The api client leaves
// an answer it has no use for unread, and net/http does not reuse a connection whose body
// was closed unread: every tag cost a new connection (a TCP and, on a TLS cluster, a TLS
// handshake per pin; bench live counted 1,024 a round). An empty answer is fine too.
func tagVersion(c *api.Client, id string, version uint64, name, desc string, q *api.WriteOptions) error {
	var out json.RawMessage
	_, err := c.Raw().Write("/v1/job/"+url.PathEscape(id)+"/versions/"+name+"/tag",
		&api.TagVersionRequest{Version: version, Description: desc}, &out, q)
	if err != nil && (errors.Is(err, io.EOF) || err.Error() == emptyAnswer) {
		return nil
	}
	return err
}

// emptyAnswer is the api client's error for an answer of no bytes it was asked to decode.
const emptyAnswer = "Got 0 byte response with non-nil decode object"
