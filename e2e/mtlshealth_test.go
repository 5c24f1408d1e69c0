package e2e

// The documented sidecar job under mTLS (client_ca in its secrets variable): Nomad's http
// service check, which cannot present a client certificate, must still pass, and so must a
// deployment that waits for it, while everything but /v1/health keeps requiring one.

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// waitChecksPassing waits until want running allocations of job each report their Nomad
// service checks, all "success" (GET /v1/client/allocation/:id/checks).
func waitChecksPassing(t *testing.T, c *api.Client, job string, want int) {
	t.Helper()
	var last []string
	waitFor(t, 60*time.Second, fmt.Sprintf("Nomad to report the service checks of %d %s allocations passing", want, job), func() bool {
		stubs, _, err := c.Jobs().Allocations(job, false, nil)
		if err != nil {
			return false
		}
		last = last[:0]
		passing := 0
		for _, s := range stubs {
			if s.ClientStatus != api.AllocClientStatusRunning {
				continue
			}
			checks, err := c.Allocations().Checks(s.ID, nil)
			if err != nil {
				last = append(last, fmt.Sprintf("%s: %v", s.ID[:8], err))
				continue
			}
			ok := len(checks) > 0
			for _, ck := range checks {
				last = append(last, fmt.Sprintf("%s %s/%s: %s (%d) %.200s", s.ID[:8], ck.Service, ck.Check, ck.Status, ck.StatusCode, ck.Output))
				ok = ok && ck.Status == "success"
			}
			if ok {
				passing++
			}
		}
		sort.Strings(last)
		return passing == want
	}, func() string { return "checks:\n" + strings.Join(last, "\n") })
	t.Logf("Nomad's service checks of %s: %s", job, strings.Join(last, "; "))
}

// TestHASidecarJobMTLSHealthCheck: jobspecs/hetgpu-sidecar.nomad.hcl as shipped, with
// client_ca in the secrets variable and an operator's update block that waits for the
// checks: Nomad reports both replicas' /v1/health checks passing and the deployment
// succeeds (the jobspec sets tls.health_without_client_cert with client_ca). A client
// without a certificate reads /v1/health and gets 401 naming tls.client_ca_file anywhere
// else, even with the read token; with the client certificate the tokens decide as before.
func TestHASidecarJobMTLSHealthCheck(t *testing.T) {
	j := runSidecarJobWithACL(t, true, func(job *api.Job) {
		u := api.DefaultUpdateStrategy()
		u.MinHealthyTime, u.HealthyDeadline, u.ProgressDeadline = ptrTo(3*time.Second), ptrTo(time.Minute), ptrTo(2*time.Minute)
		job.TaskGroups[0].Update = u
	})
	waitFor(t, 90*time.Second, "the sidecar job's deployment to succeed on its checks", func() bool {
		d, _, err := j.c.API.Jobs().LatestDeployment("hetgpu-sidecar", nil)
		if err != nil || d == nil {
			return false
		}
		if d.Status == api.DeploymentStatusFailed {
			t.Fatalf("deployment %s failed: %s", d.ID, d.StatusDescription)
		}
		return d.Status == api.DeploymentStatusSuccessful
	}, func() string { return jobState(j.c.API, "hetgpu-sidecar") })
	noCert := tlsClient(t, j.certs.CA, "", "")
	for _, u := range j.urls {
		sc := &secureSidecar{url: u, client: noCert}
		for _, ck := range []struct {
			path, token string
			want        int
			contains    string
		}{
			{"/v1/health", "", http.StatusOK, `"status": "ok"`},
			{"/v1/queue", e2eReadToken, http.StatusUnauthorized, "tls.client_ca_file"},
			{"/metrics", e2eReadToken, http.StatusUnauthorized, "tls.client_ca_file"},
			{"/ui/fleet", "", http.StatusUnauthorized, "tls.client_ca_file"},
		} {
			if code, body, _ := sc.get(t, ck.path, ck.token); code != ck.want || !strings.Contains(body, ck.contains) {
				t.Errorf("without a client certificate GET %s%s (token %q) = %d %.300s; want %d with %q", u, ck.path, ck.token, code, body, ck.want, ck.contains)
			}
		}
	}
}
