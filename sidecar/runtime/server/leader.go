package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/hetgpu/hetgpu/internal/httpjson"
)

// toLeader answers a write on a standby replica: 307 to the leader's address (the client
// repeats the same method and body there), or 503 with Retry-After while no leader is known.
// It reports whether it answered.
func toLeader(w http.ResponseWriter, r *http.Request, svc Service) bool {
	standby, leader := svc.Standby()
	if !standby {
		return false
	}
	if !strings.HasPrefix(leader, "http://") && !strings.HasPrefix(leader, "https://") {
		w.Header().Set("Retry-After", "1")
		httpjson.Error(w, http.StatusServiceUnavailable, errors.New("this sidecar replica is a standby and no leader is known yet; retry shortly"))
		return true
	}
	w.Header().Set("X-Hetgpu-Leader", leader)
	http.Redirect(w, r, strings.TrimRight(leader, "/")+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	return true
}
