package dashboard_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/sidecar/runtime/dashboard"
	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
)

// The Learning page and /v1/learning show the runtime history once a run finished.
func TestLearningShowsRuntimeHistory(t *testing.T) {
	h := servicetest.NewHarness(t, nil, servicetest.WithHistory)
	h.Nomad.Register(servicetest.HeldJob("resnet", 1, 1, nil))
	h.Round()
	h.EndRuns(api.AllocClientStatusComplete, 5*time.Minute, "resnet")
	srv := httptest.NewServer(server.New(server.Config{Token: "s3cret"}, h.Service).Handler())
	t.Cleanup(srv.Close)
	c := client{servicetest.Client{T: t, URL: srv.URL, Token: "s3cret"}}
	code, body, _ := c.get("/v1/learning")
	var l dashboard.Learning
	if code != 200 || json.Unmarshal([]byte(body), &l) != nil || l.RuntimeHistory == nil || l.RuntimeHistory.Runs != 1 ||
		l.RuntimeHistory.Namespaces != 1 {
		t.Fatalf("/v1/learning %d: runtime history %+v in %.300s", code, l.RuntimeHistory, body)
	}
	code, body, _ = c.get("/ui/learning")
	if code != 200 || !strings.Contains(body, `id="runtime-history"`) ||
		!strings.Contains(body, "finished runs in the window</td><td>1</td>") {
		t.Errorf("/ui/learning %d lacks the runtime history: %.2000s", code, body)
	}
}
