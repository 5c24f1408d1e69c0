package server

import (
	"errors"
	"net/http"

	"github.com/hetgpu/hetgpu/internal/httpjson"
)

// errNoClientCert is the answer to a request without a verified client certificate when
// tls.health_without_client_cert lets such clients complete the handshake.
var errNoClientCert = errors.New("a client certificate signed by tls.client_ca_file is required (mTLS); " +
	"without one only GET /v1/health answers (tls.health_without_client_cert)")

// refuseWithoutClientCert answers 401 and reports true for a request that came without a
// verified client certificate, when the handshake let it through only for the health check:
// the TLS layer then verifies a certificate if one is given (VerifyClientCertIfGiven) and
// this is where "required" is enforced, for every request but GET (and HEAD) /v1/health.
func (s *Server) refuseWithoutClientCert(w http.ResponseWriter, r *http.Request) bool {
	t := s.cfg.TLS
	if t.ClientCAFile == "" || !t.HealthWithoutClientCert {
		return false // plain TLS, or mTLS enforced by the handshake itself
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return false
	}
	if r.URL.Path == "/v1/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		return false
	}
	httpjson.Error(w, http.StatusUnauthorized, errNoClientCert)
	return true
}
