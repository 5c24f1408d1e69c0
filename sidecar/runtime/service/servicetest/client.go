package servicetest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Client calls the sidecar's HTTP API in tests; a request that cannot be sent fails the test.
type Client struct {
	T   testing.TB
	URL string
	// Token is sent as a bearer token when set.
	Token string
}

// Do sends a request with the headers given as name, value pairs (a header whose value is
// empty is not sent) and returns the answer's status, body and headers.
func (c Client) Do(method, path, body string, header ...string) (int, string, http.Header) {
	c.T.Helper()
	req, err := http.NewRequest(method, c.URL+path, strings.NewReader(body))
	if err != nil {
		c.T.Fatal(err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] != "" {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.T.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	return resp.StatusCode, string(b), resp.Header
}
