// Package httpjson writes the sidecar's JSON answers: indented, with the status code, and
// errors as {"error": "..."}; one home for the API's and the dashboard's data endpoints.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write answers v as indented JSON with the status code.
func Write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Error answers {"error": err} with the status code.
func Error(w http.ResponseWriter, code int, err error) {
	Write(w, code, map[string]string{"error": err.Error()})
}
