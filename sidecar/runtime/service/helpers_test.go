package service_test

import (
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
)

func scrape(t *testing.T, h *servicetest.Harness) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(h.Service.Metrics().Registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}
