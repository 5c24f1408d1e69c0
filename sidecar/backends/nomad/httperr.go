package nomad

import (
	"errors"
	"strings"

	"github.com/hashicorp/nomad/api"
)

func statusCode(err error) int {
	var ure api.UnexpectedResponseError
	if errors.As(err, &ure) && ure.HasStatusCode() {
		return ure.StatusCode()
	}
	var p *api.UnexpectedResponseError
	if errors.As(err, &p) && p != nil && p.HasStatusCode() {
		return p.StatusCode()
	}
	s := err.Error()
	switch {
	case strings.Contains(s, "404") || strings.Contains(s, "not found"):
		return 404
	}
	return 0
}

func isConflict(err error) bool {
	s := err.Error()
	return strings.Contains(s, "conflicting job modify index") || strings.Contains(s, "job already exists")
}
