package httpjson

import (
	"errors"
	"net/http/httptest"
	"testing"
)

func TestWriteAndError(t *testing.T) {
	rec := httptest.NewRecorder()
	Error(rec, 422, errors.New(`field x = 1: expected "y"`))
	if rec.Code != 422 || rec.Header().Get("Content-Type") != "application/json" ||
		rec.Body.String() != "{\n  \"error\": \"field x = 1: expected \\\"y\\\"\"\n}\n" {
		t.Errorf("answer = %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
	}
}
