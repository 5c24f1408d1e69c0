package nomad

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestTagVersionReusesConnection: tagging reads Nomad's answer, whatever it is (a body, or
// none), so the client keeps one connection for every tag instead of a new one each; errors
// still come back.
func TestTagVersionReusesConnection(t *testing.T) {
	for _, answer := range []string{`{"Name":"hetgpu-pin-12","Description":"d","TaggedTime":1}` + "\n", ""} {
		var conns atomic.Int32
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/job/train/versions/hetgpu-pin-12/tag" || r.Method != http.MethodPut {
				http.Error(w, "job version not found", http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(answer))
		}))
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
		srv.Start()
		hc, err := HTTPClient(nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := api.NewClient(&api.Config{Address: srv.URL, HttpClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if err := tagVersion(c, "train", 3, "hetgpu-pin-12", "d", &api.WriteOptions{}); err != nil {
				t.Fatalf("answer %q: %v", answer, err)
			}
		}
		if n := conns.Load(); n != 1 {
			t.Errorf("answer %q: %d connections for 5 tags, want 1", answer, n)
		}
		if err := tagVersion(c, "gone", 3, "hetgpu-pin-12", "d", &api.WriteOptions{}); err == nil || statusCode(err) != 404 {
			t.Errorf("answer %q: tagging a missing version: %v, want the 404", answer, err)
		}
		srv.Close()
	}
}
