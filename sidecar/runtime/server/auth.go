package server

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/hetgpu/hetgpu/internal/httpjson"
)

// Access scopes. token (admin) grants both; read_token grants reads (every GET but
// /v1/health: queue, decisions, explain, observations list, fleet and dashboard, metrics);
// write_token grants writes (POST /v1/observations, what the drivers hold) and nothing else,
// so a token copied from a client node cannot read the cluster's queue. A scope is open when
// no token that grants it is configured, so a lone `token` guards everything as before.
type scope int

const (
	scopeOpen scope = iota
	scopeRead
	scopeWrite
)

func (s scope) String() string {
	if s == scopeWrite {
		return "write"
	}
	return "read"
}

// scopeOf classifies a request: every POST (today only /v1/observations) writes.
func scopeOf(r *http.Request) scope {
	switch {
	case r.URL.Path == "/v1/health":
		return scopeOpen
	case r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodDelete || r.Method == http.MethodPatch:
		return scopeWrite
	}
	return scopeRead
}

// bearer returns the request's bearer token ("" without one).
func bearer(r *http.Request) string {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(tok)
}

func tokenIs(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// authorize answers a request it refuses and reports whether it did: 401 without a token
// the API knows, 403 for a known token of the wrong scope or a bad signed explain link.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) (refused bool) {
	sc := scopeOf(r)
	if sc == scopeOpen {
		return false
	}
	grant := s.cfg.ReadToken
	if sc == scopeWrite {
		grant = s.cfg.WriteToken
	}
	if s.cfg.Token == "" && grant == "" {
		return false // nothing guards this scope (loopback, or insecure = true)
	}
	tok := bearer(r)
	if tokenIs(tok, s.cfg.Token) || tokenIs(tok, grant) {
		return false
	}
	if tok == "" && sc == scopeRead {
		if ok, err := s.explainAllowed(r); ok {
			return false
		} else if err != nil {
			httpjson.Error(w, http.StatusForbidden, err)
			return true
		}
	}
	other, otherScope := s.cfg.WriteToken, scopeWrite
	if sc == scopeWrite {
		other, otherScope = s.cfg.ReadToken, scopeRead
	}
	if tokenIs(tok, other) {
		httpjson.Error(w, http.StatusForbidden, fmt.Errorf("%s %s needs a %s token (token or %s_token); this is the %s token", r.Method, r.URL.Path, sc, sc, otherScope))
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="hetgpu"`)
	httpjson.Error(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token (Authorization: Bearer TOKEN)"))
	return true
}

// explainAllowed opens a job's explain page (HTML or JSON) without a token when the operator
// made explain public, or when the request carries a valid signed link for that job. err is
// set only for a link that is present but expired or forged.
func (s *Server) explainAllowed(r *http.Request) (bool, error) {
	_, pattern := s.mux.Handler(r)
	if pattern != explainPattern {
		return false, nil
	}
	if s.cfg.PublicExplain {
		return true, nil
	}
	q := r.URL.Query()
	exp, sig := q.Get("exp"), q.Get("sig")
	if s.cfg.Links == nil || (exp == "" && sig == "") {
		return false, nil
	}
	// PathValue is set only once the mux routed the request: match the path by hand.
	ns, id, ok := explainTarget(r.URL.EscapedPath())
	if !ok {
		return false, nil
	}
	if err := s.cfg.Links.Verify(ns, id, exp, sig); err != nil {
		return false, err
	}
	return true, nil
}

const explainPattern = "GET /v1/jobs/{ns}/{id}/explain"

// explainTarget splits /v1/jobs/{ns}/{id}/explain into its unescaped namespace and job.
func explainTarget(p string) (ns, id string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/v1/jobs/")
	if !ok {
		return "", "", false
	}
	rest, ok = strings.CutSuffix(rest, "/explain")
	if !ok {
		return "", "", false
	}
	ens, eid, ok := strings.Cut(rest, "/")
	if !ok || strings.Contains(eid, "/") {
		return "", "", false
	}
	var err1, err2 error
	ns, err1 = url.PathUnescape(ens)
	id, err2 = url.PathUnescape(eid)
	return ns, id, err1 == nil && err2 == nil
}

// signedQuery returns "&exp=…&sig=…" when the request came through a signed explain link.
func signedQuery(r *http.Request) string {
	q := r.URL.Query()
	if q.Get("sig") == "" {
		return ""
	}
	v := url.Values{}
	v.Set("exp", q.Get("exp"))
	v.Set("sig", q.Get("sig"))
	return "&" + v.Encode()
}
