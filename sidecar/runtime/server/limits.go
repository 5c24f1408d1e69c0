package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/hetgpu/hetgpu/internal/httpjson"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
)

// Request limits. A body is read through http.MaxBytesReader (installed in Handler for every
// request), so a client cannot make the sidecar buffer more than MaxBodyBytes.
const (
	// DefaultMaxBody bounds request bodies: about 2,500 run records of a few hundred bytes,
	// while a driver posts one at a time.
	DefaultMaxBody = 1 << 20
	// DefaultMaxObservations bounds the records of one POST /v1/observations.
	DefaultMaxObservations = 1000
	// maxHeaderBytes bounds the request line and headers, and so every query parameter
	// (numeric ones are range-checked by their handlers).
	maxHeaderBytes = 64 << 10
)

// readBody reads a request body under the configured limit; past it the client gets 413
// naming the limit, and ok is false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, ok bool) {
	body, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		httpjson.Error(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body exceeds max_body_bytes = %d; post fewer observations at a time", mbe.Limit))
		return nil, false
	case err != nil:
		httpjson.Error(w, http.StatusBadRequest, fmt.Errorf("read body: %w", err))
		return nil, false
	}
	return body, true
}

// maxObservations is the configured bound on records per request, never above what the
// service takes in one transaction.
func (s *Server) maxObservations() int {
	n := s.cfg.MaxObservations
	if n <= 0 {
		n = DefaultMaxObservations
	}
	return min(n, service.MaxBatch)
}
